"""TileLang's chunk-in-shared-memory norm backward (``smem_norm_backward``) against Triton's (one GPU).

For each case (op, dtype, M x N; rms_norm with a weight, layer_norm with a weight and a bias):
the family's configs of :func:`variants` (chunks, threads, the next row's copy in flight, the
compiler's register bound ``blocks`` and the persistent grid's CTAs an SM ``per_sm``), against
Triton's backward as a training step calls it (given the statistics its forward saved), TileLang's
register-resident backward where it serves, torch eager's backward, and a copy of the bytes.
Timed in interleaved rounds, each call's time including the partials' reduction: with
``--timer flush`` (the default) by ``triton.testing.do_bench`` (L2 flushed, median), where a
TileLang backward's host time (37-46 us a call on an H200 host) can outlast the flush and its
gaps are counted; with ``--timer graph`` by CUDA-graph replays (device time only, no flush). Every variant's dx, dweight and dbias are checked first
against torch's fp32 gradients (each scaled by the reference's largest magnitude, the dtype's
tolerance), on the benchmark input and on rows far from zero (N(1000, 1) with one element 3e4).

Bytes: x and dy read and dx written (M x N each), w read and dweight (dbias) written (N each).

    python3 benchmarks/sweep_smem_norm_backward.py --out out/smem_norm_backward --timer graph
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "backends"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep_harness import race_arguments, race_case, row_case, row_cases, saver, write_race_markdown  # noqa: E402

SHAPES = {"bfloat16": "4096x4096,1024x16384,512x32768,256x65536,128x131072,64x262144",
          "float32": "1024x16384,256x65536,64x262144"}
EPS = 1e-5


def label(cfg: dict) -> str:
    return (f"tilelang smem c{cfg['cluster']} t{cfg['threads']} tile{cfg['tile_n']}"
            f"{' ahead' if cfg['ahead'] else ''} b{cfg['blocks']} x{cfg['per_sm']}")


def variants(n: int, dtype: str, pick: str = "all") -> list[dict]:
    """``pick="default"``: the config the backward runs (:func:`default_config`). ``"all"``: each
    (cluster, threads) of chunks of at least 4096 (smaller ones never led), the next row's copy
    in flight where it fits (it led at every length but where it did not fit), registers for 1,
    2 or 3 CTAs an SM (3: 256 threads only), grids of 1-3 clusters' CTAs an SM; rows of up to
    2048 in 128 and 256 threads only, at grids of 2, 4 and 8 CTAs an SM."""
    from dispatch_tilelang import smem_norm_backward as SB

    default = SB.default_config(n, dtype)
    if pick == "default":
        return [default] if default else []
    out = []
    for cfg in SB.configs(n, dtype):
        if n <= 2048:
            out += [{**cfg, "per_sm": per_sm} for per_sm in (2, 4, 8) if cfg["threads"] <= 256]
            continue
        if (cfg["threads"] == 128 or cfg["tile_n"] < 4096) and cfg != default:
            continue
        ahead = int(SB.check_backward(n, dtype, cfg["tile_n"], cfg["cluster"], 1, cfg["threads"], True) is None)
        for blocks, per_sm in ((1, 1), (1, 2), (2, 2), (3, 3)):
            if blocks == 3 and cfg["threads"] != 256:
                continue
            out.append({**cfg, "ahead": ahead, "blocks": blocks, "per_sm": per_sm})
    return out


def build(op, n, dtype, cfg):
    from dispatch_tilelang import smem_norm_backward as SB

    return SB.build(op, n, dtype, True, op == "layer_norm", EPS, cfg)


def main() -> None:
    ap = race_arguments("rms_norm,layer_norm", "bfloat16,float32")
    ap.add_argument("--time-limit", type=float, default=0, help="seconds after which no case is begun (0: none)")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--pick", choices=("all", "default"), default="all",
                    help="the configs timed: every one of `variants`, or the one the backward runs by default")
    args = ap.parse_args()

    import torch

    from sweep_norm_backward import backward_call, eager_call, grad_check, reference

    from dispatch_tilelang import norm_backward as TB
    from dispatch_tilelang import smem_norm_backward as SB

    cases = [(op, m, n, dtype, variants(n, dtype, args.pick)) for op, m, n, dtype in row_cases(args, SHAPES)]
    t0 = time.time()
    jobs = [(op, n, dtype, cfg) for op, _, n, dtype, cfgs in cases for cfg in cfgs]
    built = ("tile_n", "cluster", "threads", "ahead", "blocks")  # per_sm is the grid's, not the build's
    jobs = list({(op, n, dtype, *(cfg[k] for k in built)): (op, n, dtype, cfg) for op, n, dtype, cfg in jobs}.values())

    def one(job):
        try:
            build(*job)
        except Exception as exc:  # noqa: BLE001
            print("BUILD FAIL", job, f"{type(exc).__name__}: {exc}"[:400], flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, jobs))
    print(f"built {len(jobs)} kernels in {time.time() - t0:.0f} s", flush=True)

    records = []
    save = saver(args.out, "smem_norm_backward", {"command": " ".join(sys.argv), "columns": "op | dtype | M x N"},
                 records, write_race_markdown)
    t0 = time.time()
    for op, m, n, dtype, cfgs in cases:
        if args.time_limit and time.time() - t0 > args.time_limit:
            print("time limit: stopped before", op, dtype, m, n, flush=True)
            break
        tdt = getattr(torch, dtype)
        g = torch.Generator(device="cuda").manual_seed(m * 131 + n)
        x = torch.randn((m, n), generator=g, device="cuda").to(tdt)
        dy = torch.randn((m, n), generator=g, device="cuda").to(tdt)
        w = (torch.randn(n, generator=g, device="cuda") * 0.5 + 1).to(tdt)
        b = (torch.randn(n, generator=g, device="cuda") * 0.5).to(tdt) if op == "layer_norm" else None
        inp = dict(x=x, dy=dy, w=w, b=b, y=None)
        hx = (torch.randn((5, n), generator=g, device="cuda") + 1000)
        hx[:, n // 3] = 3e4
        hard = dict(x=hx.to(tdt), dy=dy[:5].clone(), w=w, b=b, y=None)
        refs = {"plain": reference(op, inp), "hard": reference(op, hard)}
        extra = (b,) if b is not None else ()
        out = torch.empty_like(x)
        fns = {"copy": lambda: out.copy_(x)}
        tri = backward_call(op, m, n, tdt, None, {}, {**inp, "y": torch.empty_like(x)})
        why = grad_check(tri(), refs["plain"], tdt)
        if why is None:
            fns["triton (dispatch's backward)"] = tri
        else:
            print("FAIL triton", op, m, n, dtype, why, flush=True)
        fns["torch eager"] = eager_call(op, inp)
        if TB.serves(n, "cuda"):
            reg = TB.make_backward(op, m, n, tdt, True, b is not None, EPS, "cuda")
            why = grad_check(reg(dy, x, w, *extra, None), refs["plain"], tdt)
            if why is None:
                fns["tilelang registers"] = lambda reg=reg: reg(dy, x, w, *extra, None)
            else:
                print("FAIL tilelang registers", op, m, n, dtype, why, flush=True)
        for c in cfgs:
            try:
                bwd = SB.make(op, m, n, tdt, True, b is not None, EPS, c)
                hb = SB.make(op, 5, n, tdt, True, b is not None, EPS, c)
                why = (grad_check(bwd(dy, x, w, *extra, None), refs["plain"], tdt)
                       or grad_check(hb(hard["dy"], hard["x"], w, *extra, None), refs["hard"], tdt))
            except Exception as exc:  # noqa: BLE001
                why = f"{type(exc).__name__}: {exc}"[:400]
            if why is not None:
                print("FAIL", op, m, n, dtype, label(c), why, flush=True)
                continue
            fns[label(c)] = lambda bwd=bwd: bwd(dy, x, w, *extra, None)
        nbytes = 3 * x.numel() * x.element_size() + (2 + len(extra) * 2) * n * x.element_size()
        race_case(fns, args, nbytes, x, *row_case(op, m, n, dtype), records, save, shown=12)


if __name__ == "__main__":
    main()
