"""How far true on-policy's bf16 gradients are from the fp32 native gradient, batch by batch and
parameter by parameter, and which shared kernel moves them (one swapped in at a time).

    flock "$HEAVY_LOCK" .venv/bin/python tools/true_on_policy_grad_probe.py --seeds 100-107
    ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell flock "$HEAVY_LOCK" \\
        .venv/bin/python tools/true_on_policy_grad_probe.py --seeds 100-107 --json /tmp/avx2.json

Each seed is one batch (4 x 40 token ids below 300 and one advantage a token, as the test draws
them with seed 0) and one PPO-like loss, -(logprob * advantage).mean(). Models (tiny Qwen3, built
once each, gradients zeroed between batches):
  fp32        Megatron native, fp32: the reference
  fp32-shared all three trainer levers, fp32
  native      Megatron native, bf16
  shared      all three trainer levers (engine norm, vLLM attention kernel, vLLM log-softmax), bf16
  norm        only the engine norm (native attention, Megatron's log-softmax), bf16
  attention   only the vLLM attention kernel, bf16
  log-softmax only vLLM's log-softmax, bf16
  missed-scale shared with a broken attention backward (the control a limit must catch)
Per batch and model: each parameter's |g - g_fp32| / |g_fp32|. Prints per batch and model the worst
parameter's distance and the all-parameter one (|G - G_fp32| / |G_fp32|) with their ratio to
native's; then, for consecutive groups of --group batches, the test's statistic (ratio_statistic:
per parameter the median over the group's batches of distance / native's distance, the worst
parameter's median) with its mean, spread and range over the groups. --json writes everything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BATCH, TOKENS, VOCAB_DRAWN = 4, 40, 300
# model name -> (bf16, trainer levers switched OFF, loss through vLLM's log-softmax)
NORM, ATTN = "trainer-engine-norm", "trainer-engine-attention"
MODELS = {
    "fp32": (False, None, False),
    "fp32-shared": (False, frozenset(), True),  # all three levers in fp32 (distances only, no ratio)
    "native": (True, None, False),
    "shared": (True, frozenset(), True),
    "norm": (True, frozenset({ATTN}), False),
    "attention": (True, frozenset({NORM}), False),
    "log-softmax": (True, None, True),
    "missed-scale": (True, frozenset(), True),  # shared, with the broken backward of missed_scale()
}


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The test's draw (tests/embedded/test_true_on_policy.py uses seed 0)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB_DRAWN, (BATCH, TOKENS), generator=g)
    targets, advantages = torch.roll(ids, -1, 1).reshape(-1), torch.randn(BATCH * TOKENS, generator=g)
    return ids, targets, advantages


def build(config, hf_state, bf16: bool, levers_off):
    from harness.embedded import true_on_policy as top
    from harness.embedded.megatron_model import build_gpt, hf_to_megatron, load_into

    top.configure(top.switches_on(true_on_policy=True, without=levers_off or (), levers=()))
    model = build_gpt(config, bf16=bf16, tp=1, true_on_policy=levers_off is not None)
    load_into(model, hf_to_megatron(hf_state, config, 1, 0))
    top.configure(top.TRUE_ON_POLICY)
    return model


def gradients(model, engine_log_softmax: bool, ids, targets, advantages) -> dict[str, torch.Tensor]:
    from harness.embedded.true_on_policy.loss_gradients import ppo_loss_gradients

    return ppo_loss_gradients(model, engine_log_softmax, ids, targets, advantages)


def distances(reference: dict, grads: dict) -> dict:
    """Per parameter |g - g_fp32| and |g_fp32| (so that batches can be pooled) and their ratio."""
    diff = {n: float((grads[n] - reference[n]).norm()) for n in reference}
    ref = {n: float(reference[n].norm()) for n in reference}
    per = {n: diff[n] / ref[n] for n in reference}
    worst = max(per, key=per.get)
    whole = (sum(d * d for d in diff.values()) / sum(r * r for r in ref.values())) ** 0.5
    return {"per_parameter": per, "diff_norm": diff, "ref_norm": ref, "worst": per[worst], "worst_name": worst, "all": whole}


@contextlib.contextmanager
def missed_scale():
    """A broken backward for the control: the attention backward's query and key gradients without
    the softmax scale (x 1/scale = sqrt(head_dim)), as a backward that forgot it would return."""
    from harness.embedded.true_on_policy import layer_spec

    original = layer_spec._KernelForwardMathBackward.backward

    def backward(ctx, grad_context):
        dq, dk, dv, *rest = original(ctx, grad_context)
        factor = 1.0 / ctx.module.engine_scale
        return (dq * factor, dk * factor, dv, *rest)

    layer_spec._KernelForwardMathBackward.backward = staticmethod(backward)
    try:
        yield
    finally:
        layer_spec._KernelForwardMathBackward.backward = staticmethod(original)


def ratio_statistic(rows: list[dict], model: str) -> tuple[float, str]:
    """The statistic of tests/embedded/test_true_on_policy.py over a set of batches (rows: one
    distances() result per model per batch): per parameter, the median over batches of the model's
    distance divided by native bf16's; the worst parameter's median, and its name."""
    medians = {
        p: statistics.median(r[model]["per_parameter"][p] / r["native"]["per_parameter"][p] for r in rows) for p in rows[0]["native"]["per_parameter"]
    }
    worst = max(medians, key=medians.get)
    return medians[worst], worst


def seeds_arg(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=seeds_arg, default=seeds_arg("100-107"), help="batch seeds, e.g. 0,100-107")
    parser.add_argument("--models", default=",".join(MODELS), help=f"subset of {','.join(MODELS)} (fp32 and native always)")
    parser.add_argument("--group", type=int, default=64, help="batches per group for the statistic's spread (the test judges 64)")
    parser.add_argument("--json", type=Path, help="write every distance here")
    args = parser.parse_args()
    wanted = ["fp32", "native"] + [m for m in args.models.split(",") if m in MODELS and m not in ("fp32", "native")]

    from safetensors.torch import load_file
    from transformers import AutoConfig

    from harness.embedded.factory import ensure_model
    from harness.embedded.megatron_cpu import init_distributed, init_model_parallel

    started = time.monotonic()
    path = ensure_model("qwen3-tiny")
    config, hf_state = AutoConfig.from_pretrained(path), load_file(str(path / "model.safetensors"))
    init_distributed(0, 1, str(Path(tempfile.mkdtemp()) / "store"))
    init_model_parallel(1, 0)
    models = {m: build(config, hf_state, MODELS[m][0], MODELS[m][1]) for m in wanted}
    result = {"torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.processor(), "seeds": {}}
    print(f"[probe] ATen CPU capability {result['torch_cpu_capability']}; models built in {time.monotonic() - started:.0f} s", flush=True)
    for seed in args.seeds:
        data = batch(seed)
        grads = {}
        for m in wanted:
            with missed_scale() if m == "missed-scale" else contextlib.nullcontext():
                grads[m] = gradients(models[m], MODELS[m][2], *data)
        row = {m: distances(grads["fp32"], grads[m]) for m in wanted if m != "fp32"}
        result["seeds"][seed] = row
        text = "  ".join(
            f"{m} worst {d['worst']:.3g} ({d['worst'] / row['native']['worst']:.2f}x) all {d['all']:.3g} ({d['all'] / row['native']['all']:.2f}x)"
            for m, d in row.items()
            if m != "native"
        )
        print(
            f"seed {seed}: native worst {row['native']['worst']:.3f} ({row['native']['worst_name']}) all {row['native']['all']:.4f} | {text}",
            flush=True,
        )
    rows = list(result["seeds"].values())
    groups = [rows[i : i + args.group] for i in range(0, len(rows) - args.group + 1, args.group)]
    for m in [m for m in wanted if m not in ("fp32", "native", "fp32-shared")] if groups else []:
        values = [ratio_statistic(g, m)[0] for g in groups]
        spread = statistics.stdev(values) if len(values) > 1 else float("nan")
        names = sorted({ratio_statistic(g, m)[1] for g in groups})
        result.setdefault("statistic", {})[m] = {"group": args.group, "values": values}
        print(
            f"{m}: statistic over {len(groups)} group(s) of {args.group}: mean {statistics.mean(values):.3f} sd {spread:.3f} min {min(values):.3f} max {max(values):.3f} (worst: {', '.join(names)})"
        )
    if "fp32-shared" in wanted:
        print(f"fp32-shared: worst parameter over all batches {max(r['fp32-shared']['worst'] for r in rows):.2e}")
    result["seconds"] = time.monotonic() - started
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(f"[probe] {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
