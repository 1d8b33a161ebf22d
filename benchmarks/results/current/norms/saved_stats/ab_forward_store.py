"""How the one-launch (COOP) norm forward stores each row's statistics, two ways, on one GPU.

``masked`` (as shipped): ``_save_stats``, a masked scalar store of rstd (and layer_norm's mean)
by every program of the row, the mask true on its first chunk's; ``branch``: the same stores
under ``if c == 0`` without a mask. Run once per way (the JIT keeps a kernel's helpers from its
first compile, so each way needs its own process); per case it prints the forward's device time
without and with the store and the compiled kernels' registers and spills.

    python3 benchmarks/results/current/norms/saved_stats/ab_forward_store.py masked
    python3 benchmarks/results/current/norms/saved_stats/ab_forward_store.py branch
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from dispatch_triton import norm_kernels as K
from dispatch_triton import norms as N

CASES = ("layer_norm:bfloat16:64x262144", "rms_norm:bfloat16:64x262144", "layer_norm:float32:64x262144")


@triton.jit
def _save_stats_branch(st_ptr, rows, mean, rstd, mask, M, IS_RMS: tl.constexpr):
    if mask:
        r = tl.cast(rows, tl.int64)
        tl.store(st_ptr + r, rstd)
        if not IS_RMS:
            tl.store(st_ptr + M + r, mean)


def main() -> None:
    way = sys.argv[1]
    if way == "branch":
        K._save_stats = _save_stats_branch
    for case in CASES:
        op, dtype_name, shape = case.split(":")
        m, n = (int(v) for v in shape.split("x"))
        dtype, dev = getattr(torch, dtype_name), torch.device("cuda")
        x = torch.randn(m, n, device=dev, dtype=dtype)
        w = torch.randn(n, device=dev, dtype=dtype)
        b = torch.randn(n, device=dev, dtype=dtype) if op == "layer_norm" else None
        cfg = N.default_config(m, n, dtype, dev, op)
        launcher = N.NormLauncher(op, m, n, dtype, n, dev, cfg, 1e-5, True, b is not None, (m, n), like_input=True)
        st = torch.empty(2 * m, device=dev)
        y0, y1 = launcher.run(x, w, b), launcher.run(x, w, b, saved=(st,))
        assert torch.allclose(y0.float(), y1.float(), rtol=1e-2, atol=1e-2)
        times = []
        for _ in range(3):
            for saved in (None, (st,)):
                times.append(triton.testing.do_bench(lambda: launcher.run(x, w, b, saved=saved), warmup=25, rep=200,
                                                     return_mode="median") * 1e3)
        plain, stats = sorted(times[0::2])[1], sorted(times[1::2])[1]
        kernels = [(c.n_regs, c.n_spills) for e in K._norm_fwd.device_caches.values() for c in e[0].values()]
        print(f"{way:7s} {op:10s} {dtype_name:8s} {shape:10s} config {cfg}: plain {plain:.1f} us, storing {stats:.1f} us "
              f"(rounds {', '.join(f'{t:.1f}' for t in times)}); kernels so far (registers, spilled) {kernels}",
              flush=True)


if __name__ == "__main__":
    main()
