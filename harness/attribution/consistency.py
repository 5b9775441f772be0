"""Compare what the rollout produced with what the trainer used, field by field.

Two sources, both optional: the raw per-sample fields of the dumps (token ids, response ids, loss
mask, rollout log-probs as the trainer received them, weight versions, sampling parameters) and the
`consistency_metadata` fingerprint records both sides write (the embedded trainer's, or RL-Align's
where a VIME dump carries them). A mismatch names the field; a field only one side has is listed as
not comparable, never as agreeing.

Fields are grouped by the probe that owns them: identity (probe 1), model state (probe 2) and
sampling contract (probe 6). Batch-layout fields (DP rank, micro-batch, offset) describe only the
trainer side and are reported, not compared.

A comparison is evidence only when each side produced its value itself. The embedded trainer
declares, in its consistency record (`provenance.copied_from_rollout_sample`), the train-dump fields
it wrote from the rollout's own Sample object (tokens, prompt/response ids, the fingerprint hashes of
them): those are reported under `not_compared` with the reason, never counted as agreeing. Its
targets, applied loss mask and received rollout log-probs (`provenance.computed_by_trainer`) are
compared against what vLLM returned. A dump without the declaration (VIME's: the trainer's fields
arrived through Ray) is compared field by field as what the trainer received.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.attribution.run_dumps import RunDumps, SamplePair

# Raw fields compared rollout side vs train side: (train field, rollout field).
IDENTITY_FIELDS = (
    ("tokens", "tokens"),
    ("prompt_ids", "prompt_ids"),
    ("response_ids", "response_ids"),
    ("response_length", "response_length"),
    ("loss_mask", "loss_mask"),
    ("rollout_log_probs", "rollout_log_probs"),
    ("target_ids", "response_ids"),  # the trainer's gathered targets are the response tokens, unshifted
)
# Fields that describe one side only (where it ran, how it computed): reported, never compared. A
# rollout in FP8 and a trainer in BF16 legitimately differ in quantisation and backend records.
LAYOUT_WORDS = (
    "layout",
    "dp_rank",
    "micro_batch",
    "microbatch",
    "offset",
    "rank",
    "side",
    "time",
    "created",
    "quantization",
    "provenance",
    "backend",
    "dtype",
    "precision",
    "old_logp",
    "position_cache",
    "schema",
)
STATE_WORDS = ("weight",)
CONTRACT_WORDS = ("sampling", "temperature", "top_p", "top_k", "logprobs_mode", "logprob_mode")


@dataclass
class FieldMismatch:
    rollout_id: int
    sample: int
    field: str
    group: str  # identity | state | contract
    detail: str

    def line(self) -> str:
        return f"rollout {self.rollout_id} sample {self.sample}: {self.field} differs ({self.detail})"


@dataclass
class Comparison:
    mismatches: list[FieldMismatch] = field(default_factory=list)
    compared: dict[str, int] = field(default_factory=dict)  # field -> samples compared
    not_comparable: dict[str, int] = field(default_factory=dict)  # field -> samples where a side lacks it
    layout: list[dict] = field(default_factory=list)
    # field -> why it was not compared (a side's copy of the other's object: no evidence either way)
    not_compared: dict[str, str] = field(default_factory=dict)
    # field -> what the trainer side computed it from, where the train dump declares it
    sources: dict[str, str] = field(default_factory=dict)

    def group(self, name: str) -> list[FieldMismatch]:
        return [m for m in self.mismatches if m.group == name]

    def count(self, name: str, key: str | None = None) -> None:
        book = self.compared if key is None else self.not_comparable
        target = name if key is None else key
        book[target] = book.get(target, 0) + 1


def flatten(record, prefix: str = "") -> dict:
    """A nested metadata record as {"a.b.c": value}."""
    if not isinstance(record, dict):
        return {prefix.rstrip("."): record} if prefix else {}
    out = {}
    for key, value in record.items():
        out.update(flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def group_of(key: str) -> str | None:
    lowered = key.lower()
    # A whole-record fingerprint covers side-specific parts too: compare its fields, not it.
    if lowered == "fingerprint" or any(word in lowered for word in LAYOUT_WORDS):
        return None
    if any(word in lowered for word in STATE_WORDS):
        return "state"
    if any(word in lowered for word in CONTRACT_WORDS):
        return "contract"
    return "identity"


def _describe_arrays(a: np.ndarray, b: np.ndarray) -> str:
    if a.size != b.size:
        return f"trainer has {a.size} entries, rollout {b.size}"
    differ = np.nonzero(a != b)[0]
    first = int(differ[0])
    return f"{differ.size} of {a.size} entries, first at {first}: trainer {a[first].item()!r}, rollout {b[first].item()!r}"


def _same(a, b) -> tuple[bool, str]:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f" and b.dtype.kind == "f"):
            return True, ""
        return False, _describe_arrays(a.reshape(-1), b.reshape(-1))
    if a == b:
        return True, ""
    return False, f"trainer {a!r}, rollout {b!r}"


PROVENANCE = "provenance"


def provenance(side) -> tuple[dict, dict]:
    """(copied, computed): the train dump's declaration of which fields it copied from the rollout's
    Sample and which its trainer computed, {field: how}; empty where the dump declares nothing."""
    record = side.get("consistency") if side is not None else None
    declared = record.get(PROVENANCE) if isinstance(record, dict) else None
    if not isinstance(declared, dict):
        return {}, {}
    copied, computed = declared.get("copied_from_rollout_sample"), declared.get("computed_by_trainer")
    return (copied if isinstance(copied, dict) else {}), (computed if isinstance(computed, dict) else {})


def _copy(result: Comparison, name: str, copied: dict) -> bool:
    """True (and noted) when the train side declared `name` a copy of the rollout's own object."""
    if name not in copied:
        return False
    result.not_compared.setdefault(name, f"the trainer's copy of the rollout's Sample ({copied[name]}): one object written twice")
    return True


