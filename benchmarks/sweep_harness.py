"""What the kernel config sweeps share (``sweep_norm_configs.py``, ``sweep_norm_backward.py``): their
timing options, the compile processes that fill Triton's disk cache before anything is timed, the
run's header (device, copy bandwidth, how it was timed), the results files, a second timing
after an L2 flush that leaves no dirty line, and the norm statistics a backward is handed. The
shared-memory sweeps (``sweep_smem_rows.py``, ``sweep_smem_cols.py``, ``sweep_smem_norms.py``) share
:func:`race_table`, and those over rows their options (:func:`race_arguments`) and cases (:func:`row_cases`)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from dispatch.ab import measure_copy_bandwidth
from dispatch.backend import TuneSettings


def race_table(fns: dict, rounds: int, nbytes: int, copy_bytes: int, case: dict, label: str,
               timer: str = "flush") -> list[dict]:
    """Time ``fns`` (name -> callable; ``"copy"``, a copy of the input, among them) in ``rounds``
    interleaved rounds. ``timer="flush"``: ``triton.testing.do_bench`` (L2 flushed, median); a call
    whose host time outlasts the flush kernel before it is timed with the host's gaps. ``"graph"``:
    CUDA-graph replays (:func:`graph_timing.graph_replay_us`), no host time and no flush; a callable
    that cannot be captured is dropped, with a line that says why. One row a name, fastest first:
    ``case``'s fields, the name, its times in us, and its markdown line (``label``, the kernel, us,
    GB/s of ``nbytes``, % of a copy of ``nbytes``; the copy's of its own bytes, ``copy_bytes``, with
    no %), which :func:`write_race_markdown` writes."""
    import statistics

    import triton.testing

    from graph_timing import graph_replay_us  # benchmarks/, beside this module

    if timer not in ("flush", "graph"):
        raise ValueError(f"timer must be 'flush' or 'graph' (got {timer!r})")
    fns = dict(fns)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in list(fns.items()):
            if timer == "flush":
                times[k].append(triton.testing.do_bench(f, warmup=10, rep=50) * 1e3)
                continue
            try:
                times[k].append(graph_replay_us(f, repeats=5)[0])
            except Exception as exc:  # noqa: BLE001 - not capturable: said, and left out of the race
                print(f"{label} | {k}: not timed, CUDA-graph capture failed: {type(exc).__name__}: {exc}"[:300],
                      flush=True)
                del fns[k], times[k]
                torch.cuda.synchronize()
    copy_us = statistics.median(times["copy"]) * (nbytes / copy_bytes)  # a copy of the op's bytes
    rows = []
    for k, ts in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
        us = statistics.median(ts)
        if k == "copy":
            line = f"{label} | copy of x | {us:.1f} | {copy_bytes / us / 1e3:.0f} | - |"
        else:
            line = f"{label} | {k} | {us:.1f} | {nbytes / us / 1e3:.0f} | {100 * copy_us / us:.0f}% |"
        rows.append({**case, "name": k, "us": ts, "line": line})
    return rows


def race_case(fns: dict, args, nbytes: int, x, case: dict, label: str, records: list, save,
              shown: int | None = None) -> None:
    """One case of a race: :func:`race_table` of ``fns`` in ``args.rounds`` rounds (by ``args.timer``;
    ``"flush"`` for a script without that option), against a copy of ``x`` (its bytes read and
    written); its rows added to ``records``, saved (``save``, :func:`saver`'s) and printed, the fastest
    ``shown`` of them (all by default)."""
    rows = race_table(fns, args.rounds, nbytes, 2 * x.numel() * x.element_size(), case, label,
                      getattr(args, "timer", "flush"))
    records += rows
    save()
    print("\n".join(r["line"] for r in rows[:shown]), flush=True)


def row_case(op: str, m: int, n: int, dtype: str) -> tuple[dict, str]:
    """``(case, label)`` of :func:`race_case` for ``op`` over rows: the fields of its rows, and the
    start of their markdown lines."""
    return {"op": op, "shape": f"{m}x{n}", "dtype": dtype}, f"| {op} | {dtype} | {m}x{n}"


def built(futures: dict) -> dict:
    """{key: kernel} of ``{key: future}`` builds; a build that raised is printed (``BUILD FAIL key:
    why``) and left out."""
    out = {}
    for key, fut in futures.items():
        try:
            out[key] = fut.result()
        except Exception as exc:  # noqa: BLE001 - one failed build must not end the sweep
            print("BUILD FAIL", key, f"{type(exc).__name__}: {exc}"[:600], flush=True)
    return out


def build_on_pool(jobs: dict, build, what: str, workers: int | None = None) -> dict:
    """{key: build(job)} of ``jobs`` ({key: job}), built on a thread pool of ``workers`` (the CPUs;
    TileLang's compiles release the GIL and overlap); a build that raised is printed and left out
    (:func:`built`). Prints how many were built and how long it took."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 4) as pool:
        out = built({key: pool.submit(build, job) for key, job in jobs.items()})
    print(f"built {len(out)} of {len(jobs)} {what} in {time.time() - t0:.0f} s", flush=True)
    return out


def race_arguments(ops: str, dtypes: str) -> argparse.ArgumentParser:
    """The options of a shared-memory race over rows (``sweep_smem_rows.py``, ``sweep_smem_norms.py``):
    ``--out``, ``--dtypes``, ``--ops``, ``--shapes`` (``M x N`` for every dtype), ``--rounds`` and
    ``--timer`` (:func:`race_table`)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtypes", default=dtypes)
    ap.add_argument("--ops", default=ops)
    ap.add_argument("--shapes", default="", help="M x N list for every dtype (default: the script's per dtype)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timer", choices=("flush", "graph"), default="flush",
                    help="flush: do_bench, L2 flushed before each call (a call whose host time outlasts the "
                         "flush counts its host gaps); graph: CUDA-graph replays, device time only, no flush")
    return ap


def row_cases(args, shapes: dict) -> list[tuple[str, int, int, str]]:
    """``(op, M, N, dtype)`` of every op, dtype and shape (``args.shapes``, else ``shapes[dtype]``)."""
    out = []
    for dtype in args.dtypes.split(","):
        for shape in (args.shapes or shapes[dtype]).split(","):
            m, n = map(int, shape.split("x"))
            out += [(op, m, n, dtype) for op in args.ops.split(",")]
    return out


def write_race_markdown(path, meta: dict, rows: list) -> None:
    """The table of :func:`race_table`'s rows, under ``meta["columns"]`` (the case's column names)."""
    head = f"| {meta['columns']} | kernel | us | GB/s | % of copy |"
    path.write_text("\n".join([head, "|---" * head.count(" | ") + "|---|"] + [r["line"] for r in rows]) + "\n")


def add_arguments(parser: argparse.ArgumentParser, out: str) -> None:
    """The options every sweep takes (``out``: the default results folder)."""
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rep", type=int, default=100)
    parser.add_argument("--no-flush", action="store_true", help="no L2 flush between repetitions")
    parser.add_argument("--clean-rep", type=int, default=30,
                        help="repetitions of the second timing, after a read-only L2 flush (0: none)")
    parser.add_argument("--jobs", type=int, default=None, help="compile processes (default min(12, CPUs) on a GPU)")
    parser.add_argument("--out", default=out)
    parser.add_argument("--time-limit", type=float, default=270,
                        help="seconds from the start after which no further case is begun (0: none); what "
                             "was measured is written")
    parser.add_argument("--compile-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)


def device_of(args) -> torch.device | None:
    """The sweep's device, with ``args.jobs`` settled (and a CPU smoke run's repetitions cut down);
    None, with a message, where a GPU is asked for and there is none."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA device (or --device cpu for a smoke run)", file=sys.stderr)
        return None
    if args.jobs is None:
        args.jobs = min(12, os.cpu_count() or 1) if device.type == "cuda" else 0
    if device.type == "cpu":
        args.warmup, args.rep, args.clean_rep = min(args.warmup, 1), min(args.rep, 3), 0
    return device


