"""The from-logits stage against its bandwidth floor and the natives (the bench's --from-logits).

For each (T, logits dtype): logits = hidden @ weight.T of a regime bundle (bf16 GEMM, or fp32 from the bf16
operands), then, timed alternately with a device-to-device copy of the same number of bytes as the logits
(the card's copy bandwidth, counting bytes read and written, measured beside each figure):

- ``fused`` forward (from_logits.logits_logprob), backward (logits_logprob_backward with a given lse), and
  forward + backward through autograd (the gradient allocated by the call);
- ``native`` vLLM's compute_logprobs: ``logits.log_softmax(-1, dtype=float32)`` then gather, forward and
  forward + backward through autograd;
- ``native-ce``: ``-cross_entropy(logits.float(), targets, reduction='none')``, forward and forward + backward.

Each row: median ms from idle and queued (measure.time_ms_paired_queued), the floor ms = the stage's fewest
bytes (from_logits.floor_bytes) over the copy bandwidth, and the ratio; error of the log-probs against fp64
(mean / max), of the gradient (relative L2 on the first 256 rows against fp64), and bitwise batch invariance
of the log-probs (measure.batch_slices) and of the gradient rows 1..517.
"""

from __future__ import annotations

import torch

from harness.operators import measure
from harness.operators.from_logits import floor_bytes, logits_logprob, logits_logprob_backward, selected_logprobs_from_logits


def _native(logits, targets):
    return logits.log_softmax(-1, dtype=torch.float32).gather(1, targets[:, None]).squeeze(1)


def _native_ce(logits, targets):
    return -torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")


FORWARDS = {"fused": lambda z, t: logits_logprob(z, t)[0], "native": _native, "native-ce": _native_ce}
AUTOGRAD = {"fused": selected_logprobs_from_logits, "native": _native, "native-ce": _native_ce}


def _ref64(logits, targets, chunk=512):
    out = []
    for a in range(0, logits.shape[0], chunk):
        out.append(torch.log_softmax(logits[a : a + chunk].double(), -1).gather(1, targets[a : a + chunk, None]).squeeze(1))
    return torch.cat(out)


def _grad64(logits, targets, grad_out):
    z = logits.double()
    g = -torch.softmax(z, -1)
    g[torch.arange(z.shape[0], device=z.device), targets] += 1.0
    return g * grad_out.double()[:, None]


def _timed(fn, copy_fn, device, reps, bytes_moved, copy_bytes) -> dict:
    ms, copy_ms = measure.time_ms_paired(fn, copy_fn, device, 3, reps)
    q = measure.time_ms_paired_queued(fn, copy_fn, device, 0, reps) or {}
    bw = copy_bytes / (copy_ms * 1e-3)
    row = {"ms_median": ms, "copy_ms_median": copy_ms, "copy_gbps": bw / 1e9, "floor_bytes": bytes_moved, "floor_ms": bytes_moved / bw * 1e3}
    row["x_floor"] = ms / row["floor_ms"]
    if q:
        bw_q = copy_bytes / (q["ref_ms"] * 1e-3)
        row |= {"ms_median_queued": q["ms"], "copy_ms_queued": q["ref_ms"], "floor_ms_queued": bytes_moved / bw_q * 1e3, "queued_held": q["held"]}
        row["x_floor_queued"] = q["ms"] / row["floor_ms_queued"]
        row["achieved_gbps_queued"] = bytes_moved / (q["ms"] * 1e-3) / 1e9
    return row


def from_logits_rows(bundle, dtype: torch.dtype, reps: int = 50) -> list[dict]:
    """Rows for one bundle (on the GPU) and one logits dtype."""
    h, w, t = bundle.hidden, bundle.weight, bundle.targets
    device = h.device
    with torch.no_grad():
        logits = (h @ w.T) if dtype == h.dtype else (h.float() @ w.float().T).to(dtype)
    rows, vocab = logits.shape
    item = logits.element_size()
    src, dst = torch.empty_like(logits), torch.empty_like(logits)
    src.copy_(logits)
    copy_fn = lambda: dst.copy_(src)  # noqa: E731
    copy_bytes = 2 * logits.numel() * item
    floors = floor_bytes(rows, vocab, item)
    grad_out = torch.randn(rows, generator=torch.Generator().manual_seed(1)).to(device)
    ref = _ref64(logits, t)
    shape = {"T": rows, "V": vocab, "dtype": str(dtype).removeprefix("torch.")}
    out = []
    for name, fwd in FORWARDS.items():
        row = {"name": name, "shape": shape}
        with torch.no_grad():
            full = fwd(logits, t)
            err = (full.double() - ref).abs()
            row |= {"mean_abs_err": float(err.mean()), "max_abs_err": float(err.max())}
            differing = 0
            for start, n in measure.batch_slices(rows):
                differing += int((fwd(logits[start : start + n], t[start : start + n]) != full[start : start + n]).sum())
            row["batch_invariant"], row["batch_rows_differing"] = differing == 0, differing
            row["fwd"] = _timed(lambda fwd=fwd: fwd(logits, t), copy_fn, device, reps, floors["fwd"], copy_bytes)
        leaf = logits.detach().requires_grad_()

        def step(fn=AUTOGRAD[name], leaf=leaf):
            leaf.grad = None
            with torch.enable_grad():
                fn(leaf, t).backward(grad_out)

        step()
        sub = slice(0, min(256, rows))
        g64 = _grad64(logits[sub], t[sub], grad_out[sub])
        row["grad_rel_err"] = float((leaf.grad[sub].double() - g64).norm() / g64.norm())
        start, n = 1, min(517, rows - 1)
        alone = logits[start : start + n].detach().requires_grad_()
        with torch.enable_grad():
            AUTOGRAD[name](alone, t[start : start + n]).backward(grad_out[start : start + n])
        row["grad_batch_invariant"] = bool(torch.equal(alone.grad, leaf.grad[start : start + n]))
        del alone, g64
        row["fwd_bwd"] = _timed(step, copy_fn, device, reps, floors["fwd_bwd"], copy_bytes)
        leaf.grad = None
        if name == "fused":
            with torch.no_grad():
                lse = logits_logprob(logits, t)[1]
                row["bwd"] = _timed(lambda: logits_logprob_backward(logits, t, lse, grad_out), copy_fn, device, reps, floors["bwd"], copy_bytes)
        out.append(row)
        del leaf
        torch.cuda.empty_cache()
    return out  # the logits and copy buffers go with this frame (the caller empties the cache)
