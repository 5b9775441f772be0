"""The fused linear-logprob operator: online log-sum-exp over vocab tiles, fp32, batch/TP invariant.

Forward: per-chunk partials from the Triton kernel (CUDA) or the torch version (elsewhere), merged
in the fixed chunk order (fused_plan.py). Backward (for training): per vocab slice, recompute the
fp32 logits from the saved operands and log-sum-exp, form grad_logits = (onehot - softmax) *
grad_out / T, and multiply it into grad_weight's rows of the slice (rows of T reduced in fixed blocks
from row 0) and into grad_hidden's group partial (fused_plan.N_GROUPS groups, each accumulated from
zero slice by slice, then added left to right). Fixed tiles everywhere, never chosen from T: a row's
grad_hidden depends only on that row, grad_weight's reduction order is fixed, and a TP split
reproduces the unsplit gradients bitwise (each rank computes its groups' partials).
"""

from __future__ import annotations

import torch

from harness.operators import fused_plan
from harness.operators.contract import Contract, OperandError, Operator, _check_operands
from harness.operators.fused_plan import BACKWARD_PLANS, LEAN_ROW_CHUNK, N_CHUNKS, merge_partials, shard_chunk_bounds, shard_group_bounds
from harness.operators.fused_torch import torch_backward_groups, torch_backward_lean, torch_partials
from harness.operators.registry import register


def _on_triton(device: torch.device, dtype: torch.dtype) -> bool:
    # The Triton kernels take 16-bit operands; an fp32 tl.dot would silently use TF32, so fp32
    # operands take the torch path (exact fp32 GEMMs of fixed shape) on any device.
    return device.type == "cuda" and dtype in (torch.bfloat16, torch.float16)


def _partials_fn(device: torch.device, dtype: torch.dtype = torch.bfloat16):
    if _on_triton(device, dtype):
        from harness.operators.fused_triton import triton_partials

        return triton_partials
    return torch_partials


def _backward_groups_fn(device: torch.device, dtype: torch.dtype):
    if _on_triton(device, dtype):
        from harness.operators.fused_triton import triton_backward_groups

        return triton_backward_groups
    return torch_backward_groups


