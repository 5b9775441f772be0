"""Fault injections for testing attribution (``--embedded-inject NAME[,NAME...]``).

- ``stale-weights:K``: the weight sync after rollouts 0..K-1 is skipped (the engine keeps
  version 0 while the trainer moves on);
- ``token-shift``: the trainer's targets are shifted by one (it scores the next token);
- ``no-temperature``: the trainer ignores the rollout temperature (T=1 in its log-softmax);
- ``mask-off-by-one``: the trainer reads the response slice one position early;
- ``reorder-samples``: the rollout log-probs reach the trainer rotated by one sample within the
  batch (tokens stay), as a reordering applied to one field but not the others would;
- ``rollout-lse-bf16`` / ``trainer-softmax-bf16`` / ``trainer-tp-reduce-bf16``: numerical controls
  at one operator boundary (harness/embedded/numeric_faults.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.embedded.flags import FlagError

NAMES = (
    "stale-weights",
    "token-shift",
    "no-temperature",
    "mask-off-by-one",
    "reorder-samples",
    "rollout-lse-bf16",
    "trainer-softmax-bf16",
    "trainer-tp-reduce-bf16",
)


@dataclass(frozen=True)
class Injections:
    stale_weights: int = 0
    token_shift: bool = False
    no_temperature: bool = False
    mask_off_by_one: bool = False
    reorder_samples: bool = False
    rollout_lse_bf16: bool = False
    trainer_softmax_bf16: bool = False
    trainer_tp_reduce_bf16: bool = False

    def names(self) -> list[str]:
        out = [f"stale-weights:{self.stale_weights}"] if self.stale_weights else []
        out += [
            n
            for n, on in (
                ("token-shift", self.token_shift),
                ("no-temperature", self.no_temperature),
                ("mask-off-by-one", self.mask_off_by_one),
                ("reorder-samples", self.reorder_samples),
                ("rollout-lse-bf16", self.rollout_lse_bf16),
                ("trainer-softmax-bf16", self.trainer_softmax_bf16),
                ("trainer-tp-reduce-bf16", self.trainer_tp_reduce_bf16),
            )
            if on
        ]
        return out


def parse(value: str | None) -> Injections:
    if not value:
        return Injections()
    kwargs: dict = {}
    for item in (v.strip() for v in value.split(",") if v.strip()):
        name, _, arg = item.partition(":")
        if name not in NAMES:
            raise FlagError(f"--embedded-inject {item}: unknown fault; known: {', '.join(NAMES)}")
        if name == "stale-weights":
            if not arg.isdigit() or int(arg) < 1:
                raise FlagError(f"--embedded-inject {item}: expected stale-weights:K with K >= 1")
            kwargs["stale_weights"] = int(arg)
        elif arg:
            raise FlagError(f"--embedded-inject {item}: {name} takes no argument")
        else:
            kwargs[name.replace("-", "_")] = True
    return Injections(**kwargs)
