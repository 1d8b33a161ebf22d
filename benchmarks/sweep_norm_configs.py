"""The Triton rms_norm / layer_norm forward under a grid of launch configurations, on one GPU: which
configuration of each shape comes closest to the copy bandwidth.

For rms_norm (with weight) and layer_norm (with weight and bias), bf16 and fp32, and the shapes
M x N with M*N = 16M (N = 1024, 2048, 4096, 8192, 16384, 65536, 262144) plus 16384 x 4096
(M*N = 64M), every configuration that ``dispatch_triton.norms.NormLauncher`` accepts from a grid
(see :func:`grid`) is built, checked against torch and timed, next to torch eager and to a
same-size copy. Grid knobs (keys of a forward config, see ``backends/dispatch_triton/norm_configs.py``):

* rows held in registers (N <= 16384): tile shape ``ROWS`` x ``BLOCK_N`` (``BLOCK_N`` = N's power
  of two) and ``num_warps`` (4..64 elements a thread); ``PERSIST`` (0: a program per tile; p: a
  persistent grid of p programs per multiprocessor, each with the next tile's load in flight,
  compiled with ``maxnreg`` = 65536 / (p * 32 * num_warps) so all are resident); ``HINTS``
  (y stored evict_first) on a few; for layer_norm, every tile again with ``ONE_SUM`` (the
  statistics from one reduction of x and x^2); on rows of 4096 and more, every persistent tile
  again with ``WB_EACH`` (weight and bias loaded for each tile), and the chunked path
  (a quarter or half a row a chunk, ``HINTS``, with and without ``PREFETCH``);
* long rows: the chunked path (a program per row, two passes over it) with ``BLOCK_N`` chunks of
  4096..16384, ``num_warps``, ``num_stages`` 1 or 3, ``PREFETCH`` (two chunks in flight) and
  ``HINTS`` (the first read evict_last, so that the second finds x in L2), and for layer_norm
  ``LANES`` (the statistics by lanes: no row shift, so never a second walk; also on the split
  path); the split path (``SPLIT`` programs per row, two launches) with ``SPLIT`` around the
  default's; the cooperative path (``COOP``: a group of programs holds a row's chunks and
  exchanges partials, one launch) with chunks of 2048..16384, ``HINTS`` (y stored evict_first)
  on or off, ``REGS`` (``maxnreg`` of 64..128: more programs resident, so more rows in flight)
  and ``WB_EACH`` (the weight and bias loaded for each row, not held), alone and under each cap.

``--only 'WORDS'`` keeps each shape's default and the configs whose label holds every word given
(``--only 'coop wb_each'``: the cooperative configs that load the weight for each row).

Every shape's default configuration (what a call gets with tuning off) is in its grid, marked.

Timing: ``dispatch.backend.measure`` with CUDA events around each launch, the median of ``--rep``
repetitions after ``--warmup``; the L2 is flushed (a 256 MB write) before every repetition unless
``--no-flush``; the host's back-to-back rate is not counted (GPU time only). The same-size copy is
``y.copy_(x)`` of the case's M x N tensor, timed the same way; the large copy is
``dispatch.ab.measure_copy_bandwidth`` (512 MB). Bytes of a case: x read, y written, weight/bias
read once. A second timing (``--clean-rep`` repetitions, the "clean L2" columns) flushes the L2 by
*reading* 256 MB instead: ``measure``'s flush writes, and the dirty lines it leaves in L2 (~50 MB on
an H200) are written back while the timed kernel runs, a cost charged to a kernel that moves 64 MB;
its % is of the same-size copy timed that way too.

Compiles: ``--jobs K`` processes (default min(12, CPUs) on a GPU) first compile shares of the grid into
Triton's on-disk cache; the main process then builds every kernel on a thread pool
(``dispatch.backend.compile_all``, mostly cache hits) before timing anything.

    python3 benchmarks/sweep_norm_configs.py --out DIR            # the full grid, ~2 minutes on an H200
    python3 benchmarks/sweep_norm_configs.py --quick --out DIR    # a smaller grid
    python3 benchmarks/sweep_norm_configs.py --device cpu --out DIR   # smoke run: interpreter, tiny shapes

Writes <out>/norm_configs.json and norm_configs.md (a summary, then a table per shape).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1:][:1] == ["cpu"]:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch
import torch.nn.functional as F

from dispatch.backend import Config, compile_all, measure, mismatch

from dispatch_triton import norm_configs as NC
from dispatch_triton import norms as NT
from dispatch_triton.norm_kernels import _norm_fwd
from sweep_harness import (add_arguments, case_rows, clean_us, device_of, header, saver, settings_of,
                           spawn_compilers, summary)

OPS = ("rms_norm", "layer_norm")
ELEMENTS = 16 * 1024 * 1024
N_LIST = (1024, 2048, 4096, 8192, 16384, 65536, 262144)
EXTRA = ((64 * 1024 * 1024 // 4096, 4096),)  # M*N = 64M at N = 4096
CPU_SHAPES = ((6, 100), (2, 20000))  # rows in registers (N odd: masked), chunked rows
COOP_REGS = (64, 80, 96, 112, 128)  # maxnreg caps tried on the cooperative path

# rows in registers: (ROWS, num_warps) tile shapes tried per bucket of N, a rough order of promise
TILES = {
    1024: [(2, 4), (4, 8), (2, 8), (4, 4), (8, 16), (1, 4), (8, 8), (4, 16)],
    2048: [(1, 4), (1, 8), (2, 8), (2, 4), (4, 16), (4, 8), (2, 16)],
    4096: [(1, 8), (1, 4), (1, 16), (2, 16), (2, 8), (4, 32), (1, 32)],
    8192: [(1, 8), (1, 16), (1, 32), (2, 32), (1, 4), (2, 16)],
    16384: [(1, 16), (1, 32), (1, 8), (2, 32)],
}


def _np2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _cfg(bn, rows=1, warps=4, persist=0, split=1, stages=1, prefetch=0, hints=0, coop=0) -> dict:
    c = {"BLOCK_N": int(bn), "ROWS": int(rows), "SPLIT": int(split), "PERSIST": int(persist),
         "num_warps": int(warps), "num_stages": int(stages)}
    if coop:
        c["COOP"] = 1
    if prefetch:
        c["PREFETCH"] = 1
    if hints:
        c["HINTS"] = 1
    return c


def label(c: dict) -> str:
    bits = [f"bn{c['BLOCK_N']}", f"w{c['num_warps']}"]
    if c["ROWS"] > 1:
        bits.insert(1, f"r{c['ROWS']}")
    if c["PERSIST"]:
        bits.append(f"persist{c['PERSIST']}(maxnreg {NT._persist_regs(c)})")
    if c["SPLIT"] > 1:
        bits.insert(0, f"split{c['SPLIT']}")
    if c.get("COOP"):
        bits.insert(0, "coop")
    if c["num_stages"] != 1:
        bits.append(f"st{c['num_stages']}")
    if c.get("PREFETCH"):
        bits.append("prefetch")
    if c.get("HINTS"):
        bits.append("hints")
    if c.get("ONE_SUM"):
        bits.append("one_sum")
    if c.get("REGS"):
        bits.append(f"regs{c['REGS']}")
    if c.get("WB_EACH"):
        bits.append("wb_each")
    if c.get("STAGES"):
        bits.append(f"stages{c['STAGES']}")
    if c.get("LANES"):
        bits.append("lanes")
    return " ".join(bits)


def _key(c: dict) -> tuple:
    return tuple(sorted((k, int(v)) for k, v in c.items() if not (k in _OPTIONS and not v)))


_OPTIONS = ("PREFETCH", "HINTS", "COOP", "ONE_SUM", "REGS", "WB_EACH", "STAGES", "LANES")  # keys that are absent when 0


def _persist_levels(bn: int, rows: int, warps: int, esz: int, quick: bool) -> list[int]:
    """Persistent programs per multiprocessor worth trying for a tile: the most that are resident
    (64 warps a multiprocessor, registers enough for the tile and the next one's load), and half that."""
    ept = bn * rows // (32 * warps)
    need = 24 + ept * (2 if esz == 2 else 3)  # x (fp32), the next tile (input dtype), w/b, temporaries
    levels = [p for p in (1, 2, 4, 8) if p * warps <= 64 and 65536 // (p * warps * 32) >= min(need, 255)]
    if not levels:
        return []
    top = max(levels)
    return [top] if quick or top == 1 else [top, top // 2]


def grid(op: str, m: int, n: int, dtype: torch.dtype, device: torch.device, quick: bool) -> list[dict]:
    """The configs of one shape, the default first (deduplicated)."""
    default = NT.default_config(m, n, dtype, device, op)
    esz = torch.empty((), dtype=dtype).element_size()
    out = [default] + [dict(c) for c in NT.config_space(m, n, dtype, device, op)]
    bn = max(_np2(n), 16)
    if bn <= 16384:
        tiles = TILES.get(bn, [(max(1, 2048 // bn), 4)])
        tiles = tiles[:4] if quick else tiles
        for rows, warps in tiles:
            ept = bn * rows // (32 * warps)
            if not 4 <= ept <= (64 if esz == 2 else 32):
                continue
            out.append(_cfg(bn, rows, warps))
            for p in _persist_levels(bn, rows, warps, esz, quick):
                out.append(_cfg(bn, rows, warps, persist=p))
        # cache hints on the default and on the first persistent config
        first_persist = next((c for c in out if c["PERSIST"]), None)
        for c in (default, first_persist):
            if c is not None:
                out.append(dict(c, HINTS=1))
        if op == "layer_norm":  # the statistics from one reduction, on every tile tried
            out += [dict(c, ONE_SUM=1) for c in list(out)]
        # persistent programs that load the weight and bias for each tile rather than hold them
        out += [dict(c, WB_EACH=1) for c in list(out) if c["PERSIST"] and bn >= 4096]
        # the persistent tile loop pipelined by Triton (STAGES: the next tiles' loads go to shared
        # memory, not registers), also at twice the programs a multiprocessor where warps allow
        for c in [c for c in out if c["PERSIST"]]:
            for p in (c["PERSIST"], 2 * c["PERSIST"]):
                for st in (2, 3):
                    if p * c["num_warps"] <= 64 and p * (st - 1) * bn * c["ROWS"] * esz <= 192 * 1024:
                        out.append(dict(c, PERSIST=p, STAGES=st))
        if bn >= 4096:  # a program per row walking it twice in chunks (the second read from L2)
            for cbn, warps in ((bn // 4, 4), (bn // 4, 8), (bn // 2, 8)):
                out.append(_cfg(cbn, 1, warps, hints=1))
                out.append(_cfg(cbn, 1, warps, prefetch=1, hints=1))
    else:
        chunked = [(4096, 8), (8192, 16), (16384, 16)] if not quick else [(4096, 8), (8192, 16)]
        if not quick:
            chunked.append((8192, 8))
        for cbn, warps in chunked:
            out.append(_cfg(cbn, 1, warps))
            out.append(_cfg(cbn, 1, warps, prefetch=1))
            out.append(_cfg(cbn, 1, warps, prefetch=1, hints=1))
            if not quick:
                out.append(_cfg(cbn, 1, warps, hints=1))
            if op == "layer_norm":  # the statistics by lanes: no row shift, never a second walk
                out.append(dict(_cfg(cbn, 1, warps, prefetch=1, hints=1), LANES=1))
                out.append(dict(_cfg(cbn, 1, warps, prefetch=1), LANES=1))
        out.append(_cfg(4096, 1, 8, stages=3))
        out.append(_cfg(4096, 1, 8, stages=3, prefetch=1))
        # the cooperative path: a row's chunks over a group of programs (8 to 32 elements a thread)
        coop = [(2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16)]
        for cbn, warps in coop[:4] if quick else coop:
            if -(-n // cbn) <= NC._MAX_COOP_CHUNKS:
                out.append(_cfg(cbn, 1, warps, coop=1))
                out.append(_cfg(cbn, 1, warps, coop=1, hints=1))
                # fewer registers a thread, more programs resident (more rows in flight)
                out += [dict(_cfg(cbn, 1, warps, coop=1), REGS=r) for r in COOP_REGS]
                # the weight and bias loaded for each row (from L2), not held: fewer registers, fewer
                # spilled under a cap
                out += [dict(_cfg(cbn, 1, warps, coop=1), WB_EACH=1, **({"REGS": r} if r else {}))
                        for r in (0,) + COOP_REGS]
        nchunks = -(-n // 4096)
        base = NC._split_for(m, nchunks, device)
        if m <= NC._MAX_GRID_ROWS:
            for s in sorted({base // 2, base, base * 2, base * 4} if not quick else {base, base * 2}):
                if 2 <= s <= min(64, nchunks):
                    out.append(_cfg(4096, 1, 8, split=s))
                    out.append(_cfg(4096, 1, 8, split=s, prefetch=1, hints=1))
                    if op == "layer_norm":  # the segments' statistics by lanes
                        out.append(dict(_cfg(4096, 1, 8, split=s, prefetch=1, hints=1), LANES=1))
                    if not quick:
                        out.append(_cfg(4096, 1, 8, split=s, hints=1))
                        if 2 * s <= min(64, nchunks // 2):
                            out.append(_cfg(8192, 1, 16, split=s, prefetch=1, hints=1))
    seen, kept = set(), []
    for c in out:
        k = _key(c)
        if k not in seen:
            seen.add(k)
            kept.append(c)
    return kept


def shapes(args) -> list[tuple[int, int]]:
    if args.device == "cpu":
        return list(CPU_SHAPES)
    ns = [int(v) for v in args.ns.split(",")] if args.ns else N_LIST
    return [(args.elements // n, n) for n in ns] + ([] if args.ns else list(EXTRA))


def plan(args, device) -> list[tuple[str, str, int, int, dict]]:
    """Every (op, dtype, M, N, config) of the run, in a fixed order."""
    jobs = []
    for m, n in shapes(args):  # shape by shape (the 64M case last): a run cut short keeps whole shapes
        for dt in args.dtypes.split(","):
            dtype = getattr(torch, dt)
            for op in args.ops.split(","):
                configs = grid(op, m, n, dtype, device, args.quick)
                if args.only:  # the default and the configs whose label holds every word given
                    configs = [configs[0]] + [c for c in configs[1:]
                                              if all(w in label(c).split() for w in args.only.split())]
                if args.device == "cpu":  # the default, one persistent or prefetching config, one ONE_SUM
                    configs = [configs[0]] + [c for c in configs[1:] if c["PERSIST"] or c.get("PREFETCH")][:1] + \
                        [c for c in configs[1:] if c.get("ONE_SUM")][:1]
                jobs += [(op, dt, m, n, c) for c in configs]
    return jobs


def launcher(op: str, m: int, n: int, dtype: torch.dtype, device: torch.device, config: dict):
    return NT.NormLauncher(op, m, n, dtype, n, device, config, 1e-5, True, op == "layer_norm", (m, n))


def compile_job(job, device) -> None:
    """Compile (and load) a job's kernels with small stand-in tensors: what its first call would build."""
    op, dt, m, n, config = job
    launcher(op, m, n, getattr(torch, dt), device, config).compile()


def compile_shard(args, device) -> int:
    k, of = (int(v) for v in args.shard.split("/"))
    jobs = plan(args, device)[k::of]
    failed = 0
    for job in jobs:
        try:
            compile_job(job, device)
        except Exception as exc:  # noqa: BLE001 - the timed run reports it
            failed += 1
            print(f"compile {job[:4]} {label(job[4])}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
    print(f"compile shard {k}/{of}: {len(jobs) - failed}/{len(jobs)} built", flush=True)
    return 0


def compile_everything(args, device, jobs) -> dict:
    """Compile every job: first in ``--jobs`` processes into Triton's disk cache, then here on a thread
    pool. Returns the reasons of the jobs that failed, by index."""
    t0 = time.perf_counter()
    if device.type != "cuda":
        return {}  # the interpreter compiles nothing
    if args.jobs > 0:
        spawn_compilers(args, __file__)
    done = [0]

    def progress(config, why):
        done[0] += 1
        if done[0] % 50 == 0 or done[0] == len(jobs):
            print(f"[{time.perf_counter() - t0:6.1f} s] built {done[0]}/{len(jobs)}", flush=True)

    with torch.cuda.device(device):  # the JIT's per-device cache made here, not raced for by the pool
        caches = getattr(_norm_fwd, "device_caches", None)
        if caches is not None:
            caches[torch.cuda.current_device()]

    def one(c) -> None:
        with torch.cuda.device(device):
            compile_job(jobs[c["i"]], device)

    report = compile_all([Config.of(i=i) for i in range(len(jobs))], one, progress=progress)
    return {f.config["i"]: f.reason for f in report.failures}


def _inputs(op, m, n, dtype, device):
    g = torch.Generator(device=device).manual_seed(m * 131 + n)  # made on the device: 64M elements in no time
    x = torch.randn((m, n), generator=g, device=device).to(dtype)
    w = (torch.randn(n, generator=g, device=device) * 0.5 + 1).to(dtype)
    b = (torch.randn(n, generator=g, device=device) * 0.5).to(dtype) if op == "layer_norm" else None
    return x, w, b


def _torch(op, x, w, b):
    n = x.shape[-1]
    return F.rms_norm(x, (n,), w, 1e-5) if op == "rms_norm" else F.layer_norm(x, (n,), w, b, 1e-5)


def run(args, device, settings, copy_gbs, jobs, failures, rows, save, start: float) -> None:
    t0 = time.perf_counter()
    cases = list(dict.fromkeys(j[:4] for j in jobs))
    for ci, (op, dt, m, n) in enumerate(cases):
        if args.time_limit and time.perf_counter() - start > args.time_limit:
            print(f"time limit ({args.time_limit} s) reached: {len(cases) - ci} case(s) not timed: "
                  f"{cases[ci:]}", flush=True)
            break
        dtype = getattr(torch, dt)
        esz = torch.empty((), dtype=dtype).element_size()
        nbytes = 2 * m * n * esz + (1 if op == "rms_norm" else 2) * n * esz
        x, w, b = _inputs(op, m, n, dtype, device)
        ref = _torch(op, x.float(), w.float(), None if b is None else b.float()).to(dtype)
        y = torch.empty_like(x)
        copy_t = measure(lambda: y.copy_(x), device, settings)
        same_gbps = 2 * m * n * esz / (copy_t.median_us * 1e-6) / 1e9
        copy_clean = clean_us(lambda: y.copy_(x), device, args.warmup, args.clean_rep) if args.clean_rep else None
        base = {"op": op, "dtype": dt, "M": m, "N": n, "bytes": nbytes}

        def record(impl, t, config=None, default=False, check="ok", error=None, fn=None):
            row = dict(base, impl=impl, default=default, config=config)
            if error is not None:
                row["error"] = error
            else:
                gbps = nbytes / (t.median_us * 1e-6) / 1e9
                row.update(us=t.median_us, spread_us=t.spread_us, gbps=gbps, pct_copy_same=100 * gbps / same_gbps,
                           pct_copy=100 * gbps / copy_gbs, check=check)
                clean = clean_us(fn, device, args.warmup, args.clean_rep) if fn is not None and args.clean_rep else None
                if clean is not None:
                    row["us_clean"] = clean
                    if copy_clean:
                        # against the same-size copy timed the same way (its bytes: 2*M*N*esz)
                        row["pct_copy_same_clean"] = 100 * (nbytes / clean) / (2 * m * n * esz / copy_clean)
            rows.append(row)
            return row

        copy_row = record("same-size copy", copy_t, fn=lambda: y.copy_(x))
        copy_row["bytes"] = 2 * m * n * esz
        copy_row.update(gbps=same_gbps, pct_copy_same=100.0, pct_copy=100 * same_gbps / copy_gbs)
        if copy_clean:
            copy_row["pct_copy_same_clean"] = 100.0
        record("torch eager", measure(lambda: _torch(op, x, w, b), device, settings), fn=lambda: _torch(op, x, w, b))
        mine = [(i, j[4]) for i, j in enumerate(jobs) if j[:4] == (op, dt, m, n)]
        for k, (i, config) in enumerate(mine):
            name = label(config)
            if i in failures:
                record(name, None, config, k == 0, error=failures[i])
                continue
            try:
                launch = launcher(op, m, n, dtype, device, config).run
                out = launch(x, w, b)
                why = mismatch(out, ref, (2e-2, 2e-2) if esz == 2 else (1e-4, 1e-4))
                record(name, measure(lambda: launch(x, w, b), device, settings), config, k == 0,
                       check=why or "ok", fn=lambda: launch(x, w, b))
            except Exception as exc:  # noqa: BLE001 - a row with its reason
                record(name, None, config, k == 0, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        mine_rows = [r for r in rows if (r["op"], r["dtype"], r["M"], r["N"]) == (op, dt, m, n) and r["config"]]
        timed = [r for r in mine_rows if "us" in r and r["check"] == "ok"]
        best = min(timed, key=lambda r: r["us"]) if timed else None
        dflt = next((r for r in mine_rows if r["default"] and "us" in r), None)
        print(f"[{time.perf_counter() - t0:6.1f} s] {ci + 1}/{len(cases)} {op} {dt} {m}x{n}: copy "
              f"{copy_t.median_us:.1f} us ({100 * same_gbps / copy_gbs:.0f}% of large copy); default "
              + (f"{dflt['us']:.1f} us {dflt['pct_copy_same']:.0f}%" if dflt else "-") + "; best "
              + (f"{best['impl']} {best['us']:.1f} us {best['pct_copy_same']:.0f}% of same-size copy "
                 f"({best['pct_copy']:.0f}% of large)" if best else "-"), flush=True)
        print_case(rows, (op, dt, m, n))
        save()
        del x, w, b, y, ref


def case_table(rows, case) -> list[str]:
    """Markdown rows of one case: copy, eager, then the configs fastest first."""
    mine = case_rows(rows, case)
    fixed = [r for r in mine if not r["config"]]
    configs = sorted([r for r in mine if r["config"]], key=lambda r: r.get("us", float("inf")))
    out = ["| config | us | GB/s | % same-size copy | % large copy | us, clean L2 | % same-size copy, clean L2 "
           "| check |", "|---|---|---|---|---|---|---|---|"]
    for r in fixed + configs:
        name = r["impl"] + (" **(default)**" if r.get("default") else "")
        if "us" in r:
            clean = f"{r['us_clean']:.1f}" if "us_clean" in r else "-"
            pclean = f"{r['pct_copy_same_clean']:.1f}" if "pct_copy_same_clean" in r else "-"
            out.append(f"| {name} | {r['us']:.1f} | {r['gbps']:.0f} | {r['pct_copy_same']:.1f} | {r['pct_copy']:.1f} "
                       f"| {clean} | {pclean} | {r.get('check', 'ok')[:60]} |")
        else:
            out.append(f"| {name} | - | - | - | - | - | - | {r['error'][:80]} |")
    return out


def print_case(rows, case) -> None:
    mine = case_rows(rows, case)
    fixed = [r for r in mine if not r["config"]]
    configs = sorted([r for r in mine if r["config"]], key=lambda r: r.get("us", float("inf")))
    for r in fixed + configs:
        mark = "*" if r.get("default") else " "
        if "us" in r:
            bad = "" if r.get("check", "ok") == "ok" else "  WRONG"
            clean = (f"  clean L2 {r['us_clean']:7.1f} us {r['pct_copy_same_clean']:5.1f}% same"
                     if "pct_copy_same_clean" in r else "")
            print(f"   {mark} {r['impl']:58} {r['us']:8.1f} us {r['pct_copy_same']:5.1f}% same {r['pct_copy']:5.1f}% "
                  f"large{clean}{bad}")
        else:
            print(f"   {mark} {r['impl']:58} {r['error'][:90]}")


def write_markdown(path: Path, meta: dict, rows: list[dict]) -> None:
    lines = [f"# Triton norm forward configs on {meta['device']}", "",
             f"Large-buffer copy {meta['copy_gbs']:.0f} GB/s. Timing: {meta['timing']}. "
             f"Command: `{meta['command']}`", "",
             "% same-size copy: of `y.copy_(x)` of the case's M x N tensor, timed the same way; % large copy: of "
             "the 512 MB copy. Bytes: x read, y written, weight (and bias) read once. Clean L2: timed again after "
             "an L2 flush that reads 256 MB (no dirty lines left to write back during the kernel), % of the "
             "same-size copy timed that way.", "",
             "## Summary", "",
             "| op | dtype | M x N | copy us (% large) | torch eager | default | best | best config |",
             "|---|---|---|---|---|---|---|---|"]
    cases = list(dict.fromkeys((r["op"], r["dtype"], r["M"], r["N"]) for r in rows))

    def cell(r):
        if not r or "us" not in r:
            return "-"
        clean = f"; clean L2 {r['pct_copy_same_clean']:.0f}%" if "pct_copy_same_clean" in r else ""
        return f"{r['us']:.1f} us ({r['pct_copy_same']:.0f}% / {r['pct_copy']:.0f}%{clean})"

    for case in cases:
        copy, eager, dflt, best = summary(rows, case, "config")
        copy_cell = f"{copy['us']:.1f} ({copy['pct_copy']:.0f}%)" if copy and "us" in copy else "-"
        lines.append(f"| {case[0]} | {case[1]} | {case[2]}x{case[3]} | {copy_cell} | {cell(eager)} | {cell(dflt)} "
                     f"| {cell(best)} | {best['impl'] if best else '-'} |")
    lines += ["", "Cells: us (% of same-size copy / % of large copy; % of same-size copy with a clean L2). "
              "Best: the fastest config whose output matched torch's.", ""]
    for case in cases:
        lines += [f"## {case[0]} {case[1]} {case[2]}x{case[3]}", ""] + case_table(rows, case) + [""]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--elements", type=int, default=ELEMENTS, help="M*N of the shapes (16M)")
    parser.add_argument("--ns", default=None, help="row lengths, comma-separated (default: the list above, "
                                                   "plus 16384x4096)")
    parser.add_argument("--quick", action="store_true", help="a smaller grid per shape")
    parser.add_argument("--only", default="", help="the default and the configs whose label holds these "
                                                   "words, e.g. 'coop' or 'coop wb_each'")
    add_arguments(parser, "benchmarks/results/norm_configs")
    args = parser.parse_args()
    device = device_of(args)
    if device is None:
        return 2
    if args.compile_only:
        return compile_shard(args, device)
    settings = settings_of(args)
    t0 = time.perf_counter()
    jobs = plan(args, device)
    ncases = len(dict.fromkeys(j[:4] for j in jobs))
    print(f"{len(jobs)} configs over {ncases} cases; compiling", flush=True)
    failures = compile_everything(args, device, jobs)
    print(f"[{time.perf_counter() - t0:6.1f} s] compiled ({len(failures)} failed); timing", flush=True)
    meta = header(args, device, settings)
    rows: list[dict] = []
    save = saver(args.out, "norm_configs", meta, rows, write_markdown)
    run(args, device, settings, meta["copy_gbs"], jobs, failures, rows, save, t0)
    save()
    print(f"[{time.perf_counter() - t0:6.1f} s] wrote {args.out}/norm_configs.json, .md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
