"""Fault injections for testing attribution (``--embedded-inject NAME[,NAME...]``).

- ``stale-weights:K``: the weight sync after rollouts 0..K-1 is skipped (the engine keeps
  version 0 while the trainer moves on);
- ``token-shift``: the trainer's targets are shifted by one (it scores the next token);
- ``no-temperature``: the trainer ignores the rollout temperature (T=1 in its log-softmax);
- ``mask-off-by-one``: the trainer reads the response slice one position early;
- ``reorder-samples``: the rollout log-probs reach the trainer rotated by one sample within the
  batch (tokens stay), as a reordering applied to one field but not the others would;
- ``rollout-lse-bits:N`` / ``trainer-softmax-bits:N`` / ``trainer-tp-reduce-bits:N``: numerical
  controls at one operator boundary, rounding to N mantissa bits (1..23; N = 7 is bf16, and
  ``rollout-lse-bf16`` / ``trainer-softmax-bf16`` / ``trainer-tp-reduce-bf16`` name N = 7);
  ``trainer-softmax-sum-bits:N``: the attention softmax's row sum held at N bits;
  ``trainer-lm-head-bits:N`` / ``rollout-filter-bits:N`` / ``trainer-expert-bits:N`` (``-bf16``: N = 7):
  the LM-head GEMM, the sampler's top-p filter kernel and one MoE expert's down projection at N bits;
  ``rollout-fp8-weight-scale:F``: the fp8 rollout's weights read back with F x their block scale
  (F > 0, not 1); ``rollout-fp8-weight-bits:N``: the fp8 rollout's weights rounded to N mantissa
  bits (1 or 2) instead of e4m3's 3 (harness/embedded/numeric_faults.py, docs/controls.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.embedded.flags import FlagError

# the sized numerical controls: name -> (field, the bf16 alias that names N = 7)
SIZED = {
    "rollout-lse-bits": ("rollout_lse_bits", "rollout-lse-bf16"),
    "trainer-softmax-bits": ("trainer_softmax_bits", "trainer-softmax-bf16"),
    "trainer-softmax-sum-bits": ("trainer_softmax_sum_bits", "trainer-softmax-sum-bf16"),
    "trainer-tp-reduce-bits": ("trainer_tp_reduce_bits", "trainer-tp-reduce-bf16"),
    "trainer-lm-head-bits": ("trainer_lm_head_bits", "trainer-lm-head-bf16"),
    "rollout-filter-bits": ("rollout_filter_bits", "rollout-filter-bf16"),
    "trainer-expert-bits": ("trainer_expert_bits", "trainer-expert-bf16"),
}
BF16_BITS = 7
MAX_BITS = 23  # fp32's mantissa: N = 23 rounds nothing
FP8_WEIGHT_SCALE = "rollout-fp8-weight-scale"
FP8_WEIGHT_BITS = "rollout-fp8-weight-bits"
E4M3_BITS = 3  # e4m3's explicit mantissa bits: the weight-bits control rounds to fewer
ALIASES = {alias: name for name, (_, alias) in SIZED.items()}

NAMES = (
    "stale-weights",
    "token-shift",
    "no-temperature",
    "mask-off-by-one",
    "reorder-samples",
    *ALIASES,
    *SIZED,
    FP8_WEIGHT_SCALE,
    FP8_WEIGHT_BITS,
)


@dataclass(frozen=True)
class Injections:
    stale_weights: int = 0
    token_shift: bool = False
    no_temperature: bool = False
    mask_off_by_one: bool = False
    reorder_samples: bool = False
    rollout_lse_bits: int = 0  # 0: off; else the mantissa bits of the control
    trainer_softmax_bits: int = 0
    trainer_softmax_sum_bits: int = 0
    trainer_tp_reduce_bits: int = 0
    trainer_lm_head_bits: int = 0
    rollout_filter_bits: int = 0
    trainer_expert_bits: int = 0
    rollout_fp8_weight_scale: float = 0.0  # 0: off; else F
    rollout_fp8_weight_bits: int = 0  # 0: off (e4m3's own 3 bits); else N < 3

    def name_of(self, field: str) -> str:
        """The name a sized control is given by: its bf16 alias at N = 7 (the name the control has
        always had, in records and run ids), ``name:N`` otherwise."""
        name, alias = next((n, a) for n, (f, a) in SIZED.items() if f == field)
        bits = getattr(self, field)
        return alias if bits == BF16_BITS else f"{name}:{bits}"

    def names(self) -> list[str]:
        out = [f"stale-weights:{self.stale_weights}"] if self.stale_weights else []
        out += [
            n
            for n, on in (
                ("token-shift", self.token_shift),
                ("no-temperature", self.no_temperature),
                ("mask-off-by-one", self.mask_off_by_one),
                ("reorder-samples", self.reorder_samples),
            )
            if on
        ]
        out += [self.name_of(field) for field, _ in SIZED.values() if getattr(self, field)]
        if self.rollout_fp8_weight_scale:
            out.append(f"{FP8_WEIGHT_SCALE}:{self.rollout_fp8_weight_scale:g}")
        if self.rollout_fp8_weight_bits:
            out.append(f"{FP8_WEIGHT_BITS}:{self.rollout_fp8_weight_bits}")
        return out


def _bits(item: str, arg: str) -> int:
    if not arg.isdigit() or not 1 <= int(arg) <= MAX_BITS:
        raise FlagError(f"--embedded-inject {item}: expected {item.partition(':')[0]}:N with N mantissa bits in 1..{MAX_BITS} (7 is bf16)")
    return int(arg)


def _scale(item: str, arg: str) -> float:
    try:
        factor = float(arg)
    except ValueError:
        factor = float("nan")
    if not (factor > 0 and factor != 1.0 and factor < float("inf")):
        raise FlagError(f"--embedded-inject {item}: expected {FP8_WEIGHT_SCALE}:F with F a positive scale factor other than 1 (e.g. 0.5)")
    return factor


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
        elif name in SIZED:
            kwargs[SIZED[name][0]] = _bits(item, arg)
        elif name == FP8_WEIGHT_SCALE:
            kwargs["rollout_fp8_weight_scale"] = _scale(item, arg)
        elif name == FP8_WEIGHT_BITS:
            if not arg.isdigit() or not 1 <= int(arg) < E4M3_BITS:
                raise FlagError(
                    f"--embedded-inject {item}: expected {FP8_WEIGHT_BITS}:N with N mantissa bits in 1..{E4M3_BITS - 1} (e4m3 has {E4M3_BITS})"
                )
            kwargs["rollout_fp8_weight_bits"] = int(arg)
        elif arg:
            raise FlagError(f"--embedded-inject {item}: {name} takes no argument")
        elif name in ALIASES:
            kwargs[SIZED[ALIASES[name]][0]] = BF16_BITS
        else:
            kwargs[name.replace("-", "_")] = True
    return Injections(**kwargs)
