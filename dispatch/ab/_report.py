"""An A/B run rendered for people and for tools: a rich table, markdown, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ._result import BackendResult, Comparison, dtype_name, shape_text

CSV_COLUMNS = ("op", "shape", "rows", "row_length", "dtype", "out_dtype", "dim", "options", "backend", "status", "via",
               "config", "config_source", "median_us", "spread_us", "reps", "bytes_moved", "gbps", "pct_of_copy",
               "speedup", "max_abs_err", "max_rel_err", "rtol", "atol", "reason", "device", "device_name",
               "copy_gbps")

_STYLE = {"pass": "green", "fail": "bold red", "error": "bold red", "refused": "yellow"}


def _write(text: str, path: str | Path | None) -> str:
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return text


def write_json(comparison: Comparison, path: str | Path | None = None) -> str:
    return _write(json.dumps(comparison.to_dict(), indent=1) + "\n", path)


def write_csv(comparison: Comparison, path: str | Path | None = None) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in comparison.rows():
        row = dict(row)
        row["config"] = "" if row["config"] is None else json.dumps(row["config"], sort_keys=True)
        row["options"] = json.dumps(row["options"], sort_keys=True) if row["options"] else ""
        writer.writerow({k: "" if row[k] is None else row[k] for k in CSV_COLUMNS})
    return _write(buffer.getvalue(), path)


# -- for people -----------------------------------------------------------------------------------

def headline(comparison: Comparison) -> str:
    """One line: what ran where, the copy bandwidth, and how it was measured."""
    copy = comparison.copy
    copy_text = f"{copy.gbps:.1f} GB/s" if copy.gbps else "n/a"
    flush = ", L2 flushed between reps" if comparison.flush_l2 and comparison.device.startswith("cuda") else ""
    return (f"{', '.join(comparison.ops)} on {comparison.device} ({comparison.device_name}); copy bandwidth "
            f"{copy_text} ({copy.nbytes // 2**20} MB dst.copy_(src), read+write); warmup {comparison.warmup}, "
            f"rep {comparison.rep}{flush}{', tuned first' if comparison.tuned else ''}; "
            f"speedup vs {comparison.baseline or 'none'}"
            + (f"; {', '.join(f'{k}={v!r}' for k, v in comparison.options.items())}" if comparison.options else ""))


def _num(value: float | None, fmt: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{suffix}"


def _sig(value: float | None, suffix: str = "") -> str:
    """Three significant digits below 100 (an interpreter's 0.00123 GB/s stays readable)."""
    if value is None:
        return "-"
    return f"{value:.0f}{suffix}" if abs(value) >= 100 else f"{value:.3g}{suffix}"


def _config(r: BackendResult) -> str:
    if r.config is None:
        return "-"
    if not r.config:
        return "-" if r.config_source == "no tune space" else "(default)"
    return str(r.config)


def cells(r: BackendResult, several_ops: bool) -> list[str]:
    """The display cells of one result, in the order of :func:`headers`."""
    latency = "-" if r.median_us is None else f"{r.median_us:.2f} ±{r.spread_us or 0:.2f}"
    out = [r.op] if several_ops else []
    out += [shape_text(r.shape), dtype_name(r.dtype), r.backend, r.status, _config(r), latency,
            _sig(r.gbps), _sig(r.pct_of_copy, "%"), _sig(r.speedup, "x"),
            _num(r.max_abs_err, ".1e"), _num(r.max_rel_err, ".1e"), r.reason]
    return out


def headers(several_ops: bool) -> list[str]:
    return (["op"] if several_ops else []) + ["shape", "dtype", "backend", "status", "config", "median us ±IQR",
                                              "GB/s", "% copy", "speedup", "max abs err", "max rel err", "note"]


def write_markdown(comparison: Comparison, path: str | Path | None = None) -> str:
    several = len(comparison.ops) > 1
    head = headers(several)
    lines = [f"{headline(comparison)}", "", "| " + " | ".join(head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]
    for r in comparison.results:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells(r, several)) + " |")
    lines += ["", "GB/s = (input bytes read + output bytes written) / median time; % copy is that over the copy "
              "bandwidth above; errors are against an fp64 reference, pass/fail at the output dtype's tolerance."]
    return _write("\n".join(lines) + "\n", path)


def rich_table(comparison: Comparison) -> Any:
    from rich.table import Table
    from rich.text import Text

    several = len(comparison.ops) > 1
    table = Table(title=headline(comparison), title_justify="left")
    for name in headers(several):
        numeric = name in ("median us ±IQR", "GB/s", "% copy", "speedup", "max abs err", "max rel err")
        table.add_column(name, justify="right" if numeric else "left", overflow="fold",
                         max_width=48 if name == "note" else None)
    previous = None
    for r in comparison.results:
        if previous is not None and r.case != previous:
            table.add_section()
        previous = r.case
        row = [Text(c) for c in cells(r, several)]  # Text: a reason like "dims=[1]" is not markup
        row[headers(several).index("status")].stylize(_STYLE.get(r.status, ""))
        table.add_row(*row)
    return table
