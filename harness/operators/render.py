"""Bench records as tables: rich on the console, markdown for docs/operators.md."""

from __future__ import annotations

COLUMNS = (
    "operator",
    "T",
    "mean err",
    "p99 err",
    "max err",
    "batch inv",
    "TP inv",
    "ms",
    "x GEMM idle (queued)",
    "extra MiB",
    "fwd+bwd ms",
    "fwd+bwd x GEMM idle (queued)",
    "fwd+bwd extra MiB",
    "grad rel err (h / W)",
    "grad batch inv",
    "grad TP inv",
)
_N = len(COLUMNS) - 1


def _num(x, fmt="{:.1e}") -> str:
    return "-" if x is None else fmt.format(x)


def _ratio(idle, queued) -> str:
    # x GEMM timed from an idle GPU, and in brackets with the call's launches queued (bench.METHOD)
    return _num(idle, "{:.2f}") + ("" if queued is None else f" ({queued:.2f})")


def _inv(flag, detail) -> str:
    if flag is None:
        return "n/a"
    if flag:
        return "yes"
    if isinstance(detail, dict):
        return "no (" + ", ".join(f"tp{k}: {v}" for k, v in detail.items()) + " rows)"
    return f"no ({detail} rows)"


def rows(record: dict) -> list[tuple[str, ...]]:
    out = []
    for r in record["results"]:
        if not r.get("available", True):
            out.append((r["name"], *(["unavailable: " + r.get("why_unavailable", "")] + [""] * _N)[:_N]))
            continue
        if "error" in r:
            out.append((r["name"], *(["failed: " + r["error"][:80]] + [""] * _N)[:_N]))
            continue
        bwd = (
            ("failed: " + r["backward_error"][:60])
            if r.get("backward_error")
            else "-"
            if r.get("grad_rel_err_hidden") is None
            else f"{r['grad_rel_err_hidden']:.1e} / {r['grad_rel_err_weight']:.1e}"
        )
        if r.get("grad_rel_err_hidden_fp32") is not None:
            bwd += f" (fp32: {r['grad_rel_err_hidden_fp32']:.1e} / {r['grad_rel_err_weight_fp32']:.1e})"
        extra = r.get("peak_extra_bytes")
        extra_fb = r.get("fwd_bwd_peak_extra_bytes")
        out.append(
            (
                r["name"] + (f" [{r['path']}]" if r.get("path") else ""),
                str(r["shape"]["T"]),
                _num(r.get("mean_abs_err")),
                _num(r.get("p99_abs_err")),
                _num(r.get("max_abs_err")),
                _inv(r.get("batch_invariant"), r.get("batch_rows_differing")),
                _inv(r.get("tp_invariant"), r.get("tp_rows_differing")),
                _num(r.get("ms_median"), "{:.2f}"),
                _ratio(r.get("x_gemm"), r.get("x_gemm_queued")),
                "-" if extra is None else f"{extra / 2**20:.0f}",
                _num(r.get("fwd_bwd_ms_median"), "{:.2f}"),
                _ratio(r.get("fwd_bwd_x_gemm"), r.get("fwd_bwd_x_gemm_queued")),
                "-" if extra_fb is None else f"{extra_fb / 2**20:.0f}",
                bwd,
                _inv(r.get("grad_batch_invariant"), r.get("grad_batch_rows_differing")),
                "n/a" if r.get("grad_tp_invariant") is None else ("yes" if r["grad_tp_invariant"] else f"no {r.get('grad_tp_equal')}"),
            )
        )
    return out


def caption(record: dict) -> str:
    hw, b = record["hardware"], record["bundle"]
    where = hw.get("gpu") or f"CPU ({hw.get('cpu')})"
    if "gemm_ms_by_tokens" in record:  # a sweep over T
        shape = record["results"][0]["shape"] if record["results"] else {}
        dims = f"T in {b['tokens']} H={shape.get('H')} V={shape.get('V')} {shape.get('dtype')}, {b['source']}"
        gemm = "GEMM ms by T " + ", ".join(f"{k}: {v:.2f}" for k, v in record["gemm_ms_by_tokens"].items())
    else:
        dims = f"T={b['T']} H={b['H']} V={b['V']} {b['dtype']}, {b['source']}"
        gemm = f"bf16 GEMM {record['gemm_ms_median']:.2f} ms"
    stats = record.get("input_stats")
    regime = (
        f"; regime {record.get('regime')}: entropy {stats['mean_entropy_nats']:.2f} nats, p(target) {stats['mean_target_prob']:.2f}, "
        f"logit spread {stats['logit_spread']:.1f}"
        if stats
        else ""
    )
    return (
        f"{where}; {dims}{regime}; {gemm}; torch {record['libraries']['torch']}, triton {record['libraries'].get('triton')}; {record['created_utc']}"
    )


def markdown(record: dict) -> str:
    lines = [f"_{caption(record)}_", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(record)]
    return "\n".join(lines) + "\n"


def print_table(record: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=caption(record), title_justify="left")
    for c in COLUMNS:
        table.add_column(c, overflow="fold")
    for r in rows(record):
        table.add_row(*r)
    Console(width=200).print(table)
