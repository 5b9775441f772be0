"""VIME's `--save-debug-*` dumps -> per-rollout summary records.

Two shapes (docs/records.md):
  rollout dumps  {"rollout_id", "samples": [{"tokens", "response_length", "reward", "loss_mask",
                  "rollout_log_probs", ...}]}
  train dumps    {"rollout_id", "rank", "rollout_data": {"log_probs": [...], "rollout_log_probs":
                  [...], "loss_masks": [...], "tokens": [...], ...}}  (per rank; lists per sample)

Summaries are `rollout N` records whose keys start with `dump/`, so they never collide with the
metrics VIME logged. `dump/train_rollout_logprob_abs_diff` follows VIME's definition: per sample
the mean of |log_prob - rollout_log_prob| over loss-mask tokens (at least one token in the
denominator), then the mean over samples. Every rank writes a train dump and TP/PP peers hold the
same samples, so a sample found in several rank files counts once (a sample repeated within one
file counts as often as it appears there).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from harness.records.models import Record

DUMP_SUFFIXES = (".pt", ".pth")


class DumpError(ValueError):
    """A dump that cannot be read; one line naming the file."""


def is_dump_file(path: Path) -> bool:
    return path.suffix in DUMP_SUFFIXES


def _restricted_pickle_module():
    """A pickle module for torch.load whose Unpickler is the C unpickler with globals limited to
    torch's own weights_only allowlist (Python's documented "restricting globals" pattern).

    Why not torch.load(weights_only=True) itself: its unpickler is written in Python and reads a
    rollout dump's token lists (plain Python ints) about 4x slower (2.9 s vs 0.7 s per million
    tokens here), which alone blew the 10 s budget for 10 M dumped tokens. The allowlist is the
    same, so what may load is the same.
    """
    import pickle
    import types

    from torch._weights_only_unpickler import _get_allowed_globals

    allowed = _get_allowed_globals()

    class RestrictedUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            key = f"{module}.{name}"
            if key in allowed:
                return allowed[key]
            raise pickle.UnpicklingError(f"global {key} is not in the weights_only allowlist")

    module = types.ModuleType("harness_restricted_pickle")
    module.Unpickler = RestrictedUnpickler
    module.load = lambda file, **kwargs: RestrictedUnpickler(file, **kwargs).load()
    module.UnpicklingError = pickle.UnpicklingError
    return module


def load_dump(path: Path, trust: bool = False) -> dict:
    import pickle

    import torch

    try:
        if trust:
            data = torch.load(path, map_location="cpu", weights_only=False)
        else:
            data = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_restricted_pickle_module())
    except pickle.UnpicklingError as err:
        if trust or "allowlist" not in str(err):
            raise DumpError(f"{path}: not a readable torch dump ({' '.join(str(err).split())[:200]})") from None
        raise DumpError(f"{path}: holds objects that weights_only loading refuses; if you trust the file, rerun with --trust-dumps") from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise DumpError(f"{path}: not a readable torch dump ({type(err).__name__}: {' '.join(str(err).split())[:200]})") from None
    if not isinstance(data, dict) or "rollout_id" not in data:
        keys = f" with keys {sorted(map(str, data))[:6]}" if isinstance(data, dict) else ""
        raise DumpError(f"{path}: expected a dict with 'rollout_id' and 'samples' or 'rollout_data', found {type(data).__name__}{keys}")
    rollout_id = dump_rollout_id(data)
    if rollout_id is None:
        raise DumpError(
            f"{path}: rollout_id: expected a whole number >= 0, got {str(data['rollout_id'])[:80]!r} (type={type(data['rollout_id']).__name__})"
        )
    data["rollout_id"] = rollout_id
    samples = data.get("samples")
    if "samples" in data and (not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples)):
        bad = samples if not isinstance(samples, list) else next(s for s in samples if not isinstance(s, dict))
        raise DumpError(
            f"{path}: samples: expected a list of dicts (one per sample), found a "
            f"{'list holding a ' if isinstance(samples, list) else ''}{type(bad).__name__}"
        )
    if "samples" not in data and not isinstance(data.get("rollout_data", {}), dict):
        raise DumpError(f"{path}: rollout_data: expected a dict of per-sample lists, found {type(data['rollout_data']).__name__}")
    return data


def dump_rollout_id(data: dict) -> int | None:
    """The dump's rollout id as an int >= 0 (a one-element integer tensor counts), else None."""
    value = data.get("rollout_id")
    if hasattr(value, "numel") and hasattr(value, "is_floating_point"):  # a torch tensor
        if value.numel() != 1 or value.is_floating_point():
            return None
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _array(values) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor
        return values.detach().to("cpu").double().numpy().reshape(-1)
    return np.asarray(values, dtype=np.float64).reshape(-1)


def _length(values) -> int:
    return int(values.numel()) if hasattr(values, "numel") else len(values)


def _masked_sample_mean(values, mask) -> float:
    if isinstance(values, list) and isinstance(mask, list):
        # Rollout dumps hold Python lists; builtin sum() over them is ~3x faster than building
        # arrays, and an all-ones mask (the common case) needs nothing else.
        mask_sum = sum(mask)
        if mask_sum == len(mask):
            return float(sum(values) / max(mask_sum, 1))
    values, mask = _array(values), _array(mask)
    return float((values * mask).sum() / max(mask.sum(), 1.0))