def fused_forward(hidden, weight, targets, temperature, tp_size, partials_fn=None, range_flag=None, kept=None):
    """(selected log-probs [T] fp32, log-sum-exp [T] fp32); tp_size shards emulated in rank order.

    ``range_flag`` (GPU only; int32 [2], see fused_triton.triton_merge): the merge kernel also checks
    the targets' range and records targets outside [0, V) there (those rows' results are NaN); nothing waits.
    ``kept`` (a list; GPU only): the keep plan's forward (fused_keep.py), each rank's kept terms appended to it.
    """
    on_gpu = partials_fn is None and _on_triton(hidden.device, hidden.dtype)
    if kept is not None and on_gpu:
        from harness.operators.fused_keep import keep_partials

        def partials_fn(*args):
            parts, terms = keep_partials(*args)
            kept.append(terms)
            return parts

    partials_fn = partials_fn or _partials_fn(hidden.device, hidden.dtype)
    vocab = weight.shape[0]
    gathered = []
    for rank in range(tp_size):
        start, local = shard_chunk_bounds(vocab, tp_size, rank)
        shard = weight if tp_size == 1 else weight[start : start + vocab // tp_size]  # a view costs host time before the launch
        gathered.append(partials_fn(hidden, shard, targets - start if start else targets, local, temperature))
    # all-gather of partials: concatenate every rank's chunks in rank (= chunk) order
    m, s, z_t = (torch.cat([g[i] for g in gathered], dim=0) if tp_size > 1 else gathered[0][i] for i in range(3))
    if range_flag is not None and on_gpu:
        from harness.operators.fused_triton import triton_merge

        assert m.shape[0] == N_CHUNKS, f"expected {N_CHUNKS} chunk partials, got {m.shape[0]}"
        return triton_merge(m, s, z_t, targets, vocab, range_flag)  # the same merge, plus the range check
    return merge_partials(m, s, z_t)


def shard_backward(hidden, weight_shard, targets_local, lse, temperature, grad_out, local_groups, grad_w):
    """Iterator over the shard's grad_hidden group partials; fills grad_w [shard V, H] as it goes."""
    fn = _backward_groups_fn(hidden.device, hidden.dtype)
    return fn(hidden, weight_shard, targets_local, lse, temperature, grad_out, local_groups, grad_w)


def fused_backward(hidden, weight, targets, lse, temperature, grad_out, tp_size=1, grad_dtype=None, plan="fast", row_chunk=None):
    """(grad_hidden [T, H], grad_weight [V, H] in grad_dtype, default the weight's dtype).

    ``tp_size`` > 1 emulates the vocab-parallel backward in rank order: each shard's group partials,
    gathered, added in group order (the same additions as tp_size = 1). ``plan`` (fused_plan.BACKWARD_PLANS):
    ``fast`` returns grad_hidden in fp32; ``lean`` (grad_hidden in chunks of ``row_chunk`` rows, default
    fused_plan.LEAN_ROW_CHUNK) writes it straight into grad_dtype, or the hidden's dtype when none is given.
    """
    vocab = weight.shape[0]
    grad_w = torch.empty(weight.shape, dtype=grad_dtype or weight.dtype, device=weight.device)
    if plan == "lean":
        grad_h = torch.empty(hidden.shape, dtype=grad_dtype or hidden.dtype, device=hidden.device)
        shards = []
        for rank in range(tp_size):
            start, local = shard_group_bounds(vocab, tp_size, rank)
            end = start + vocab // tp_size
            shards.append((weight[start:end], targets - start, local, grad_w[start:end]))
        if _on_triton(hidden.device, hidden.dtype):
            from harness.operators.fused_triton import triton_backward_lean as lean
        else:
            lean = torch_backward_lean
        lean(hidden, shards, lse, temperature, grad_out, grad_h, row_chunk or fused_plan.LEAN_ROW_CHUNK)  # read per call: experiments set it
        return grad_h, grad_w
    if plan != "fast":
        raise ValueError(f"backward plan {plan!r}: expected one of {BACKWARD_PLANS}")
    if _on_triton(hidden.device, hidden.dtype):
        # the kernels fold each group into grad_hidden in group (= rank) order: no [T, H] partial per group
        from harness.operators.fused_triton import triton_backward_groups

        total = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device)
        for rank in range(tp_size):
            start, local = shard_group_bounds(vocab, tp_size, rank)
            end = start + vocab // tp_size
            shard_grads = triton_backward_groups(
                hidden, weight[start:end], targets - start, lse, temperature, grad_out, local, grad_w[start:end], into=total, start_sum=rank == 0
            )
            for _ in shard_grads:
                pass
        return total, grad_w
    total = None
    for rank in range(tp_size):
        start, local = shard_group_bounds(vocab, tp_size, rank)
        end = start + vocab // tp_size
        for partial in shard_backward(hidden, weight[start:end], targets - start, lse, temperature, grad_out, local, grad_w[start:end]):
            # fused_plan.sum_group_partials' left-to-right order, kept running so at most two
            # [T, H] fp32 tensors exist at once
            if total is None:
                total = partial
            else:
                total += partial
    return total, grad_w