def _metadata_fields(pair: SamplePair, result: Comparison, copied: dict) -> None:
    train = flatten(pair.train.get("consistency")) if pair.train is not None else {}
    rollout = flatten(pair.rollout.get("consistency")) if pair.rollout is not None else {}
    train = {k: v for k, v in train.items() if not k.startswith(PROVENANCE + ".")}
    layout = {k: v for k, v in train.items() if group_of(k) is None}
    if layout:
        result.layout.append({"rollout_id": pair.rollout_id, "sample": pair.position, **layout})
    for key in sorted(set(train) | set(rollout)):
        group = group_of(key)
        if group is None:
            continue
        name = f"consistency_metadata.{key}"
        if _copy(result, name, copied):
            continue
        if key not in train or key not in rollout:
            result.count(name, key=name)
            continue
        result.count(name)
        same, detail = _same(train[key], rollout[key])
        if not same:
            result.mismatches.append(FieldMismatch(pair.rollout_id, pair.position, name, group, detail))


def compare_pair(pair: SamplePair, result: Comparison) -> None:
    if pair.train is None or pair.rollout is None:
        return
    copied, computed = provenance(pair.train)
    for name, how in computed.items():
        result.sources.setdefault(name, how)
    for train_name, rollout_name in IDENTITY_FIELDS:
        if _copy(result, train_name, copied):
            continue
        a, b = pair.train.get(train_name), pair.rollout.get(rollout_name)
        if a is None or b is None:
            result.count(train_name, key=train_name)
            continue
        result.count(train_name)
        same, detail = _same(a, b)
        if not same and train_name == "target_ids":
            detail = describe_targets(np.asarray(a).reshape(-1), np.asarray(b).reshape(-1))
        if not same:
            result.mismatches.append(FieldMismatch(pair.rollout_id, pair.position, train_name, "identity", detail))
    a, b = pair.train.get("weight_version"), pair.rollout.get("weight_version")
    if a is None or b is None:
        result.count("weight_version", key="weight_version")
    else:
        result.count("weight_version")
        if str(a) != str(b):
            result.mismatches.append(FieldMismatch(pair.rollout_id, pair.position, "weight_version", "state", f"trainer {a!r}, rollout {b!r}"))
    _metadata_fields(pair, result, copied)


