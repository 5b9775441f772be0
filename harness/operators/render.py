"""Bench records as tables: rich on the console, markdown for docs/operators.md."""

from __future__ import annotations

COLUMNS = ("operator", "mean err", "p99 err", "max err", "batch inv", "TP inv", "ms", "x GEMM", "extra MiB", "bwd rel err (h / W)")


def _num(x, fmt="{:.1e}") -> str:
    return "-" if x is None else fmt.format(x)


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
            out.append((r["name"], *(["unavailable: " + r.get("why_unavailable", "")] + [""] * 9)[:9]))
            continue
        if "error" in r:
            out.append((r["name"], *(["failed: " + r["error"][:80]] + [""] * 9)[:9]))
            continue
        bwd = "-" if r.get("backward_rel_err_hidden") is None else f"{r['backward_rel_err_hidden']:.1e} / {r['backward_rel_err_weight']:.1e}"
        extra = r.get("peak_extra_bytes")
        out.append((
            r["name"] + (f" [{r['path']}]" if r.get("path") else ""),
            _num(r.get("mean_abs_err")),
            _num(r.get("p99_abs_err")),
            _num(r.get("max_abs_err")),
            _inv(r.get("batch_invariant"), r.get("batch_rows_differing")),
            _inv(r.get("tp_invariant"), r.get("tp_rows_differing")),
            _num(r.get("ms_median"), "{:.2f}"),
            _num(r.get("x_gemm"), "{:.2f}"),
            "-" if extra is None else f"{extra / 2**20:.0f}",
            bwd,
        ))
    return out


def caption(record: dict) -> str:
    hw, b = record["hardware"], record["bundle"]
    where = hw.get("gpu") or f"CPU ({hw.get('cpu')})"
    return (
        f"{where}; T={b['T']} H={b['H']} V={b['V']} {b['dtype']}, {b['source']}; "
        f"bf16 GEMM {record['gemm_ms_median']:.2f} ms; torch {record['libraries']['torch']}, "
        f"triton {record['libraries'].get('triton')}; {record['created_utc']}"
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