def keep_plan_runs(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the keep plan (fused_keep.py) runs for these operands: Triton (a GPU, 16-bit operands), H divisible
    by 256 (the backward's tiles) and V by 64 (each group of V/8 columns starts 16-byte aligned in the kept buffer,
    as its TMA loads need). Elsewhere the operator runs the fast plan, and its path says so."""
    return _on_triton(hidden.device, hidden.dtype) and hidden.shape[1] % 256 == 0 and weight.shape[0] % 64 == 0


def keep_fused_backward(hidden, weight, targets, logp, lse, kept, temperature, grad_out, tp_size=1, grad_dtype=None, config=None):
    """The keep plan's (grad_hidden [T, H] fp32, grad_weight [V, H] in grad_dtype, default the weight's) from the
    terms its forward kept (``kept``, one entry per rank; consumed: they hold grad_logits afterwards)."""
    from harness.operators.fused_keep import keep_backward

    vocab = weight.shape[0]
    grad_w = torch.empty(weight.shape, dtype=grad_dtype or weight.dtype, device=weight.device)
    grad_h = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device)
    shards = []
    for rank in range(tp_size):
        start, local = shard_group_bounds(vocab, tp_size, rank)
        end = start + vocab // tp_size
        shards.append((weight[start:end], targets - start, kept[rank], local, grad_w[start:end]))
    keep_backward(hidden, shards, logp, lse, temperature, grad_out, grad_h, config)
    return grad_h, grad_w


def fused_forward_backward(hidden, weight, targets, temperature, grad_out, tp_size=1, grad_dtype=None, plan="fast"):
    """(grad_hidden, grad_weight) of sum(grad_out * logp) by the named plan (BACKWARD_PLANS or "keep"), no autograd."""
    if plan == "keep" and keep_plan_runs(hidden, weight):
        kept: list = []
        logp, lse = fused_forward(hidden, weight, targets, temperature, tp_size, kept=kept)
        return keep_fused_backward(hidden, weight, targets, logp, lse, kept, temperature, grad_out, tp_size, grad_dtype)
    lse = fused_forward(hidden, weight, targets, temperature, tp_size)[1]
    plan = "fast" if plan == "keep" else plan
    return fused_backward(hidden, weight, targets, lse, temperature, grad_out, tp_size, grad_dtype, plan=plan)


class FusedLinearLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, tp_size, range_flag=None, plan="fast"):
        kept = [] if plan == "keep" and keep_plan_runs(hidden, weight) else None
        logp, lse = fused_forward(hidden, weight, targets, temperature, tp_size, range_flag=range_flag, kept=kept)
        ctx.save_for_backward(hidden, weight, targets, lse, logp if kept is not None else None)
        ctx.temperature, ctx.tp_size, ctx.plan, ctx.kept = temperature, tp_size, plan, kept
        return logp

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, targets, lse, logp = ctx.saved_tensors
        if ctx.plan == "keep" and ctx.kept is not None:
            kept, ctx.kept = ctx.kept, None  # consumed (turned into grad_logits in place); freed with this frame
            grad_h, grad_w = keep_fused_backward(hidden, weight, targets, logp, lse, kept, ctx.temperature, grad_out.contiguous(), ctx.tp_size)
            del kept
        elif ctx.plan == "keep" and keep_plan_runs(hidden, weight):
            raise RuntimeError("fused keep plan: its kept softmax terms were consumed by an earlier backward (retain_graph is not supported)")
        else:
            plan = "fast" if ctx.plan == "keep" else ctx.plan
            grad_h, grad_w = fused_backward(hidden, weight, targets, lse, ctx.temperature, grad_out.contiguous(), ctx.tp_size, plan=plan)
        grad_h = grad_h.to(hidden.dtype)
        return (grad_h if ctx.needs_input_grad[0] else None), (grad_w if ctx.needs_input_grad[1] else None), None, None, None, None, None


_RANGE_FLAGS: dict = {}
_FLAG_VIEWS: dict = {}


def _range_flag(device: torch.device) -> torch.Tensor:
    """int32 [2] in pinned host memory, one per GPU, that the merge kernel writes (count, V) into through
    unified addressing when a call's targets leave [0, V): the host reads it with no copy and no sync."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _RANGE_FLAGS:
        _RANGE_FLAGS[index] = torch.zeros(2, dtype=torch.int32, pin_memory=True)
    return _RANGE_FLAGS[index]


def _raise_if_flagged(flag: torch.Tensor) -> None:
    view = _FLAG_VIEWS.get(id(flag))
    if view is None or view[0] is not flag:  # a numpy view of the pinned memory: reading it is not a torch op
        view = _FLAG_VIEWS[id(flag)] = (flag, flag.numpy())
    if not view[1][0]:  # the common case, before every GPU call
        return
    count, vocab = (int(x) for x in view[1])  # pinned host memory: a read, not a device sync
    if count:
        flag.zero_()
        raise OperandError(
            f"targets must lie in [0, V={vocab}); an earlier call on the GPU had {count} or more outside it "
            "(found by its merge kernel after the call returned; those rows' log-probs are NaN)"
        )