def settings_of(args) -> TuneSettings:
    """How each config is timed: GPU time only, the L2 flushed before each repetition unless ``--no-flush``."""
    return TuneSettings(warmup=args.warmup, rep=args.rep, flush_l2=not args.no_flush, host_bound=False,
                        early_stop=0.0)


def spawn_compilers(args, script: str) -> None:
    """Run ``script`` again in ``--jobs`` processes, each compiling its shard (``--compile-only``) into
    Triton's disk cache, and wait for them."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(script), *sys.argv[1:], "--compile-only",
                               "--shard", f"{i}/{args.jobs}"]) for i in range(args.jobs)]
    for p in procs:
        p.wait()
    print(f"[{time.perf_counter() - t0:6.1f} s] {args.jobs} compile processes done", flush=True)


def header(args, device: torch.device, settings: TuneSettings) -> dict:
    """The run's meta (device, the large-buffer copy bandwidth as ``copy_gbs``, how it was timed,
    versions, the command), printed in one line."""
    copy_gbs = measure_copy_bandwidth(device, settings).gbps
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    if device.type == "cuda":
        timing = (f"CUDA events, median of {args.rep} after {args.warmup} warm-up, "
                  + ("no L2 flush" if args.no_flush else "L2 flushed before each repetition") + ", GPU time only")
    else:
        timing = f"wall time under the Triton interpreter, median of {args.rep} (a smoke run: not a measurement)"
    print(f"device {name}; large-buffer copy {copy_gbs:.0f} GB/s; {timing}", flush=True)
    return {"device": name, "copy_gbs": copy_gbs, "timing": timing, "torch": torch.__version__,
            "triton": __import__("triton").__version__, "python": platform.python_version(),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "settings": vars(args)}


def case_rows(rows: list[dict], case: tuple) -> list[dict]:
    """The rows of one ``(op, dtype, M, N)`` case."""
    return [r for r in rows if (r["op"], r["dtype"], r["M"], r["N"]) == case]


def summary(rows: list[dict], case: tuple, candidate: str) -> tuple[dict | None, ...]:
    """``(same-size copy, torch eager, default, fastest)`` rows of a case: the fastest of the rows
    whose ``candidate`` field is set (a plan, a config) that were timed and passed their check."""
    mine = case_rows(rows, case)
    ok = [r for r in mine if r[candidate] and "us" in r and r.get("check", "ok") == "ok"]
    return (next((r for r in mine if r["impl"] == "same-size copy"), None),
            next((r for r in mine if r["impl"] == "torch eager"), None),
            next((r for r in mine if r.get("default")), None),
            min(ok, key=lambda r: r["us"]) if ok else None)


def saver(out: str, stem: str, meta: dict, rows: list, write_markdown):
    """``save()``: ``<out>/<stem>.json`` (meta and rows) and ``<stem>.md`` (``write_markdown(path, meta,
    rows)``), written again at each call, so that a run cut short keeps what it measured."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (folder / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        write_markdown(folder / f"{stem}.md", meta, rows)
    return save


