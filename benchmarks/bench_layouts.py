"""Layouts and row shapes beyond plain contiguous rows, on the GPU: GB/s, % of copy, and dispatch's pick against torch.

The cases come in families: "dim != -1" (dim 0 of a 2-D tensor, dim 1 of (B, C, H, W)), "strided
rows" (a transposed view, rows sliced out of wider ones), "few long rows" (vocabulary-sized rows,
odd N included), "long rows" (64M elements in rows of 64K-256K), "odd N" (rows whose length is not
a power of two), "several dims" (logsumexp over two dims at once; softmax and log_softmax take one
dim, so they are left out there), "short rows" (many rows of 64 to 1000: attention scores, a
router's experts) and "dtype=float32" (rows normalized in fp32 whatever the input's dtype, as
attention's ``softmax(scores, -1, dtype=torch.float32)``; logsumexp takes no ``dtype=``, so it is
left out there). For each case, op and dtype these contenders are timed with dispatch's protocol
(``dispatch.backend.measure``:
warm-up, median of repetitions, L2 flushed): torch eager, ``torch.compile`` of the same torch op,
dispatch's own pick (``dispatch.<op>(x, dim)``; the backend that served it is recorded), and
dispatch forced to the Triton and to the TileLang backend, with ``dispatch.configure(autotune=True)``
(unless ``--no-tune``) so that a first call sweeps the kernel's config space; the config each
dispatch contender runs is recorded. A contender that raises is recorded with its error.

GB/s counts bytes read plus bytes written; % of copy is against ``dispatch.ab.measure_copy_bandwidth``
measured in the same run. Each row also has ``launch_floor_us``, the bytes over the copy bandwidth
plus one launch (the median of ``torch.empty(1).zero_()``, measured once per run the same way), and
``vs_floor``, its time over that floor. Every output is compared with torch's first. The markdown
has a summary line per case, op and dtype (dispatch's pick against the faster of torch eager and
``torch.compile``, flagged when slower) and one table per family; the plot one panel per family.
Writes ``layouts.json``, ``layouts.md`` and ``layouts.png`` (when matplotlib is installed) under ``--out``::

    python3 benchmarks/bench_layouts.py --out DIR [--families "few long rows,odd N"] [--cases rows_1x32000,...]
        [--dtypes bfloat16,float32] [--ops softmax,log_softmax,logsumexp] [--no-compile] [--no-tune]
        [--device-timing] [--device cpu]

``--device-timing`` adds dispatch's pick in a ``use(timing="device")`` block (the kernel chosen for
code that CUDA graphs replay, by device time; the block is entered around the timing, not in it),
with its own columns in the summary.

``--device cpu`` is a smoke test under the Triton interpreter: every case shrunk in proportion to at
most 2048 elements (an odd dim kept odd), three repetitions, no tuning and no ``torch.compile``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1:][:1] == ["cpu"]:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402

import dispatch  # noqa: E402
from dispatch.ab import measure_copy_bandwidth, torch_compiled  # noqa: E402
from dispatch.backend import TuneSettings, measure  # noqa: E402
from dispatch.tolerance import mismatch  # noqa: E402


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]  # of the tensor allocated
    dim: int | tuple[int, ...]  # reduced over; a tuple for logsumexp only
    family: str
    view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t  # of the tensor allocated, the input
    out_dtype: torch.dtype | None = None  # softmax/log_softmax's dtype= (logsumexp takes none: left out)


CASES = {
    "dim0_4096x4096": Case((4096, 4096), 0, "dim != -1"),
    "dim1_32x1024x64x64": Case((32, 1024, 64, 64), 1, "dim != -1"),
    "dim1_64x256x56x56": Case((64, 256, 56, 56), 1, "dim != -1"),
    "dim0_65536x128": Case((65536, 128), 0, "dim != -1"),
    # segmentation logits, softmax over the classes: 150 (ADE20K) at 128 x 128, 19 (Cityscapes) at 256 x 512,
    # 21 (Pascal VOC) at 512 x 512
    "dim1_8x150x128x128": Case((8, 150, 128, 128), 1, "dim != -1"),
    "dim1_8x19x256x512": Case((8, 19, 256, 512), 1, "dim != -1"),
    "dim1_4x21x512x512": Case((4, 21, 512, 512), 1, "dim != -1"),
    # every other row of (H, W): the kept dims form three groups (dims 0, 2 and 3)
    "dim1_32x512x64x128_sliced": Case((32, 512, 64, 128), 1, "dim != -1", lambda t: t[:, :, ::2, :]),
    "transposed_4096x4096": Case((4096, 4096), -1, "strided rows", lambda t: t.t()),
    # a transposed view reduced over its unit-stride dim: rows read in place, written as torch lays them out
    "transposed_dim0_16384x4096": Case((16384, 4096), 0, "dim != -1", lambda t: t.t()),
    # 4000 of 4096 columns (kept in proportion when --device cpu shrinks the shape)
    "rows_16384x4000_of_4096": Case((16384, 4096), -1, "strided rows", lambda t: t[:, :t.shape[1] * 125 // 128]),
    "rows_1x32000": Case((1, 32000), -1, "few long rows"),
    "rows_4x50257": Case((4, 50257), -1, "few long rows"),
    "rows_8x128256": Case((8, 128256), -1, "few long rows"),
    "rows_32x151936": Case((32, 151936), -1, "few long rows"),
    "rows_1x262144": Case((1, 262144), -1, "few long rows"),
    # long rows: the same 64M elements as the sweep's, cut into fewer, longer rows
    "rows_1024x65536": Case((1024, 65536), -1, "long rows"),
    "rows_512x131072": Case((512, 131072), -1, "long rows"),
    "rows_256x262144": Case((256, 262144), -1, "long rows"),
    "rows_4096x1000": Case((4096, 1000), -1, "odd N"),
    "rows_1000x4099": Case((1000, 4099), -1, "odd N"),
    "rows_2048x30001": Case((2048, 30001), -1, "odd N"),
    "dims12_64x512x512": Case((64, 512, 512), (1, 2), "several dims"),
    "dims02_512x64x512": Case((512, 64, 512), (0, 2), "several dims"),
    # rows of 128 under a longer leading reduced dim; per head over batch and keys: rows of 256 in 4-D
    "dims02_4096x64x128": Case((4096, 64, 128), (0, 2), "several dims"),
    "dims13_16x64x32x256": Case((16, 64, 32, 256), (1, 3), "several dims"),
    # many short rows: attention scores over 256 and 512 keys, an odd 1000, a router's 128 and 64 experts
    "rows_262144x256": Case((262144, 256), -1, "short rows"),
    "rows_131072x512": Case((131072, 512), -1, "short rows"),
    "rows_65536x1000": Case((65536, 1000), -1, "short rows"),
    "rows_524288x128": Case((524288, 128), -1, "short rows"),
    "rows_16384x64": Case((16384, 64), -1, "short rows"),
    # bf16 scores normalized in fp32, as attention does (softmax(scores, -1, dtype=torch.float32))
    "upcast_262144x256": Case((262144, 256), -1, "dtype=float32", out_dtype=torch.float32),
    "upcast_65536x1024": Case((65536, 1024), -1, "dtype=float32", out_dtype=torch.float32),
    "upcast_16384x4096": Case((16384, 4096), -1, "dtype=float32", out_dtype=torch.float32),
    "upcast_2048x32000": Case((2048, 32000), -1, "dtype=float32", out_dtype=torch.float32),
}
FAMILIES = list(dict.fromkeys(c.family for c in CASES.values()))
OPS = ("softmax", "log_softmax", "logsumexp")
MULTI_DIM_OPS = ("logsumexp",)  # the ops that take several dims
DTYPE_OPS = ("softmax", "log_softmax")  # the ops that take dtype=
# contender -> the backend dispatch is forced to (None: its own pick)
DISPATCH_CONTENDERS = {"dispatch": None, "dispatch[triton]": "triton", "dispatch[tilelang]": "tilelang"}
DEVICE_PICK = "dispatch (device timing)"  # dispatch's pick in a use(timing="device") block (--device-timing)
SMOKE_ELEMENTS = 2048
FEW_ROWS_BOUND = 1.5  # few long rows: dispatch's time within this many times the launch floor


def smoke_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` shrunk for ``--device cpu``, its proportions kept: every dim divided by the smallest
    power of two that leaves at most SMOKE_ELEMENTS elements (an odd dim kept odd, a dim of 4 or
    less kept, none below 4)."""
    k = 0
    while math.prod(small := [max(min(d, 4), (d >> k) | (d & 1)) for d in shape]) > SMOKE_ELEMENTS:
        k += 1
    return tuple(small)


