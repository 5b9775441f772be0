"""The operator bench: every available operator on one bundle, written as one JSON record.

    record = run_bench(bundle, device, names=None)   # dict, see docs/operators.md for the fields
    write_record(record, path)

A killed bench keeps what it had: the record is rewritten after each operator.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from harness.operators import measure, regimes, registry
from harness.operators.bundles import Bundle

SCHEMA = 1
TARGETS = {  # the fused operator's design targets: recorded beside the figures, not asserted
    "fused_ms_over_gemm_max": 1.15,  # T in {1024, 2048, 4096, 8192}
    "fused_ms_over_gemm_max_t256": 2.0,
    "fused_peak_extra_bytes_max": 256 * 2**20,
    "fused_max_abs_err_max": 1e-4,
    "fused_fwd_bwd_over_gemm_max": 4.3,  # T=8192, H=2048, V=151936
    "fused_fwd_bwd_peak_extra_bytes_max": 64 * 2**20,
    "fused_grad_rel_err_max": 1e-3,
    "batch_invariant": True,
    "tp_invariant": True,
    "grad_batch_invariant": True,
}
# Calls of each side per timed figure. On a GPU 100: a 10-call window at T=1024 (about 20 ms of GPU work) is
# shorter than the H200's clock changes under load, and its ratio to the GEMM spread 1.14-1.23x on one machine,
# where 100-call windows gave 1.136-1.141x (docs/operators.md). On CPU 10 (the CPU record, tests).
DEFAULT_REPS = {"cuda": 100, "cpu": 10}


def default_reps(device) -> int:
    return DEFAULT_REPS.get(torch.device(device).type, 10)


METHOD = (
    "Error: |op - fp64 reference| on the same operands over tokens where both are finite (the processed "
    "variants against an fp64 processed reference with the same top-k/top-p). Batch invariance: bitwise, "
    "slices of the batch computed alone vs inside the full batch. TP invariance: bitwise, vocab split into "
    "2/4/8 shards in one process (rank-order reductions) vs unsplit. Time: median of `reps` calls after "
    "`warmup` calls, CUDA events around each call; gemm_ms_median is torch.matmul(hidden, weight.T) in the "
    "operands' dtype, timed alternately with the operator call by call (fwd and fwd_bwd each get their own "
    "paired GEMM median: the card's clock drifts with load). Peak extra: torch.cuda.max_memory_allocated "
    "during one call minus memory allocated before it (inputs excluded). Backward: relative L2 error of "
    "grad_hidden and grad_weight vs fp64 autograd on the first 256 rows, as delivered by autograd (operand dtype) "
    "and, where the operator exposes them, its fp32 gradients (_fp32 fields). fwd_bwd: forward + backward of "
    "sum(grad_out * logp), grad_out ~ N(0,1) seeded, gradients w.r.t. hidden and weight; median of `reps//2` "
    "calls; fwd_bwd_peak_extra_bytes excludes the inputs and the returned .grad tensors. grad_batch_invariant: "
    "grad_hidden of rows 1..517 computed alone vs inside the full batch, bitwise; grad_tp_invariant: both "
    "gradients at TP 2 and 8 (emulated) vs TP 1, bitwise; grad_deterministic: two full runs, bitwise. "
    "Queued timing (GPU; the _queued fields, x_gemm_queued and fwd_bwd_x_gemm_queued against a GEMM timed the "
    "same way, alternately): a sleep kernel queued before the start event holds the GPU while the host issues "
    "the call (nvbench's blocking-kernel method), so the span is the GPU's work without the host's issue time "
    "or the GPU's wake from idle; queued_held / fwd_bwd_queued_held: the fraction of calls whose sleep outlasted "
    "the host's issue time (below 1, that many calls were timed partly from an idle GPU). input_stats: the "
    "bundle's log-softmax statistics from fp32 logits of its operands (regimes.input_stats), recorded with each row."
)


def _pkg(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def environment(device: torch.device) -> dict:
    hardware = {"cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(), "gpu": None}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        hardware.update(
            gpu=props.name,
            gpu_memory_bytes=props.total_memory,
            sm_count=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}",
            cuda_runtime=torch.version.cuda,
            gpu_count=torch.cuda.device_count(),
        )
        try:
            import pynvml  # nvidia-ml-py, present on the H200 image

            pynvml.nvmlInit()
            hardware["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:
            hardware["driver"] = None
    libraries = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("triton", "liger-kernel", "cut-cross-entropy", "vllm", "megatron-core", "numpy"):
        libraries[name] = _pkg(name)
    return {"hardware": hardware, "libraries": libraries, "platform": platform.platform()}


def gemm_ms(bundle: Bundle, device: torch.device, warmup: int, reps: int) -> float:
    return measure.time_ms(lambda: bundle.hidden @ bundle.weight.T, device, warmup, reps)


def measure_operator(name, bundle, device, temperature, ref_cache, gemm, warmup, reps, backward_rows) -> dict:
    op = registry.get(name)
    row = {"name": name, "shape": bundle.shape, "contract": op.contract.model_dump()}
    ok, why = op.available()
    if not ok:
        return row | {"available": False, "why_unavailable": why}
    call = lambda: op.selected_logprobs(bundle.hidden, bundle.weight, bundle.targets, temperature)  # noqa: E731
    with torch.no_grad():
        full = call()
        row |= measure.error_stats(full, measure.reference_for(op, bundle, temperature, ref_cache))
        row["path"] = getattr(op, "last_path", "") or None
        row |= measure.batch_invariance(op, bundle, full, temperature)
        row |= measure.tp_invariance(op, bundle, full, temperature)
        gemm_call = lambda: bundle.hidden @ bundle.weight.T  # noqa: E731
        row["ms_median"], row["gemm_ms_paired"] = measure.time_ms_paired(call, gemm_call, device, warmup, reps)
        row |= measure.queued_fields(measure.time_ms_paired_queued(call, gemm_call, device, 0, reps))
        row["peak_extra_bytes"] = measure.peak_extra_bytes(call, device)
    try:  # an operator whose backward refuses this shape keeps its forward figures
        row |= measure.backward_parity(op, bundle, temperature, backward_rows)
        row |= measure.fwd_bwd_time_and_memory(op, bundle, temperature, max(1, warmup - 1), max(3, reps // 2), gemm_call)
        row |= measure.backward_checks(op, bundle, temperature)
    except Exception as exc:
        row["backward_error"] = f"{type(exc).__name__}: {exc}"
    # Ratios against the GEMM timed alternately with the operator (measure.time_ms_paired): the
    # card's clock drifts with load, so the run's first GEMM timing (gemm_ms_first) is context only.
    row["gemm_ms_first"] = gemm
    row["gemm_ms_median"] = row["gemm_ms_paired"]
    row["x_gemm"] = row["ms_median"] / row["gemm_ms_paired"]
    fb, fb_gemm = row.get("fwd_bwd_ms_median"), row.get("fwd_bwd_gemm_ms_median")
    row["fwd_bwd_x_gemm"] = fb / fb_gemm if fb and fb_gemm else None
    return row | {"available": True}


def run_bench(
    bundle: Bundle, device, names=None, temperature=1.0, warmup=3, reps=None, backward_rows=256, out_path=None, on_row=None, regime=None
) -> dict:
    """``reps``: calls of each side per timed figure (None: default_reps(device)). ``regime``: the name of the
    synthetic regime the bundle was drawn from (regimes.REGIMES), recorded; the bundle's measured statistics
    (regimes.input_stats) go into the record and into every row."""
    device = torch.device(device)
    reps = default_reps(device) if reps is None else reps
    bundle = bundle.to(device)
    stats = regimes.input_stats(bundle.hidden, bundle.weight, bundle.targets, temperature)
    record = {
        "schema": SCHEMA,
        "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **environment(device),
        "bundle": {"source": bundle.source, **bundle.shape},
        "temperature": temperature,
        "regime": regime,
        "input_stats": stats,
        "method": METHOD,
        "timing": {"warmup": warmup, "reps": reps},
        "targets": TARGETS,
        "plugin_errors": registry.plugin_errors(),
        "results": [],
    }
    record["gemm_ms_median"] = gemm = gemm_ms(bundle, device, warmup, reps)
    ref_cache: dict = {}
    for name in names or registry.names():
        try:
            row = measure_operator(name, bundle, device, temperature, ref_cache, gemm, warmup, reps, backward_rows)
        except Exception as exc:  # one operator failing must not lose the others' results
            row = {"name": name, "shape": bundle.shape, "available": True, "error": f"{type(exc).__name__}: {exc}"}
        row |= {"regime": regime, "input_stats": stats}
        record["results"].append(row)
        if on_row:
            on_row(row)
        if out_path:
            write_record(record, out_path)
    return record


def write_record(record: dict, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    tmp.replace(path)


def run_token_sweep(bundles, device, names=None, temperature=1.0, warmup=3, reps=None, out_path=None, on_row=None, regime=None) -> dict:
    """One bench per bundle (the same H, V, seed at several T), every row in one record's results.

    Each row carries its own ``shape`` (with T) and the ``gemm_ms_median`` of its T; the record's
    ``gemm_ms_by_tokens`` lists them. The plan of the fused operator never looks at T, so one record
    shows how each operator's cost scales with the batch it is handed.
    """
    record = None
    for bundle in bundles:
        part = run_bench(bundle, device, names, temperature, warmup, reps, on_row=on_row, regime=regime)
        if record is None:
            record = part | {
                "results": [],
                "gemm_ms_by_tokens": {},
                "bundle": {"source": part["bundle"]["source"], "tokens": [b.hidden.shape[0] for b in bundles]},
            }
            record.pop("gemm_ms_median", None)
        record["gemm_ms_by_tokens"][str(bundle.hidden.shape[0])] = part["gemm_ms_median"]
        record["results"].extend(part["results"])
        if out_path:
            write_record(record, out_path)
        del part
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return record
