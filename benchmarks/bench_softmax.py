"""GPU sweep of the softmax family: every backend's tuned best, torch eager, torch.compile and
dispatch's own pick, in GB/s and % of the device-to-device copy bandwidth measured in the same run.

GB/s counts bytes actually moved: softmax/log_softmax read and write M*N elements, logsumexp
reads M*N and writes M. Each (op, dtype, shape) is tuned first (timed: the full tune over all
backends), then everything is timed with CUDA events and an L2 flush between repetitions.

    python benchmarks/bench_softmax.py --out benchmarks/results            # full sweep
    python benchmarks/bench_softmax.py --ops softmax --dtypes bfloat16 --quick
    python benchmarks/bench_softmax.py --warm 8 ...   # compile every kernel in 8 processes first
    python benchmarks/bench_softmax.py --resume ...   # go on with a sweep that was stopped
    python benchmarks/bench_softmax.py --shard 0/2 --out A ...  # every 2nd case (one GPU each)
    python benchmarks/bench_softmax.py --merge A/softmax_sweep.json,B/softmax_sweep.json --out DIR

``tune s`` is the race of one call; with ``--warm`` it runs on warm compile caches (the cold-cache
cost of a full tune is what benchmarks/bench_tune_time.py measures).
Writes <out>/softmax_sweep.json, .md and .png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch

import dispatch
from dispatch.ab import bytes_moved, gbps, measure_copy_bandwidth
from dispatch.backend import TuneSettings, device_name, measure, mismatch

N_SWEEP = [256, 1024, 4096, 16384, 65536, 262144]
DECODE_M = [1, 32]
DECODE_N = 4096


def shapes(total: int, quick: bool) -> list[tuple[int, int]]:
    ns = N_SWEEP[1::2] if quick else N_SWEEP
    out = [(max(1, total // n), n) for n in ns]
    out += [(m, DECODE_N) for m in DECODE_M]
    return out


def main() -> int:  # noqa: C901
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="softmax,log_softmax,logsumexp")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    parser.add_argument("--elements", type=int, default=64 * 1024 * 1024, help="M*N per shape")
    parser.add_argument("--compile", default="softmax,log_softmax,logsumexp",
                        help="ops to time torch.compile on ('' for none)")
    parser.add_argument("--quick", action="store_true", help="every other N")
    parser.add_argument("--pairs", default="", help="op:dtype,... in this order (instead of --ops x --dtypes)")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--name", default="softmax_sweep")
    parser.add_argument("--device", default="cuda", help="cuda (the point), or cpu for a smoke run")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows of <out>/<name>.json and measure only the missing ones")
    parser.add_argument("--shard", default="0/1", help="i/k: measure every k-th case from the i-th (one GPU each)")
    parser.add_argument("--merge", default="",
                        help="comma list of sweep JSONs to combine into <out>/<name>.json/.md/.png (no measuring)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per row (median kept)")
    parser.add_argument("--warm", type=int, default=0,
                        help="first compile every kernel of the sweep in this many parallel processes (their "
                             "tuning results are thrown away; the sweep then tunes again, with warm compile caches)")
    parser.add_argument("--warm-only", default="", help=argparse.SUPPRESS)  # a --warm worker: "i/k"
    args = parser.parse_args()
    _shard(args.shard)  # a bad --shard stops here, before anything is measured or written
    if args.warm_only:
        return warm_worker(args)
    if args.merge:
        return merge(args)
    if args.warm > 0:
        warm_caches(args)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA device (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    settings = TuneSettings()
    dispatch.configure(autotune=True, policy="measured")
    backends = [n for n, i in dispatch.backends().items() if i.available]
    print(f"backends: {backends}; failures: {[f.name + ': ' + f.error for f in dispatch.load_failures()]}")
    copy_gbs = measure_copy_bandwidth(device, settings).gbps
    print(f"device {device_name(device)}  copy bandwidth {copy_gbs:.0f} GB/s")
    rows: list[dict] = []
    previous = Path(args.out) / f"{args.name}.json"
    if args.resume and previous.exists():  # rows of an earlier (stopped) run of the same sweep
        rows = json.loads(previous.read_text())["rows"]
        print(f"resuming: {len(rows)} rows already measured in {previous}")
    meta = {"device": device_name(device), "copy_gbs": copy_gbs, "torch": torch.__version__,
            "python": platform.python_version(), "backends": {n: dict(dispatch.backends()[n].versions)
                                                              for n in backends},
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "settings": vars(args)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        sweep(args, device, settings, backends, copy_gbs, rows, lambda: save(out, args.name, meta, rows, backends))
    finally:
        save(out, args.name, meta, rows, backends)
        if rows:
            write_plot(out / f"{args.name}.png", meta, rows)
    return 0


def sweep_cases(args) -> list[tuple[str, str, int, int]]:
    """The cases this process measures: its ``--shard`` of those not already in a ``--resume``d sweep."""
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")] if args.pairs else [
        (op, dt) for op in args.ops.split(",") for dt in args.dtypes.split(",")]
    i, k = _shard(args.shard)  # shards first, so that a resumed shard keeps its cases
    cases = [(op, dt, m, n) for op, dt in pairs for m, n in shapes(args.elements, args.quick)][i::k]
    previous = Path(args.out) / f"{args.name}.json"
    if args.resume and previous.exists():
        done = {(r["op"], r["dtype"], r["M"], r["N"]) for r in json.loads(previous.read_text())["rows"]}
        cases = [c for c in cases if c not in done]
    return cases


def _shard(text: str) -> tuple[int, int]:
    try:
        i, k = (int(v) for v in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard must be i/k with 0 <= i < k (e.g. 0/2), got {text!r}") from None
    if not 0 <= i < k:
        raise SystemExit(f"--shard must be i/k with 0 <= i < k (e.g. 0/2), got {text!r}")
    return i, k


def merge(args) -> int:
    """Combine sweeps (e.g. the shards of one run, one per GPU) into one JSON, table and plot.

    Rows keep the copy bandwidth of the run that timed them; a case measured twice keeps the
    later file's row. The first file's meta heads the result, with every file's command listed."""
    paths = [Path(p) for p in args.merge.split(",") if p]
    loaded = [json.loads(p.read_text()) for p in paths]
    by_case: dict[tuple, dict] = {}
    for data in loaded:
        for r in data["rows"]:
            by_case[(r["op"], r["dtype"], r["M"], r["N"])] = r
    order = {c: i for i, c in enumerate((op, dt) for op in ("softmax", "log_softmax", "logsumexp")
                                        for dt in ("bfloat16", "float32", "float16"))}
    decode = {m: i for i, m in enumerate(DECODE_M)}
    rows = sorted(by_case.values(), key=lambda r: (order.get((r["op"], r["dtype"]), 99),
                                                   r["M"] in decode, r["N"] if r["M"] not in decode else decode[r["M"]]))
    meta = dict(loaded[0]["meta"])
    meta["command"] = " ; ".join(d["meta"]["command"] for d in loaded)
    meta["merged_from"] = [str(p) for p in paths]
    backends = sorted({n for d in loaded for n in d["meta"]["backends"]}, key=lambda n: (n != "tilelang", n))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save(out, args.name, meta, rows, backends)
    write_plot(out / f"{args.name}.png", meta, rows)
    print(f"merged {len(rows)} rows from {len(paths)} files into {out / args.name}.json")
    return 0


