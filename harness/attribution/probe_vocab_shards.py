"""Probe 5 on what a TP run recorded: each rank's vocab shard of the probe samples' logits.

Under tensor parallelism the embedded trainer writes, next to `probe_{id}.pt`, one
`vocab_shards_{id}_{rank}.pt` per rank (harness.embedded.dumps.vocab_shards): the rank's vocab
range of the logits / T at the probe samples' response positions (fp32, the input of Megatron's
vocab-parallel merge) and the target ids. On those real shards the probe measures, per token:

* the trainer's own log-prob (Megatron's vocab-parallel cross entropy as the run executed it,
  from the probe bundle) against the full-vocabulary fp32 reduce of the same logits;
* the layout's merge (harness.layout.vocab_parallel, native and fixed order) against the same;
* each against a float64 reference, so a difference is the merge's arithmetic, not the data.

A run with TP=1 ran no vocab-parallel merge: the probe is "not checked" there, never a pass.
"""

from __future__ import annotations

import torch

from harness.layout.vocab_parallel import full_logsumexp, full_token_logprobs, sharded_logsumexp, sharded_token_logprobs, vocab_range
from harness.records.debug_dumps import DumpError, load_dump

MEGATRON_MERGE = "vocab-parallel cross entropy"  # the merge_path the trainer records for Megatron's own merge


def shard_file_name(rollout_id: int, rank: int) -> str:
    return f"vocab_shards_{rollout_id}_{rank}.pt"


def _stats(err: torch.Tensor) -> dict:
    err = err.double().abs()
    if err.numel() == 0:
        return {"mean": None, "max": None, "p99": None}
    return {"mean": float(err.mean()), "max": float(err.max()), "p99": float(torch.quantile(err, 0.99))}


def _skipped(reason: str, evidence: dict | None = None) -> dict:
    return {"localised": False, "boundary": None, "skipped": reason, "evidence": evidence or {}}


def _rank_rows(bundle, tp_size: int) -> tuple[list[dict], str | None]:
    """Each rank's dump, checked against the run's TP layout; (dumps, problem)."""
    ranks = []
    for rank in range(tp_size):
        path = bundle.path.parent / shard_file_name(bundle.rollout_id, rank)
        if not path.is_file():
            return [], f"{path.name} missing: the TP={tp_size} run recorded no vocab shards for rank {rank}"
        try:
            data = load_dump(path)
        except DumpError as err:
            return [], str(err)
        if int(data.get("tp_rank", -1)) != rank or int(data.get("tp_size", -1)) != tp_size:
            return [], f"{path.name}: keys 'tp_rank'/'tp_size' are {data.get('tp_rank')}/{data.get('tp_size')}, expected {rank}/{tp_size}"
        ranks.append(data)
    return ranks, None


def _concatenated(bundle, ranks: list[dict]) -> tuple[list[torch.Tensor], str | None]:
    """Per rank, the shard rows of the bundle's samples in the bundle's token order."""
    tp_size = len(ranks)
    by_index = [{int(row["index"]): row for row in data["samples"]} for data in ranks]
    shards: list[list[torch.Tensor]] = [[] for _ in range(tp_size)]
    for index, start, end in bundle.segments:
        for rank, rows in enumerate(by_index):
            row = rows.get(index)
            if row is None:
                return [], f"{shard_file_name(bundle.rollout_id, rank)}: no shard for sample {index} of the probe bundle"
            logits, targets = torch.as_tensor(row["logits_shard"]), torch.as_tensor(row["target_ids"]).reshape(-1)
            if logits.shape[0] != end - start or not torch.equal(targets.long(), bundle.targets[start:end]):
                return [], f"{shard_file_name(bundle.rollout_id, rank)}: sample {index}'s tokens differ from the probe bundle's"
            shards[rank].append(logits.float())
    merged = [torch.cat(parts) for parts in shards]
    vocab = sum(s.shape[-1] for s in merged)
    for rank, data in enumerate(ranks):
        if (int(data["vocab_start"]), int(data["vocab_end"])) != vocab_range(rank, vocab, tp_size):
            return [], f"{shard_file_name(bundle.rollout_id, rank)}: vocab range {data['vocab_start']}..{data['vocab_end']} is not rank {rank}'s"
    return merged, None


def probe_vocab_parallel_shards(bundle, tp_size: int, floor: float) -> dict:
    """Probe 5 on the run's own shards; "not checked" (skipped) on TP=1 or without the shard dumps."""
    if tp_size <= 1:
        return {**_skipped("the run used TP=1: no vocab-parallel merge ran"), "not_applicable": True}
    if bundle.rollout_id is None or not bundle.segments:
        return _skipped(f"{bundle.path.name}: no rollout id or per-sample segments to find the ranks' vocab shards by")
    ranks, problem = _rank_rows(bundle, tp_size)
    if problem:
        return _skipped(problem)
    shards, problem = _concatenated(bundle, ranks)
    if problem:
        return _skipped(problem)
    active = torch.cat([bundle.active[start:end] for _, start, end in bundle.segments])
    targets = torch.cat([bundle.targets[start:end] for _, start, end in bundle.segments])[active]
    shards = [s[active] for s in shards]
    full = torch.cat(shards, dim=-1)
    reference = full.double().gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(full.double(), dim=-1)
    full_reduce = full_token_logprobs(full, targets, mode="native").double()
    layout_merge = sharded_token_logprobs(shards, targets, mode="native").double()
    fixed_equal = bool(torch.equal(sharded_logsumexp(shards, mode="fixed-order"), full_logsumexp(full, mode="fixed-order")))
    merge_path = str(ranks[0].get("merge_path"))
    evidence = {
        "tp_size": tp_size,
        "source": f"the run's own vocab shards ({', '.join(shard_file_name(bundle.rollout_id, r) for r in range(tp_size))})",
        "merge_path": merge_path,
        "tokens": int(targets.numel()),
        "layout_merge_vs_full": _stats(layout_merge - full_reduce),
        "layout_merge_vs_fp64": _stats(layout_merge - reference),
        "full_reduce_vs_fp64": _stats(full_reduce - reference),
        "fixed_order_bitwise_equal": fixed_equal,
        "floor": floor,
    }
    compared = evidence["layout_merge_vs_full"]
    trainer_lp = bundle.trainer_log_probs
    if merge_path == MEGATRON_MERGE and trainer_lp is not None:
        run_lp = torch.cat([trainer_lp[start:end] for _, start, end in bundle.segments])[active]
        evidence["run_merge_vs_full"] = compared = _stats(run_lp - full_reduce)
        evidence["run_merge_vs_fp64"] = _stats(run_lp - reference)
    else:
        evidence["note"] = (
            f"the trainer's log-probs took the path '{merge_path}', not Megatron's merge: the layout's merge is checked on the run's shards"
        )
    localised = (compared["mean"] or 0.0) > floor
    return {
        "localised": localised,
        "boundary": f"vocab-parallel log-sum-exp merge over TP={tp_size}" if localised else None,
        "evidence": evidence,
    }
