"""The token-level audit in the report: dlogp histogram and the worst-token table.

Takes plain data so it does not depend on the audit's classes: `dlogp` is any array-like of
trainer − rollout logprobs on loss-mask tokens; worst tokens are a list of dicts (or a dict of
equal-length columns). Figures here are token-weighted views and say so; the run's logged
abs-diff is a sample mean (docs/attribution.md: the two are named apart).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from harness.report.plots import DPI, RUN_COLOUR, plt

# Columns shown first when present, in this order (RL-Align's audit names and the obvious
# spellings of the same facts); any other key follows in the order the audit gave it.
WORST_TOKEN_COLUMNS = (
    "rank",
    "abs_dlogp",
    "dlogp",
    "trainer_logprob",
    "rollout_logprob",
    "token",
    "token_text",
    "token_id",
    "context",
    "sample",
    "sample_index",
    "position",
    "token_position",
    "response_length",
    "prompt_length",
    "token_prob",
    "token_rank",
    "in_filter_set",
    "filter_edge",
    "vocab_shard",
    "experts",
    "rollout_id",
)
PERCENTILES = (50, 90, 99)


def dlogp_histogram(dlogp, *, title: str = "dlogp = trainer − rollout (token-weighted)", bins: int = 80):
    """Two panels: signed dlogp (log counts) and |dlogp| on a log axis with p50/p90/p99 marked."""
    values = np.asarray(dlogp, dtype=float).reshape(-1)
    finite = values[np.isfinite(values)]
    fig, (signed, absolute) = plt.subplots(1, 2, figsize=(10.0, 4.0), dpi=DPI, layout="constrained")
    fig.suptitle(
        f"{title}: {len(finite)} tokens" + (f", {len(values) - len(finite)} non-finite left out" if len(finite) != len(values) else ""), fontsize=11
    )
    for ax in (signed, absolute):
        ax.grid(True, alpha=0.3)
        ax.set_ylabel("tokens")
    signed.set_xlabel("dlogp (nats)")
    absolute.set_xlabel("|dlogp| (nats, log scale)")
    if not len(finite):
        for ax in (signed, absolute):
            ax.text(0.5, 0.5, "no finite dlogp values", ha="center", va="center", transform=ax.transAxes, color="#a00000")
        return fig
    signed.hist(finite, bins=bins, color=RUN_COLOUR, alpha=0.85)
    signed.set_yscale("log")
    signed.axvline(0.0, color="black", linewidth=0.8)
    signed.axvline(finite.mean(), color="#c44e52", linestyle="--", label=f"mean {finite.mean():+.3g}")
    signed.legend(fontsize=8)
    magnitudes = np.abs(finite)
    nonzero = magnitudes[magnitudes > 0]
    if len(nonzero):
        edges = np.logspace(np.log10(nonzero.min()), np.log10(nonzero.max()) + 1e-9, bins)
        absolute.hist(nonzero, bins=edges, color=RUN_COLOUR, alpha=0.85)
        absolute.set_xscale("log")
        for q, style in zip(PERCENTILES, (":", "--", "-")):
            value = np.percentile(magnitudes, q)
            if value > 0:
                absolute.axvline(value, color="#c44e52", linestyle=style, label=f"p{q} {value:.3g}")
        absolute.axvline(magnitudes.mean(), color="black", linestyle="-.", label=f"mean {magnitudes.mean():.3g}")
        absolute.legend(fontsize=8)
    zeros = len(magnitudes) - len(nonzero)
    if zeros:
        absolute.set_title(f"{zeros} tokens with dlogp exactly 0 not shown", fontsize=9)
    return fig


def _rows_from_columns(columns: Mapping) -> list[dict]:
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"worst-token columns have different lengths: {sorted(lengths)}")
    n = lengths.pop() if lengths else 0
    return [{key: columns[key][i] for key in columns} for i in range(n)]


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def worst_token_rows(worst: Sequence[Mapping] | Mapping, limit: int = 20) -> list[dict]:
    """The worst tokens as table rows, largest |dlogp| first, known columns first."""
    rows = _rows_from_columns(worst) if isinstance(worst, Mapping) else [dict(r) for r in worst]
    if rows and "abs_dlogp" not in rows[0] and "dlogp" in rows[0]:
        for row in rows:
            row["abs_dlogp"] = abs(float(row["dlogp"]))
    if rows and "abs_dlogp" in rows[0]:
        rows.sort(key=lambda r: -abs(float(r["abs_dlogp"])))
    ordered = []
    for index, row in enumerate(rows[:limit], start=1):
        keys = [k for k in WORST_TOKEN_COLUMNS if k in row] + [k for k in row if k not in WORST_TOKEN_COLUMNS]
        out = {key: _plain(row[key]) for key in keys}
        out.setdefault("rank", index)
        ordered.append({"rank": out.pop("rank"), **out})
    return ordered
