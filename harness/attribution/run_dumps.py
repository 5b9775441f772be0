"""Read a run's token dumps (embedded trainer or real VIME) into per-sample pairs.

Three files per rollout step, under `<run>/dumps/`:

    rollout_{id}.pt         {"rollout_id", "samples": [sample dict, ...]}          (rollout side)
    train_{id}_{rank}.pt    {"rollout_id", "rank", "rollout_data": {key: [per sample]}} (trainer side)
    probe_{id}.pt           a probe bundle (harness.attribution.probe_bundle)

The embedded trainer writes VIME's keys plus extra ones (docs/embedded.md). Real
VIME dumps are read by the same code: a field that is not there becomes a named warning (the
RL-Align audit's codes where it has one), never a zero. Each train-side sample is paired with the
rollout sample it claims to be (its `sample_indices` / `index` entry, else its position), so the
probes can compare what the trainer used with what the rollout produced.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.records.debug_dumps import DumpError, load_dump

# One place for the key names: VIME's first, then the embedded trainer's extras.
ROLLOUT_KEYS = {
    "tokens": ("tokens",),
    "response_length": ("response_length",),
    "prompt_ids": ("prompt_ids", "prompt_tokens"),
    "response_ids": ("response_ids", "response_tokens"),
    "loss_mask": ("loss_mask",),
    "rollout_log_probs": ("rollout_log_probs",),
    "weight_version": ("weight_versions", "weight_version"),
    "sampling": ("sampling_params", "sampling"),
    "sampled_rank": ("rollout_ranks", "sampled_token_rank", "sampled_rank", "token_rank"),
    "in_top_k": ("in_top_k", "sampled_in_top_k"),
    "in_top_p": ("in_top_p", "sampled_in_top_p"),
    "vocab_shard": ("vocab_shard", "sampled_vocab_shard"),
    "experts": ("rollout_routed_experts", "routed_experts"),
    "consistency": ("consistency_metadata",),
    "index": ("index", "sample_index"),
}
TRAIN_KEYS = {
    "tokens": ("tokens",),
    "response_length": ("response_lengths", "response_length"),
    "prompt_ids": ("prompt_ids",),
    "response_ids": ("response_ids",),
    "target_ids": ("target_ids", "targets"),
    "loss_mask": ("loss_masks", "loss_mask"),
    "log_probs": ("log_probs",),
    "rollout_log_probs": ("rollout_log_probs",),
    "weight_version": ("weight_version_trainer", "train_weight_versions", "weight_versions", "weight_version"),
    "rollout_weight_version_seen": ("weight_version_rollout",),
    "sampling": ("sampling_params",),
    "sampled_rank": ("sampled_token_rank_trainer",),
    "in_filter": ("inside_filter_set",),
    "vocab_shard": ("vocab_shard",),
    "tp_size": ("tp_size",),
    "consistency": ("consistency_metadata",),
    "index": ("sample_indices", "index", "indices"),
    "experts": ("trainer_routed_experts", "routed_experts"),
    "entropy": ("entropy", "entropies"),
}
_ROLLOUT_FILE = re.compile(r"rollout_(\d+)\.pt$")
_TRAIN_FILE = re.compile(r"train_(\d+)_(\d+)\.pt$")
_PROBE_FILE = re.compile(r"probe_(\d+)\.pt$")


def as_array(value, dtype=np.float64) -> np.ndarray | None:
    """A tensor, list or scalar as a flat numpy array; None stays None."""
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach().to("cpu")
        value = value.double() if value.is_floating_point() and dtype == np.float64 else value
        value = value.numpy()
    return np.asarray(value, dtype=dtype).reshape(-1)


def _pick(data: dict, names: tuple[str, ...]):
    for name in names:
        if name in data and data[name] is not None:
            return data[name]
    return None


def _last(value):
    """VIME keeps one weight version per engine turn; the last one produced the sample's tail."""
    if isinstance(value, (list, tuple)):
        return value[-1] if value else None
    if hasattr(value, "tolist"):
        value = value.tolist()
        return value[-1] if isinstance(value, list) and value else value
    return value


