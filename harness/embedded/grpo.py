"""GRPO advantages, the PPO-clip policy loss (optional TIS), and VIME's metric reduction.

TIS as VIME defines it (vime/backends/megatron_utils/loss.py, ``vanilla_tis_function``): per
token w = exp(old - rollout), the trainer's recomputed probability over the engine's; the PPO-clip
loss is multiplied by clamp(w, tis_clip_low, tis_clip). Logged as VIME logs them, each reduced like
every other figure: tis (w), tis_clipfrac (clamped != w), tis_abs (|w - 1|) and ois
(exp(current - old), the PPO ratio).

VIME's reduction for every per-token figure: per sample, the mean over its loss-mask tokens
(count at least 1); then the mean over the step's samples. ``--calculate-per-token-loss``
turns it into a plain token mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.layout.sample_mean import masked_sample_mean as sample_mean  # VIME's reduction; the property tests guard it


def grpo_advantages(rewards: list[float], group_size: int, std_normalise: bool) -> list[float]:
    r = torch.tensor(rewards, dtype=torch.float64).view(-1, group_size)
    centred = r - r.mean(dim=1, keepdim=True)
    if std_normalise:
        centred = centred / (r.std(dim=1, keepdim=True) + 1e-6)
    return centred.flatten().tolist()


@dataclass(frozen=True)
class LossConfig:
    eps_clip: float
    eps_clip_high: float
    use_tis: bool
    tis_clip: float
    tis_clip_low: float
    per_token: bool


def policy_loss(
    logp: list[torch.Tensor],
    old_logp: list[torch.Tensor],
    rollout_logp: list[torch.Tensor],
    advantages: list[float],
    masks: list[torch.Tensor],
    cfg: LossConfig,
):
    """(loss tensor over these samples, per-sample-reduced metric tensors)."""
    pg, clipped, kl, tis_vals, tis_clipped, tis_abs, ois = [], [], [], [], [], [], []
    for cur, old, roll, adv in zip(logp, old_logp, rollout_logp, advantages):
        ratio = torch.exp(cur - old)
        unclipped_loss = -adv * ratio
        clipped_loss = -adv * ratio.clamp(1 - cfg.eps_clip, 1 + cfg.eps_clip_high)
        loss = torch.maximum(unclipped_loss, clipped_loss)
        if cfg.use_tis:
            # Truncated importance sampling: old (trainer) over rollout (engine) probability.
            w = torch.exp(old - roll)
            w_clipped = w.clamp(min=cfg.tis_clip_low, max=cfg.tis_clip)
            loss = loss * w_clipped
            tis_vals.append(w)
            tis_clipped.append((w != w_clipped).float())
            tis_abs.append((w - 1).abs())
            ois.append(ratio.detach())
        pg.append(loss)
        clipped.append((clipped_loss > unclipped_loss).float())
        kl.append(old - cur.detach())
    metrics = {
        "pg_loss": sample_mean(pg, masks, cfg.per_token),
        "pg_clipfrac": sample_mean(clipped, masks, cfg.per_token),
        "ppo_kl": sample_mean(kl, masks, cfg.per_token),
    }
    if cfg.use_tis:
        metrics["tis"] = sample_mean(tis_vals, masks, cfg.per_token)
        metrics["tis_clipfrac"] = sample_mean(tis_clipped, masks, cfg.per_token)
        metrics["tis_abs"] = sample_mean(tis_abs, masks, cfg.per_token)
        metrics["ois"] = sample_mean(ois, masks, cfg.per_token)
    return metrics["pg_loss"], {k: v.detach() for k, v in metrics.items()}
