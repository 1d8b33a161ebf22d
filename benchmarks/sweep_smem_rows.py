"""TileLang's chunk-in-shared-memory row kernels (``smem_rows``) against the other row kernels (one GPU).

For each shape: every chunk-in-shared-memory config of the TileLang config space, TileLang's
register families' default (what served before, ``default_config`` for strided rows), TileLang's
and Triton's defaults through dispatch, torch, and a copy of the same bytes, timed with
``triton.testing.do_bench`` (L2 flushed, median) in interleaved rounds. Every kernel's output is
checked against torch first, on the benchmark input and on rows of -inf, +inf and NaN.

    python3 benchmarks/sweep_smem_rows.py --out out/smem_rows

``--small-chunks`` adds every cluster of 1-16 CTAs at 64, 128 and 256 threads whose chunk fits,
however small (the config space keeps chunks of 16 KB or more): few long rows, where a row's
chunks are all the CTAs the GPU runs.

    python3 benchmarks/sweep_smem_rows.py --small-chunks --shapes 1x32000,8x128256,1x262144 --out out/few

``--unbound`` adds each chunk-in-shared-memory config's twin built without the kernel's launch
bound (``smem_rows.launch_bound``; ``benchmarks/smem_kernel_registers.py [--unbound]`` shows a
thread's registers either way), timed next to it. ``--staged`` adds each one's twin that copies
its chunk in parts and walks each part for the max as it lands (``smem_rows.program(staged=True)``);
``--poly`` each one's twin that takes a softmax output's exponent by a polynomial
(``smem_rows.program(poly=True)``); ``--synced`` each one's twin that syncs its cluster before it
copies its chunk (``smem_rows.program(early=False)``, as shipped before; kept configs too). Twins
may be asked for together; each is timed next to its kernel. Softmax's config space holds its
configs of up to eight chunks a second time with ``keep: 1`` (its exponentials kept in shared
memory between the sum and the output), labelled "... kept".
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "backends"))

from sweep_harness import (build_on_pool, race_arguments, race_case, row_case, row_cases, saver,  # noqa: E402
                           write_race_markdown)

SHAPES = {"bfloat16": "2048x16384,2097x32000,2048x32768,1024x65536,512x131072,256x151936,256x262144,8x128256,1x262144",
          "float32": "2048x16384,1024x32768,1024x65536"}


def edge_rows(torch, m, n, dtype, seg):
    x = torch.randn(m, n) * 3
    x[0] = -float("inf")
    x[1, n // 3] = float("inf")
    x[2, n // 2] = float("nan")
    x[3, : min(n - 1, seg + 7)] = -float("inf")
    x[4, n // 2:] = -float("inf")
    x[5] += 1000  # rows far from zero: a shift's rounding must not show
    x[6] = x[6] / 8 - 20000
    return x.to(dtype).cuda()


def check(torch, y, op, x):
    xf = x.float()
    want = (torch.logsumexp(xf, -1) if op == "logsumexp" else getattr(torch, op)(xf, -1)).to(x.dtype)
    tol = (1e-5, 1e-5) if x.dtype == torch.float32 else (1.6e-2, 1e-2)
    torch.testing.assert_close(y, want, rtol=tol[0], atol=tol[1], equal_nan=True)
    assert torch.equal(torch.isnan(y), torch.isnan(want))


def label(cfg: dict) -> str:
    fam = "smem" if cfg.get("smem") else ("row" if cfg["tile_n"] == 0 else "split")
    kept = " kept" if cfg.get("keep") else ""
    return f"tilelang {fam} c{cfg['cluster']} t{cfg['threads']} tile{cfg['tile_n']}{kept}"


def small_chunk_configs(C, smem_rows, n: int, dtype: str) -> list[dict]:
    """Every chunk-in-shared-memory config of 1-16 chunks at 64-256 threads that launches, with at most
    1/8 of the covered row padding, whatever its chunk's size."""
    out = []
    for cluster in (1, 2, 4, 8, 16):
        for threads in (64, 128, 256):
            cfg = C._smem_config(n, dtype, cluster, threads)
            tile = cfg["tile_n"]
            if (cluster * tile - n) * 8 <= cluster * tile \
                    and smem_rows.check_launch(n, dtype, tile, cluster, 1, threads) is None:
                out.append(cfg)
    return out


TWINS = {"unbound": {"bound": False}, "staged": {"staged": True}, "poly": {"poly": True},
         "synced": {"early": False}}  # a twin's name: how smem_rows.program builds it


