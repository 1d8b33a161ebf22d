"""TileLang's cluster-split row kernels: two cluster barriers against one mbarrier wait (one H200).

The cluster-split family (``dispatch_tilelang.cuda_kernels``, ``tile_n > 0``, ``cluster > 1``)
exchanges each CTA's (max, sum) through distributed shared memory. ``exchange="sync"`` (shipped)
writes them into every peer with plain stores between two ``cluster_sync``s; ``"mbar"`` copies
them with ``cp.async.bulk`` into every peer, each copy completing on the peer's mbarrier, so a CTA
waits only for the data it needs (and once, at its end, for its peers to be past theirs).

For each shape and config, both exchanges (``"mbar"`` alone at clusters of 16, which the shipped
exchange does not run), Triton's default forced through dispatch, torch, and a copy of the same
bytes, timed with ``triton.testing.do_bench`` (L2 flushed, median) in interleaved rounds; every
kernel's output is checked against torch on the benchmark input and on rows of -inf, +inf and
NaN first.

    python3 benchmarks/profile_cluster_exchange.py --out out/exchange
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "backends"))

SHAPES = ["1024x65536", "256x262144", "2048x32768", "8x128256", "64x131072"]
LOCK = threading.Lock()


def configs(n: int, dtype: str) -> list[dict]:
    """Single-read cluster configs: clusters of 4, 8, 16 at 256-1024 threads, 16 to 32 values a
    thread, and at most 1/8 of the covered row padding."""
    from dispatch_tilelang import cuda_kernels as K

    vec = K.vector_width(n, dtype)
    out = []
    for c in (4, 8, 16):
        for t in (256, 512, 1024):
            step = vec * t
            tile = -(-(-(-n // c)) // step) * step
            if 16 <= tile // t <= 32 and (c * tile - n) * 8 <= c * tile:
                out.append({"threads": t, "tile_n": tile, "cluster": c})
    return out


def smem_configs(n: int, dtype: str) -> list[dict]:
    """``smem_rows`` configs: clusters of 1-16 at 128 or 256 threads, chunks of 16-64 KB, at most
    1/8 of the covered row padding."""
    from dispatch_tilelang import smem_rows as S

    size = S.DTYPE_BYTES[dtype]
    out = []
    for c in (1, 2, 4, 8, 16):
        for t in (128, 256):
            step = (16 // size) * t
            tile = -(-(-(-n // c)) // step) * step
            if (16 << 10) <= tile * size <= (64 << 10) and (c * tile - n) * 8 <= c * tile \
                    and S.check_launch(n, dtype, tile, c, t) is None:
                out.append({"threads": t, "tile_n": tile, "cluster": c})
    return out


def build(op, n, dtype, cfg, exchange):
    import tilelang

    from dispatch_tilelang import cuda_kernels as K, smem_rows as S

    with LOCK:
        if exchange == "smem":
            program = S.program(op, n, dtype, dtype, cfg["tile_n"], cfg["cluster"])
            prim = program.get_tir(threads=cfg["threads"])
        else:
            program = K.program(op, n, dtype, dtype, cfg["tile_n"], cfg["cluster"], None, 0, exchange)
            prim = program.get_tir(block_m=1, threads=cfg["threads"])
    return tilelang.compile(prim, out_idx=program.out_idx, target=program.target)


def edge_rows(torch, m, n, dtype, seg):
    x = torch.randn(m, n) * 3
    inf = float("inf")
    x[0] = -inf
    if m > 1:
        x[1, n // 3] = inf
    if m > 2:
        x[2, n // 2] = float("nan")
    if m > 3:
        x[3, : min(n - 1, seg + 7)] = -inf
    if m > 4:
        x[4, n // 2:] = -inf
    return x.to(dtype).cuda()


def check(torch, fn, op, x):
    y = fn(x)
    want = getattr(torch, op)(x.float(), -1).to(x.dtype) if op != "logsumexp" else torch.logsumexp(x.float(), -1).to(x.dtype)
    tol = (1e-5, 1e-5) if x.dtype == torch.float32 else (1.6e-2, 1e-2)
    torch.testing.assert_close(y, want, rtol=tol[0], atol=tol[1], equal_nan=True)
    assert torch.equal(torch.isnan(y), torch.isnan(want))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default="bfloat16")
    ap.add_argument("--ops", default="softmax")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smem", action="store_true", help="add the shared-memory family (smem_rows), and time the "
                    "register family at 32 values a thread only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import torch
    import triton.testing

    import dispatch
    from dispatch_tilelang import cuda_kernels as K

    K.MAX_CLUSTER = 16  # clusters of 16 (non-portable) for the mbarrier exchange
    jobs = []
    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            m, n = map(int, shape.split("x"))
            for op in args.ops.split(","):
                for cfg in configs(n, dtype):
                    if cfg["tile_n"] // cfg["threads"] == 32 or not args.smem:  # the register family's best shape
                        for ex in ("sync", "mbar"):
                            if ex == "sync" and cfg["cluster"] > 8:
                                continue
                            jobs.append((op, m, n, dtype, cfg, ex))
                if args.smem:
                    jobs += [(op, m, n, dtype, cfg, "smem") for cfg in smem_configs(n, dtype)]
    t0 = time.time()

    def one(job):
        op, m, n, dtype, cfg, ex = job
        try:
            return job, build(op, n, dtype, cfg, ex), None
        except Exception as exc:  # noqa: BLE001
            return job, None, f"{type(exc).__name__}: {exc}"[-600:]

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        built = list(pool.map(one, jobs))
    print(f"built {len(built)} kernels in {time.time() - t0:.0f} s", flush=True)

    records = []
    by_case: dict = {}
    for job, kernel, err in built:
        op, m, n, dtype, cfg, ex = job
        name = f"tilelang {ex} c{cfg['cluster']} t{cfg['threads']} tile{cfg['tile_n']}"
        rec = {"op": op, "shape": f"{m}x{n}", "dtype": dtype, "name": name, "config": cfg, "exchange": ex}
        if err:
            rec["error"] = err
            print("BUILD FAIL", name, err[:300], flush=True)
        else:
            try:
                tdt = getattr(torch, dtype)
                check(torch, kernel, op, edge_rows(torch, 7, n, tdt, cfg["tile_n"]))
                check(torch, kernel, op, edge_rows(torch, 1, n, tdt, cfg["tile_n"]))
                by_case.setdefault((op, m, n, dtype), []).append((name, kernel, rec))
            except Exception as exc:  # noqa: BLE001
                rec["error"] = f"{type(exc).__name__}: {exc}"[-600:]
                print("CHECK FAIL", name, rec["error"][:300], flush=True)
        records.append(rec)

    lines = ["| op | dtype | M x N | kernel | us | GB/s | % of copy |", "|---|---|---|---|---|---|---|"]
    for (op, m, n, dtype), kernels in by_case.items():
        tdt = getattr(torch, dtype)
        x = torch.randn(m, n, device="cuda").to(tdt)
        y = torch.empty_like(x)
        fns = {"copy": lambda: y.copy_(x), "torch": lambda: getattr(torch, op)(x, -1),
               "triton (default)": lambda: getattr(dispatch, op)(x, -1, backend="triton")}
        check(torch, lambda t: getattr(dispatch, op)(t, -1, backend="triton"), op, x)
        for name, kernel, rec in kernels:
            check(torch, kernel, op, x)
            fns[name] = (lambda k=kernel: k(x))
        times = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, f in fns.items():
                times[k].append(triton.testing.do_bench(f, warmup=10, rep=60) * 1e3)
        nbytes = 2 * x.numel() * x.element_size()
        copy_us = statistics.median(times["copy"])
        for k, ts in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
            us = statistics.median(ts)
            lines.append(f"| {op} | {dtype} | {m}x{n} | {k} | {us:.1f} | {nbytes / us / 1e3:.0f} | "
                         f"{100 * copy_us / us:.0f}% |")
            records.append({"op": op, "shape": f"{m}x{n}", "dtype": dtype, "name": k, "us": ts})
        print("\n".join(lines[-len(times):]), flush=True)
    with open(os.path.join(args.out, "exchange.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "exchange.json"), "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
