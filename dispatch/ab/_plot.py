"""GB/s against row length per backend, one subplot per (op, dtype), under the copy-bandwidth ceiling."""

from __future__ import annotations

from pathlib import Path

from ._result import Comparison, dtype_name


def matplotlib_figures():
    """``(FigureCanvasAgg, Figure)``, matplotlib's classes that the plots draw with; an ImportError
    saying how to install it where it is missing."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib: pip install 'dispatch-ops[plot]'") from exc
    return FigureCanvasAgg, Figure


def plot_problem(path: str | Path) -> str | None:
    """Why a plot could not be written to ``path`` (matplotlib missing, a suffix it has no format
    for), or None; checked before a run, so that a long run is not lost to it."""
    try:
        FigureCanvasAgg, Figure = matplotlib_figures()
    except ImportError as exc:
        return str(exc)
    suffix = Path(path).suffix.lower().lstrip(".")
    formats = FigureCanvasAgg(Figure()).get_supported_filetypes()
    if suffix and suffix not in formats:
        return f"no plot format for the suffix '.{suffix}'; use one of {', '.join('.' + f for f in sorted(formats))}"
    return None


def plot_comparison(comparison: Comparison, path: str | Path) -> Path:
    """Write the plot of ``comparison`` to ``path`` (format by suffix; a path without one gets ``.png``);
    return the path written.

    Each backend is a line through its measured cases, sorted by row length N (then row count
    M); a result that failed the parity check is drawn with a red cross; refused and errored
    cases are absent. The dashed line is the copy bandwidth measured in the same run.
    """
    FigureCanvasAgg, Figure = matplotlib_figures()
    import matplotlib

    panels = list(dict.fromkeys((r.op, r.dtype) for r in comparison.results))
    cols = min(len(panels), 3) or 1
    rows = (len(panels) + cols - 1) // cols or 1
    fig = Figure(figsize=(5.5 * cols, 4.2 * rows))  # no pyplot: the Agg canvas, no global state touched
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    backends = comparison.backends
    palette = matplotlib.colormaps["tab10"]
    colors = {b: palette(i % 10) for i, b in enumerate(backends)}
    ceiling = comparison.copy.gbps
    for ax, (op, dtype) in zip(axes.flat, panels):
        mine = [r for r in comparison.results if r.op == op and r.dtype == dtype]
        for backend in backends:
            points = sorted((r for r in mine if r.backend == backend and r.gbps is not None),
                            key=lambda r: (r.row_length, r.rows))
            if not points:
                continue
            xs, ys = [r.row_length for r in points], [r.gbps for r in points]
            ax.plot(xs, ys, marker="o", color=colors[backend], label=backend)
            bad = [(r.row_length, r.gbps) for r in points if r.status != "pass"]
            if bad:
                ax.scatter(*zip(*bad), marker="x", s=90, color="red", zorder=5,
                           label=f"{backend}: wrong result")
        if ceiling:
            ax.axhline(ceiling, color="black", linestyle="--", linewidth=1,
                       label=f"copy bandwidth {_fmt(ceiling)} GB/s")
        lengths = sorted({r.row_length for r in mine})
        if lengths:
            ax.set_xscale("log", base=2)
            ax.set_xticks(lengths)
            ax.set_xticklabels([f"{n}\n({'/'.join(str(m) for m in sorted({r.rows for r in mine if r.row_length == n}))}"
                                " rows)" for n in lengths], fontsize=8)
            ax.minorticks_off()
        rates = [r.gbps for r in mine if r.gbps] + ([ceiling] if ceiling else [])
        log = bool(rates) and max(rates) > 50 * min(rates)  # an interpreter next to a kernel: see both
        if log:
            ax.set_yscale("log")
        elif rates:
            ax.set_ylim(0, 1.1 * max(rates))  # room above the ceiling for its line
        ax.set_title(f"{op} {dtype_name(dtype)}")
        ax.set_xlabel("row length N")
        ax.set_ylabel("GB/s (read + write)" + (", log scale" if log else ""))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(f"dispatch A/B on {comparison.device_name}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    if not path.suffix:  # (matplotlib would add one itself: the file written is the one said)
        path = path.with_name(path.name + ".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"