@dataclass
class Side:
    """One sample as one side (rollout or trainer) recorded it. Arrays are flat numpy."""

    fields: dict = field(default_factory=dict)
    source: str = ""

    def get(self, name: str):
        return self.fields.get(name)

    def has(self, name: str) -> bool:
        return self.fields.get(name) is not None


@dataclass
class SamplePair:
    rollout_id: int
    position: int  # position in the trainer's batch (or in the rollout dump when no train dump)
    index: int | None
    rollout: Side | None
    train: Side | None
    rank: int | None = None


@dataclass
class StepDumps:
    rollout_id: int
    pairs: list[SamplePair] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    probe_file: Path | None = None


@dataclass
class RunDumps:
    steps: dict[int, StepDumps] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _normalise(raw: dict, keys: dict, source: str) -> Side:
    out: dict = {}
    for name, aliases in keys.items():
        value = _pick(raw, aliases)
        if value is None:
            continue
        if name in ("tokens", "prompt_ids", "response_ids", "target_ids", "vocab_shard"):
            value = as_array(value, np.int64)
        elif name == "sampled_rank":  # vLLM gives no rank for some tokens: NaN, not 0
            value = as_array([np.nan if v is None else v for v in value] if isinstance(value, list) else value)
        elif name in ("loss_mask", "log_probs", "rollout_log_probs", "in_top_k", "in_top_p", "in_filter", "entropy"):
            value = as_array(value)
        elif name == "consistency" and isinstance(value, dict) and set(value) == {"rollout", "trainer"}:
            value = value["trainer"]  # the train dump carries both sides' records: this side's is "trainer"
        elif name in ("response_length", "index", "tp_size"):
            value = int(as_array(value, np.int64)[0]) if not isinstance(value, int) else value
        elif name == "weight_version":
            value = _last(value)
        elif name == "experts":
            value = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
        out[name] = value
    # Derive what VIME leaves implicit: prompt and response ids from the row and its length.
    tokens, length = out.get("tokens"), out.get("response_length")
    if tokens is not None and length is not None and 0 <= length <= tokens.size:
        out.setdefault("response_ids", tokens[tokens.size - length :])
        out.setdefault("prompt_ids", tokens[: tokens.size - length])
    return Side(out, source)


def rollout_sides(data: dict, source: str) -> list[Side]:
    samples = data.get("samples")
    if not isinstance(samples, list):
        raise DumpError(f"{source}: key 'samples': expected a list of sample dicts, found {type(samples).__name__}")
    sides = []
    for position, sample in enumerate(samples):
        if not isinstance(sample, dict):
            raise DumpError(f"{source}: samples[{position}]: expected a dict, found {type(sample).__name__}")
        sides.append(_normalise(sample, ROLLOUT_KEYS, f"{source}#samples[{position}]"))
    return sides


def train_sides(data: dict, source: str) -> list[Side]:
    """VIME's rollout_data holds one list per key (one entry per sample): turn columns into rows.
    The embedded trainer adds a `samples` list of per-sample dicts in the same order: merged in."""
    payload = data.get("rollout_data", data)
    if not isinstance(payload, dict):
        raise DumpError(f"{source}: key 'rollout_data': expected a dict of per-sample lists, found {type(payload).__name__}")
    extras = data.get("samples") if "rollout_data" in data else None
    if extras is not None and not (isinstance(extras, list) and all(isinstance(e, dict) for e in extras)):
        raise DumpError(f"{source}: key 'samples': expected a list of per-sample dicts")
    counts = {k: len(v) for k, v in payload.items() if isinstance(v, (list, tuple))}
    n = max([*counts.values(), len(extras or [])], default=0)
    rows = []
    for i in range(n):
        row = {k: v[i] for k, v in payload.items() if isinstance(v, (list, tuple)) and i < len(v)}
        if extras is not None and i < len(extras):
            row.update(extras[i])
        rows.append(_normalise(row, TRAIN_KEYS, f"{source}#rollout_data[{i}]"))
    return rows