def summarize_rollout_dump(data: dict) -> tuple[dict, list[str]]:
    samples = data.get("samples")
    if not isinstance(samples, list):
        return {}, [f"rollout dump {data.get('rollout_id')}: 'samples' is not a list"]
    tokens = response_tokens = mask_tokens = 0
    rewards, logprob_means = [], []
    for sample in samples:
        tokens += _length(sample.get("tokens", []))
        response_tokens += int(sample.get("response_length") or 0)
        mask = sample.get("loss_mask")
        if mask is not None:
            mask_tokens += int(sum(mask) if isinstance(mask, list) else _array(mask).sum())
        if isinstance(sample.get("reward"), (int, float)):
            rewards.append(float(sample["reward"]))
        logprobs = sample.get("rollout_log_probs")
        if logprobs is not None and _length(logprobs):
            mask = mask if mask is not None and _length(mask) == _length(logprobs) else np.ones(_length(logprobs))
            logprob_means.append(_masked_sample_mean(logprobs, mask))
    metrics: dict = {
        "dump/samples": len(samples),
        "dump/tokens": tokens,
        "dump/response_tokens": response_tokens,
        "dump/loss_mask_tokens": mask_tokens,
    }
    if rewards:
        metrics["dump/raw_reward_mean"] = float(np.mean(rewards))
    if logprob_means:
        metrics["dump/rollout_log_probs_mean"] = float(np.mean(logprob_means))
    return metrics, []


def _sample_key(tokens, rollout_log_probs) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.asarray(_array(tokens), dtype=np.int64).tobytes())
    digest.update(_array(rollout_log_probs).tobytes())
    return digest.hexdigest()


def train_dump_abs_diffs(data: dict, label: str) -> tuple[Counter, dict[str, float], list[str]]:
    """Per-sample abs-diff values of one rank's train dump, keyed by sample identity."""
    payload = data.get("rollout_data", data)
    needed = ("log_probs", "rollout_log_probs", "loss_masks")
    missing = [key for key in needed if key not in payload]
    if missing:
        return Counter(), {}, [f"{label}: no {', '.join(missing)}; abs diff not computed"]
    counts: Counter = Counter()
    values: dict[str, float] = {}
    # One entry per sample in each (lists of lists or tensors, or a 2-D tensor): zip would pair
    # the samples of unequal lists wrongly and drop the surplus without a word.
    counts_by_key = {
        key: len(payload[key]) if hasattr(payload[key], "__len__") and not isinstance(payload[key], (str, bytes, dict)) else None for key in needed
    }
    if None in counts_by_key.values() or len(set(counts_by_key.values())) > 1:
        shown = ", ".join(f"{n if n is not None else 'not a list'} {key}" for key, n in counts_by_key.items())
        raise DumpError(f"{label}: unequal sample counts ({shown}): samples would be paired wrongly; abs diff not computed")
    tokens = payload.get("tokens") or [[] for _ in payload["log_probs"]]
    for index, (train_lp, rollout_lp, mask, toks) in enumerate(
        zip(payload["log_probs"], payload["rollout_log_probs"], payload["loss_masks"], tokens)
    ):
        if not (_length(train_lp) == _length(rollout_lp) == _length(mask)):
            return (
                Counter(),
                {},
                [
                    f"{label}: sample {index} has {_length(train_lp)} train log-probs, "
                    f"{_length(rollout_lp)} rollout log-probs and {_length(mask)} mask entries "
                    f"(CP-sliced?); abs diff not computed"
                ],
            )
        key = _sample_key(toks, rollout_lp)
        counts[key] += 1
        values[key] = _masked_sample_mean(np.abs(_array(train_lp) - _array(rollout_lp)), mask)
    return counts, values, []


def dump_records(dumps: Iterable[tuple[Path, dict]]) -> tuple[list[Record], list[str], list[str]]:
    """One `rollout N` record per rollout id, merging its rollout dump and its ranks' train dumps;
    then warnings, and problems (dumps whose contents contradict themselves, left out).
    `dumps` may be a generator: each dump is summarised and dropped before the next is loaded."""
    by_rollout: dict[int, dict] = {}
    pooled: dict[int, tuple[Counter, dict]] = {}
    warnings: list[str] = []
    bad: list[str] = []
    for path, data in dumps:
        rollout_id = int(data["rollout_id"])
        try:
            if "samples" in data:
                summary, problems = summarize_rollout_dump(data)
            else:
                counts, values, problems = train_dump_abs_diffs(data, str(path))
        except DumpError as err:
            bad.append(str(err))
            continue
        except (TypeError, ValueError, AttributeError) as err:  # a field of the wrong type inside a sample
            bad.append(f"{path}: not in VIME's dump shape ({type(err).__name__}: {' '.join(str(err).split())[:160]}); left out")
            continue
        if "samples" in data:
            by_rollout.setdefault(rollout_id, {}).update(summary)
        else:
            metrics = by_rollout.setdefault(rollout_id, {})
            total, known = pooled.setdefault(rollout_id, (Counter(), {}))
            for key, count in counts.items():
                total[key] = max(total[key], count)  # a peer rank's copy of a sample is not a new sample
            known.update(values)
            metrics["dump/train_ranks"] = metrics.get("dump/train_ranks", 0) + 1
        warnings.extend(problems)
    for rollout_id, (total, known) in pooled.items():
        if total:
            weights = np.array([total[key] for key in total], dtype=np.float64)
            diffs = np.array([known[key] for key in total])
            by_rollout[rollout_id]["dump/train_rollout_logprob_abs_diff"] = float((weights * diffs).sum() / weights.sum())
            by_rollout[rollout_id]["dump/train_samples"] = int(weights.sum())
    records = [Record(kind="rollout", n=n, metrics=m) for n, m in sorted(by_rollout.items())]
    return records, warnings, bad
