"""TileLang's tiles-in-shared-memory kernels over a dim that is not the last (``smem_cols``), one GPU.

For each case, a contiguous tensor reduced over one of its leading dims: every config of
``smem_cols.configs``, TileLang's and Triton's defaults through dispatch, torch, and a copy of
the same bytes, timed with ``triton.testing.do_bench`` (L2 flushed, median) in interleaved rounds.
Every kernel's output is checked against torch first, on the benchmark input and on an input
whose columns hold -inf, +inf and NaN. ``--bound`` adds each config's twin built with a launch
bound (``smem_cols.launch_bound``: the CTAs an SM that shared memory and threads allow, a thread
left 40 registers at least), checked and timed the same way; ``--staged`` its twin that copies
its tile in parts and walks each part for the max as it lands; ``--early`` its twin that copies
its tile before its cluster's peers need have started.

    python3 benchmarks/sweep_smem_cols.py --out out/smem_cols [--bound | --staged | --early]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "backends"))

from sweep_harness import build_on_pool, race_case, saver, write_race_markdown  # noqa: E402

# shape:dim
CASES = "32x1024x64x64:1,64x256x56x56:1,4096x4096:0,32x2048x2048:1,8x4096x1024:1"


def view3(shape, dim):
    outer = 1
    for s in shape[:dim]:
        outer *= s
    inner = 1
    for s in shape[dim + 1:]:
        inner *= s
    return outer, shape[dim], inner


def edge_input(torch, shape, dim, dtype):
    x = torch.randn(shape) * 3
    o, r, i = view3(shape, dim)
    v = x.view(o, r, i)
    v[0, :, 0] = -float("inf")
    v[0, r // 3, 1] = float("inf")
    v[0, r // 2, 2] = float("nan")
    v[0, : r - 1, 3] = -float("inf")
    v[-1, r // 2:, -1] = -float("inf")
    v[:, :, 4] += 1000  # columns far from zero: a shift's rounding must not show
    v[:, :, 5] = v[:, :, 5] / 8 - 20000
    return x.to(dtype).cuda()


def reference(torch, op, x, dim):
    # float64: torch's own fp32 log_softmax over a leading dim is off by up to 2e-5 (H100), twice the
    # fp32 tolerance, where these kernels stay within 2.5e-6
    xd = x.double()
    return (torch.logsumexp(xd, dim) if op == "logsumexp" else getattr(torch, op)(xd, dim)).to(x.dtype)


def check(torch, y, op, x, dim):
    want = reference(torch, op, x, dim)
    tol = (1e-5, 1e-5) if x.dtype == torch.float32 else (1.6e-2, 1e-2)
    torch.testing.assert_close(y.view(want.shape), want, rtol=tol[0], atol=tol[1], equal_nan=True)
    assert torch.equal(torch.isnan(y.view(want.shape)), torch.isnan(want))


def label(cfg: dict) -> str:
    return f"smem_cols i{cfg['block_i']} c{cfg['cluster']} t{cfg['threads']}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtypes", default="bfloat16")
    ap.add_argument("--ops", default="softmax")
    ap.add_argument("--cases", default=CASES, help="shape:dim list, e.g. 32x1024x64x64:1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=12)
    twin_args = ap.add_mutually_exclusive_group()
    twin_args.add_argument("--bound", action="store_true", help="also each config's twin built with a launch bound")
    twin_args.add_argument("--staged", action="store_true", help="also each config's twin that walks its tile for "
                           "the max part by part as it lands")
    twin_args.add_argument("--early", action="store_true", help="also each config's twin that copies its tile "
                           "before its cluster's peers need have started")
    args = ap.parse_args()
    twin = "bound" if args.bound else "staged" if args.staged else "early" if args.early else ""

    import tilelang
    import torch

    import dispatch
    from dispatch_tilelang import smem_cols

    cases = []
    for dtype in args.dtypes.split(","):
        for case in args.cases.split(","):
            shape_s, dim_s = case.split(":")
            shape, dim = tuple(map(int, shape_s.split("x"))), int(dim_s)
            for op in args.ops.split(","):
                cases.append((op, shape, dim, dtype, smem_cols.configs(view3(shape, dim), dtype)))

    lock = threading.Lock()

    def build(op, key, dtype, cfg, twin=""):
        with lock:
            rows = smem_cols.tile_rows(key[1], dtype, cfg["block_i"], cfg["cluster"], cfg["threads"])
            prog = smem_cols.program(op, key, dtype, dtype, cfg["block_i"], rows, cfg["cluster"],
                                      **({twin: True} if twin else {}))
            prim = prog.get_tir(threads=cfg["threads"])
        return tilelang.compile(prim, out_idx=[1], target=prog.target, pass_configs=prog.pass_configs)

    jobs = {}
    for op, shape, dim, dtype, cfgs in cases:
        key = view3(shape, dim)
        for cfg in cfgs:
            jobs[(op, key, dtype, label(cfg))] = (op, key, dtype, cfg)
            if twin:
                jobs[(op, key, dtype, f"{label(cfg)} {twin}")] = (op, key, dtype, cfg, twin)
    kernels = build_on_pool(jobs, lambda job: build(*job), "kernels", args.workers)

    records = []
    save = saver(args.out, "smem_cols", {"command": " ".join(sys.argv), "columns": "op | dtype | shape, dim"}, records,
                 write_race_markdown)
    for op, shape, dim, dtype, cfgs in cases:
        key = view3(shape, dim)
        tdt = getattr(torch, dtype)
        x = torch.randn(shape, device="cuda").to(tdt)
        e = edge_input(torch, shape, dim, tdt)
        y = torch.empty_like(x)
        tfn = torch.logsumexp if op == "logsumexp" else getattr(torch, op)
        dop = getattr(dispatch, op)
        fns = {"copy": lambda: y.copy_(x), "torch": lambda: tfn(x, dim),
               "triton (default)": lambda: dop(x, dim, backend="triton")}
        try:
            check(torch, dop(x, dim, backend="tilelang"), op, x, dim)
            fns["tilelang (default)"] = lambda: dop(x, dim, backend="tilelang")
        except Exception as exc:  # noqa: BLE001
            print("tilelang default:", f"{type(exc).__name__}: {exc}"[:300], flush=True)
        check(torch, fns["triton (default)"](), op, x, dim)
        names = [label(c) + name for c in cfgs for name in (("", " " + twin) if twin else ("",))]
        for name in names:
            k = kernels.get((op, key, dtype, name))
            if k is None:
                continue
            try:
                check(torch, k(e.view(key)), op, e, dim)
                check(torch, k(x.view(key)), op, x, dim)
                xs = x.clone()
                k(x.view(key))
                assert torch.equal(xs, x), "input changed"
            except Exception as exc:  # noqa: BLE001
                print("FAIL", op, shape, dim, dtype, name, f"{type(exc).__name__}: {exc}"[:400], flush=True)
                continue
            fns[name] = (lambda k=k: k(x.view(key)))
        nbytes = (x.numel() + (x.numel() // key[1] if op == "logsumexp" else x.numel())) * x.element_size()
        case = f"{'x'.join(map(str, shape))}, dim {dim}"
        race_case(fns, args, nbytes, x, {"op": op, "shape": list(shape), "dim": dim, "dtype": dtype},
                  f"| {op} | {dtype} | {case}", records, save)


if __name__ == "__main__":
    main()
