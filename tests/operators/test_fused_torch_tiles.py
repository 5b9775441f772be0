"""The CPU fused operator's tiles: empty chunks (V=64 < 120 chunks), narrow ones (the embedded model's V=512: 4-5 columns a chunk)
and chunks wider than one tile (V=70000: 584 columns, two tiles of 512) keep the plan's promises:
a row's partials do not depend on the rows around it, every TP shard's partials are the unsplit
operator's bits, and the merged log-sum-exp and target logit agree with fp64."""

import pytest
import torch

from harness.operators.fused_plan import chunk_bounds, shard_chunk_bounds
from harness.operators.fused_torch import torch_partials


@pytest.mark.parametrize("vocab, hidden_size, rows", [(64, 16, 24), (512, 128, 200), (70000, 64, 70)])
def test_partials_are_batch_and_tp_invariant_and_accurate(vocab, hidden_size, rows):
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(rows, hidden_size, generator=gen).bfloat16()
    w = (torch.randn(vocab, hidden_size, generator=gen) * 0.05).bfloat16()
    t = torch.randint(0, vocab, (rows,), generator=gen)
    full = torch_partials(h, w, t, chunk_bounds(vocab), 1.0)

    alone = torch_partials(h[:7], w, t[:7], chunk_bounds(vocab), 1.0)
    assert all(torch.equal(a[:, :7], b) for a, b in zip(full, alone)), "a row's partials depend on the batch"

    for tp in (2, 4, 8):
        if vocab % tp:
            continue
        for rank in range(tp):
            start, local = shard_chunk_bounds(vocab, tp, rank)
            shard = torch_partials(h, w[start : start + vocab // tp], t - start, local, 1.0)
            n = len(local) - 1
            assert all(torch.equal(a[rank * n : (rank + 1) * n], b) for a, b in zip(full, shard)), f"TP={tp} rank {rank}"

    m, s, z_t = full
    top = m.max(dim=0).values
    lse = top + torch.log((s * torch.exp(m - top)).sum(dim=0))
    logits = h.double() @ w.double().T
    assert (lse.double() - torch.logsumexp(logits, dim=-1)).abs().max() < 1e-5
    assert (z_t.sum(dim=0).double() - logits.gather(1, t[:, None])[:, 0]).abs().max() < 1e-5