def _nbytes(x: torch.Tensor, out: torch.Tensor) -> int:
    return x.numel() * x.element_size() + out.numel() * out.element_size()


def _contenders(op: str, dim, compile_too: bool, kwargs: dict, device_timing: bool = False) -> dict:
    eager = getattr(torch, op)
    found = {"torch": lambda x: eager(x, dim, **kwargs)}
    if compile_too:
        compiled = torch_compiled(eager)
        found["torch.compile"] = lambda x: compiled(x, dim, **kwargs)
    ours = getattr(dispatch, op)
    for who, backend in DISPATCH_CONTENDERS.items():
        found[who] = lambda x, backend=backend: ours(x, dim, backend=backend, **kwargs)
    if device_timing:  # called, timed and explained inside the block (see run), so entering it is not timed
        found[DEVICE_PICK] = lambda x: ours(x, dim, **kwargs)
    return found


def _scope(who: str):
    """The block a contender runs in: ``use(timing="device")`` for :data:`DEVICE_PICK`, none for the rest."""
    return dispatch.use(timing="device") if who == DEVICE_PICK else contextlib.nullcontext()


def run(cases, dtypes, ops, compile_too: bool, device: torch.device, settings: TuneSettings, smoke: bool,
        save=None, device_timing: bool = False) -> dict:
    """Every contender on every case, dtype and op; ``save(result)`` (if given) after each case and
    dtype with the rows so far, so that a run stopped early leaves what it timed. ``device_timing``:
    dispatch's pick in a ``use(timing="device")`` block as one more contender (:data:`DEVICE_PICK`),
    the choice for code that CUDA graphs capture and replay."""
    start = time.time()
    copy = measure_copy_bandwidth(device, settings)
    one = torch.empty(1, device=device)
    launch_us = measure(one.zero_, device, settings).median_us
    print(f"copy {copy.gbps:.0f} GB/s, one launch {launch_us:.1f} us", flush=True)

    def result(rows: list[dict]) -> dict:
        return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter)",
                "torch": torch.__version__, "copy_gbps": copy.gbps, "copy_bytes": copy.nbytes, "launch_us": launch_us,
                "settings": {"warmup": settings.warmup, "rep": settings.rep, "flush_l2": settings.flush_l2,
                             "host_bound": settings.host_bound},
                "tuned": dispatch.settings().autotune, "wall_s": time.time() - start, "rows": list(rows)}

    rows = []
    for name in cases:
        case = CASES[name]
        dim = list(case.dim) if isinstance(case.dim, tuple) else case.dim
        for dtype in dtypes:
            x = case.view(torch.randn(*(smoke_shape(case.shape) if smoke else case.shape), device=device, dtype=dtype))
            for op in ops:
                if isinstance(dim, list) and op not in MULTI_DIM_OPS:
                    continue
                if case.out_dtype is not None and op not in DTYPE_OPS:
                    continue
                kwargs = {} if case.out_dtype is None else {"dtype": case.out_dtype}
                want = getattr(torch, op)(x, dim, **kwargs)
                nbytes = _nbytes(x, want)
                floor_us = nbytes / copy.gbps / 1e3 + launch_us
                for who, fn in _contenders(op, dim, compile_too, kwargs, device_timing).items():
                    row = {"case": name, "family": case.family, "shape": list(x.shape), "stride": list(x.stride()),
                           "dim": dim, "dtype": str(dtype).removeprefix("torch."), "op": op, "contender": who,
                           "bytes": nbytes, "launch_floor_us": floor_us}
                    if case.out_dtype is not None:
                        row["out_dtype"] = str(case.out_dtype).removeprefix("torch.")
                    try:
                        with _scope(who):
                            _time(row, fn, x, want, op, dim, kwargs, device, settings, copy.gbps)
                    except Exception as exc:  # noqa: BLE001 - a contender that fails is reported, the rest run
                        row["error"] = f"{type(exc).__name__}: {exc}"
                    rows.append(row)
                    print(_line(row), flush=True)
            if save is not None:
                save(result(rows))

    return result(rows)


