"""VIME's reduction of |trainer logprob - rollout logprob| to one number per step.

Mirrors `get_sum_of_sample_mean` in VIME's `backends/megatron_utils/cp_utils.py` as used for
`train/train_rollout_logprob_abs_diff`:

* default: per sample, (sum of |dlogp| over its loss-mask tokens) / max(its mask count, 1); the
  per-sample values are summed and divided by the number of samples in the step (VIME divides
  the all-reduced sum by the global batch size, which is that number). Short and long responses
  weigh the same.
* `--calculate-per-token-loss`: a plain token mean, sum over every masked token of the step
  divided by the step's masked-token count.

The embedded trainer reduces its loss terms and logs its metrics with `masked_sample_mean` (the
same rule on tensors, in their own dtype, differentiable); the token audit calls
`sample_mean_abs_diff` (fp64). Both live here, so the property tests guard the code the trainer
runs and "the audit's sample-mean reproduces the logged metric" compares one definition.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["sample_mean_abs_diff", "per_sample_means", "masked_sample_mean", "micro_batch_share"]


def _checked_pairs(per_sample_abs_diffs: Sequence[torch.Tensor], loss_masks: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if len(per_sample_abs_diffs) != len(loss_masks):
        raise ValueError(
            f"sample_mean_abs_diff: {len(per_sample_abs_diffs)} per-sample diff tensors but "
            f"{len(loss_masks)} loss masks; expected one mask per sample"
        )
    if len(per_sample_abs_diffs) == 0:
        raise ValueError("sample_mean_abs_diff: no samples; a step with zero samples has no metric")
    pairs = []
    for index, (diff, mask) in enumerate(zip(per_sample_abs_diffs, loss_masks)):
        diff = torch.as_tensor(diff).reshape(-1)
        mask = torch.as_tensor(mask).reshape(-1)
        if diff.numel() != mask.numel():
            raise ValueError(
                f"sample_mean_abs_diff: sample {index} has {diff.numel()} diff values but a loss "
                f"mask of {mask.numel()}; both must cover the response tokens"
            )
        # float64 so the reduction order inside a sample cannot move the result by more than
        # rounding of the final value; VIME reduces in fp32 on the GPU.
        pairs.append((diff.to(torch.float64), mask.to(torch.float64)))
    return pairs


def per_sample_means(per_sample_abs_diffs: Sequence[torch.Tensor], loss_masks: Sequence[torch.Tensor]) -> list[float]:
    """Each sample's masked token mean (denominator clamped to 1, as VIME clamps it)."""
    return _means(_checked_pairs(per_sample_abs_diffs, loss_masks))


def _means(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    return [float((diff * mask).sum() / torch.clamp_min(mask.sum(), 1.0)) for diff, mask in pairs]


def sample_mean_abs_diff(
    per_sample_abs_diffs: list[torch.Tensor],
    loss_masks: list[torch.Tensor],
    per_token: bool = False,
) -> float:
    """The step's `train_rollout_logprob_abs_diff` from per-sample |dlogp| and loss masks.

    `per_token=True` is VIME's `--calculate-per-token-loss` (token mean over the step). A step
    whose masks are all zero gives 0.0 in both modes, as VIME's clamp does; non-finite inputs
    propagate (the audit names them, this function does not hide them).
    """
    pairs = _checked_pairs(per_sample_abs_diffs, loss_masks)
    if per_token:
        total = sum((diff * mask).sum() for diff, mask in pairs)
        count = sum(mask.sum() for _, mask in pairs)
        return float(total / torch.clamp_min(torch.as_tensor(count), 1.0))
    means = _means(pairs)
    return float(sum(means) / len(means))


def masked_sample_mean(values: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], per_token: bool = False) -> torch.Tensor:
    """The same reduction as the trainer runs it: on per-sample token tensors, in their dtype, with
    autograd (the policy loss is reduced by it). Per sample, sum(v * m) / max(sum(m), 1), then the
    mean over samples; `per_token` is the token mean over the step."""
    if per_token:
        total = sum((v * m).sum() for v, m in zip(values, masks))
        return total / max(sum(float(m.sum()) for m in masks), 1.0)
    per_sample = [(v * m).sum() / m.sum().clamp(min=1) for v, m in zip(values, masks)]
    return torch.stack(per_sample).mean()


def micro_batch_share(micro_masks: Sequence[torch.Tensor], step_masks: Sequence[torch.Tensor], per_token: bool = False) -> float:
    """The weight of one micro-batch's `masked_sample_mean` in the step's: summed over the step's
    micro-batches, share x value is the step's value. By samples (n_micro / n_step) for the sample
    mean; by masked tokens (count_micro / max(count_step, 1)) for the per-token mean, so the step
    stays one token mean (VIME divides by the step's token count), not a mean of micro-batch means."""
    if not step_masks:
        raise ValueError("micro_batch_share: a step with zero samples has no metric")
    if per_token:
        return float(sum(float(m.sum()) for m in micro_masks)) / max(sum(float(m.sum()) for m in step_masks), 1.0)
    return len(micro_masks) / len(step_masks)