def warm_worker(args) -> int:
    """Tune this worker's share of the sweep and torch.compile it (compiles every kernel into the disk caches)."""
    i, k = _shard(args.warm_only)
    dispatch.configure(autotune=True, policy="measured")
    for op, dtype_name, m, n in sweep_cases(args)[i::k]:
        x = torch.randn(m, n, device=args.device).to(getattr(torch, dtype_name))
        try:
            getattr(dispatch, op)(x, -1)
            if op in args.compile.split(","):  # fills inductor's on-disk graph cache
                torch.compile(getattr(torch, op), dynamic=False)(x, -1)
        except Exception as exc:  # the sweep itself reports errors; this only warms caches
            print(f"warm {op} {dtype_name} {m}x{n}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 0


def warm_caches(args) -> None:
    """Compile the sweep's kernels in ``args.warm`` processes, on a throw-away decision cache.

    Only compiled kernels carry over (Triton's and TileLang's disk caches): the decisions and
    TileLang's tuning results of these contended runs are dropped, so the sweep still tunes
    every backend itself."""
    import subprocess
    import tempfile

    start = time.perf_counter()
    argv, skip = [], False
    for a in sys.argv[1:]:  # the sweep's own arguments, less --warm and its value
        if skip or a.startswith("--warm"):
            skip = a == "--warm"
            continue
        argv.append(a)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, DISPATCH_CACHE_DIR=tmp, TILELANG_AUTO_TUNING_DISABLE_CACHE="1")
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv, f"--warm-only={i}/{args.warm}"],
                                  env=env) for i in range(args.warm)]
        for proc in procs:
            proc.wait()
    os.environ["TILELANG_AUTO_TUNING_DISABLE_CACHE"] = "1"  # TileLang reads it at each use
    print(f"compiled the sweep's kernels in {args.warm} processes: {time.perf_counter() - start:.0f} s", flush=True)


