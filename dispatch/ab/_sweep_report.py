"""A sweep's rows for people: one markdown table of every row, and GB/s plots per (op, dtype)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._plot import matplotlib_figures


def _cell(res: Mapping[str, Any] | None, per_call: bool) -> str:
    if res is None:
        return ""
    if "gbs" not in res:
        return "err"
    text = f"{res['us']:.1f} us" if per_call else f"{res['gbs']:.0f} ({res['pct_copy']:.0f}%)"
    return text + ("" if res.get("ok") else " WRONG")


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of positive ``values`` (NaN for none)."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def sweep_markdown(meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], columns: Sequence[str],
                   per_call_rows: Collection[int] = (), baseline: str = "torch", path: str | Path | None = None,
                   title: str = "A/B sweep") -> str:
    """A markdown page of ``rows``: one line each, a cell per contender in ``columns``.

    A cell is GB/s (% of the copy bandwidth of the process that timed the row); rows whose M is
    in ``per_call_rows`` are launch-bound and show microseconds per call instead. ``pick`` is
    dispatch's choice, ``pick/best`` its GB/s over the best passing backend's, ``decided by`` where
    the choice came from: a shipped decision table (``pick_source``), else the seconds of the first
    (racing) call (``tune_s``). Below: the bf16 geometric-mean speedup of ``dispatch`` over
    ``baseline``, per op and over all. The page is headed ``<title> on <device>``. Written to
    ``path`` when given; returned.
    """
    cols = list(columns)
    lines = [f"# {title} on {meta.get('device', '?')}", "",
             f"Copy bandwidth measured in the same run: **{meta.get('copy_gbs', float('nan')):.0f} GB/s** (each "
             "row's % is of the copy measured in the run that timed it). "
             f"torch {meta.get('torch', '?')}. Command: `{meta.get('command', '?')}`", "",
             "GB/s (and % of copy bandwidth); `pick` is dispatch's choice; `decided by`: a shipped decision table, "
             "or the seconds its first call took to race the backends.",
             "", "| op | dtype | M x N | " + " | ".join(cols) + " | pick | pick/best | decided by |",
             "|" + "---|" * (len(cols) + 6)]
    for r in rows:
        per_call = r["M"] in per_call_rows
        cells = [_cell(r["results"].get(c), per_call) for c in cols]
        pick = r["results"].get("dispatch", {}).get("gbs", float("nan"))
        best = r.get("best_gbs") or float("nan")
        lines.append(f"| {r['op']} | {r['dtype']} | {r['M']}x{r['N']} | " + " | ".join(cells)
                     + f" | {r.get('pick', '?')} | {pick / best:.2f} | {_decided(r)} |")
    if per_call_rows:
        lines += ["", "Rows with M = " + ", ".join(map(str, sorted(per_call_rows)))
                  + " show time per call: they are launch-bound."]
    lines += ["", f"bf16 geometric-mean speedup of dispatch over {baseline} (the same op):", ""]
    for op in [*dict.fromkeys(r["op"] for r in rows), None]:
        sel = [r for r in rows if r["dtype"] == "bfloat16" and (op is None or r["op"] == op)
               and "gbs" in r["results"].get(baseline, {}) and "gbs" in r["results"].get("dispatch", {})]
        if not sel:
            continue
        ratio = [r["results"]["dispatch"]["gbs"] / r["results"][baseline]["gbs"] for r in sel]
        line = f"- {op or 'all ops'}: **{geomean(ratio):.2f}x** over {len(sel)} shapes"
        big = [x for x, r in zip(ratio, sel) if r["M"] not in per_call_rows]
        if big and len(big) < len(sel):
            line += f" ({geomean(big):.2f}x over the {len(big)} that are not launch-bound)"
        lines.append(line)
    text = "\n".join(lines) + "\n"
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text


def plot_sweep(path: str | Path, meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
               per_call_rows: Collection[int] = ()) -> Path:
    """GB/s against row length N, one panel per (op, dtype), every contender a line, under the copy line.

    Launch-bound rows (M in ``per_call_rows``) are left out: GB/s says nothing about them.
    """
    FigureCanvasAgg, Figure = matplotlib_figures()
    groups = sorted({(r["op"], r["dtype"]) for r in rows})
    fig = Figure(figsize=(4.5 * max(len(groups), 1), 4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, max(len(groups), 1), squeeze=False)
    for ax, (op, dtype) in zip(axes[0], groups):
        sel = [r for r in rows if r["op"] == op and r["dtype"] == dtype and r["M"] not in per_call_rows]
        for name in sorted({k for r in sel for k in r["results"]}):
            pts = sorted((r["N"], r["results"][name]["gbs"]) for r in sel if "gbs" in r["results"].get(name, {}))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name)
        if meta.get("copy_gbs"):
            ax.axhline(meta["copy_gbs"], color="k", linestyle="--", label="copy bandwidth")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{op} {dtype}")
        ax.set_xlabel("row length N (M*N fixed)")
        ax.set_ylabel("GB/s")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _decided(row: Mapping[str, Any]) -> str:
    """Where a row's pick came from: ``table`` (a shipped decision), else its race's seconds."""
    if row.get("pick_source") == "shipped table":
        return "table"
    return f"race {row.get('tune_s', float('nan')):.1f} s"