_PATHS: dict = {}


def _cached_path_name(device: torch.device, dtype: torch.dtype) -> str:
    key = (device, dtype)
    if key not in _PATHS:
        _PATHS[key] = _path_name(device, dtype)
    return _PATHS[key]


def _path_name(device: torch.device, dtype: torch.dtype) -> str:
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        from harness.operators.fused_plan import N_CHUNKS
        from harness.operators.fused_torch import BLOCK_T, BLOCK_V

        return f"torch tiles {BLOCK_T}x{BLOCK_V}, {N_CHUNKS} chunks"
    from harness.operators.fused_triton import default_config

    c = default_config(device)
    from harness.operators.fused_plan import N_CHUNKS
    from harness.operators.fused_triton import BACKWARD_CONFIG as b

    return (
        f"triton {c.variant}{' exp2' if c.exp2 else ''} {c.block_t}x{c.block_v}x{c.block_k} w{c.num_warps} s{c.num_stages}, {N_CHUNKS} chunks; "
        f"bwd {b.g_dtype} (onehot - p) x 2^{b.g_exp} in {'equal ' if b.even_slices else ''}slices of <= {b.g_buffer_bytes >> 20} MiB, grad_out in fp32"
        + (", weight slice copied by the grad_logits launch" if b.copy_in_logits else "")
    )


@register("fused-linear-logprob")
class FusedLinearLogprobOperator(Operator):
    contract = Contract(
        summary="Fused linear-logprob: tiled GEMM + online log-sum-exp, fp32, fixed 120-chunk reduction plan; fused invariant backward",
        operand_dtype="as given (bf16 in production)",
        accumulate_dtype="float32",
        logits_dtype="none stored: fp32 tiles in registers (Triton) or one fp32 tile (torch)",
        rounds_at=[
            "fp32 GEMM accumulation per tile",
            "forward (GPU): running max of the raw accumulator times log2(e)/T, exp2(acc * log2(e)/T - max) as one FMA, "
            "partials returned in natural units (max * ln2, target acc * (1/T)); CPU and backward: fp32 / T (as x * (1/T)), exp",
            "fp32 online max/exp/sum",
            "fp32 merge of 120 chunk partials",
            "backward (GPU): (onehot - softmax) * m * 2^15 stored in fp16 per vocab slice, m the mantissa of grad_out / T "
            "(its exponent kept out, so no underflow under a mean loss); the exponent applied exactly in fp32, per row to "
            "grad_hidden and through hidden's fp16 copy (rows times a power of two) to grad_weight; fp32 accumulation of "
            "both products; gradients returned in the operand dtype",
        ],
        reduction_order=(
            "vocabulary cut into 120 chunks at (c*V)//120; tiles from each chunk's start in fixed order; "
            "chunks merged in chunk order by one elementwise sequence. Backward: grad_weight rows summed over "
            "T in fixed row blocks from row 0; grad_hidden accumulated per group of V/8 columns in fixed "
            "slices, the 8 group partials added left to right"
        ),
        tp_handling="TP 1/2/4/8: each rank computes its chunks' partials and its groups' gradient partials; all-gather of partials, same merge and sum",
        batch_invariant_by_design=True,
        tp_invariant_by_design=True,
        has_backward=True,
        requires=[],
    )

    last_path = ""
    backward_plan = "fast"  # fused_plan.BACKWARD_PLANS; the same bits either way
    path_suffix = ""
    targets_checked_after_launch = True  # the kernels compare target ids with column ids, never gather by them

    def selected_logprobs(self, hidden, weight, targets, temperature: float = 1.0, tp_size: int = 1):
        """As Operator.selected_logprobs. On the GPU the targets' range is checked by the merge kernel, not
        by a host sync: rows with a target outside [0, V) come back NaN, and the OperandError is raised by
        the next call of this operator once the kernel has run (or by ``check_targets()``, which waits
        for it). Elsewhere (CPU) the check raises before returning, as for every operator."""
        if not (hidden.is_cuda and targets.is_cuda and _on_triton(hidden.device, hidden.dtype)):
            return super().selected_logprobs(hidden, weight, targets, temperature, tp_size)
        flag = _range_flag(hidden.device)
        _raise_if_flagged(flag)  # an earlier call's targets
        _check_operands(hidden, weight, targets, temperature, tp_size, check_targets=False)
        targets = targets if targets.dtype == torch.int64 else targets.long()
        return self._run(hidden, weight, targets, float(temperature), int(tp_size), flag)

    def check_targets(self, wait: bool = True) -> None:
        """Raise OperandError if an earlier GPU call had targets outside [0, V). ``wait``: first wait for
        the GPU's queued work (a device sync); else report only what the kernels have written so far."""
        if wait and torch.cuda.is_available():
            torch.cuda.synchronize()
        for flag in _RANGE_FLAGS.values():
            _raise_if_flagged(flag)

    def fp32_gradients(self, hidden, weight, targets, temperature, grad_out):
        """(grad_hidden, grad_weight) in fp32, before autograd rounds them to the operands' dtype."""
        return fused_forward_backward(hidden, weight, targets, temperature, grad_out, 1, torch.float32, plan=self.backward_plan)

    def _selected_logprobs(self, hidden, weight, targets, temperature, tp_size):
        return self._run(hidden, weight, targets, temperature, tp_size, None)

    def _run(self, hidden, weight, targets, temperature, tp_size, range_flag):
        self.last_path = _cached_path_name(hidden.device, hidden.dtype) + self.path_suffix
        if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
            return FusedLinearLogprob.apply(hidden, weight, targets, temperature, tp_size, range_flag, self.backward_plan)
        return fused_forward(hidden, weight, targets, temperature, tp_size, range_flag=range_flag)[0]


