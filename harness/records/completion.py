"""The end of a run, from evidence: which rollouts its records cover, against how many it was launched with.

VIME's train.py prints no end line (its loop ends with `rollout_manager.dispose` and
`finish_tracking`), so a log says it is complete only by what it holds. A rollout id r is covered
when a `rollout r` or `perf r` record names it and, where the argument print gives the steps per
rollout (and the run trains: not --debug-rollout-only), every train step of it is logged (`step r*S .. r*S+S-1`, S = num_steps_per_rollout): VIME's rollout
manager prints `perf r` before the trainer has trained on it, so a run killed in its last train
step still has that line. A run is complete when every id in [start, N) is covered, N being
`--num-rollout` as the run's own argument print (or its spec, or the user) gives it, and start the
printed `start_rollout_id` (VIME prints 0 for a fresh run and None when it resumes from a Megatron
checkpoint, deciding the start only later: then the first rollout the log holds is the start); a launched
run also needs its process or job to have exited 0, which the launcher knows and this does not.

N unknown is "unknown length", never complete: the note says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from harness.records.models import Record


@dataclass(frozen=True)
class Length:
    """How many rollouts a run was launched with, and where that number comes from."""

    num_rollout: int | None
    source: str  # "the log's arguments (line 43)", "--num-rollout", "spec.yaml", ...
    start_rollout_id: int | None = None  # None: not known before the run; the first logged rollout
    steps_per_rollout: int | None = None  # None: train steps are not checked (not known, or no training)


@dataclass(frozen=True)
class Completion:
    complete: bool
    note: str  # one sentence: "all 3 rollouts (0..2) logged" or why not
    covered: tuple[int, ...] = field(default_factory=tuple)
    next_rollout: int | None = None  # the first id not covered (None when complete or N unknown)

    def unfinished_note(self) -> str | None:
        return None if self.complete else self.note


def length_from_arguments(arguments: dict[str, str], lines: dict[str, int]) -> Length | None:
    """N (and the start and steps per rollout) from a Megatron-style argument print, or None."""

    def as_int(name: str) -> int | None:
        try:
            return int(arguments[name])
        except (KeyError, ValueError):
            return None

    n = as_int("num_rollout")
    if n is None:
        return None
    # --debug-rollout-only runs no trainer: its rollouts have no train steps to check.
    trains = arguments.get("debug_rollout_only", "False") != "True"
    return Length(
        num_rollout=n,
        source=f"the log's arguments (line {lines.get('num_rollout', 0)}: num_rollout {n})",
        start_rollout_id=as_int("start_rollout_id"),
        steps_per_rollout=steps_per_rollout(
            as_int("num_steps_per_rollout"), as_int("rollout_batch_size"), as_int("n_samples_per_prompt"), as_int("global_batch_size")
        )
        if trains
        else None,
    )


def steps_per_rollout(num_steps: int | None, rollout_batch: int | None, n_samples: int | None, global_batch: int | None) -> int | None:
    """VIME's rule: --num-steps-per-rollout, else rollout_batch_size * n_samples_per_prompt // global_batch_size."""
    if num_steps:
        return num_steps
    if rollout_batch and n_samples and global_batch and (rollout_batch * n_samples) % global_batch == 0:
        return rollout_batch * n_samples // global_batch
    return None


def completion(records: Iterable[Record], length: Length | None) -> Completion:
    records = list(records)
    named = sorted({r.n for r in records if r.kind in ("rollout", "perf")})
    logged = _span(named)
    if length is None or length.num_rollout is None:
        return Completion(
            False,
            f"unknown length: nothing says how many rollouts the run was launched with (no num_rollout in the log's arguments; "
            f"give it with --num-rollout); {logged}",
            tuple(named),
        )
    n, start, spr = length.num_rollout, length.start_rollout_id, length.steps_per_rollout
    resumed = ""
    if start is None:
        start = min(named) if named else 0
        if start:
            resumed = f"; from rollout {start}, the first logged (the run resumed: no start_rollout_id before it)"
    steps = {r.n for r in records if r.kind == "step"}
    check_steps = spr is not None

    def covered(r: int) -> bool:
        if r not in named_set:
            return False
        return not check_steps or all(s in steps for s in range(r * spr, (r + 1) * spr))

    named_set = set(named)
    wanted = range(start, n)
    done = tuple(r for r in wanted if covered(r))
    missing = [r for r in wanted if not covered(r)]
    if not missing:
        return Completion(True, f"all {len(wanted)} rollouts ({_ids(start, n - 1)}) logged, as {length.source} asks{resumed}", done)
    first = missing[0]
    why = "" if first not in named_set else f": its train steps {_ids(first * spr, (first + 1) * spr - 1)} are not all logged"
    note = f"unfinished at rollout {first} of {n}{why} ({len(done)} of {len(wanted)} rollouts logged; {logged}; N from {length.source}{resumed})"
    return Completion(False, note, done, first)


def _span(ids: list[int]) -> str:
    return f"rollout ids logged: {_ids(ids[0], ids[-1])}" if ids else "no rollout logged"


def _ids(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"
