"""GPU sweep of the softmax family: every backend's tuned best, torch eager, torch.compile and
dispatch's own pick, in GB/s and % of the device-to-device copy bandwidth measured in the same run.

GB/s counts bytes actually moved: softmax/log_softmax read and write M*N elements, logsumexp
reads M*N and writes M. Each (op, dtype, shape) is tuned first (timed: the full tune over all
backends), then everything is timed with CUDA events and an L2 flush between repetitions.

    python benchmarks/bench_softmax.py --out OUT                           # full sweep
    python benchmarks/bench_softmax.py --ops softmax --dtypes bfloat16 --quick
    python benchmarks/bench_softmax.py --warm 8 ...   # compile every kernel in 8 processes first
    python benchmarks/bench_softmax.py --resume ...   # go on with a sweep that was stopped
    python benchmarks/bench_softmax.py --shard 0/2 --out A ...  # every 2nd case (one GPU each)
    python benchmarks/bench_softmax.py --merge A/softmax_sweep.json,B/softmax_sweep.json --out DIR

``decided by`` is ``table`` where a shipped decision table held the call's key, else the seconds
of its race; with ``--warm`` it runs on warm compile caches (the cold-cache cost of a full tune is
what benchmarks/bench_tune_time.py measures).
Writes <out>/softmax_sweep.json, .md and .png. Sharding, resume, merging, the interleaved timing
rounds, the table and the plot are ``dispatch.ab``'s sweep functions; this script says what to measure.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch

import dispatch
from dispatch.ab import (bytes_moved, describe_error, gbps, interleaved_rounds, load_sweep, measure_copy_bandwidth,
                         median_round, merge_sweeps, parse_shard, pending, plot_sweep, save_sweep, sweep_markdown,
                         take_shard, torch_compiled)
from dispatch.backend import TuneSettings, device_name, measure, mismatch

N_SWEEP = [256, 1024, 4096, 16384, 65536, 262144]
DECODE_M = [1, 32]
DECODE_N = 4096
OP_ORDER = ("softmax", "log_softmax", "logsumexp")
DTYPE_ORDER = ("bfloat16", "float32", "float16")


def shapes(total: int, quick: bool) -> list[tuple[int, int]]:
    ns = N_SWEEP[1::2] if quick else N_SWEEP
    out = [(max(1, total // n), n) for n in ns]
    out += [(m, DECODE_N) for m in DECODE_M]
    return out


def main() -> int:
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
    try:  # a bad --shard, --rounds or sweep file stops here, before anything is measured or written
        parse_shard(args.shard)
        if args.warm_only:
            parse_shard(args.warm_only)
        if args.rounds < 1:
            raise ValueError(f"--rounds must be >= 1 (got {args.rounds})")
        if args.merge:
            return merge(args)
        previous = resumed_rows(args)
    except ValueError as exc:
        print(f"bench_softmax: {exc}", file=sys.stderr)
        return 2
    if args.warm_only:
        return warm_worker(args)
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
    rows: list[dict] = list(previous)
    if rows:
        print(f"resuming: {len(rows)} rows already measured in {Path(args.out) / (args.name + '.json')}")
    meta = {"device": device_name(device), "copy_gbs": copy_gbs, "torch": torch.__version__,
            "python": platform.python_version(), "backends": {n: dict(dispatch.backends()[n].versions)
                                                              for n in backends},
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "settings": vars(args)}
    out = Path(args.out)
    try:
        sweep(args, device, settings, backends, copy_gbs, rows, lambda: save(out, args.name, meta, rows, backends))
    finally:
        save(out, args.name, meta, rows, backends)
        if rows:
            plot_sweep(out / f"{args.name}.png", meta, rows, DECODE_M)
    return 0


def all_cases(args) -> list[tuple[str, str, int, int]]:
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")] if args.pairs else [
        (op, dt) for op in args.ops.split(",") for dt in args.dtypes.split(",")]
    return [(op, dt, m, n) for op, dt in pairs for m, n in shapes(args.elements, args.quick)]


def resumed_rows(args) -> list[dict]:
    """The rows of <out>/<name>.json that a ``--resume`` keeps (none without ``--resume``)."""
    previous = Path(args.out) / f"{args.name}.json"
    if not (args.resume and previous.exists()):
        return []
    return load_sweep(previous)["rows"]


def sweep_cases(args) -> list[tuple[str, str, int, int]]:
    """The cases this process measures: its ``--shard`` of those not already in a ``--resume``d sweep."""
    # shards first, then the resumed rows: a resumed shard keeps its own cases
    return pending(take_shard(all_cases(args), args.shard), resumed_rows(args))


def _order(row: dict) -> tuple:
    op = OP_ORDER.index(row["op"]) if row["op"] in OP_ORDER else 99
    dt = DTYPE_ORDER.index(row["dtype"]) if row["dtype"] in DTYPE_ORDER else 99
    decode = row["M"] in DECODE_M
    return op, dt, decode, DECODE_M.index(row["M"]) if decode else row["N"]


def merge(args) -> int:
    """Combine sweeps (e.g. the shards of one run, one per GPU) into one JSON, table and plot."""
    paths = [Path(p) for p in args.merge.split(",") if p]
    meta, rows = merge_sweeps([load_sweep(p) for p in paths], sources=paths, order=_order)
    backends = sorted(meta.get("backends", {}), key=lambda n: (n != "tilelang", n))
    out = Path(args.out)
    save(out, args.name, meta, rows, backends)
    plot_sweep(out / f"{args.name}.png", meta, rows, DECODE_M)
    print(f"merged {len(rows)} rows from {len(paths)} files into {out / args.name}.json")
    return 0


def warm_worker(args) -> int:
    """Tune this worker's share of the sweep and torch.compile it (compiles every kernel into the disk caches)."""
    i, k = parse_shard(args.warm_only)
    dispatch.configure(autotune=True, policy="measured")
    for op, dtype_name, m, n in sweep_cases(args)[i::k]:
        x = torch.randn(m, n, device=args.device).to(getattr(torch, dtype_name))
        try:
            getattr(dispatch, op)(x, -1)
            if op in args.compile.split(","):  # fills inductor's on-disk graph cache
                torch_compiled(getattr(torch, op))(x, -1)
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
    save_sweep(out / f"{name}.json", meta, rows)
    sweep_markdown(meta, rows, ["dispatch"] + list(backends) + ["torch.compile"], DECODE_M,
                   path=out / f"{name}.md", title="Softmax family")


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
        row["pick_source"] = decision.config_source  # "shipped table" where no race ran
        row["pick_config"] = decision.config.as_dict()
        row["candidates"] = {c.name: {"ok": c.verdict.ok, "reason": c.verdict.reason,
                                      "raced_us": c.latency_us, "tune_s": c.tune_s, "note": c.note}
                             for c in decision.candidates}
        runs = {"dispatch": lambda: getattr(dispatch, op)(x, -1)}
        for name in backends:
            runs[name] = (lambda name=name: getattr(dispatch, op)(x, -1, backend=name))
        if op in args.compile.split(","):
            compiled = torch_compiled(getattr(torch, op))
            runs["torch.compile"] = lambda: compiled(x, -1)
        checked = {}
        for name, fn in runs.items():  # each contender's result against torch's, once, before timing
            try:
                row["results"][name] = {"ok": (why := mismatch(fn(), ref)) is None, "error": why}
                checked[name] = fn
            except Exception as exc:
                row["results"][name] = {"error": describe_error(exc)}
        timings, errors = interleaved_rounds(checked, args.rounds, lambda fn: measure(fn, device, settings))
        for name, error in errors.items():
            row["results"][name] = {"error": error}
        for name, rounds in timings.items():
            timing = median_round(rounds)
            gbs = gbps(row["bytes"], timing.median_us)
            row["results"][name].update(us=timing.median_us, spread_us=timing.spread_us, gbs=gbs,
                                        pct_copy=100 * gbs / copy_gbs, rounds_us=[t.median_us for t in rounds])
        best = max(((r["gbs"], k) for k, r in row["results"].items()
                    if "gbs" in r and k in backends and r["ok"]), default=(float("nan"), "none"))
        row["best_backend"], row["best_gbs"] = best[1], best[0]
        rows.append(row)
        checkpoint()
        res = row["results"]
        print(f"{op:<12}{dtype_name:<9}{m:>7}x{n:<7} tune {row['tune_s']:5.1f}s  pick {row['pick']:<9}"
              + "  ".join(f"{k} {r.get('gbs', float('nan')):6.0f}" for k, r in res.items()), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