def describe_targets(got: np.ndarray, expected: np.ndarray) -> str:
    """How the trainer's gathered targets differ from the response tokens, naming a one-token shift."""
    detail = _describe_arrays(got, expected)
    if got.size == expected.size and got.size > 1 and (got[:-1] == expected[1:]).mean() > 0.5:
        detail += "; the trainer's targets are the response shifted by one (next token)"
    elif got.size == expected.size and got.size > 1 and (got[1:] == expected[:-1]).mean() > 0.5:
        detail += "; the trainer's targets are the response shifted back by one (slice read one position early)"
    return detail


def internal_checks(pair: SamplePair, result: Comparison) -> None:
    """The trainer's own arrays must cover its response exactly (token shift / response slice)."""
    train = pair.train
    if train is None:
        return
    length = train.get("response_length")
    for name in ("loss_mask", "log_probs", "rollout_log_probs", "target_ids"):
        value = train.get(name)
        if value is None or length is None:
            continue
        result.count(f"{name}.length")
        if value.size != length:
            result.mismatches.append(
                FieldMismatch(pair.rollout_id, pair.position, f"{name}.length", "identity", f"{value.size} entries for a response of {length} tokens")
            )


def compare_run(dumps: RunDumps) -> Comparison:
    result = Comparison()
    for step in dumps.steps.values():
        for pair in step.pairs:
            compare_pair(pair, result)
            internal_checks(pair, result)
    return result


def tokenizer_checks(dumps: RunDumps, tokenizer=None, model_vocab: int | None = None) -> list[str]:
    """Named warnings for a tokenizer that differs between sides or does not know the token ids.

    Models pad their vocabulary past the tokenizer (Qwen3: 151936 rows, ~151.7k tokens), so an id
    between the tokenizer's size and the model's is a sampled padding row (`padding_token_ids`);
    only an id past the model's vocabulary (or past the tokenizer, when the model's is unknown)
    means the dumps were made with another tokenizer."""
    warnings: list[str] = []
    known = tokenizer.get_vocab_size() if tokenizer is not None and hasattr(tokenizer, "get_vocab_size") else None
    vocab = model_vocab or known
    padding_ids = 0
    reported_ids = reported_fp = False
    for step in dumps.steps.values():
        for pair in step.pairs:
            train = flatten(pair.train.get("consistency")) if pair.train is not None else {}
            rollout = flatten(pair.rollout.get("consistency")) if pair.rollout is not None else {}
            for key in set(train) & set(rollout):
                if "tokenizer" in key.lower() and train[key] != rollout[key] and not reported_fp:
                    warnings.append(
                        f"rollout {step.rollout_id} sample {pair.position}: consistency_metadata.{key} "
                        f"differs: trainer {train[key]!r}, rollout {rollout[key]!r} (code: tokenizer_mismatch)"
                    )
                    reported_fp = True
            side = pair.rollout or pair.train
            tokens = side.get("tokens") if side is not None else None
            if vocab is not None and tokens is not None and tokens.size and int(tokens.max()) >= vocab and not reported_ids:
                warnings.append(
                    f"rollout {step.rollout_id} sample {pair.position}: token id {int(tokens.max())} is outside "
                    f"the run's {'model vocabulary' if model_vocab else 'tokenizer'} ({vocab} ids) "
                    "(code: tokenizer_mismatch)"
                )
                reported_ids = True
            if known is not None and model_vocab and tokens is not None:
                padding_ids += int(((tokens >= known) & (tokens < model_vocab)).sum())
    if padding_ids:
        warnings.append(
            f"{padding_ids} token ids lie in the model's padded vocabulary rows ({known}..{model_vocab - 1}), "
            "which the tokenizer cannot decode (code: padding_token_ids)"
        )
    return warnings