def _time(row: dict, fn, x, want, op: str, dim, kwargs: dict, device, settings: TuneSettings, copy_gbps: float):
    """One contender's call checked against torch's ``want``, timed, and (dispatch's) its backend and
    config, into ``row``."""
    got = fn(x)  # compiles / tunes here, before anything is timed
    row["max_abs_err"] = (got.float() - want.float()).abs().nan_to_num().max().item()
    if (why := mismatch(got, want)) is not None:
        row["mismatch"] = why
    timing = measure(partial(fn, x), device, settings)
    row.update(median_us=timing.median_us, spread_us=timing.spread_us,
               gbps=row["bytes"] / timing.median_us / 1e3, vs_floor=timing.median_us / row["launch_floor_us"])
    row["pct_of_copy"] = 100.0 * row["gbps"] / copy_gbps
    who = row["contender"]
    if who in DISPATCH_CONTENDERS or who == DEVICE_PICK:
        decision = dispatch.explain(op, x, dim, backend=DISPATCH_CONTENDERS.get(who), **kwargs).decision
        row["backend"] = decision.backend
        row["config"] = dict(decision.config.as_dict()) if decision.config else {}
        row["config_source"] = decision.config_source


def _line(row: dict) -> str:
    head = f"{row['case']:<26} {row['dtype']:<9} {row['op']:<12} {row['contender']:<18}"
    if "error" in row:
        return f"{head} error: {row['error']}"
    return (f"{head} {row['median_us']:10.1f} us {row['gbps']:8.0f} GB/s {row['pct_of_copy']:5.1f}% "
            f"{row['vs_floor']:5.2f}x floor err {row['max_abs_err']:.2g} {row.get('backend', '')} "
            f"{row.get('config', '')}")


