"""The pre-registration a session judges against: every expectation and threshold it applies, and their hash.

Recorded before any answer is judged (the experiment record's `preregistration`, shown on the page),
so a record says exactly what it was held to, and two records judged against different knobs say so
by their hashes. What is hashed is what decides an answer: every threshold's value, each rung's
expectation, each acceptance criterion's check, thresholds and reports, the A/B's pairs and expected
answers, each question's effect of interest and the A/A spreads it is made of, the stages' seeds and
replicates, the design's target margin and seed ranges, the drift budget's levers, seeds, shares and
expectations (levers.yaml), the readiness criteria (readiness.yaml) and the candidate operator's pairs
and expectations (candidate.yaml). What a design tool measured below a file's marker line (its
`measured`) is the evidence an expectation was sized from, not one: it is not hashed. Reasons are prose and are not hashed; a
changed number, outcome or seed is a new pre-registration. The confirmatory sweep's ledger
(python -m harness sweep) keeps the hash each offset was judged against.
"""

from __future__ import annotations

import hashlib
import json

from harness.spec import Knobs

__all__ = ["expectations", "expectations_hash", "preregistration"]


# Keys whose text says why (a design's story, a reason); a number under such a key (design.yaml's
# seeds.design) is a seed, and is hashed.
PROSE = ("reason", "why", "title", "seed_text", "design")


def _plain(value):
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump(by_alias=True, exclude_none=True))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if not (k in PROSE and isinstance(v, str))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def expectations(knobs: Knobs, design=None) -> dict:
    """Everything a session holds its answers to, without prose (module docstring)."""
    effects = knobs.effects
    return {
        "thresholds": {name: t.value for name, t in sorted(knobs.thresholds.items())},
        "rungs": {rung_id: _plain(rung.expect) | {"parent": rung.parent, "stages": rung.stages} for rung_id, rung in sorted(knobs.rungs.items())},
        "acceptance": {"judges": knobs.acceptance.judges, "criteria": [_plain(c) | {"id": c.id} for c in knobs.acceptance.criteria]},
        "ab": {
            "pair": _plain(knobs.ab.pair),
            "replicates": _plain(knobs.ab.replicates),
            "expect": _plain(knobs.ab.expect),
            "candidates": {
                name: {"set": c.set, "backends": c.backends, "expect": _plain(c.expect)} for name, c in sorted(knobs.ab.candidates.items())
            },
        },
        "effects": _plain(effects) if effects is not None else None,
        "stages": {
            name: {"replicates": _plain(stage.replicates), "seed": stage.embedded.get("seed")} for name, stage in sorted(knobs.stages.items())
        },
        "budget": None if knobs.levers is None else _plain(knobs.levers.model_dump(by_alias=True, exclude_none=True, exclude={"measured"})),
        "readiness": _plain(knobs.readiness),
        "candidate": None if knobs.candidate is None else _plain(knobs.candidate.model_dump(by_alias=True, exclude_none=True, exclude={"measured"})),
        "design": None
        if design is None
        else {"target_margin": design.target_margin_se, "seeds": _plain(design.seeds), "affordable": _plain(design.affordable)},
    }


def expectations_hash(knobs: Knobs, design=None) -> str:
    text = json.dumps(expectations(knobs, design), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def preregistration(knobs: Knobs, design=None) -> dict:
    """The record's `preregistration` entry: the hash and what it covers."""
    covered = expectations(knobs, design)
    return {
        "sha256": expectations_hash(knobs, design),
        "covers": sorted(k for k, v in covered.items() if v is not None),
        "thresholds": len(covered["thresholds"]),
        "rungs": len(covered["rungs"]),
        "knobs": str(knobs.root),
    }