@register("fused-linear-logprob-lean")
class FusedLinearLogprobLeanOperator(FusedLinearLogprobOperator):
    """The fused operator with the lean backward plan (fused_plan.py): the same forward, the same gradient bits,
    grad_hidden in fixed chunks of LEAN_ROW_CHUNK rows and grad_weight in a pass of its own (less memory, one
    more logits product)."""

    contract = FusedLinearLogprobOperator.contract.model_copy(
        update={
            "summary": FusedLinearLogprobOperator.contract.summary + " (lean backward plan: bounded memory, same bits)",
            "reduction_order": FusedLinearLogprobOperator.contract.reduction_order
            + f"; lean plan: grad_hidden in chunks of {LEAN_ROW_CHUNK} rows from row 0 (the same per-row additions), "
            "grad_weight in a second pass over all T (the same row-block order)",
        }
    )
    backward_plan = "lean"
    path_suffix = f"; lean backward plan, row chunks of {LEAN_ROW_CHUNK}"


@register("fused-linear-logprob-keep")
class FusedLinearLogprobKeepOperator(FusedLinearLogprobOperator):
    """The fused operator with the keep plan (fused_keep.py, GPU): the same forward partials, plus each tile's
    softmax terms in fp16 kept for the backward, which then runs two products instead of three. Memory: a
    [T, V] fp16 buffer from forward to backward. Off the GPU (no Triton) the fast plan runs, and the path says so."""

    contract = FusedLinearLogprobOperator.contract.model_copy(
        update={
            "summary": FusedLinearLogprobOperator.contract.summary + " (keep plan: the forward keeps fp16 softmax terms, no recompute)",
            "logits_dtype": "none stored; the forward keeps exp2(logit - running max) * 2^15 per tile in fp16 ([T, V]) for the backward",
            "reduction_order": FusedLinearLogprobOperator.contract.reduction_order
            + "; keep plan: grad_logits from the kept terms (target entry from the fp32 log-prob), grad_weight over the shard "
            "in one product, grad_hidden per group in one product each, the group partials added left to right",
        }
    )
    backward_plan = "keep"

    def _run(self, hidden, weight, targets, temperature, tp_size, range_flag):
        out = super()._run(hidden, weight, targets, temperature, tp_size, range_flag)
        if keep_plan_runs(hidden, weight):
            self.last_path += "; keep plan: fp16 softmax terms kept by the forward (fused_keep.py)"
        else:
            self.last_path += "; keep plan needs Triton, H % 256 == 0 and V % 64 == 0: the fast plan's backward ran"
        return out