def summary(rows: list[dict]) -> list[dict]:
    """Per (case, op, dtype): dispatch's pick against the faster of torch eager and torch.compile."""
    out = []
    for key in dict.fromkeys((r["case"], r["op"], r["dtype"]) for r in rows):
        mine = {r["contender"]: r for r in rows if (r["case"], r["op"], r["dtype"]) == key and "median_us" in r}
        torches = [mine[w] for w in ("torch", "torch.compile") if w in mine]
        if "dispatch" not in mine or not torches:
            continue
        ours, best = mine["dispatch"], min(torches, key=lambda r: r["median_us"])
        ratio = ours["median_us"] / best["median_us"]
        out.append({"case": key[0], "family": ours["family"], "op": key[1], "dtype": key[2],
                    "backend": ours["backend"], "dispatch_us": ours["median_us"], "best_torch": best["contender"],
                    "best_torch_us": best["median_us"], "ratio": ratio, "slower": ratio > 1.0,
                    "vs_floor": ours["vs_floor"], "mismatch": "mismatch" in ours})
        if DEVICE_PICK in mine:
            dev = mine[DEVICE_PICK]
            out[-1].update(device_backend=dev["backend"], device_us=dev["median_us"], device_vs_floor=dev["vs_floor"],
                           device_ratio=dev["median_us"] / best["median_us"], mismatch=out[-1]["mismatch"] or (
                               "mismatch" in dev))
    return out


