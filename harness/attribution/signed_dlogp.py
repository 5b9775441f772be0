"""The sign of the drift per token: the signed mean of dlogp (trainer minus rollout) beside the
absolute one, and how dlogp moves with the token's entropy and its position in the response.

A mean |dlogp| says how far the two sides are apart; the signed mean says whether one side is
systematically more confident (a processed top-p contract the trainer ignores makes every dlogp
<= 0; pure rounding leaves it near zero). Spearman's rho (scipy) is taken against the token's
entropy when the train dumps hold it (the embedded trainer's `entropy` per sample), else against
the rollout log-prob as a proxy for how peaked the distribution was; `entropy_source` says which.
"""

from __future__ import annotations

import numpy as np

from harness.attribution.probe_context import _column, _spearman

ENTROPY = "train dump entropy (the trainer's per-token entropy)"
PROXY = "proxy: rollout log-prob of the sampled token (the dumps hold no entropy)"


def _entropy_column(tokens) -> tuple[np.ndarray | None, str | None]:
    entropy = _column(tokens, "train", "entropy")
    if entropy is not None:
        return entropy, ENTROPY
    for side in ("train", "rollout"):
        proxy = _column(tokens, side, "rollout_log_probs")
        if proxy is not None:
            return proxy, PROXY
    return None, None


def signed_view(tokens) -> dict:
    """Signed and absolute mean of the run's active dlogp, and their Spearman correlations with
    entropy (or its proxy) and response position; {} without active tokens."""
    if not tokens.dlogp:
        return {}
    dlogp = np.concatenate(tokens.dlogp)
    if dlogp.size == 0:
        return {}
    position = np.concatenate([p.astype(np.float64) for _, p in tokens.where])
    entropy, source = _entropy_column(tokens)
    view: dict = {
        "tokens": int(dlogp.size),
        "dlogp_mean": float(dlogp.mean()),
        "dlogp_abs_mean": float(np.abs(dlogp).mean()),
        "fraction_positive": float((dlogp > 0).mean()),
        "fraction_negative": float((dlogp < 0).mean()),
        "entropy_source": source,
        "correlations": {},
    }
    columns = {"position": position}
    if entropy is not None:
        columns["entropy" if source == ENTROPY else "rollout_log_prob"] = entropy
    for name, column in columns.items():
        for kind, values in (("signed", dlogp), ("abs", np.abs(dlogp))):
            rho = _spearman(column, values)
            if rho is not None:
                view["correlations"][f"{kind}_dlogp_vs_{name}"] = rho
    return view


def view_rows(view: dict) -> list[dict]:
    """The view as table rows (one per correlation) for printing and Allure."""
    return [
        {
            "correlation": name,
            "spearman_rho": value["spearman_rho"],
            "p_value": value["p_value"],
            "tokens": value["tokens"],
            "dlogp_mean": view["dlogp_mean"],
            "dlogp_abs_mean": view["dlogp_abs_mean"],
        }
        for name, value in view.get("correlations", {}).items()
    ]
