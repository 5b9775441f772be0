"""docs/results.md's operator bench: every record under reports/bench/ (tools/bench_operators.py and
the TP run write them, each with its hardware), one table per kind of record, every speed figure
beside the card it was measured on.

A record is recognised by what it holds (`results` of operators, `runs` of gradient plans, `paths`
of a training step, `floor`, `hot`, a `tp` parity run); one of no known kind is still listed, with
its card and date, so that no committed record goes unnamed. A record without `hardware` is refused
in one line naming the file: a speed figure without its card says nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.report.results_format import mib, num, record_line
from harness.report.results_records import ResultsRecordError, problem_line, read_json

BENCH = Path("reports") / "bench"


class Hardware(BaseModel):
    model_config = ConfigDict(extra="allow")
    gpu: str | None = None
    gpu_count: int | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    driver: str | None = None


class BenchRecord(BaseModel):
    """The keys every bench record shares; each kind's own keys are read where its table is drawn."""

    model_config = ConfigDict(extra="allow")
    hardware: Hardware
    created_utc: str | None = None

    def card(self) -> str:
        hw = self.hardware
        if hw.gpu:
            return f"{hw.gpu_count} x {hw.gpu}" if (hw.gpu_count or 1) > 1 else hw.gpu
        return f"CPU only ({hw.cpu or 'CPU not named'}, {hw.cpu_count} cores)"

    @property
    def date(self) -> str:
        return self.created_utc[:10] if self.created_utc else "undated"


def _load(root: Path) -> dict[str, tuple[BenchRecord, dict]]:
    records = {}
    for path in sorted((root / BENCH).glob("*.json")):
        shown = str(BENCH / path.name)
        data = read_json(path, shown)
        try:
            records[path.name] = (BenchRecord.model_validate(data), data)
        except ValidationError as err:
            raise ResultsRecordError(problem_line(shown, err)) from None
    return records


def _x(value) -> str:
    return f"{num(value)}x" if isinstance(value, (int, float)) else "—"


def _yes(value) -> str:
    return {True: "yes", False: "no"}.get(value, "—")


def _table(
    title: str, intro: str, names: list[str], records: dict, header: list[str], rows: list[list[str]], commit: str = "not recorded"
) -> list[str]:
    dates = sorted({records[n][0].date for n in names})
    cards = sorted({records[n][0].card() + (f" (driver {records[n][0].hardware.driver})" if records[n][0].hardware.driver else "") for n in names})
    lines = [f"### {title}", "", record_line([str(BENCH / n) for n in names], ", ".join(dates), commit, "; ".join(cards)) + ".", ""]
    lines += [intro, ""] if intro else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _operators(records: dict, names: list[str]) -> list[str]:
    rows = []
    for name in names:
        record, data = records[name]
        results = [r for r in data["results"] if isinstance(r, dict) and isinstance(r.get("shape"), dict)]
        largest = max((r["shape"].get("T") or 0 for r in results), default=0)
        inputs = data.get("regime") or (data.get("bundle") or {}).get("source") or "—"
        for r in (r for r in results if (r["shape"].get("T") or 0) == largest):
            shape = r["shape"]
            fwd_bwd = _x(r.get("fwd_bwd_x_gemm")) if not r.get("backward_error") else "no backward at this shape"
            rows.append(
                [name, record.card(), str(inputs), f"{shape.get('T')} x {shape.get('H')} x {shape.get('V')}", r.get("name", "—")]
                + [_x(r.get("x_gemm")), fwd_bwd, mib(r.get("fwd_bwd_peak_extra_bytes")), num(r.get("max_abs_err")), _yes(r.get("batch_invariant"))]
            )
    header = [
        "record",
        "card",
        "inputs",
        "T x H x V",
        "operator",
        "forward x GEMM",
        "fwd+bwd x GEMM",
        "fwd+bwd extra memory",
        "max abs err",
        "batch-invariant",
    ]
    intro = "Each record's largest T; times against the bf16 GEMM `hidden @ weight.T` timed alternately; error against fp64 (docs/operators.md)."
    return _table("Log-prob operators", intro, names, records, header, rows)


def _gradients(records: dict, names: list[str]) -> list[str]:
    rows = []
    for name in names:
        record, data = records[name]
        for run in data["runs"]:
            fast = {p.get("grad_dtype"): p for p in run.get("plans", []) if p.get("plan") == "fast"}
            f32, b16 = fast.get("float32", {}), fast.get("bfloat16", {})
            errors = [f"{num(p.get('grad_rel_err_hidden'))} / {num(p.get('grad_rel_err_weight'))}" if p else "—" for p in (f32, b16)]
            rows.append(
                [
                    name,
                    record.card(),
                    str(run.get("code")),
                    str(run.get("regime")),
                    num(run.get("grad_scale")),
                    *errors,
                    _x(b16.get("fwd_bwd_x_gemm")),
                ]
            )
    header = ["record", "card", "backward", "inputs", "grad scale", "rel err, fp32 delivery (hidden / weight)", "bf16 delivery", "fwd+bwd x GEMM"]
    # Each run names its code by a label (`after`, `before`) the record's `code` maps to a commit.
    codes = {label: re.search(r"commit (\w+)", str(text)) for name in names for label, text in (records[name][1].get("code") or {}).items()}
    commit = ", ".join(f"{m.group(1)} ({label})" for label, m in codes.items() if m) or "not recorded"
    return _table("Gradient precision of the fused backward (fast plan)", "", names, records, header, rows, commit=commit)