_READ_FLUSH: dict = {}


def clean_us(fn, device, warmup: int, rep: int) -> float | None:
    """GPU time of ``fn`` (median of ``rep``, CUDA events) after an L2 flush that leaves no dirty line:
    a 256 MB buffer *read* (a reduction) before each repetition. ``measure``'s flush writes 256 MB,
    and the last ~50 MB of it are still dirty in L2 when the timed kernel starts, so the kernel's own
    traffic evicts them: their write-back (up to ~50 MB to HBM) is charged to it, a large share of a
    kernel moving 64 MB. None on the CPU."""
    if device.type != "cuda":
        return None
    buf = _READ_FLUSH.get(device)
    if buf is None:
        buf = _READ_FLUSH[device] = torch.ones(256 * 1024 * 1024 // 8, dtype=torch.int64, device=device)
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for a, b in zip(starts, ends):
        buf.sum()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) * 1e3 for a, b in zip(starts, ends))
    return times[len(times) // 2]


def row_stats(op: str, x: torch.Tensor, eps: float) -> torch.Tensor:
    """What the Triton norm forward saves for its backward (``norm_backward.make_backward``'s
    ``saves``) for the rows of a 2-D ``x``, computed by torch: fp32 rstd per row, then layer_norm's
    means; for a backward called without its forward."""
    xd = x.double()
    if op == "rms_norm":
        return (xd.pow(2).mean(-1) + eps).rsqrt().float()
    return torch.cat([(xd.var(-1, unbiased=False) + eps).rsqrt(), xd.mean(-1)]).float()
