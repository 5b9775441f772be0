"""Run the vocab-parallel parity: one process per rank, NCCL on GPUs or gloo on CPU.

On N GPUs (keep NVLink multicast off, as the device notes require):
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    torchrun --nproc-per-node=N -m harness.operators.vocab_parallel_run --shape 8192,2048,151936 --out reports/bench/tpN.json
On CPU (gloo, spawns its own processes):
    python -m harness.operators.vocab_parallel_run --spawn 2 --shape 256,256,4096 --out /tmp/tp2.json

Rank 0 writes: bitwise comparison of the fused result against the single-process TP=1 fused result,
the Megatron-native result's error and its difference from TP=1, time per call, collective share,
and peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _timed(fn, device, reps):
    samples, coll = [], []
    for i in range(reps + 2):
        timings: dict = {}
        if device.type == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(timings)
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
        else:
            import time

            t0 = time.perf_counter()
            fn(timings)
            ms = (time.perf_counter() - t0) * 1e3
        if i >= 2:  # two warm-up calls
            samples.append(ms)
            coll.append(timings.get("collective_ms", 0.0))
    return statistics.median(samples), statistics.median(coll)


def run_rank(shape, temperature, reps, out_path):
    from harness.operators import registry
    from harness.operators.bench import environment
    from harness.operators.bundles import BundleShape, synthetic_bundle
    from harness.operators.impl_reference import reference_logprobs
    from harness.operators.vocab_parallel import fused_vocab_parallel, megatron_vocab_parallel

    rank, world = dist.get_rank(), dist.get_world_size()
    device = (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        if torch.cuda.is_available() and dist.get_backend() == "nccl"
        else torch.device("cpu")
    )
    if device.type == "cuda":
        torch.cuda.set_device(device)
    bundle = synthetic_bundle(BundleShape(*shape)).to(device)
    per = bundle.weight.shape[0] // world
    shard = bundle.weight[rank * per : (rank + 1) * per].contiguous()
    h, t = bundle.hidden, bundle.targets
    results = {}
    for name, fn in (("fused-linear-logprob", fused_vocab_parallel), ("megatron-native", megatron_vocab_parallel)):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
        out = fn(h, shard, t, temperature)
        peak = torch.cuda.max_memory_allocated() - base if device.type == "cuda" else None
        ms, coll = _timed(lambda timings: fn(h, shard, t, temperature, timings=timings), device, reps)
        everyone = [torch.empty_like(out) for _ in range(world)]
        dist.all_gather(everyone, out)
        results[name] = {
            "out": out,
            "ranks_agree": all(torch.equal(e, out) for e in everyone),
            "ms_median": ms,
            "collective_ms_median": coll,
            "peak_extra_bytes_rank0": peak,
        }
    grad_check = _gradient_parity(h, bundle.weight, shard, t, temperature, rank, per)
    if rank == 0:
        ref = reference_logprobs(h, bundle.weight, t, temperature)
        record = {
            "schema": 1,
            "what": "vocab-parallel selected-logprob parity",
            "backend": dist.get_backend(),
            "tp": world,
            "env": {k: os.environ.get(k) for k in MULTICAST_OFF},
            **environment(device),
            "bundle": {"source": bundle.source, **bundle.shape},
            "temperature": temperature,
            "results": [],
        }
        record["gradients"] = grad_check
        for name, r in results.items():
            single = registry.get(name).selected_logprobs(h, bundle.weight, t, temperature, tp_size=1)
            err = (r["out"].double() - ref).abs()
            record["results"].append(
                {
                    "name": name,
                    "tp": world,
                    "rows_differing_from_tp1": int((r["out"] != single).sum()),
                    "bitwise_equal_tp1": bool(torch.equal(r["out"], single)),
                    "ranks_agree": r["ranks_agree"],
                    "mean_abs_err": float(err.mean()),
                    "max_abs_err": float(err.max()),
                    "ms_median": r["ms_median"],
                    "collective_ms_median": r["collective_ms_median"],
                    "collective_share": r["collective_ms_median"] / r["ms_median"] if r["ms_median"] else None,
                    "peak_extra_bytes_rank0": r["peak_extra_bytes_rank0"],
                }
            )
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as f:
            json.dump(record, f, indent=1, default=str)
        for r in record["results"]:
            print(json.dumps(r), flush=True)


def _gradient_parity(h, weight, shard, t, temperature, rank, per) -> dict:
    """The drop-in's log-probs and gradients over the group vs the single-process TP=1 operator, bitwise.

    Every rank checks its own shard's grad_weight rows and the (replicated) grad_hidden; the verdicts
    are all-reduced (MIN) so rank 0 records whether every rank matched.
    """
    from harness.operators import registry
    from harness.operators.vocab_parallel import fused_vocab_parallel_logprobs

    gen = torch.Generator().manual_seed(1)
    g = torch.randn(h.shape[0], generator=gen).to(h.device)
    h_tp, w_tp = h.detach().clone().requires_grad_(), shard.detach().clone().requires_grad_()
    logp_tp = fused_vocab_parallel_logprobs(h_tp, w_tp, t, temperature)
    (logp_tp * g).sum().backward()
    h_1, w_1 = h.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    logp_1 = registry.get("fused-linear-logprob").selected_logprobs(h_1, w_1, t, temperature, tp_size=1)
    (logp_1 * g).sum().backward()
    checks = torch.tensor(
        [
            int(torch.equal(logp_tp, logp_1)),
            int(torch.equal(h_tp.grad, h_1.grad)),
            int(torch.equal(w_tp.grad, w_1.grad[rank * per : (rank + 1) * per])),
        ],
        device=h.device,
    )  # NCCL reduces device tensors only
    dist.all_reduce(checks, op=dist.ReduceOp.MIN)
    return {
        "logp_bitwise_equal_tp1": bool(checks[0]),
        "grad_hidden_bitwise_equal_tp1": bool(checks[1]),
        "grad_weight_shards_bitwise_equal_tp1": bool(checks[2]),
    }


def _spawned(rank, world, init_file, shape, temperature, reps, out_path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        run_rank(shape, temperature, reps, out_path)
    finally:
        dist.destroy_process_group()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="8192,2048,151936", help="T,H,V")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--spawn", type=int, default=0, help="CPU: spawn this many gloo processes instead of torchrun")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    shape = tuple(int(x) for x in args.shape.split(","))
    for k, v in MULTICAST_OFF.items():
        os.environ.setdefault(k, v)
    if args.spawn:
        import tempfile

        import torch.multiprocessing as mp

        init_file = tempfile.mktemp(prefix="vocab_parallel_gloo_")
        mp.spawn(_spawned, args=(args.spawn, init_file, shape, args.temperature, args.reps, args.out), nprocs=args.spawn, join=True)
        return 0
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    try:
        run_rank(shape, args.temperature, args.reps, args.out)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
