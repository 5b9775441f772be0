"""The boundary table of a run: per boundary, the divergence between the two engines and its
measured envelope; the first boundary that breaks its envelope is the localised boundary.

For a boundary with operation f, each side's captured input x and output y (capture bundles,
harness/embedded/capture.py), elementwise:

    divergence  d = |y_rollout - y_trainer|
    envelope    e = |f64(x_rollout) - f64(x_trainer)|          what the inputs' own divergence explains
                  + |f_r(x_rollout) - f64(x_rollout)|          what the rollout's declared precision adds
                  + |f_t(x_trainer) - f64(x_trainer)|          what the trainer's declared precision adds

f_r, f_t: the operation at each side's declared precision (bf16, fp32, fp8-emulated linears);
f64: the same operation in fp64 on the same weights (harness/attribution/boundary_ops.py). Both
sides computing f within their declared precision gives d <= e up to how the engines' rounding
differs from the reference's; a boundary breaks its envelope when mean(d) > k x mean(e), k =
thresholds.boundary_envelope_k (its reason gives the measured ratios). Samples of every capture of
the run are pooled into one table.

The own-input check, per side s, cancels the first envelope term (on a bf16 rung it is most of e,
and a planted fault the size of a few-bit rounding hides inside it):

    own residual  r_s = |y_s - f64(x_s)|           what side s's engine did to its OWN inputs
    own envelope  o_s = |f_s(x_s) - f64(x_s)|      what its declared precision alone does there

A side breaks the boundary when mean(r_s) > k_own x mean(o_s), k_own =
thresholds.boundary_own_k (calibrated apart from what it judges, docs/calibration.md), and the row
names that side. A row breaks when either rule breaks it; the localised boundary is the first in
forward order that breaks. Boundaries in forward order: embedding, per layer attention,
mlp, output, then final_norm, logits (all, the target's, the top-k slice), logsumexp,
selected_logprob, processed_logprob.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.attribution import boundary_ops as ops
from harness.attribution.boundary_ops import FP64, Precision, Qwen3Weights
from harness.embedded.capture import CaptureProblem, read_capture

TOPK_SLICE = 16  # the trainer's 16 largest logits per position: where the probability mass is
NOT_CHECKED = "not checked"


SIDES = ("trainer", "rollout")


@dataclass
class BoundaryRow:
    boundary: str
    divergence: dict
    envelope: dict
    ratio: float
    breaks: bool  # either rule: the cross-engine envelope (cross_breaks) or a side's own-input check (own_breaks)
    elements: int
    # side -> {"residual": stats of |y_s - f64(x_s)|, "envelope": stats of |f_s(x_s) - f64(x_s)|, "ratio": mean over mean}
    own: dict = field(default_factory=dict)
    cross_breaks: bool = False  # mean divergence > k x mean envelope (the rule before the own-input check)
    own_breaks: list[str] = field(default_factory=list)  # the sides whose own ratio > k_own

    def line(self) -> str:
        d, e = self.divergence, self.envelope
        text = (
            f"{self.boundary}: divergence mean {d['mean']:.3g} (max {d['max']:.3g}, p99 {d['p99']:.3g}, rel {d['relative']:.3g}) "
            f"vs envelope mean {e['mean']:.3g} (max {e['max']:.3g}): {self.ratio:.3g}x"
        )
        own = [
            f"{side}'s own output vs fp64 on its own inputs, mean {self.own[side]['residual']['mean']:.3g} "
            f"vs its declared precision's {self.own[side]['envelope']['mean']:.3g}: {self.own[side]['ratio']:.3g}x"
            for side in self.own_breaks
        ]
        return "; ".join([text, *own])


@dataclass
class BoundaryTable:
    run: str
    status: str  # "checked" | "not checked"
    k: float
    rows: list[BoundaryRow] = field(default_factory=list)
    captures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    precisions: dict = field(default_factory=dict)
    capture_fidelity: dict = field(default_factory=dict)
    # How much of the logged drift the captured tokens carry (capture_coverage); None: not measured.
    coverage: dict = field(default_factory=dict)
    # The own-input check's multiple (thresholds.boundary_own_k); None: own ratios measured, not judged.
    k_own: float | None = None

    @property
    def localised(self) -> BoundaryRow | None:
        return next((r for r in self.rows if r.breaks), None)

    @property
    def not_comparable(self) -> list[str]:
        """Boundaries whose ratio is NaN (a NaN in either engine's tensors or the envelope): such a
        row is not within its envelope, and the table cannot say where the drift starts."""
        return [r.boundary for r in self.rows if math.isnan(r.ratio) or any(math.isnan(o["ratio"]) for o in r.own.values())]

    @property
    def decides(self) -> bool:
        """A table classes something only when every row is comparable and its captures carry the
        drift being classified."""
        return self.status == "checked" and not self.not_comparable and bool(self.coverage.get("carries_drift"))

    @property
    def reason(self) -> str:
        if self.status != "checked":
            return f"boundary table not checked: {'; '.join(self.notes) or 'no capture'}"
        if self.not_comparable:
            return f"boundary table classes nothing: not comparable (NaN) at {', '.join(self.not_comparable)}"
        if not self.decides:
            return f"boundary table classes nothing: {self.coverage.get('reason') or 'capture coverage not measured'}"
        hit = self.localised
        if hit is None:
            worst = max(self.rows, key=lambda r: r.ratio)
            text = f"every boundary within {self.k:g}x its envelope (largest: {worst.line()})"
            own = [(o["ratio"], r.boundary, side) for r in self.rows for side, o in r.own.items()]
            if own and self.k_own is not None:
                ratio, boundary, side = max(own)
                text += f"; each side within {self.k_own:g}x its own envelope on its own inputs (largest: {boundary} {side} {ratio:.3g}x)"
            return text
        if hit.own_breaks and not hit.cross_breaks:
            return f"first boundary beyond {self.k_own:g}x its own envelope on the {' and '.join(hit.own_breaks)}'s own inputs: {hit.line()}"
        if hit.own_breaks:
            return (
                f"first boundary beyond {self.k:g}x its envelope and {self.k_own:g}x the {' and '.join(hit.own_breaks)}'s own envelope: {hit.line()}"
            )
        return f"first boundary beyond {self.k:g}x its envelope: {hit.line()}"

    @property
    def localised_side(self) -> str | None:
        """The side the own-input check names at the localised boundary ("trainer", "rollout",
        "trainer and rollout"); None when only the cross-engine rule broke it, or nothing did."""
        hit = self.localised
        return " and ".join(hit.own_breaks) if hit is not None and hit.own_breaks else None

    def to_json(self) -> dict:
        return {
            "run": self.run,
            "status": self.status,
            "k": self.k,
            "k_own": self.k_own,
            "localised": None if self.localised is None else self.localised.boundary,
            "localised_side": self.localised_side,
            "reason": self.reason,
            "captures": self.captures,
            "notes": self.notes,
            "precisions": self.precisions,
            "capture_fidelity": self.capture_fidelity,
            "coverage": self.coverage,
            "decides": self.decides,
            "rows": [vars(r) for r in self.rows],
        }

    def markdown(self) -> str:
        head = (
            "| boundary | div. max | div. mean | div. p99 | div. rel | env. mean | env. max | mean ratio | own ratio trainer | own ratio rollout | breaks |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|"
        )

        def own(r, side):
            return f"{r.own[side]['ratio']:.3g}" if side in r.own else "-"

        def verdict(r):
            if not r.breaks:
                return "no"
            return "**yes**" + (f" ({', '.join(r.own_breaks)})" if r.own_breaks else "")

        lines = [
            f"| {r.boundary} | {r.divergence['max']:.3g} | {r.divergence['mean']:.3g} | {r.divergence['p99']:.3g} | "
            f"{r.divergence['relative']:.3g} | {r.envelope['mean']:.3g} | {r.envelope['max']:.3g} | {r.ratio:.3g} | "
            f"{own(r, 'trainer')} | {own(r, 'rollout')} | {verdict(r)} |"
            for r in self.rows
        ]
        return "\n".join([head, *lines])


def _absdiff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b|, 0 where both are the same value: two -inf processed log-probs (a token outside both
    sides' top-k/top-p set) agree. A NaN stays NaN."""
    return torch.where(a == b, torch.zeros_like(a), (a - b).abs())


def _stats(values: torch.Tensor, reference: torch.Tensor | None = None) -> dict:
    v = values.double().reshape(-1)
    if v.numel() == 0 or not bool(torch.isfinite(v).all()):
        # A NaN/inf divergence or envelope is not comparable: its mean is NaN, never left out.
        return {
            "max": float("nan"),
            "mean": float("nan"),
            "p99": float("nan"),
            "relative": float("nan"),
            "nonfinite": int((~torch.isfinite(v)).sum()),
        }
    out = {"max": float(v.max()), "mean": float(v.mean()), "p99": float(torch.quantile(v, 0.99)) if v.numel() > 1 else float(v.max())}
    if reference is not None:
        ref = reference.double().reshape(-1)
        scale = float(ref[torch.isfinite(ref)].abs().mean()) if bool(torch.isfinite(ref).any()) else 0.0
        out["relative"] = out["mean"] / scale if scale else float("inf") if out["mean"] else 0.0
    return out


def precisions(policy: dict) -> dict[str, Precision]:
    fp8 = str(policy.get("rollout_quantization") or "").startswith("fp8")
    return {"trainer": Precision(str(policy["train_dtype"])), "rollout": Precision(str(policy["rollout_dtype"]), fp8)}


def _boundary_ops(num_layers: int):
    """(boundary, inputs(side capture, sample) -> tuple, op(inputs, weights, prec, policy) -> tensor) in forward order."""

    def stream_in(c, i):
        return c["embedding"] if i == 0 else c[f"layer.{i - 1}.output"]

    table = [("embedding", lambda c, s: (torch.tensor(s["tokens"][:-1]),), lambda x, w, p, _: w.get("model.embed_tokens.weight", p)[x[0]])]
    for i in range(num_layers):
        table += [
            (f"layer.{i}.attention", lambda c, s, i=i: (stream_in(c, i),), lambda x, w, p, _, i=i: ops.attention(x[0], w, i, p)),
            (
                f"layer.{i}.mlp",
                lambda c, s, i=i: (stream_in(c, i), c[f"layer.{i}.attention"]),
                lambda x, w, p, _, i=i: ops.mlp(ops.residual(*x, prec=p), w, i, p),
            ),
            (
                f"layer.{i}.output",
                lambda c, s, i=i: (stream_in(c, i), c[f"layer.{i}.attention"], c[f"layer.{i}.mlp"]),
                lambda x, w, p, _: ops.residual(*x, prec=p),
            ),
        ]
    last = f"layer.{num_layers - 1}.output"
    cols = _response_cols
    table += [
        ("final_norm", lambda c, s: (c[last],), lambda x, w, p, _: ops.rms_norm(x[0], w.get("model.norm.weight", FP64), w.config["rms_norm_eps"], p)),
        ("logits", lambda c, s: (c["final_norm"][cols(s)],), lambda x, w, p, _: ops.lm_head(x[0], w, p)),
        ("logsumexp", lambda c, s: (c["logits"],), lambda x, w, p, pol: ops.logsumexp(x[0], pol["temperature"], p)),
        ("selected_logprob", lambda c, s: (c["logits"], c["targets"]), lambda x, w, p, pol: ops.selected_logprob(*x, pol["temperature"], p)),
        (
            "processed_logprob",
            lambda c, s: (c["logits"], c["targets"]),
            lambda x, w, p, pol: ops.processed_logprob(*x, pol["temperature"], int(pol["top_k"] or -1), float(pol["top_p"] or 1.0), p),
        ),
    ]
    return table


def _response_cols(sample: dict) -> list[int]:
    from harness.layout.token_shift import response_gather_positions

    return response_gather_positions(sample["prompt_len"], sample["response_len"])[0]


ENGINE_PATHS = ("native", "processed-replay", "true-on-policy")  # log-probs from the side's own logits


def operator_precision(name: str | None) -> Precision | None:
    """A registry operator's arithmetic as a Precision (its contract's accumulate dtype, on the
    operands as given); None for the engines' own paths, which log-softmax their logits."""
    if name in (None, *ENGINE_PATHS):
        return None
    from harness.operators import registry

    accumulate = registry.get(name).contract.accumulate_dtype
    return Precision(accumulate if accumulate in ops.DTYPES else "float32")


def _selected_from_operands(c, s):
    return (c["final_norm"][_response_cols(s)], c["targets"])


def _selected_through_head(x, w, p, pol):
    return ops.selected_logprob(ops.lm_head(x[0], w, p), x[1], pol["temperature"], p)


def _side_ops(name: str, side: str, policy: dict, inputs_of, op, prec: Precision):
    """The selected-log-prob row is computed with the operator the side ran (the capture's
    ``policy.logprob_operator``, from the side's own counts): a registry operator takes the LM
    head's operands (the final norm at the response positions and the LM-head weight), so its
    envelope is the head and the log-softmax at the operator's precision against fp64."""
    if name != "selected_logprob":
        return inputs_of, op, prec
    used = operator_precision((policy.get("logprob_operator") or {}).get(side))
    if used is None:
        return inputs_of, op, prec
    return _selected_from_operands, _selected_through_head, used


def _own_unmeasured(name: str, side: str, policy: dict) -> bool:
    """A side that ran a registry operator formed its processed log-prob from the operator's raw
    log-prob on the LM head's fp32 operands, not from its captured (rounded) logits, so fp64 of the
    row's op on those logits is not what it computed from: the own-input check there would measure
    the logits' rounding, not the side. Not measured (the cross-engine row still judges it)."""
    return name == "processed_logprob" and operator_precision((policy.get("logprob_operator") or {}).get(side)) is not None


def _measure(bundle: dict, pooled: dict, own: dict | None = None) -> None:
    """Pool each boundary's (divergence, envelope, trainer output) elements into ``pooled``; with
    ``own``, also each side's own-input check (residual, own envelope) into own[boundary][side]."""
    policy, weights = bundle["policy"], Qwen3Weights(bundle["weights"], bundle["policy"])
    prec = precisions(policy)
    for sample in bundle["samples"]:
        sides = {"trainer": sample["trainer"], "rollout": sample["rollout"]}
        for name, inputs_of, op in _boundary_ops(int(policy["num_layers"])):
            per_side = {side: _side_ops(name, side, policy, inputs_of, op, prec[side]) for side in sides}
            x = {side: per_side[side][0](c, sample) for side, c in sides.items()}
            with torch.no_grad():
                exact = {side: per_side[side][1](x[side], weights, FP64, policy).double() for side in sides}
                declared = {side: per_side[side][1](x[side], weights, per_side[side][2], policy).double() for side in sides}
            envelope = _absdiff(exact["rollout"], exact["trainer"])
            for side in sides:
                envelope = envelope + _absdiff(declared[side], exact[side])
            y = {side: sides[side][name].double() for side in sides}
            pieces = {name: (_absdiff(y["rollout"], y["trainer"]), envelope, y["trainer"])}
            # The own-input check: what each side's engine did to its OWN captured inputs, against
            # fp64 on the same inputs and weights, beside what its declared precision alone does
            # there. The inputs' divergence between the engines cancels (docs/attribution.md).
            mine = {
                side: (_absdiff(y[side], exact[side]), _absdiff(declared[side], exact[side]))
                for side in sides
                if not _own_unmeasured(name, side, policy)
            }
            slices = {name: None}
            if name == "logits":
                targets = sample["trainer"]["targets"][:, None]
                top = y["trainer"].topk(min(TOPK_SLICE, y["trainer"].shape[-1]), -1).indices
                for sub, idx in (("logits.target", targets), (f"logits.top{TOPK_SLICE}", top)):
                    pieces[sub] = tuple(t.gather(-1, idx) for t in pieces[name])
                    slices[sub] = idx
            for key, (d, e, ref) in pieces.items():
                bucket = pooled.setdefault(key, ([], [], []))
                bucket[0].append(d.reshape(-1))
                bucket[1].append(e.reshape(-1))
                bucket[2].append(ref.reshape(-1))
            if own is None:
                continue
            for key, idx in slices.items():
                for side, (r, e) in mine.items():
                    bucket = own.setdefault(key, {}).setdefault(side, ([], []))
                    bucket[0].append((r if idx is None else r.gather(-1, idx)).reshape(-1))
                    bucket[1].append((e if idx is None else e.gather(-1, idx)).reshape(-1))


def _fidelity(bundles: list[dict]) -> dict:
    """How well each side's capture reproduces what the side recorded in the run (rollout: the
    prefill's processed log-prob vs the decode's; trainer: the capture's own op vs the recompute)."""
    out = {}
    for side, key in (("rollout", "processed_logprob"), ("trainer", "selected_logprob")):
        diffs = [
            _absdiff(s[side][key].double(), s[side]["recorded_logprob"].double())
            for b in bundles
            for s in b["samples"]
            if s.get(side) is not None and not (side == "trainer" and b["policy"].get("replay_processed"))
        ]
        if diffs:
            out[side] = _stats(torch.cat(diffs))
    return out


def captured_drift(bundle: dict) -> dict:
    """The step's drift as the capture holds it: VIME's sample-mean (harness.layout.sample_mean, the
    reduction of the logged abs-diff) of |trainer - rollout| selected log-prob, each side's own op
    on its own captured logits, over the captured samples' response tokens."""
    from harness.layout.sample_mean import masked_sample_mean

    rows = [(s["trainer"]["selected_logprob"] - s["rollout"]["selected_logprob"]).abs().double() for s in bundle["samples"]]
    value = float(masked_sample_mean(rows, [torch.ones_like(r) for r in rows])) if rows else float("nan")
    return {"captured": value, "samples": len(rows), "tokens": int(sum(r.numel() for r in rows))}


def _coverage_by_construction(bundles: list[dict], samples_per_step: int | None) -> bool:
    """Every sample of each captured step is captured, and the rollout's processed log-prob is its
    selected one (no sampling contract between them): the captured drift then IS the logged drift, so
    a coverage of 1 is an identity, not a measurement."""
    if not samples_per_step or any(len(b["samples"]) < samples_per_step for b in bundles):
        return False
    return all(torch.equal(s["rollout"]["processed_logprob"], s["rollout"]["selected_logprob"]) for b in bundles for s in b["samples"])


def capture_coverage(bundles: list[dict], logged: dict[int, float] | None, minimum: float, samples_per_step: int | None = None) -> dict:
    """Per captured step: the captured selected-log-prob drift over the logged abs-diff of the same
    step (train/train_rollout_logprob_abs_diff). The table carries the drift only when every
    captured step reaches ``minimum`` (thresholds.boundary_capture_min_coverage); a step whose
    logged value is missing or not finite leaves coverage not measured, never assumed. Where the
    capture holds every sample of its step and no sampling contract sits between the rollout's two
    log-probs (``samples_per_step`` given), the ratio is 1 by construction: said so (`by_construction`),
    never presented as a measurement."""
    steps, problems = {}, []
    for bundle in bundles:
        rid = int(bundle["rollout_id"])
        row = captured_drift(bundle)
        value = (logged or {}).get(rid)
        if value is None or not math.isfinite(value) or not math.isfinite(row["captured"]):
            problems.append(f"rollout {rid}: no finite logged abs-diff to compare the capture with")
            steps[rid] = {**row, "logged": value, "coverage": None}
            continue
        ratio = row["captured"] / value if value else (1.0 if row["captured"] == 0.0 else float("inf"))
        steps[rid] = {**row, "logged": value, "coverage": ratio}
    measured = [s["coverage"] for s in steps.values() if s["coverage"] is not None]
    low = {rid: s["coverage"] for rid, s in steps.items() if s["coverage"] is not None and s["coverage"] < minimum}
    carries = bool(steps) and not problems and not low
    if problems:
        reason = "capture coverage not measured (" + "; ".join(problems) + ")"
    elif low:
        reason = (
            "capture coverage "
            + ", ".join(f"{c:.3g} at rollout {rid}" for rid, c in sorted(low.items()))
            + (f" < {minimum:g}: the captured tokens do not carry the logged drift")
        )
    else:
        reason = f"capture coverage {min(measured):.3g} .. {max(measured):.3g} (>= {minimum:g})"
    identity = carries and _coverage_by_construction(bundles, samples_per_step)
    if identity:
        reason = (
            f"the capture holds all {samples_per_step} samples of each captured step and the rollout's processed log-prob is its "
            "selected one: the captured drift is the logged drift by construction (coverage not measured, not needed)"
        )
    return {
        "per_step": steps,
        "min": min(measured) if measured else None,
        "minimum": minimum,
        "carries_drift": carries,
        "by_construction": identity,
        "reason": reason,
    }


def boundary_table(
    run_dir: Path,
    k: float,
    run_id: str | None = None,
    logged: dict[int, float] | None = None,
    min_coverage: float | None = None,
    k_own: float | None = None,
    samples_per_step: int | None = None,
) -> BoundaryTable:
    """The run's table from every dumps/capture_*.pt; status "not checked" (with why) when there is none usable.
    ``logged``: the run's logged abs-diff by rollout id, for the capture coverage; without it (or
    without ``min_coverage``) the coverage is not measured and the table classes nothing.
    ``k_own``: the own-input check's multiple; without it the own ratios are measured, not judged."""
    run_dir = Path(run_dir)
    table = BoundaryTable(run_id or run_dir.name, NOT_CHECKED, k, k_own=k_own)
    files = sorted((run_dir / "dumps").glob("capture_*.pt"))
    if not files:
        table.notes.append(f"no capture bundle in {run_dir / 'dumps'} (the embedded trainer writes dumps/capture_N.pt with probe samples on)")
        return table
    bundles = []
    for path in files:
        try:
            bundle = read_capture(path)
        except CaptureProblem as err:
            table.notes.append(str(err))
            continue
        table.notes.extend(f"{path.name}: {u}" for u in bundle["unavailable"])
        usable = [s for s in bundle["samples"] if s.get("trainer") is not None and s.get("rollout") is not None]
        if not usable or bundle.get("weights") is None:
            continue
        if "model.layers.0.mlp.gate_proj.weight" not in bundle["weights"]:
            table.notes.append(f"{path.name}: an MoE model (routed experts): boundary_ops has no reference MoE block, so no envelope")
            continue
        bundles.append({**bundle, "samples": usable})
        table.captures.append(path.name)
    if not bundles:
        return table
    pooled: dict = {}
    own: dict = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny operands: a second thread only waits at its barrier (40 ms a GEMM on a busy machine, 5 us alone)
    try:
        for bundle in bundles:
            _measure(bundle, pooled, own)
    finally:
        torch.set_num_threads(threads)
    table.precisions = {side: p.describe() for side, p in precisions(bundles[0]["policy"]).items()}
    used = bundles[0]["policy"].get("logprob_operator") or {}
    # which operator each side's selected_logprob row was computed with (what the side's counts showed)
    table.precisions["selected_logprob"] = {
        side: (
            f"{used[side]} ({operator_precision(used[side]).describe()} on the LM head's operands)"
            if operator_precision(used.get(side))
            else used[side]
        )
        for side in ("trainer", "rollout")
        if used.get(side)
    } or "each side's own log-softmax of its logits (the capture records no operator)"
    table.capture_fidelity = _fidelity(bundles)
    if min_coverage is None:
        table.coverage = {"carries_drift": False, "reason": "capture coverage not measured (no minimum coverage given)"}
    else:
        table.coverage = capture_coverage(bundles, logged, min_coverage, samples_per_step)
    for name, (d, e, ref) in pooled.items():
        d, e, ref = torch.cat(d), torch.cat(e), torch.cat(ref)
        div, env = _stats(d, ref), _stats(e, ref)
        ratio = _ratio(div["mean"], env["mean"])
        mine = own_figures(own.get(name, {}), ref)
        own_breaks = own_broken(mine, k_own)
        table.rows.append(BoundaryRow(name, div, env, ratio, ratio > k or bool(own_breaks), int(d.numel()), mine, ratio > k, own_breaks))
    table.status = "checked"
    return table


def own_figures(per_side: dict, reference: torch.Tensor | None = None) -> dict:
    """Each side's own-input check at one boundary, pooled as the cross-engine rows are:
    per_side[side] = (residual pieces, own-envelope pieces) -> the stats of each and the ratio
    mean(residual) / mean(own envelope)."""
    out = {}
    for side in SIDES:
        if side not in per_side:
            continue
        r, e = (torch.cat(list(t)) for t in per_side[side])
        res, env = _stats(r, reference), _stats(e, reference)
        out[side] = {"residual": res, "envelope": env, "ratio": _ratio(res["mean"], env["mean"])}
    return out


def own_broken(own: dict, k_own: float | None) -> list[str]:
    """The sides whose own ratio exceeds k_own (none judged without k_own); a NaN is not comparable
    (BoundaryTable.not_comparable), never "within"."""
    return [] if k_own is None else [side for side in SIDES if side in own and own[side]["ratio"] > k_own]


def _ratio(divergence: float, envelope: float) -> float:
    if math.isnan(divergence) or math.isnan(envelope):
        return float("nan")
    if envelope == 0.0:
        return 0.0 if divergence == 0.0 else float("inf")
    return divergence / envelope


def logged_abs_diff(run) -> dict[int, float]:
    """The run's logged train/train_rollout_logprob_abs_diff by rollout id (one train step a rollout;
    with more, a logged step covers part of a rollout and no step is comparable with a capture)."""
    if int(run.spec.flag("num-steps-per-rollout", 1)) != 1:
        return {}
    return {int(n): float(v) for n, v in run.series("train/train_rollout_logprob_abs_diff")}


def run_boundary_table(run, knobs) -> BoundaryTable:
    """The table of a loaded run, k from the knobs (thresholds.boundary_envelope_k), its capture
    coverage against the run's logged abs-diff (thresholds.boundary_capture_min_coverage)."""
    return boundary_table(
        run.path,
        knobs.threshold("boundary_envelope_k"),
        run.id,
        logged_abs_diff(run),
        knobs.threshold("boundary_capture_min_coverage"),
        knobs.threshold("boundary_own_k"),
        _samples_per_step(run),
    )


def _samples_per_step(run) -> int | None:
    from harness.spec.flag_read import int_flag

    prompts, samples = int_flag(run.spec.flags, "rollout-batch-size"), int_flag(run.spec.flags, "n-samples-per-prompt")
    return prompts * samples if prompts and samples else None


def boundary_status(run, knobs) -> tuple[str, str, str | None]:
    """(status, reason, boundary) for the ladder: "within" (every boundary inside its envelope),
    "breaks" (with the localised boundary), or "not checked" (no usable capture, a capture that
    does not carry the logged drift, and why)."""
    table = run_boundary_table(run, knobs)
    if not table.decides:
        return NOT_CHECKED, table.reason, None
    hit = table.localised
    return ("breaks", table.reason, hit.boundary) if hit is not None else ("within", table.reason, None)


@dataclass
class EvidenceClass:
    """A drift class from evidence: the probe or boundary that decided it, or what it needs."""

    drift_class: str  # framework | semantic | candidate-operator | expected-numerical | undecided
    decided_by: str | None
    reason: str
    needs: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"undecided: needs {', '.join(self.needs)}" if self.drift_class == "undecided" else self.drift_class


def classify(table: BoundaryTable, framework: list, contract, measured: list = (), drift: dict | None = None) -> EvidenceClass:
    """The one evidence path (``harness attribute`` and the ladder's checks): the seed's order,
    framework probes (1, 2), then the contract (6), then the measured numerical evidence (probe 5
    where a TP run recorded its shards; the boundary table). ``framework``/``contract``/``measured``:
    ProbeVerdicts (harness.attribution.probes). A framework failure is a finding on its own; every
    later class needs every probe before it to have passed: a probe not checked leaves the class
    undecided and says what it needs. A probe "not measured" (computed from declarations) decides
    nothing. ``drift``: {"max": the run's largest logged abs-diff, "floor": the fp32 floor}; a run
    whose drift never leaves the fp32 floor has nothing to attribute (class none)."""
    for probe in framework:
        if probe.status == "fail":
            return EvidenceClass("framework", f"probe {probe.number} ({probe.name})", probe.verdict)
    needs = [f"probe {p.number} ({p.name})" for p in framework if p.status != "pass"]
    if contract.status == "fail" and not needs:
        return EvidenceClass("semantic", f"probe {contract.number} ({contract.name})", contract.verdict)
    if contract.status not in ("pass", "fail"):
        needs.append(f"probe {contract.number} ({contract.name})")
    if needs:  # what comes after cannot be a class: say everything the class lacks
        needs += [f"probe {p.number} ({p.name})" for p in measured if p.status != "pass"]
        return EvidenceClass("undecided", None, f"{'; '.join(needs)} (contract: {contract.verdict})", needs)
    for probe in measured:
        if probe.status == "fail":
            return EvidenceClass("candidate-operator", f"probe {probe.number} ({probe.name})", probe.verdict)
    needs = [f"probe {p.number} ({p.name})" for p in measured if p.status == NOT_CHECKED]
    if drift and drift.get("max") is not None and math.isfinite(drift["max"]) and drift["max"] <= drift["floor"] and not needs:
        return EvidenceClass(
            "none", "logged abs-diff", f"the logged abs-diff never exceeds the fp32 floor ({drift['max']:.3g} <= {drift['floor']:g})"
        )
    if table.status != "checked":
        needs.append(f"the boundary table ({'; '.join(table.notes) or 'no capture'})")
    elif not table.decides:
        needs.append(f"a boundary table whose captures carry the drift ({table.reason})")
    if needs:
        return EvidenceClass("undecided", None, "; ".join(needs), needs)
    hit = table.localised
    if hit is not None:
        return EvidenceClass("candidate-operator", f"boundary {hit.boundary}", table.reason)
    return EvidenceClass("expected-numerical", "boundary table", table.reason)


def main(argv: list[str] | None = None) -> int:
    """python -m harness.attribution.boundaries RUN_DIR [--k K] [--k-own K]: the table, its reason, capture fidelity.
    Bad input is one line and exit code 2."""
    import argparse
    import json

    from harness import DEFAULT_KNOBS_DIR
    from harness.spec import SpecError, load_knobs

    parser = argparse.ArgumentParser(prog="python -m harness.attribution.boundaries", description="the boundary table of a run directory")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (reports/runs/<id>/) with dumps/capture_*.pt")
    parser.add_argument("--k", type=float, default=None, help="envelope multiple (default: thresholds.boundary_envelope_k of --knobs)")
    parser.add_argument("--k-own", type=float, default=None, help="own-input multiple (default: thresholds.boundary_own_k of --knobs)")
    parser.add_argument("--knobs", default=str(DEFAULT_KNOBS_DIR), help="knobs directory whose thresholds.yaml gives k")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"error: {run_dir}: no such run directory (expected reports/runs/<id>/ with dumps/)", file=sys.stderr)
        return 2
    try:
        knobs = load_knobs(Path(args.knobs))
        k = knobs.threshold("boundary_envelope_k") if args.k is None else args.k
        k_own = knobs.threshold("boundary_own_k") if args.k_own is None else args.k_own
        min_coverage = knobs.threshold("boundary_capture_min_coverage")
    except SpecError as err:
        print("error: " + "; ".join(err.problems), file=sys.stderr)
        return 2
    if not k > 0:
        print(f"error: --k {k}: expected a positive envelope multiple", file=sys.stderr)
        return 2
    if not k_own > 0:
        print(f"error: --k-own {k_own}: expected a positive own-envelope multiple", file=sys.stderr)
        return 2
    result = boundary_table(run_dir, k, run_dir.name, _logged_of_dir(run_dir), min_coverage, k_own)
    print(result.reason)
    print(result.markdown())
    print(
        json.dumps(
            {"precisions": result.precisions, "capture_fidelity": result.capture_fidelity, "coverage": result.coverage, "notes": result.notes},
            indent=1,
            default=str,
        )
    )
    return 0


def _logged_of_dir(run_dir: Path) -> dict[int, float]:
    """The logged abs-diff of a run directory; none (coverage not measured) where it is not a loadable run."""
    from harness.records.rundir import RunDir

    if not (run_dir / "spec.yaml").is_file():
        return {}
    try:
        return logged_abs_diff(RunDir(run_dir).load())
    except Exception:  # noqa: BLE001 - an unreadable run's coverage is "not measured", said in the table's reason
        return {}


if __name__ == "__main__":
    sys.exit(main())
