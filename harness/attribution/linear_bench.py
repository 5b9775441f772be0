"""The linear boundary's operators on fixed tensors captured from a run, before any training loop.

A capture bundle (harness.embedded.capture: ``capture_N.pt``) holds the rollout engine's own hidden
states at every layer boundary of every sample of a step, and the weights the engine was synced with.
From them this bench rebuilds the inputs of the linears whose weights the rollout holds in FP8 (the
candidate's boundary, knobs/candidate.yaml), on the rollout side, as the engine computed them:

    qkv      x = RMSNorm(residual in)                       residual in = embedding | layer.{i-1}.output
    gate/up  x = RMSNorm(residual in + layer.{i}.attention)
    down     x = SiLU(gate) * up                            gate/up by the rollout's native linear
(RMSNorm as vLLM computes it: fp32, rounded to the weight's dtype, times the weight; the o-projection's
input, the attention context, is not in the capture and is left out.) Each linear's weight is put
into the rollout's form (e4m3 128x128 blocks per HF tensor where the rollout quantises:
harness.embedded.fp8), and every operator of the registry's linear boundary runs on the same tensors:

- error against the fp64 reference on the held weight, in the output's units, in bf16 ulps, and as a
  ratio to the candidate's contract bound (its one output rounding and an fp32 running sum over K:
  |y - ref| <= ulp(ref) + gamma(K - 1) sum_k |x_k w_k|, gamma(n) = n u / (1 - n u), u = 2^-24; the
  reference's own rounding adds the other half ulp);
- batch invariance: rows computed alone and inside the batch reversed, compared bitwise with the batch's;
- the train-rollout gap at this boundary on the same input rows, each side batching as it does (the
  trainer all of a step's rows in one micro-batch, the engine one request's rows at a time): natively
  Megatron's GEMM on the trainer's own weight against vLLM's on the held one; with the candidate both
  run it on the held weight (the trainer's weight put into that form is the same tensor: the form is a
  fixed point), so what is left is whatever the batching changes, which batch invariance makes zero;
- the median time of a call (CPU, one thread; the machine is in the record).
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from harness.embedded import fp8
from harness.embedded.capture import read_capture
from harness.operators import registry
from harness.operators.linear_contract import LINEAR_BOUNDARY

REFERENCE = "fp64-linear-reference"
TRAINER_NATIVE, ROLLOUT_NATIVE = "megatron-native-linear", "vllm-native-linear"
INVARIANCE_ROWS = 16  # rows checked alone and inside the reversed batch, per linear
TIMING_CALLS = 3


@dataclass
class LinearInput:
    name: str  # layer.{i}.qkv | gate_up | down
    x: torch.Tensor  # [T, K] in the model dtype
    trainer_weight: torch.Tensor  # [N, K] as the trainer holds it
    held_weight: torch.Tensor  # [N, K] as the rollout holds it
    sample_rows: list[int]  # rows per captured sample, in order (the engine's per-request batching)


@dataclass
class BenchRow:
    operator: str
    linear: str
    rows: int
    max_abs_error: float
    mean_abs_error: float
    max_ulps: float  # the largest error in units of the reference's bf16 ulp
    max_bound_ratio: float  # the largest error over the candidate's contract bound (<= 1: within it)
    invariance_rows: int
    invariance_differing: int
    median_seconds: float

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class LinearBench:
    source: str
    quantized: bool
    rows: list[BenchRow] = field(default_factory=list)
    native_gap: dict[str, dict] = field(default_factory=dict)  # linear -> |trainer - rollout| figures, natives
    candidate_gap: dict[str, dict] = field(default_factory=dict)  # linear -> the same with the candidate on both sides
    machine: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def of(self, operator: str) -> list[BenchRow]:
        return [row for row in self.rows if row.operator == operator]

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "quantized": self.quantized,
            "rows": [row.as_dict() for row in self.rows],
            "native_gap": self.native_gap,
            "candidate_gap": self.candidate_gap,
            "machine": self.machine,
            "problems": self.problems,
        }


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h.to(weight.dtype) * weight).to(x.dtype)


def _held(weights: list[torch.Tensor], quantized: bool) -> torch.Tensor:
    """The HF tensors as the rollout holds them, concatenated as vLLM stacks them."""
    return torch.cat([fp8.quantize_weight_blockwise(w) if quantized else w for w in weights], dim=0)


def linear_inputs(bundle: dict) -> list[LinearInput]:
    """Every rebuildable linear input of the bundle's rollout side (module docstring), all samples' rows."""
    policy, weights = bundle["policy"], bundle["weights"]
    quantized = bool(policy.get("rollout_quantization"))
    eps = float(policy.get("rms_norm_eps", 1e-6))
    sides = [s["rollout"] for s in bundle["samples"] if s.get("rollout")]
    if not sides or weights is None:
        raise ValueError("the bundle holds no rollout side or no weights (TP > 1 keeps none)")
    cat = {key: torch.cat([side[key] for side in sides]) for key in sides[0] if key.startswith(("embedding", "layer."))}
    rows = [int(side["embedding"].shape[0]) for side in sides]
    native = registry.get(ROLLOUT_NATIVE)
    out = []
    for i in range(int(policy["num_layers"])):
        prefix = f"model.layers.{i}."
        w = {name.removeprefix(prefix): t for name, t in weights.items() if name.startswith(prefix)}
        residual = cat["embedding"] if i == 0 else cat[f"layer.{i - 1}.output"]
        qkv = [w[f"self_attn.{p}_proj.weight"] for p in "qkv"]
        x_attn = _rms_norm(residual, w["input_layernorm.weight"], eps)
        out.append(LinearInput(f"layer.{i}.qkv", x_attn, torch.cat(qkv), _held(qkv, quantized), rows))
        mid = (residual + cat[f"layer.{i}.attention"]).to(residual.dtype)
        gate_up = [w["mlp.gate_proj.weight"], w["mlp.up_proj.weight"]]
        x_mlp = _rms_norm(mid, w["post_attention_layernorm.weight"], eps)
        held_gate_up = _held(gate_up, quantized)
        out.append(LinearInput(f"layer.{i}.gate_up", x_mlp, torch.cat(gate_up), held_gate_up, rows))
        gate, up = native.linear(x_mlp, held_gate_up).chunk(2, dim=-1)
        down = w["mlp.down_proj.weight"]
        x_down = (torch.nn.functional.silu(gate) * up).to(x_mlp.dtype)
        out.append(LinearInput(f"layer.{i}.down", x_down, down, _held([down], quantized), rows))
    return out


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """The bf16 spacing at |x| (fp32)."""
    exponent = torch.frexp(x.float().abs().clamp(min=2.0**-126))[1]
    return torch.ldexp(torch.ones_like(x, dtype=torch.float32), exponent - 8)


def _contract_bound(x: torch.Tensor, weight: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """ulp(ref) + gamma(K - 1) x sum_k |x_k w_k| per output (module docstring)."""
    unit = 2.0**-24
    k = x.shape[-1]
    gamma = (k - 1) * unit / (1 - (k - 1) * unit)
    magnitude = (x.double().abs() @ weight.double().abs().T).float()
    return _ulp(reference) + gamma * magnitude


def _invariance(op, x: torch.Tensor, weight: torch.Tensor, together: torch.Tensor) -> tuple[int, int]:
    """(rows checked, rows whose result alone or inside the reversed batch differs bitwise from the batch's)."""
    picks = torch.linspace(0, x.shape[0] - 1, min(INVARIANCE_ROWS, x.shape[0])).long().unique()
    reversed_rows = op.linear(x.flip(0), weight).flip(0)
    differing = 0
    for r in picks.tolist():
        alone = op.linear(x[r : r + 1], weight)[0]
        differing += int(not (torch.equal(alone, together[r]) and torch.equal(reversed_rows[r], together[r])))
    return len(picks), differing


def _gap(trainer_op, trainer_weight, rollout_op, rollout_weight, item: LinearInput) -> dict:
    """|trainer - rollout| on the same rows: the trainer's call over all rows at once, the rollout's one
    sample's rows at a time."""
    trainer = trainer_op.linear(item.x, trainer_weight).float()
    rollout = torch.cat([rollout_op.linear(part, rollout_weight) for part in item.x.split(item.sample_rows)]).float()
    gap = (trainer - rollout).abs()
    return {"max": float(gap.max()), "mean": float(gap.mean()), "rows_unequal": int((gap > 0).any(dim=-1).sum()), "rows": int(gap.shape[0])}


def _timed(op, x, weight) -> float:
    times = []
    for _ in range(TIMING_CALLS):
        start = time.perf_counter()
        op.linear(x, weight)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def bench_capture(path: Path, candidate: str) -> LinearBench:
    """Every linear operator of the registry on the capture's fixed tensors, and the boundary's
    train-rollout gap natively and with `candidate` on both sides."""
    bundle = read_capture(path)
    bench = LinearBench(
        str(path),
        bool(bundle["policy"].get("rollout_quantization")),
        machine={"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(), "torch": torch.__version__},
    )
    try:
        inputs = linear_inputs(bundle)
    except (KeyError, ValueError) as err:
        bench.problems.append(f"{path}: cannot rebuild the linears' inputs: {err}")
        return bench
    names = [n for n in registry.names(LINEAR_BOUNDARY) if registry.get(n).available()[0]]
    cand = registry.get(candidate)
    for item in inputs:
        reference = registry.get(REFERENCE).linear(item.x, item.held_weight).float()
        ulp = _ulp(reference)
        bound = _contract_bound(item.x, item.held_weight, reference)
        for name in names:
            op = registry.get(name)
            weight = item.trainer_weight if name == TRAINER_NATIVE else item.held_weight
            got = op.linear(item.x, weight)
            error = (got.float() - reference).abs()
            checked, differing = _invariance(op, item.x, weight, got)
            row = BenchRow(
                name,
                item.name,
                item.x.shape[0],
                float(error.max()),
                float(error.mean()),
                float((error / ulp).max()),
                float((error / bound).max()),
                checked,
                differing,
                0.0,
            )
            row.median_seconds = _timed(op, item.x, weight)
            bench.rows.append(row)
        bench.native_gap[item.name] = _gap(registry.get(TRAINER_NATIVE), item.trainer_weight, registry.get(ROLLOUT_NATIVE), item.held_weight, item)
        bench.candidate_gap[item.name] = _gap(cand, item.held_weight, cand, item.held_weight, item)
    return bench
