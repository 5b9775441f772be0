"""Probe bundles: the fixed tensors of chosen samples, for probes 3-7 and the operator bench.

The embedded trainer writes `dumps/probe_{rollout_id}.pt` (docs/embedded.md): the final hidden
states before the LM head, the LM-head weight (or its shard), the target ids, the loss mask, the
sampling parameters, the rollout's dtype/quantisation policy, the weight version, and both sides'
log-probs for the same tokens. `read_bundle` checks shapes and names every missing key;
`export_for_bench` writes the LM-head operands in the safetensors form the operator bench loads
(harness.operators.bundles.load_bundle), so a fixed-token case found here runs there unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.records.debug_dumps import DumpError, load_dump

KEYS = {
    "hidden": ("hidden", "hidden_states", "final_hidden"),
    "weight": ("weight", "lm_head_weight", "output_weight"),
    "targets": ("targets", "target_ids"),
    "loss_mask": ("loss_mask", "loss_masks"),
    "rollout_log_probs": ("rollout_log_probs",),
    "trainer_log_probs": ("trainer_log_probs", "log_probs", "train_log_probs"),
}
SCALARS = {
    "temperature": ("temperature", "rollout_temperature"),
    "top_p": ("top_p", "rollout_top_p"),
    "top_k": ("top_k", "rollout_top_k"),
    "logprobs_mode": ("logprobs_mode",),
    "rollout_dtype": ("rollout_dtype", "dtype_policy"),
    "rollout_quantization": ("rollout_quantization", "quantization"),
    "trainer_dtype": ("trainer_dtype", "train_dtype"),
    "trainer_temperature": ("trainer_temperature",),
    "replay_processed": ("replay_processed",),
    "logprob_operator": ("logprob_operator",),
    "tp_size": ("tp_size", "tensor_model_parallel_size"),
    "vocab_start": ("vocab_start", "vocab_start_index"),
    "weight_version": ("weight_version_trainer", "weight_version"),
    "rollout_weight_version": ("weight_version_rollout", "rollout_weight_version"),
    "injections": ("injections",),
    # the step's weight-digest coverage (embedded trainer): {"tensors": hashed on both sides, "not_comparable", "differing"}
    "weight_digest": ("weight_digest",),
}


class BundleProblem(ValueError):
    """A probe bundle that cannot be used; the message names the file and the key."""


@dataclass
class ProbeBundle:
    path: Path
    hidden: torch.Tensor  # [T, H]
    weight: torch.Tensor  # [V, H] (or the shard, see vocab_start)
    targets: torch.Tensor  # [T] int64
    loss_mask: torch.Tensor  # [T] float
    rollout_log_probs: torch.Tensor | None
    trainer_log_probs: torch.Tensor | None
    scalars: dict = field(default_factory=dict)
    extra_keys: list[str] = field(default_factory=list)
    # Per-sample slices of the concatenated tokens: (sample index or None, start, end).
    segments: list[tuple[int | None, int, int]] = field(default_factory=list)
    rollout_id: int | None = None

    @property
    def active(self) -> torch.Tensor:
        return self.loss_mask > 0

    def scalar(self, name: str, default=None):
        value = self.scalars.get(name)
        return default if value is None else value


def _pick(data: dict, names: tuple[str, ...]):
    for name in names:
        if name in data and data[name] is not None:
            return data[name]
    return None


def _scalar(value):
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return value


SAMPLE_INDEX = ("index", "sample_index")


def _flatten_samples(data: dict, path: Path) -> tuple[dict, list]:
    """The embedded trainer's form - {"lm_head_weight", "policy": {...}, "samples": [per-sample
    tensors]} - as one flat bundle: per-token tensors concatenated, the policy's scalars on top."""
    flat = {k: v for k, v in data.items() if k not in ("samples", "policy")}
    policy = data.get("policy")
    if isinstance(policy, dict):
        for key, value in policy.items():
            flat.setdefault(key, value)
    samples = data.get("samples")
    if samples is None:
        return flat, []
    if not isinstance(samples, list) or not all(isinstance(x, dict) for x in samples) or not samples:
        raise BundleProblem(f"{path}: key 'samples': expected a non-empty list of per-sample dicts")
    segments, start = [], 0
    for name in ("hidden", "targets", "loss_mask", "rollout_log_probs", "trainer_log_probs"):
        parts = [_pick(x, KEYS[name]) for x in samples]
        if all(p is None for p in parts):
            continue
        if any(p is None for p in parts):
            missing = next(i for i, p in enumerate(parts) if p is None)
            raise BundleProblem(f"{path}: samples[{missing}] has no {KEYS[name][0]!r} while other samples do")
        tensors = [torch.as_tensor(p) for p in parts]
        flat[KEYS[name][0]] = torch.cat([t if name == "hidden" else t.reshape(-1) for t in tensors])
        if name == "targets":
            for sample, t in zip(samples, tensors):
                index = _pick(sample, SAMPLE_INDEX)
                segments.append((None if index is None else int(index), start, start + t.numel()))
                start += t.numel()
    # Per-sample scalars (also inside a per-sample "sampling" dict) that are equal for every sample.
    scalar_views = [{**x.get("sampling", {}), **x} if isinstance(x.get("sampling"), dict) else x for x in samples]
    for aliases in SCALARS.values():
        values = [_scalar(_pick(x, aliases)) for x in scalar_views]
        if values[0] is not None and all(v == values[0] for v in values):
            flat.setdefault(aliases[0], values[0])
    return flat, segments


