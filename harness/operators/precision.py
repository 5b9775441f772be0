"""Gradient precision of the fused operator's backward plans at full T, against fp64 (the bench's --precision).

The bench's backward_parity compares the first 256 rows as autograd delivers them (the operands' dtype,
bf16 in production): rounding a gradient to bf16 alone costs ~1.7e-3 relative L2 error. A trainer that
accumulates into fp32 (Megatron's ``main_grad``) can take the kernel's fp32 gradients instead. This
measures, over every row, each plan as delivered in bf16 and in fp32, with its fwd+bwd time against the
GEMM timed alternately and its peak memory, so the plan that meets a gradient target has its cost beside it.
"""

from __future__ import annotations

import torch

from harness.operators import measure
from harness.operators.impl_fused import fused_forward_backward

PLANS = tuple((plan, dtype) for plan in ("fast", "lean", "keep") for dtype in (torch.bfloat16, torch.float32))


def fp64_gradients(hidden, weight, targets, temperature, grad_out, row_chunk=1024):
    """d(sum(grad_out * logp))/d(hidden, weight) in fp64, rows in chunks (no T x V fp64 tensor at once)."""
    w64 = weight.double()
    gh = torch.empty(hidden.shape, dtype=torch.float64, device=hidden.device)
    gw = torch.zeros(weight.shape, dtype=torch.float64, device=weight.device)
    for a in range(0, hidden.shape[0], row_chunk):
        h64 = hidden[a : a + row_chunk].double()
        dz = -torch.softmax((h64 @ w64.T) / temperature, dim=-1)
        dz[torch.arange(h64.shape[0], device=dz.device), targets[a : a + row_chunk]] += 1.0
        dz *= grad_out[a : a + row_chunk, None].double() / temperature
        gh[a : a + row_chunk] = dz @ w64
        gw += dz.T @ h64
        del dz
    return gh, gw


def _rel(a, b) -> float:
    return float((a.double() - b).norm() / b.norm().clamp(min=1e-300))


def gradient_precision(bundle, temperature: float = 1.0, warmup: int = 2, reps: int = 10, grad_scale: float = 1.0, plans=PLANS) -> dict:
    """``grad_scale`` multiplies grad_out ~ N(0,1): a mean loss over N tokens hands each token 1/N. The
    relative errors do not depend on it in exact arithmetic; a low-precision intermediate that underflows does."""
    h, w, t = bundle.hidden, bundle.weight, bundle.targets
    g = torch.randn(h.shape[0], generator=torch.Generator().manual_seed(1)).mul_(grad_scale).to(h.device)
    ref_h, ref_w = fp64_gradients(h, w, t, temperature, g)
    gemm = lambda: h @ w.T  # noqa: E731
    rows = []
    for plan, dtype in plans:

        def step(plan=plan, dtype=dtype):
            gh, gw = fused_forward_backward(h, w, t, temperature, g, 1, grad_dtype=dtype, plan=plan)
            return gh.to(dtype), gw

        row = {"plan": plan, "grad_dtype": str(dtype).removeprefix("torch."), "rows": int(h.shape[0])}
        try:
            gh, gw = step()
        except Exception as exc:  # one plan failing keeps the others' figures
            rows.append(row | {"error": f"{type(exc).__name__}: {exc}"[:1000]})
            continue
        row["grad_rel_err_hidden"], row["grad_rel_err_weight"] = _rel(gh, ref_h), _rel(gw, ref_w)
        del gh, gw
        ms, gemm_ms = measure.time_ms_paired(step, gemm, h.device, warmup, reps)
        row |= {"fwd_bwd_ms_median": ms, "gemm_ms_median": gemm_ms, "fwd_bwd_x_gemm": ms / gemm_ms}
        row["peak_extra_bytes"] = measure.peak_extra_bytes(step, h.device)  # includes the returned gradients
        rows.append(row)
    del ref_h, ref_w
    return {
        "grad_scale": grad_scale,
        "method": "fp64 reference over every row (fp64_gradients); fused_forward + fused_backward with the plan and "
        "gradient dtype named, grad_out ~ N(0,1) * grad_scale, seed 1; time: median of reps calls alternating with the bf16 GEMM; "
        "peak_extra_bytes includes the returned gradients (fp32 grad_weight is V*H*4 bytes)",
        "plans": rows,
    }
