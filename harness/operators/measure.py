"""Measurements of one operator on one bundle: error, invariance, backward parity, time, memory.

Each function measures; none asserts. The tests (tests/operators/) and the record (reports/bench/)
decide what the numbers mean.
"""

from __future__ import annotations

import statistics
import time

import torch

from harness.operators.contract import OperandError, Operator
from harness.operators.impl_reference import reference_logprobs

TP_SIZES = (2, 4, 8)


def error_stats(out: torch.Tensor, ref64: torch.Tensor) -> dict:
    """Abs error against the fp64 reference over tokens where both are finite (filters give -inf)."""
    out64 = out.double()
    both = torch.isfinite(out64) & torch.isfinite(ref64)
    finite_disagree = int((torch.isfinite(out64) != torch.isfinite(ref64)).sum())
    err = (out64 - ref64)[both].abs()
    if err.numel() == 0:
        return {"mean_abs_err": None, "p99_abs_err": None, "max_abs_err": None, "compared_tokens": 0, "finite_mismatch_tokens": finite_disagree}
    return {
        "mean_abs_err": float(err.mean()),
        "p99_abs_err": float(torch.quantile(err.float().cpu(), 0.99)),
        "max_abs_err": float(err.max()),
        "compared_tokens": int(err.numel()),
        "finite_mismatch_tokens": finite_disagree,
    }