def read_bundle(path: Path, trust: bool = False) -> ProbeBundle:
    path = Path(path)
    try:
        data = load_dump(path, trust=trust)
    except DumpError as err:
        raise BundleProblem(str(err)) from None
    data, segments = _flatten_samples(data, path)
    tensors = {}
    for name in ("hidden", "weight", "targets"):
        value = _pick(data, KEYS[name])
        if not isinstance(value, torch.Tensor):
            raise BundleProblem(f"{path}: key {KEYS[name][0]!r} (or {', '.join(KEYS[name][1:])}): expected a tensor, found {type(value).__name__}")
        tensors[name] = value
    hidden, weight, targets = tensors["hidden"], tensors["weight"], tensors["targets"].reshape(-1).long()
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise BundleProblem(f"{path}: expected hidden [T, H] and weight [V, H]; got hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}")
    if targets.numel() != hidden.shape[0]:
        raise BundleProblem(f"{path}: key 'targets': {targets.numel()} ids for {hidden.shape[0]} hidden rows")
    mask = _pick(data, KEYS["loss_mask"])
    mask = torch.ones(targets.numel()) if mask is None else torch.as_tensor(mask).reshape(-1).float()

    def optional(name):
        value = _pick(data, KEYS[name])
        if value is None:
            return None
        value = torch.as_tensor(value).reshape(-1).to(torch.float64)
        if value.numel() != targets.numel():
            raise BundleProblem(f"{path}: key {name!r}: {value.numel()} values for {targets.numel()} targets")
        return value

    scalars = {name: _scalar(_pick(data, names)) for name, names in SCALARS.items()}
    known = {n for names in (*KEYS.values(), *SCALARS.values()) for n in names}
    return ProbeBundle(
        path,
        hidden,
        weight,
        targets,
        mask,
        optional("rollout_log_probs"),
        optional("trainer_log_probs"),
        scalars,
        sorted(k for k in data if k not in known),
        segments,
        data.get("rollout_id"),
    )


def export_for_bench(bundle: ProbeBundle, out: Path) -> Path:
    """Write hidden / weight / targets (active tokens only) as the operator bench's safetensors bundle."""
    from safetensors.torch import save_file

    active = bundle.active
    save_file(
        {"hidden": bundle.hidden[active].contiguous(), "weight": bundle.weight.contiguous(), "targets": bundle.targets[active].contiguous()}, str(out)
    )
    return out