def markdown(result: dict) -> str:
    how = result["settings"]
    flushed = how["flush_l2"] and result["device"] != "cpu (Triton interpreter)"
    rows = summary(result["rows"])
    device = any("device_us" in s for s in rows)
    lines = [f"# Layouts: {result['device']}, torch {result['torch']}", "",
             (f"Copy bandwidth (read + write): {result['copy_gbps']:.0f} GB/s; one launch: {result['launch_us']:.1f} "
              "us. GB/s = (bytes read + bytes written) / median time; floor = bytes / copy bandwidth + one launch; "
              f"medians of dispatch.backend.measure (warm-up {how['warmup']}, {how['rep']} reps"
              f"{', L2 flushed' if flushed else ''}); "
              f"dispatch {'tuned' if result['tuned'] else 'untuned (default configs)'}."), "",
             "## dispatch's pick against the faster of torch eager and torch.compile", "",
             ("ratio = dispatch / torch (above 1: dispatch is slower). x floor: dispatch's time over the floor "
              f"(few long rows: within {FEW_ROWS_BOUND}x is the target)."
              + (" Device timing: dispatch's pick in a `use(timing=\"device\")` block (the choice for code "
                 "replayed in CUDA graphs), its ratio to the faster torch and its time over the floor."
                 if device else "")), ""]
    if device:
        lines += [("| case | op | dtype | dispatch (backend) us | faster torch us | ratio | x floor "
                   "| device timing (backend) us | ratio | x floor | |"), "|---" * 11 + "|"]
    else:
        lines += ["| case | op | dtype | dispatch (backend) us | faster torch us | ratio | x floor | |",
                  "|---|---|---|---|---|---|---|---|"]
    for s in rows:
        few = s["family"] == "few long rows"
        flags = [f for f, on in (("**slower**", s["slower"]), ("**mismatch**", s["mismatch"]),
                                 (f"**over {FEW_ROWS_BOUND}x floor**", few and s["vs_floor"] > FEW_ROWS_BOUND),
                                 (f"**device timing over {FEW_ROWS_BOUND}x floor**",
                                  few and s.get("device_vs_floor", 0) > FEW_ROWS_BOUND)) if on]
        cells = (f"| {s['case']} | {s['op']} | {s['dtype']} | {s['dispatch_us']:.1f} ({s['backend']}) | "
                 f"{s['best_torch_us']:.1f} ({s['best_torch']}) | {s['ratio']:.3f} | {s['vs_floor']:.2f} |")
        if device:
            cells += (f" {s['device_us']:.1f} ({s['device_backend']}) | {s['device_ratio']:.3f} | "
                      f"{s['device_vs_floor']:.2f} |" if "device_us" in s else " | | |")
        lines.append(f"{cells} {' '.join(flags)} |")
    for family in dict.fromkeys(r["family"] for r in result["rows"]):
        lines += ["", f"## {family}", "",
                  ("| case | shape / stride | dim | dtype | op | contender | us | GB/s | % of copy | x floor "
                   "| max abs err |"),
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in result["rows"] if r["family"] == family):
            where = f"{'x'.join(map(str, r['shape']))} / {','.join(map(str, r['stride']))}"
            head = f"| {r['case']} | {where} | {r['dim']} | {r['dtype']} | {r['op']} |"
            if "error" in r:
                lines.append(f"{head} {r['contender']} | error: {r['error'][:80]} | | | | |")
                continue
            who = r["contender"] + (f" -> {r['backend']}" if r["contender"] in ("dispatch", DEVICE_PICK) else "")
            who += f" {r['config']}" if r.get("config") else ""
            err = f"{r['max_abs_err']:.2g}" + (" (mismatch)" if "mismatch" in r else "")
            lines.append(f"{head} {who} | {r['median_us']:.1f} | {r['gbps']:.0f} | {r['pct_of_copy']:.1f} | "
                         f"{r['vs_floor']:.2f} | {err} |")
    return "\n".join(lines) + "\n"