def batch_slices(tokens: int) -> list[tuple[int, int]]:
    """(start, length) slices: single rows at several offsets and odd-sized batches at odd offsets."""
    candidates = [(0, 1), (1, 1), (tokens // 2 + 3, 1), (tokens - 1, 1), (5, 7), (3, 129), (1, 517), (tokens // 4 + 1, tokens // 2 - 1)]
    return [(s, n) for s, n in candidates if n >= 1 and s + n <= tokens]


def batch_invariance(op: Operator, bundle, full: torch.Tensor, temperature: float) -> dict:
    """Bitwise: each slice computed alone vs the same rows inside the full batch."""
    differing, checked = 0, 0
    for start, n in batch_slices(bundle.hidden.shape[0]):
        alone = op.selected_logprobs(bundle.hidden[start : start + n], bundle.weight, bundle.targets[start : start + n], temperature)
        differing += int((alone != full[start : start + n]).sum())
        checked += n
    return {"batch_invariant": differing == 0, "batch_rows_checked": checked, "batch_rows_differing": differing}


def tp_invariance(op: Operator, bundle, full: torch.Tensor, temperature: float) -> dict:
    """Bitwise: TP 2/4/8 (emulated in-process, rank order) vs TP 1. None where the op has no TP mode."""
    per_tp: dict[str, int] = {}
    vocab = bundle.weight.shape[0]
    for tp in TP_SIZES:
        if vocab % tp:
            continue
        try:
            out = op.selected_logprobs(bundle.hidden, bundle.weight, bundle.targets, temperature, tp_size=tp)
        except OperandError:
            return {"tp_invariant": None, "tp_rows_differing": None}
        per_tp[str(tp)] = int((out != full).sum())
    return {"tp_invariant": all(v == 0 for v in per_tp.values()), "tp_rows_differing": per_tp}


def backward_parity(op: Operator, bundle, temperature: float, rows: int = 256) -> dict:
    """Relative L2 error of grad_hidden and grad_weight against fp64 autograd on the first rows."""
    if not op.contract.has_backward:
        return {"grad_rel_err_hidden": None, "grad_rel_err_weight": None, "backward_rel_err_hidden": None, "backward_rel_err_weight": None}
    h, w, t = bundle.hidden[:rows], bundle.weight, bundle.targets[:rows]
    grad_out = _grad_out(h.shape[0], h.device, op)
    h_op, w_op = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (op.selected_logprobs(h_op, w_op, t, temperature) * grad_out).sum().backward()
    h64, w64 = h.double().requires_grad_(), w.double().requires_grad_()
    logp = torch.log_softmax((h64 @ w64.T) / temperature, dim=-1).gather(1, t[:, None]).squeeze(1)
    (logp * grad_out.double()).sum().backward()

    def rel(a, b):
        return float((a.double() - b).norm() / b.norm().clamp(min=1e-300))

    res = {"grad_rel_err_hidden": rel(h_op.grad, h64.grad), "grad_rel_err_weight": rel(w_op.grad, w64.grad), "grad_out": grad_out_kind(op)}
    # The kernel's own fp32 gradients, before autograd rounds them to the operands' dtype (an
    # operator that has them exposes fp32_gradients): bf16 storage alone costs ~1.7e-3 relative.
    fp32 = getattr(op, "fp32_gradients", None)
    if fp32 is not None:
        gh, gw = fp32(h, w, t, temperature, grad_out)
        res |= {"grad_rel_err_hidden_fp32": rel(gh, h64.grad), "grad_rel_err_weight_fp32": rel(gw, w64.grad)}
    return res | {"backward_rel_err_hidden": res["grad_rel_err_hidden"], "backward_rel_err_weight": res["grad_rel_err_weight"]}


def time_ms(fn, device: torch.device, warmup: int = 3, reps: int = 10) -> float:
    """Median milliseconds: CUDA events around each call on a GPU, perf_counter on CPU."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def time_ms_paired(fn, ref_fn, device: torch.device, warmup: int = 3, reps: int = 10) -> tuple[float, float]:
    """(median ms of fn, median ms of ref_fn), the two timed alternately call by call.

    The H200's clock drifts with sustained load (its bf16 GEMM at T=8192 measured 6.6 ms cold and
    8.2 ms right after a long operator run in one session), so a ratio of two timings taken minutes
    apart measures the clock as much as the code; alternating puts both in the same state.
    """
    for _ in range(warmup):
        fn()
        ref_fn()
    a, b = [], []
    for _ in range(reps):
        a.append(time_ms(fn, device, 0, 1))
        b.append(time_ms(ref_fn, device, 0, 1))
    return statistics.median(a), statistics.median(b)


# Queued timing (GPU only). time_ms starts each call on an idle GPU, so its span also holds the host's
# time to issue the call and the GPU's wake from idle: at T=1024 the fused forward measured 0.95-0.97
# ms with its launches queued and 1.13-1.24 ms from idle, the GEMM 0.85-0.86 and 0.94-1.05 ms on an H200;
# 10-call windows hide the difference in the clock's changes, 100-call windows show it). Queued timing is
# nvbench's "blocking kernel" method: a sleep kernel ahead of the start event holds the GPU while the
# host issues the whole call, so the span is the GPU's work alone, as in a training step where the host
# runs ahead. Each call says whether its queue held (the sleep outlasted the host's issue time); a call
# that syncs inside, or a sleep too short, shows as not held rather than as a shorter time.
_CYCLES_PER_MS: dict = {}


def _sleep_cycles_per_ms(device: torch.device) -> float:
    """torch.cuda._sleep cycles per GPU millisecond, measured once per device on a warm GPU."""
    found = _CYCLES_PER_MS.get(device)
    if found is None:
        torch.cuda._sleep(1_000_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(4_000_000)
        end.record()
        torch.cuda.synchronize()
        found = _CYCLES_PER_MS[device] = 4_000_000 / max(start.elapsed_time(end), 1e-3)
    return found


def _host_issue_ms(fn) -> float:
    """Host milliseconds to issue fn (no sync), after it has run once."""
    t0 = time.perf_counter()
    fn()
    host = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    return host


def _queued_call(fn, cycles: int) -> tuple[float, bool]:
    """(GPU ms of fn with its launches queued behind a sleep of ``cycles``, whether the queue held)."""
    before, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    t0 = time.perf_counter()
    before.record()
    torch.cuda._sleep(cycles)
    start.record()
    fn()
    end.record()
    host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    # The sleep starts on the GPU no sooner than the host recorded ``before``, so it still held the
    # GPU when the host finished issuing iff it lasted longer than the host took.
    return start.elapsed_time(end), before.elapsed_time(start) > host_ms


def time_ms_paired_queued(fn, ref_fn, device: torch.device, warmup: int = 3, reps: int = 10) -> dict | None:
    """Queued timing (see above) of fn and ref_fn, alternately call by call as time_ms_paired does.

    Returns {"ms", "ref_ms"} (medians over every call), "held" (the fraction of calls whose queue
    held) and "sleep_ms" (the sleep asked for: three times the slower side's host issue time plus
    0.2 ms); None off the GPU.
    """
    if device.type != "cuda":
        return None
    for _ in range(warmup):
        fn()
        ref_fn()
    host = max(_host_issue_ms(fn), _host_issue_ms(ref_fn))
    sleep_ms = 3 * host + 0.2
    cycles = int(sleep_ms * _sleep_cycles_per_ms(device))
    a, b, held = [], [], 0
    for _ in range(reps):
        ms, ok = _queued_call(fn, cycles)
        ref_ms, ref_ok = _queued_call(ref_fn, cycles)
        a.append(ms)
        b.append(ref_ms)
        held += ok + ref_ok
    return {"ms": statistics.median(a), "ref_ms": statistics.median(b), "held": held / (2 * reps), "sleep_ms": sleep_ms}


def queued_fields(queued: dict | None, prefix: str = "") -> dict:
    """The record's fields for one time_ms_paired_queued result ({} off the GPU): ``ms_median_queued``,
    ``gemm_ms_queued``, ``x_gemm_queued``, ``queued_held``, each name after ``prefix``."""
    if not queued:
        return {}
    return {
        f"{prefix}ms_median_queued": queued["ms"],
        f"{prefix}gemm_ms_queued": queued["ref_ms"],
        f"{prefix}x_gemm_queued": queued["ms"] / queued["ref_ms"],
        f"{prefix}queued_held": queued["held"],
    }


def paired_fields(fn, ref_fn, device: torch.device, warmup: int = 3, reps: int = 10) -> dict:
    """fn against ref_fn (the GEMM), timed alternately from idle and queued: ``ms_median``, ``gemm_ms_median``,
    ``x_gemm`` and the queued_fields."""
    ms, ref = time_ms_paired(fn, ref_fn, device, warmup, reps)
    queued = time_ms_paired_queued(fn, ref_fn, device, 0, reps)
    return {"ms_median": ms, "gemm_ms_median": ref, "x_gemm": ms / ref} | queued_fields(queued)


def peak_extra_bytes(fn, device: torch.device) -> int | None:
    """Peak device memory allocated during one call above what was allocated before it (GPU only)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return int(peak)


def reference_for(op: Operator, bundle, temperature: float, cache: dict) -> torch.Tensor:
    """The fp64 reference with the operator's semantics (raw, or processed with its filters)."""
    key = (op.contract.semantics, getattr(op, "top_k", None), getattr(op, "top_p", None))
    if key not in cache:
        top_k = key[1] if key[0] == "processed" else None
        top_p = key[2] if key[0] == "processed" else None
        cache[key] = reference_logprobs(bundle.hidden, bundle.weight, bundle.targets, temperature, top_k, top_p)
    return cache[key]


def _grads(op: Operator, h, w, t, temperature, grad_out, tp_size=1):
    h_op, w_op = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    with torch.enable_grad():
        (op.selected_logprobs(h_op, w_op, t, temperature, tp_size) * grad_out).sum().backward()
    return h_op.grad, w_op.grad


def grad_out_kind(op: Operator) -> str:
    """What the bench hands an operator's backward: N(0, 1) per token, seed 1; a uniform 1 to an operator whose
    gradients exist for a scalar loss only (``scalar_loss_only``, e.g. QuACK's fused path)."""
    return "uniform 1 (scalar loss only)" if getattr(op, "scalar_loss_only", False) else "N(0,1) seed 1"


def _grad_out(tokens: int, device, op: Operator | None = None) -> torch.Tensor:
    if op is not None and getattr(op, "scalar_loss_only", False):
        return torch.ones(tokens, device=device)
    return torch.randn(tokens, generator=torch.Generator().manual_seed(1)).to(device)


def backward_checks(op: Operator, bundle, temperature: float) -> dict:
    """Bitwise: grad_hidden rows of a slice computed alone vs in the full batch; TP 2/8 vs 1 (both grads)."""
    if not op.contract.has_backward:
        return {"grad_batch_invariant": None, "grad_tp_invariant": None}
    h, w, t = bundle.hidden, bundle.weight, bundle.targets
    g = _grad_out(h.shape[0], h.device, op)
    full_h, full_w = _grads(op, h, w, t, temperature, g)
    start, n = 1, min(517, h.shape[0] - 1)
    alone_h, _ = _grads(op, h[start : start + n], w, t[start : start + n], temperature, g[start : start + n])
    out = {
        "grad_batch_invariant": bool(torch.equal(alone_h, full_h[start : start + n])),
        "grad_batch_rows_differing": int((alone_h != full_h[start : start + n]).any(dim=1).sum()),
    }
    del alone_h
    again_h, again_w = _grads(op, h, w, t, temperature, g)
    out["grad_deterministic"] = bool(torch.equal(again_h, full_h) and torch.equal(again_w, full_w))
    del again_h, again_w
    per_tp = {}
    for tp in (2, 8):
        if w.shape[0] % tp:
            continue
        try:
            tp_h, tp_w = _grads(op, h, w, t, temperature, g, tp)
        except OperandError:
            return out | {"grad_tp_invariant": None}
        per_tp[str(tp)] = bool(torch.equal(tp_h, full_h) and torch.equal(tp_w, full_w))
        del tp_h, tp_w
    return out | {"grad_tp_invariant": all(per_tp.values()) if per_tp else None, "grad_tp_equal": per_tp}


def fwd_bwd_time_and_memory(op: Operator, bundle, temperature: float, warmup: int = 2, reps: int = 5, ref_fn=None) -> dict:
    """Forward+backward (gradients w.r.t. hidden and weight) time and peak memory beyond inputs and grads.

    With ``ref_fn`` (the GEMM) the two are timed alternately (:func:`time_ms_paired`), and on a GPU also
    queued (:func:`time_ms_paired_queued`, the ``_queued`` fields).
    """
    if not op.contract.has_backward:
        return {"fwd_bwd_ms_median": None, "fwd_bwd_peak_extra_bytes": None}
    h = bundle.hidden.detach().clone().requires_grad_()
    w = bundle.weight.detach().clone().requires_grad_()
    g = _grad_out(h.shape[0], h.device, op)

    def step():
        h.grad = w.grad = None
        with torch.enable_grad():
            op.selected_logprobs(h, w, bundle.targets, temperature).backward(g)

    ref_ms, queued = None, None
    if ref_fn is None:
        ms = time_ms(step, h.device, warmup, reps)
    else:
        ms, ref_ms = time_ms_paired(step, ref_fn, h.device, warmup, reps)
        queued = time_ms_paired_queued(step, ref_fn, h.device, 0, reps)
    peak = None
    if h.device.type == "cuda":
        h.grad = w.grad = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        grads = sum(x.grad.numel() * x.grad.element_size() for x in (h, w) if x.grad is not None)
        peak = int(torch.cuda.max_memory_allocated() - base - grads)
    out = {"fwd_bwd_ms_median": ms, "fwd_bwd_gemm_ms_median": ref_ms, "fwd_bwd_peak_extra_bytes": peak}
    return out | queued_fields(queued, "fwd_bwd_")
