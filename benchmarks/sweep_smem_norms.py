"""TileLang's chunk-in-shared-memory norms (``smem_norms``) against the other norm kernels (one GPU).

For each case (op, dtype, M x N; rms_norm with a weight, layer_norm with a weight and a bias):
every chunk-in-shared-memory config of the TileLang norm space, the default of TileLang's other
families, Triton's and TileLang's defaults through dispatch (forced, tuning off), torch eager,
and a copy of the input, timed with ``triton.testing.do_bench`` (L2 flushed, median) in
interleaved rounds. Every kernel's output is checked against torch in float64 first, on the
benchmark input and on rows far from zero with one massive element each.

    python3 benchmarks/sweep_smem_norms.py --out out/smem_norms

``--two-walks``: for layer_norm, each chunk-in-shared-memory config also with ``walks=2`` (an
option of ``smem_norms.program``: the sum and the squares about a shift in one walk of the chunk),
labelled "... walks2", checked the same way (the hard rows also hold a massive element at column
0, which moves the first chunk's shift off its mean and so takes its squares' second walk).

``--bound-twin``: each chunk-in-shared-memory config also built the other way as to the launch
bound (``smem_norms.program(bound=...)``; :func:`smem_norms.ships_bound` says which configs
ship with it), labelled "... bound" or "... unbound" (with ``--two-walks``, layer_norm's
"... walks2 bound" or "... walks2 unbound" too), checked the same way;
``benchmarks/smem_kernel_registers.py --norms`` shows a thread's registers either way.

``--synced``: each config of a cluster also built with ``early=False`` (its cluster synced before
its chunk's copy, as shipped before), labelled "... synced".
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "backends"))

from sweep_harness import (build_on_pool, race_arguments, race_case, row_case, row_cases, saver,  # noqa: E402
                           write_race_markdown)

SHAPES = {"bfloat16": "4096x4096,2048x8192,1024x16384,512x32768,256x65536,128x131072,32x151936,64x262144,4x262144",
          "float32": "1024x16384,256x65536,64x262144"}
EPS = 1e-5


def reference(torch, op, x, w, b):
    xd, wd = x.double(), w.double()
    if op == "rms_norm":
        return torch.nn.functional.rms_norm(xd, (x.shape[-1],), wd, EPS)
    return torch.nn.functional.layer_norm(xd, (x.shape[-1],), wd, b.double(), EPS)


def check(torch, y, op, x, w, b):
    from dispatch.tolerance import tolerance

    rtol, atol = tolerance(x.dtype)
    torch.testing.assert_close(y.double(), reference(torch, op, x, w, b).to(x.dtype).double(), rtol=rtol, atol=atol)


def hard_rows(torch, m, n, dtype, head=False):
    """Rows far from zero, one element of each massive (3e4 in rows of N(1000, 1)); ``head``: another
    at column 0 in all rows but the last."""
    x = torch.randn(m, n) + 1000
    x[:, n // 3] = 3e4
    if head:
        x[:-1, 0] = 3e4
    return x.to(dtype).cuda()


def label(cfg: dict) -> str:
    if cfg.get("smem"):
        return f"tilelang smem c{cfg['cluster']} t{cfg['threads']} tile{cfg['tile_n']}"
    return f"tilelang {'chunks' if cfg['tile_n'] else 'rows'} t{cfg['threads']} tile{cfg['tile_n']}"


def twins(args, op: str, cfg: dict) -> list[tuple[str, dict]]:
    """The twins of a chunk-in-shared-memory config that the flags ask for: (label, how
    ``smem_norms.program`` builds it)."""
    from dispatch_tilelang.smem_norms import ships_bound

    if not cfg.get("smem"):
        return []
    ships = ships_bound(cfg["cluster"], cfg["threads"])
    flip = ("unbound" if ships else "bound", {"bound": not ships})
    out = [flip] if args.bound_twin else []
    if args.synced and cfg["cluster"] > 1:
        out.append(("synced", {"early": False}))
    if args.two_walks and op == "layer_norm":
        out.append(("walks2", {"walks": 2}))
        if args.bound_twin:
            out.append((f"walks2 {flip[0]}", {"walks": 2, **flip[1]}))
    return out


def twin_kernels(smem_norms, args, cases) -> dict:
    """Every twin (:func:`twins`) of the configs of ``cases``, built on a thread pool:
    {(op, n, dtype, sorted config items, twin label): kernel}."""
    from dispatch_tilelang.build import compile_program

    jobs = {(op, n, dtype, tuple(sorted(cfg.items())), twin): (op, n, dtype, cfg, kwargs)
            for op, _m, n, dtype, cfgs, _ in cases for cfg in cfgs for twin, kwargs in twins(args, op, cfg)}

    def one(job):
        op, n, dtype, cfg, kwargs = job
        return compile_program(lambda: smem_norms.program(op, n, dtype, True, op == "layer_norm", EPS, cfg["tile_n"],
                                                          cfg["cluster"], **kwargs),
                               {"block_m": 1, "threads": cfg["threads"]})

    return build_on_pool(jobs, one, "twins") if jobs else {}


def main() -> None:
    ap = race_arguments("rms_norm,layer_norm", "bfloat16,float32")
    ap.add_argument("--time-limit", type=float, default=0, help="seconds after which no case is begun (0: none)")
    ap.add_argument("--two-walks", action="store_true",
                    help="layer_norm: each shared-memory config also with walks=2 (see above)")
    ap.add_argument("--synced", action="store_true",
                    help="each shared-memory config of a cluster also built with early=False (see above)")
    ap.add_argument("--bound-twin", action="store_true",
                    help="each shared-memory config also built the other way as to the launch bound (see above)")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    import dispatch
    from dispatch_tilelang import norms as NM
    from dispatch_tilelang import smem_norms

    cases = []
    for op, m, n, dtype in row_cases(args, SHAPES):
        space = NM.config_space(m, n, "cuda", dtype)
        cfgs = [c for c in space if c.get("smem")]
        cfgs.append([c for c in space if not c.get("smem")][0])  # the other families' default
        cases.append((op, m, n, dtype, cfgs, space[0]))
    t0 = time.time()
    for op, m, n, dtype, cfgs, _ in cases:
        for cfg, why in NM.build_all(op, n, dtype, True, op == "layer_norm", EPS, "cuda", 0, cfgs):
            print("BUILD FAIL", op, n, dtype, cfg, why[:300], flush=True)
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    twin_built = twin_kernels(smem_norms, args, cases)

    records = []
    save = saver(args.out, "smem_norms", {"command": " ".join(sys.argv), "columns": "op | dtype | M x N"}, records,
                 write_race_markdown)
    t0 = time.time()
    for op, m, n, dtype, cfgs, default in cases:
        if args.time_limit and time.time() - t0 > args.time_limit:
            print("time limit: stopped before", op, dtype, m, n, flush=True)
            break
        tdt = getattr(torch, dtype)
        x = torch.randn(m, n, device="cuda").to(tdt)
        w = (torch.rand(n, device="cuda") + 0.5).to(tdt)
        b = (torch.randn(n, device="cuda")).to(tdt) if op == "layer_norm" else None
        y = torch.empty_like(x)
        wb = (w,) if b is None else (w, b)
        dop, top = getattr(dispatch, op), getattr(F, op)
        fns = {"copy": lambda: y.copy_(x), "torch": lambda: top(x, (n,), *wb, EPS),
               "triton (default)": lambda: dop(x, (n,), *wb, EPS, backend="triton"),
               "tilelang (default)": lambda: dop(x, (n,), *wb, EPS, backend="tilelang")}
        hard = hard_rows(torch, 5, n, tdt)
        for cfg in cfgs:
            try:
                k = NM.build(op, n, dtype, True, b is not None, EPS, "cuda", 0, cfg)
                bb = w if b is None else b  # the kernel's bias slot (unread without a bias)
                check(torch, k(hard, w, bb), op, hard, w, b)
                check(torch, k(x, w, bb), op, x, w, b)
            except Exception as exc:  # noqa: BLE001
                print("FAIL", op, m, n, dtype, cfg, f"{type(exc).__name__}: {exc}"[:400], flush=True)
                continue
            fns[label(cfg) + (" (default)" if cfg == default else "")] = (lambda k=k, bb=bb: k(x, w, bb))
            for twin, _ in twins(args, op, cfg):
                k2 = twin_built.get((op, n, dtype, tuple(sorted(cfg.items())), twin))
                if k2 is None:
                    continue
                try:
                    for xc in (hard_rows(torch, 5, n, tdt, head=True), hard, x):
                        check(torch, k2(xc, w, bb), op, xc, w, b)
                except Exception as exc:  # noqa: BLE001
                    print("FAIL", twin, op, m, n, dtype, cfg, f"{type(exc).__name__}: {exc}"[:400], flush=True)
                    continue
                fns[f"{label(cfg)} {twin}"] = (lambda k2=k2, bb=bb: k2(x, w, bb))
        for name in ("triton (default)", "tilelang (default)"):
            check(torch, fns[name](), op, x, w, b)
        params = len(wb) * n * x.element_size()
        nbytes = 2 * x.numel() * x.element_size() + params
        race_case(fns, args, nbytes, x, *row_case(op, m, n, dtype), records, save)


if __name__ == "__main__":
    main()