def twin_kernels(B, smem_rows, cases, twin: str) -> dict:
    """Each chunk-in-shared-memory config of ``cases`` built as its ``twin`` (of :data:`TWINS`), on
    a thread pool: {(op, n, dtype, sorted config items): kernel}."""
    kept = twin == "synced"  # (the twin that builds kept configs too)
    jobs = {(op, n, dtype, tuple(sorted(cfg.items()))): (op, n, dtype, cfg)
            for op, _m, n, dtype, cfgs in cases for cfg in cfgs
            if cfg.get("smem") and (kept or not cfg.get("keep"))}

    def one(job):
        op, n, dtype, cfg = job
        keep = {"keep": True} if cfg.get("keep") else {}
        return B.compile_program(lambda: smem_rows.program(op, n, dtype, dtype, cfg["tile_n"], cfg["cluster"],
                                                           B.cuda_arch(), **TWINS[twin], **keep),
                                 {"block_m": 1, "threads": cfg["threads"]})

    return build_on_pool(jobs, one, f"{twin} twins")


def main() -> None:
    ap = race_arguments("softmax", "bfloat16,float32")
    ap.add_argument("--small-chunks", action="store_true",
                    help="also every cluster of 1-16 at 64-256 threads, chunks of any size (few long rows)")
    twin_args = ap.add_argument_group("twins (any of them)")
    twin_args.add_argument("--unbound", action="store_true",
                           help="also each smem config's twin built without the kernel's launch bound")
    twin_args.add_argument("--poly", action="store_true", help="also each smem config's twin that takes a "
                           "softmax output's exponent by a polynomial on the FMA pipes (one ex2 an element)")
    twin_args.add_argument("--staged", action="store_true", help="also each smem config's twin that walks its "
                           "chunk for the max part by part as it lands")
    twin_args.add_argument("--synced", action="store_true", help="also each smem config's twin that syncs its "
                           "cluster before it copies its chunk (early=False)")
    args = ap.parse_args()

    import torch

    import dispatch
    from dispatch_tilelang import build as B, configs as C, smem_rows

    cases = []
    for op, m, n, dtype in row_cases(args, SHAPES):
        cfgs = [c for c in C.config_space(op, m, n, dtype, "cuda") if c.get("smem")]
        if args.small_chunks:
            cfgs += [c for c in small_chunk_configs(C, smem_rows, n, dtype) if c not in cfgs]
        cfgs.append(C.default_config(op, m, n, dtype, "cuda", row_stride=n + 8))  # the register default
        cases.append((op, m, n, dtype, cfgs))
    t0 = time.time()
    for op, m, n, dtype, cfgs in cases:
        failed = B.build_all(op, m, n, dtype, dtype, cfgs, "cuda")
        for cfg, why in failed:
            print("BUILD FAIL", op, n, dtype, cfg, why[:300], flush=True)
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    twins = {name: twin_kernels(B, smem_rows, cases, name) for name in TWINS if getattr(args, name)}

    records = []
    save = saver(args.out, "smem_rows", {"command": " ".join(sys.argv), "columns": "op | dtype | M x N"}, records,
                 write_race_markdown)
    for op, m, n, dtype, cfgs in cases:
        tdt = getattr(torch, dtype)
        x = torch.randn(m, n, device="cuda").to(tdt)
        y = torch.empty_like(x)
        tfn = torch.logsumexp if op == "logsumexp" else getattr(torch, op)
        dop = getattr(dispatch, op)
        fns = {"copy": lambda: y.copy_(x), "torch": lambda: tfn(x, -1),
               "triton (default)": lambda: dop(x, -1, backend="triton"),
               "tilelang (default)": lambda: dop(x, -1, backend="tilelang")}
        default = C.default_config(op, m, n, dtype, "cuda")
        for cfg in cfgs:
            e = edge_rows(torch, 7, n, tdt, cfg["tile_n"])
            kernels = [(label(cfg) + (" (default)" if cfg == default else ""),
                        lambda cfg=cfg: B.build(op, m, n, dtype, dtype, cfg, "cuda"))]
            for twin_name, built in twins.items():
                twin = built.get((op, n, dtype, tuple(sorted(cfg.items()))))
                if twin is not None:
                    kernels.append((label(cfg) + " " + twin_name, lambda twin=twin: twin))
            for name, make in kernels:  # a twin is timed only next to its kernel
                try:
                    k = make()
                    check(torch, k(e), op, e)
                    check(torch, k(x), op, x)
                except Exception as exc:  # noqa: BLE001
                    print("FAIL", op, m, n, dtype, name, f"{type(exc).__name__}: {exc}"[:400], flush=True)
                    break
                fns[name] = (lambda k=k: k(x))
        for name in ("triton (default)", "tilelang (default)"):
            check(torch, fns[name](), op, x)
        nbytes = (x.numel() + (m if op == "logsumexp" else x.numel())) * x.element_size()
        race_case(fns, args, nbytes, x, *row_case(op, m, n, dtype), records, save)


if __name__ == "__main__":
    main()
