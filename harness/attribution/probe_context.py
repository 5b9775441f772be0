"""Where the drift sits: the worst tokens with their context, and what |dlogp| correlates with.

The seed asks whether worst tokens "correlate with filtered tokens, long contexts, vocab shards, or
specific experts". Each figure here is computed only from fields the dumps really carry; a field
that is absent gives no entry (and the audit says which fields were missing), never a zero.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

WORST_TOKENS = 5
CONTEXT_TOKENS = 8  # tokens shown either side of a worst token


def _decode(tokenizer, ids) -> str | None:
    if tokenizer is None:
        return None
    try:
        return tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)
    except Exception:  # a token id the tokenizer does not know: show ids only
        return None


def _value_at(side, name: str, position: int):
    value = side.get(name) if side is not None else None
    if value is None or position >= np.size(value):
        return None
    item = value[position]
    return item.tolist() if hasattr(item, "tolist") else item


def _filter_edge(rank, sampling: dict | None) -> bool | None:
    """At the edge of the top-k set: the last (1-based, as vLLM counts) rank top-k keeps; top-p's
    edge needs the full row, which only a probe bundle has."""
    top_k = (sampling or {}).get("top_k")
    if rank is None or top_k is None or int(top_k) <= 0 or rank != rank:  # rank != rank: NaN
        return None
    return int(rank) == int(top_k)


# Per-token fields and where to find them: (side, field) in order of preference.
SOURCES = {
    "sampled_rank": (("rollout", "sampled_rank"), ("train", "sampled_rank")),
    "in_filter_set": (("train", "in_filter"), ("rollout", "in_top_p"), ("rollout", "in_top_k")),
    "vocab_shard": (("train", "vocab_shard"), ("rollout", "vocab_shard")),
}


def _either(pair, name: str, position: int):
    for side_name, field_name in SOURCES[name]:
        value = _value_at(getattr(pair, side_name), field_name, position)
        if value is not None:
            return value
    return None


def routing_of(side, prompt_length: int, position: int) -> list | None:
    """The experts ([MoE layer][top-k], ascending) that computed response token ``position``'s
    log-prob: the routing of the position that predicts it, prompt_length + position - 1, in a
    ``[tokens - 1, layers, top-k]`` routed-experts array (VIME's rollout_routed_experts)."""
    value = side.get("experts") if side is not None else None
    row = prompt_length + position - 1
    if value is None or np.ndim(value) != 3 or not 0 <= row < np.shape(value)[0]:
        return None
    return np.sort(np.asarray(value[row], dtype=np.int64), axis=-1).tolist()


def _routing_agrees(pair, position: int) -> bool | None:
    """Whether trainer and rollout dispatched the predicting position to the same experts in every
    layer (None: one side recorded no routing)."""
    prompt = _prompt_length(pair)
    rollout, trainer = routing_of(pair.rollout, prompt, position), routing_of(pair.train, prompt, position)
    return None if rollout is None or trainer is None else rollout == trainer


def _prompt_length(pair) -> int:
    side = pair.rollout if pair.rollout is not None else pair.train
    prompt = side.get("prompt_ids") if side is not None else None
    return 0 if prompt is None else int(np.size(prompt))


def token_context(pair, position: int, dlogp: float, tokenizer) -> dict:
    """One token of one sample, described for a human: position, lengths, probability, filters."""
    rollout, train = pair.rollout, pair.train
    side = rollout if rollout is not None else train
    response = side.get("response_ids") if side is not None else None
    prompt = side.get("prompt_ids") if side is not None else None
    rollout_lp = _value_at(train, "rollout_log_probs", position)
    if rollout_lp is None:
        rollout_lp = _value_at(rollout, "rollout_log_probs", position)
    sampling = rollout.get("sampling") if rollout is not None else None
    rank = _either(pair, "sampled_rank", position)
    entry = {
        "rollout_id": pair.rollout_id,
        "sample_position": pair.position,
        "sample_index": pair.index,
        "train_rank": pair.rank,
        "token_position": position,
        "dlogp": float(dlogp),
        "abs_dlogp": abs(float(dlogp)),
        "prompt_length": None if prompt is None else int(prompt.size),
        "response_length": None if response is None else int(response.size),
        "token_id": _value_at(side, "response_ids", position),
        "trainer_log_prob": _value_at(train, "log_probs", position),
        "rollout_log_prob": rollout_lp,
        "sampled_token_probability": None if rollout_lp is None else float(np.exp(rollout_lp)),
        "sampled_token_rank": rank,
        "in_filter_set": _either(pair, "in_filter_set", position),
        "top_k_edge": _filter_edge(rank, sampling),
        "vocab_shard": _either(pair, "vocab_shard", position),
        # MoE: the experts that computed this token's log-prob on each side, and whether they agree
        "experts": routing_of(rollout, _prompt_length(pair), position),
        "trainer_experts": routing_of(train, _prompt_length(pair), position),
        "routing_agrees": _routing_agrees(pair, position),
    }
    if response is not None:
        lo, hi = max(0, position - CONTEXT_TOKENS), min(response.size, position + CONTEXT_TOKENS + 1)
        entry["context_ids"] = [int(i) for i in response[lo:hi]]
        before, token, after = (
            _decode(tokenizer, response[lo:position]),
            _decode(tokenizer, response[position : position + 1]),
            _decode(tokenizer, response[position + 1 : hi]),
        )
        entry["context_text"] = None if token is None else f"{before}[[{token}]]{after}"
    return entry


def worst_tokens(tokens, tokenizer=None, count: int = WORST_TOKENS) -> list[dict]:
    """The `count` active tokens with the largest |dlogp| across the run, with their context."""
    ranked = []
    for (pair, positions), d in zip(tokens.where, tokens.dlogp):
        for position, value in zip(positions, d):
            ranked.append((abs(float(value)), pair, int(position), float(value)))
    ranked.sort(key=lambda item: -item[0])
    return [token_context(pair, position, value, tokenizer) for _, pair, position, value in ranked[:count]]


def _spearman(x: np.ndarray, y: np.ndarray) -> dict | None:
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    result = stats.spearmanr(x, y)
    return {"spearman_rho": float(result.statistic), "p_value": float(result.pvalue), "tokens": int(x.size)}


def _grouped(abs_d: np.ndarray, groups: np.ndarray) -> dict | None:
    """Mean |dlogp| per group (filter membership, vocab shard) and a Kruskal-Wallis test across them."""
    keep = np.isfinite(groups)
    abs_d, groups = abs_d[keep], groups[keep]
    labels = np.unique(groups)
    if labels.size < 2:
        return None
    samples = [abs_d[groups == g] for g in labels]
    test = stats.kruskal(*samples)
    return {
        "mean_abs_dlogp_by_group": {str(int(g)): float(s.mean()) for g, s in zip(labels, samples)},
        "tokens_by_group": {str(int(g)): int(s.size) for g, s in zip(labels, samples)},
        "kruskal_p_value": float(test.pvalue),
    }


def _column(tokens, side_name: str, field: str) -> np.ndarray | None:
    """A per-active-token column from one side, or None when any sample lacks it."""
    parts = []
    for pair, positions in tokens.where:
        side = getattr(pair, side_name)
        value = side.get(field) if side is not None else None
        if value is None:
            return None
        value = np.asarray(value, dtype=np.float64)
        if positions.size and positions.max() >= value.size:
            return None
        parts.append(value[positions])
    return np.concatenate(parts) if parts else None


def _first_column(tokens, name: str) -> np.ndarray | None:
    for side_name, field_name in SOURCES[name]:
        column = _column(tokens, side_name, field_name)
        if column is not None:
            return column
    return None


def correlations(tokens) -> dict[str, dict]:
    if not tokens.dlogp:
        return {}
    abs_d = np.abs(np.concatenate(tokens.dlogp))
    out: dict[str, dict | None] = {}
    out["position"] = _spearman(np.concatenate([p.astype(np.float64) for _, p in tokens.where]), abs_d)
    lengths = [np.full(p.size, float(pair.train.get("loss_mask").size)) for pair, p in tokens.where]
    out["response_length"] = _spearman(np.concatenate(lengths), abs_d)
    lp = _column(tokens, "train", "rollout_log_probs")
    lp = lp if lp is not None else _column(tokens, "rollout", "rollout_log_probs")
    if lp is not None:
        out["sampled_token_probability"] = _spearman(np.exp(lp), abs_d)
    for name in SOURCES:
        column = _first_column(tokens, name)
        if column is None:
            continue
        out[name] = _spearman(column, abs_d) if name == "sampled_rank" else _grouped(abs_d, column)
    out["routing_agrees"] = _routing_groups(tokens, abs_d)
    return {name: value for name, value in out.items() if value is not None}


def _routing_groups(tokens, abs_d: np.ndarray) -> dict | None:
    """MoE runs: mean |dlogp| of the tokens whose trainer routing equals the rollout's (group 1)
    against those routed through other experts in some layer (group 0), with the Kruskal-Wallis test,
    and the experts the rollout sent the flipped tokens to. None when a side recorded no routing."""
    agrees = []
    for pair, positions in tokens.where:
        for position in positions:
            agree = _routing_agrees(pair, int(position))
            if agree is None:
                return None
            agrees.append(float(agree))
    grouped = _grouped(abs_d, np.asarray(agrees))
    result = grouped or {"mean_abs_dlogp_by_group": {"1": float(abs_d.mean())}, "tokens_by_group": {"1": int(abs_d.size)}}
    result["groups"] = "1: same experts on both sides in every layer; 0: some layer routed differently"
    return result