def save(out: Path, name: str, meta: dict, rows: list[dict], backends: list[str]) -> None:
    """Write what has been measured so far (the sweep may be stopped at any point)."""
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    write_markdown(out / f"{name}.md", meta, rows, backends)


def sweep(args, device, settings, backends, copy_gbs, rows, checkpoint) -> None:
    for op, dtype_name, m, n in sweep_cases(args):  # less the rows already in a --resume'd sweep
        dtype = getattr(torch, dtype_name)
        x = (torch.randn(m, n, device=device) * 4).to(dtype)
        ref = getattr(torch, op)(x, -1)
        row = {"op": op, "dtype": dtype_name, "M": m, "N": n, "bytes": bytes_moved(op, (m, n), dtype),
               "copy_gbs": copy_gbs, "results": {}}
        start = time.perf_counter()
        getattr(dispatch, op)(x, -1)  # races every backend (tunes each) and keeps the winner
        if device.type == "cuda":
            torch.cuda.synchronize()
        row["tune_s"] = time.perf_counter() - start
        decision = dispatch.explain(op, x, -1).decision
        row["pick"] = decision.backend
        row["pick_config"] = decision.config.as_dict()
        row["candidates"] = {c.name: {"ok": c.verdict.ok, "reason": c.verdict.reason,
                                      "raced_us": c.latency_us, "tune_s": c.tune_s, "note": c.note}
                             for c in decision.candidates}
        runs = {"dispatch": lambda: getattr(dispatch, op)(x, -1)}
        for name in backends:
            runs[name] = (lambda name=name: getattr(dispatch, op)(x, -1, backend=name))
        if op in args.compile.split(","):
            compiled = torch.compile(getattr(torch, op), dynamic=False)
            runs["torch.compile"] = lambda: compiled(x, -1)
        # every contender once per round, rounds interleaved, so that drift of the device (clocks,
        # temperature) over the row hits all alike; each keeps the median of its round medians
        medians: dict[str, list] = {}
        for name, fn in runs.items():
            try:
                row["results"][name] = {"ok": (why := mismatch(fn(), ref)) is None, "error": why}
                medians[name] = []
            except Exception as exc:
                row["results"][name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        for _ in range(args.rounds):
            for name in list(medians):
                try:
                    medians[name].append(measure(runs[name], device, settings))
                except Exception as exc:
                    row["results"][name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
                    del medians[name]
        for name, timings in medians.items():
            timing = sorted(timings, key=lambda t: t.median_us)[len(timings) // 2]
            gbs = gbps(row["bytes"], timing.median_us)
            row["results"][name].update(us=timing.median_us, spread_us=timing.spread_us, gbs=gbs,
                                        pct_copy=100 * gbs / copy_gbs,
                                        rounds_us=[t.median_us for t in timings])
        best = max(((r["gbs"], k) for k, r in row["results"].items()
                    if "gbs" in r and k in backends and r["ok"]), default=(float("nan"), "none"))
        row["best_backend"], row["best_gbs"] = best[1], best[0]
        rows.append(row)
        checkpoint()
        res = row["results"]
        print(f"{op:<12}{dtype_name:<9}{m:>7}x{n:<7} tune {row['tune_s']:5.1f}s  pick {row['pick']:<9}"
              + "  ".join(f"{k} {r.get('gbs', float('nan')):6.0f}" for k, r in res.items()), flush=True)


def write_markdown(path: Path, meta: dict, rows: list[dict], backends: list[str]) -> None:
    cols = ["dispatch"] + backends + ["torch.compile"]
    lines = [f"# Softmax family on {meta['device']}", "",
             f"Copy bandwidth measured in the same run: **{meta['copy_gbs']:.0f} GB/s** (each row's % is of "
             "the copy measured in the run that timed it). "
             f"torch {meta['torch']}. Command: `{meta['command']}`", "",
             "GB/s (and % of copy bandwidth); `pick` is dispatch's choice; `tune` is the time to race all backends.",
             "", "| op | dtype | M x N | " + " | ".join(cols) + " | pick | pick/best | tune s |",
             "|" + "---|" * (len(cols) + 6)]
    for r in rows:
        cells = []
        for c in cols:
            res = r["results"].get(c)
            if res is None:
                cells.append("")
            elif "gbs" not in res:
                cells.append("err")
            elif r["M"] in DECODE_M:  # launch-bound: GB/s says nothing, time per call does
                cells.append(f"{res['us']:.1f} us" + ("" if res["ok"] else " WRONG"))
            else:
                cells.append(f"{res['gbs']:.0f} ({res['pct_copy']:.0f}%)" + ("" if res["ok"] else " WRONG"))
        pick = r["results"].get("dispatch", {}).get("gbs", float("nan"))
        lines.append(f"| {r['op']} | {r['dtype']} | {r['M']}x{r['N']} | " + " | ".join(cells)
                     + f" | {r['pick']} | {pick / r['best_gbs']:.2f} | {r['tune_s']:.1f} |")
    lines += ["", "Decode shapes (M = " + ", ".join(map(str, DECODE_M)) + ") show time per call: they are launch-bound.",
              "", "bf16 geometric-mean speedup of dispatch over torch eager (the same op):", ""]
    for op in ("softmax", "log_softmax", "logsumexp", None):
        sel = [r for r in rows if r["dtype"] == "bfloat16" and (op is None or r["op"] == op)
               and "gbs" in r["results"].get("torch", {}) and "gbs" in r["results"].get("dispatch", {})]
        if not sel:
            continue
        geo = _geomean([r["results"]["dispatch"]["gbs"] / r["results"]["torch"]["gbs"] for r in sel])
        big = [r for r in sel if r["M"] not in DECODE_M]
        line = f"- {op or 'all ops'}: **{geo:.2f}x** over {len(sel)} shapes"
        if big and len(big) < len(sel):
            geo_big = _geomean([r["results"]["dispatch"]["gbs"] / r["results"]["torch"]["gbs"] for r in big])
            line += f" ({geo_big:.2f}x over the {len(big)} without decode shapes)"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def write_plot(path: Path, meta: dict, rows: list[dict]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["op"], r["dtype"]) for r in rows})
    fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 4), squeeze=False)
    for ax, (op, dtype) in zip(axes[0], groups):
        sel = [r for r in rows if r["op"] == op and r["dtype"] == dtype and r["M"] not in DECODE_M]
        names = sorted({k for r in sel for k in r["results"]})
        for name in names:
            pts = [(r["N"], r["results"][name]["gbs"]) for r in sel if "gbs" in r["results"].get(name, {})]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name)
        ax.axhline(meta["copy_gbs"], color="k", linestyle="--", label="copy bandwidth")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{op} {dtype}")
        ax.set_xlabel("row length N (M*N fixed)")
        ax.set_ylabel("GB/s")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