def plot(path: str, result: dict) -> bool:
    """One panel per family: % of copy per case, op and dtype, a marker per contender. False when
    matplotlib is not installed (no plot)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return False
    timed = [r for r in result["rows"] if "pct_of_copy" in r]
    families = list(dict.fromkeys(r["family"] for r in timed))
    contenders = list(dict.fromkeys(r["contender"] for r in timed))
    keys = {f: list(dict.fromkeys((r["case"], r["op"], r["dtype"]) for r in timed if r["family"] == f))
            for f in families}
    width = max(8.0, 0.3 * max(map(len, keys.values()), default=0))
    fig, axes = plt.subplots(len(families), 1, figsize=(width, 3.6 * len(families)), squeeze=False)
    for ax, family in zip(axes[:, 0], families):
        where = {k: i for i, k in enumerate(keys[family])}
        floors = {(r["case"], r["op"], r["dtype"]): r for r in timed if r["family"] == family}
        ax.scatter([where[k] for k in floors], [100.0 * (1 - result["launch_us"] / r["launch_floor_us"])
                                                for r in floors.values()],
                   marker="_", s=120, color="k", lw=1, label="floor (bytes / copy + one launch)")
        for i, (who, marker) in enumerate(zip(contenders, "osv^DP*")):
            mine = [r for r in timed if r["family"] == family and r["contender"] == who]
            ours = who == "dispatch"  # hollow and larger: the contender it picked shows inside
            ax.scatter([where[(r["case"], r["op"], r["dtype"])] for r in mine], [r["pct_of_copy"] for r in mine],
                       marker=marker, s=60 if ours else 18, label=who, zorder=3 if ours else 2, linewidths=1.2,
                       facecolors="none" if ours else f"C{i}", edgecolors=f"C{i}")
        ax.set_xticks(range(len(keys[family])))
        ax.set_xticklabels([f"{c} {o} {d}" for c, o, d in keys[family]], rotation=60, ha="right", fontsize=6)
        ax.axhline(100, color="k", lw=0.5)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("% of copy")
        ax.grid(axis="y", lw=0.3)
        ax.set_title(f"{family} ({result['device']}, copy {result['copy_gbps']:.0f} GB/s)", fontsize=9)
        ax.legend(fontsize=6, ncol=min(4, len(contenders) + 1), loc="upper left")  # rows of 4: fits 8 inches
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _pick(arg: str, value: str, known) -> list[str]:
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in known]
    if unknown or not chosen:
        raise SystemExit(f"{arg}: unknown {unknown or value!r}; known: {', '.join(known)}")
    return chosen


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for layouts.json, layouts.md and layouts.png")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help=f"comma-separated, of {', '.join(FAMILIES)} (with --cases: the cases in both)")
    parser.add_argument("--dtypes", default="bfloat16,float32", help="comma-separated, of float32, bfloat16, float16")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)}")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--no-tune", action="store_true", help="dispatch runs the default config, untuned")
    parser.add_argument("--device-timing", action="store_true",
                        help='also dispatch\'s pick in a use(timing="device") block (code replayed in CUDA graphs)')
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: a smoke test under the Triton interpreter (tiny shapes, untuned, no torch.compile)")
    args = parser.parse_args(argv)
    smoke = args.device == "cpu"
    if not smoke and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --device cpu for the smoke test")
    cases = _pick("--cases", args.cases, list(CASES))
    families = _pick("--families", args.families, FAMILIES)
    cases = [c for c in cases if CASES[c].family in families]
    if not cases:
        raise SystemExit(f"--cases and --families select no case together; the families: "
                         f"{', '.join(f'{c} ({CASES[c].family})' for c in CASES)}")
    dtypes = [getattr(torch, d) for d in _pick("--dtypes", args.dtypes, ("float32", "bfloat16", "float16"))]
    ops = _pick("--ops", args.ops, OPS)
    dispatch.configure(autotune=not (args.no_tune or smoke))
    settings = TuneSettings(warmup=1, rep=3, host_bound=False) if smoke else TuneSettings()
    os.makedirs(args.out, exist_ok=True)

    def save(result: dict) -> None:  # the table so far: a run stopped early keeps what it timed
        with open(os.path.join(args.out, "layouts.json"), "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.join(args.out, "layouts.md"), "w") as f:
            f.write(markdown(result))

    result = run(cases, dtypes, ops, not (args.no_compile or smoke), torch.device(args.device), settings, smoke,
                 save, args.device_timing)
    save(result)
    plotted = plot(os.path.join(args.out, "layouts.png"), result)
    print(f"wrote {args.out}/layouts.json, layouts.md{' and layouts.png' if plotted else ''}  "
          f"[{result['wall_s']:.1f} s]")


if __name__ == "__main__":
    main()