def _training_step(records: dict, names: list[str]) -> list[str]:
    rows = []
    for name in names:
        record, data = records[name]
        invariance = data.get("lm_head_grad_batch_invariance") or {}
        for p in data["paths"]:
            lm = next((v for k, v in invariance.items() if k == p.get("path")), {})
            grads = [p.get(f"grad_rel_diff_vs_fp32-logits_{s}") for s in ("median", "max")]
            rows.append(
                [name, record.card(), str(p.get("path")), f"{num(p.get('step_ms_median'))} ms", mib(p.get("peak_extra_bytes"))]
                + [
                    num(p.get("loss_max_abs_err_vs_fp64")),
                    " / ".join(num(g) for g in grads),
                    f"{lm.get('rows_differing', '—')} of {lm.get('rows', '—')}",
                ]
            )
    header = [
        "record",
        "card",
        "log-prob path",
        "step",
        "peak extra",
        "loss max err vs fp64",
        "grads vs fp32 logits (median / max)",
        "LM-head grad rows differing",
    ]
    return _table("A Megatron-Core training step", "", names, records, header, rows)


def _floor(records: dict, names: list[str]) -> list[str]:
    rows = []
    for name in names:
        record, data = records[name]
        for f in data["floor"]:
            unfused, fused = f.get("unfused_library_fwd_bwd") or {}, f.get("fused_fast_fwd_bwd") or {}
            rows.append(
                [name, record.card(), str(f.get("T")), _x((f.get("four_products") or {}).get("x_gemm"))]
                + [
                    f"{_x(unfused.get('x_gemm'))} ({mib(unfused.get('peak_extra_bytes'))})",
                    f"{_x(fused.get('fwd_bwd_x_gemm'))} ({mib(fused.get('fwd_bwd_peak_extra_bytes'))})",
                ]
            )
    header = ["record", "card", "T", "cuBLAS's four products x GEMM", "unfused library fwd+bwd (extra)", "fused fast fwd+bwd (extra)"]
    return _table("What an exact fwd+bwd costs in cuBLAS alone", "", names, records, header, rows)


def _hot(records: dict, names: list[str]) -> list[str]:
    rows = []
    for name in names:
        record, data = records[name]
        for part, entries in data["hot"].items():
            for h in entries if isinstance(entries, list) else []:
                clock = h.get("clock") or {}
                rows.append(
                    [
                        name,
                        record.card(),
                        part,
                        str(h.get("T")),
                        _x(h.get("x_gemm_hot")),
                        f"{clock.get('sm_mhz_median', 0):.0f} MHz",
                        num(clock.get("power_cap_fraction"), 2),
                    ]
                )
    header = ["record", "card", "call", "T", "x GEMM, each call behind GEMMs", "SM clock (median)", "time at the power cap"]
    return _table("Under sustained load", "", names, records, header, rows)


def _tensor_parallel(records: dict, names: list[str]) -> list[str]:
    rows = []
    for name in names:
        record, data = records[name]
        for r in data["results"]:
            rows.append(
                [name, record.card(), str(r.get("tp")), str(r.get("name")), f"{num(r.get('ms_median'))} ms", num(r.get("collective_share"), 2)]
            )
            rows[-1] += [_yes(r.get("bitwise_equal_tp1")), f"{r.get('rows_differing_from_tp1', '—')}", num(r.get("max_abs_err"))]
    header = ["record", "card", "TP", "operator", "forward", "collective share", "bitwise equal to TP=1", "rows differing", "max abs err"]
    return _table(f"Tensor parallel over {str(records[names[0]][1].get('backend', 'nccl')).upper()}", "", names, records, header, rows)


# (kind, how a record of it is recognised, its table), in the page's order.
KINDS = (
    ("tp", lambda d: "tp" in d and isinstance(d.get("results"), list), _tensor_parallel),
    ("operators", lambda d: isinstance(d.get("results"), list), _operators),
    ("gradients", lambda d: isinstance(d.get("runs"), list), _gradients),
    ("step", lambda d: isinstance(d.get("paths"), list), _training_step),
    ("hot", lambda d: isinstance(d.get("hot"), dict), _hot),
    ("floor", lambda d: isinstance(d.get("floor"), list) and d["floor"], _floor),
)


def bench_section(root: Path) -> list[str]:
    records = _load(root)
    by_kind: dict[str, list[str]] = {kind: [] for kind, _, _ in KINDS}
    unknown = []
    for name, (_, data) in records.items():
        kind = next((k for k, recognise, _ in KINDS if recognise(data)), None)
        (by_kind[kind] if kind else unknown).append(name)
    lines = [
        "## The operator bench",
        "",
        "Every record under `reports/bench/` (its index: `reports/bench/README.md`); how each is measured: docs/operators.md.",
    ]
    order = ("operators", "gradients", "step", "floor", "hot", "tp")
    draw = {kind: table for kind, _, table in KINDS}
    for kind in order:
        if by_kind[kind]:
            lines += ["", *draw[kind](records, by_kind[kind])]
    if unknown:
        rows = [[n, records[n][0].card(), records[n][0].date] for n in unknown]
        lines += [
            "",
            *_table("Records this page does not draw", "Their figures are in the files.", unknown, records, ["record", "card", "made"], rows),
        ]
    return lines