def _row_key(side: Side) -> str:
    digest = hashlib.blake2b(digest_size=12)
    index = side.get("index")
    digest.update(str(index).encode())
    for name in ("tokens", "rollout_log_probs", "log_probs"):
        value = side.get(name)
        if value is not None:
            digest.update(name.encode() + np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def _pair_step(rollout_id: int, rollout: list[Side] | None, ranks: dict[int, list[Side]], warnings: list[str]) -> list[SamplePair]:
    if not ranks:
        return [SamplePair(rollout_id, i, s.get("index"), s, None) for i, s in enumerate(rollout or [])]
    by_index = {s.get("index"): s for s in rollout or [] if s.get("index") is not None}
    pairs: list[SamplePair] = []
    taken: set[str] = set()  # samples of lower ranks: a TP/PP peer's copy of one is not a new sample
    position = 0
    for rank in sorted(ranks):
        mine = []
        for row_position, side in enumerate(ranks[rank]):
            key = _row_key(side)
            mine.append(key)
            if key in taken:
                continue
            index = side.get("index")
            partner = None
            if rollout is not None:
                if index is not None and index in by_index:
                    partner = by_index[index]
                elif index is None and row_position < len(rollout) and len(ranks) == 1:
                    partner = rollout[row_position]
                    if position == 0:
                        warnings.append(
                            f"rollout {rollout_id}: train dump has no sample_indices; paired with the "
                            "rollout dump by position (code: sample_index_missing)"
                        )
                else:
                    warnings.append(
                        f"rollout {rollout_id}: train sample {row_position} of rank {rank} (index {index}) "
                        "has no rollout-dump sample (code: unmatched_sample)"
                    )
            pairs.append(SamplePair(rollout_id, position, index, partner, side, rank))
            position += 1
        taken.update(mine)
    return pairs


def read_run_dumps(dumps_dir: Path, trust: bool = False) -> RunDumps:
    """Every dump under `dumps_dir`, grouped per rollout id; unreadable files become warnings."""
    result = RunDumps()
    if not dumps_dir.is_dir():
        result.warnings.append(f"{dumps_dir}: no dumps directory (code: dumps_missing)")
        return result
    rollouts: dict[int, list[Side]] = {}
    trains: dict[int, dict[int, list[Side]]] = {}
    files: dict[int, list[str]] = {}
    probes: dict[int, Path] = {}
    for path in sorted(dumps_dir.glob("*.pt")):
        if m := _PROBE_FILE.search(path.name):
            probes[int(m.group(1))] = path
            continue
        rollout_match, train_match = _ROLLOUT_FILE.search(path.name), _TRAIN_FILE.search(path.name)
        if not (rollout_match or train_match):
            continue
        try:
            data = load_dump(path, trust=trust)
        except DumpError as err:
            result.warnings.append(f"{err} (code: unreadable_dump)")
            continue
        named_id = int((rollout_match or train_match).group(1))
        if int(data["rollout_id"]) != named_id:
            result.warnings.append(
                f"{path}: key 'rollout_id' is {data['rollout_id']} but the file name says {named_id}; "
                "a dump from another run or step? (code: rollout_id_mismatch)"
            )
            continue
        try:
            if rollout_match:
                rollouts[named_id] = rollout_sides(data, str(path))
            else:
                rank = int(train_match.group(2))
                trains.setdefault(named_id, {})[rank] = train_sides(data, str(path))
        except DumpError as err:
            result.warnings.append(f"{err} (code: malformed_dump)")
            continue
        files.setdefault(named_id, []).append(path.name)
    for rollout_id in sorted(set(rollouts) | set(trains) | set(probes)):
        step = StepDumps(rollout_id, files=files.get(rollout_id, []), probe_file=probes.get(rollout_id))
        if rollout_id not in trains and rollout_id in rollouts:
            result.warnings.append(
                f"rollout {rollout_id}: no train_{rollout_id}_<rank>.pt dump; trainer log-probs unavailable (code: missing_train_dump)"
            )
        if rollout_id not in rollouts and rollout_id in trains:
            result.warnings.append(
                f"rollout {rollout_id}: no rollout_{rollout_id}.pt dump; rollout-side identity cannot be checked (code: missing_rollout_dump)"
            )
        step.pairs = _pair_step(rollout_id, rollouts.get(rollout_id), trains.get(rollout_id, {}), result.warnings)
        result.steps[rollout_id] = step
    return result
