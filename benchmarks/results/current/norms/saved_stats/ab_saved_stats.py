"""The long-row norm backward given each row's statistics by the forward, against recomputing them, on one GPU.

Per case (op, dtype, M x N; weight, and bias for layer_norm): device time (``triton.testing.do_bench``
median, L2 flushed) of the Triton forward without and with the statistics stored
(``NormLauncher.run(..., saved=)``), and of the backward (``make_backward``) recomputing them
(as a torch.compile graph's backward node runs it) and given them (as an eager or CUDA-graph
training step runs it), three rounds interleaved; dx of each checked against torch's fp32
backward (max error over the largest |dx|). GB/s over the bytes each must move: forward x read,
y written; backward x and dy read, dx written.

    python3 benchmarks/results/current/norms/saved_stats/ab_saved_stats.py [CASES]

CASES: comma-separated op:dtype:MxN (default: both ops, bf16 and fp32, at 1024x16384, 256x65536
and 64x262144).
"""

from __future__ import annotations

import statistics
import sys

import torch
import torch.nn.functional as F
import triton

from dispatch_triton import norm_backward as NB
from dispatch_triton import norms as N

DEFAULT = ",".join(f"{op}:{dt}:{s}" for dt in ("bfloat16", "float32") for op in ("rms_norm", "layer_norm")
                   for s in ("1024x16384", "256x65536", "64x262144"))


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def case(op: str, dtype_name: str, shape: str) -> None:
    m, n = (int(v) for v in shape.split("x"))
    dtype, dev = getattr(torch, dtype_name), torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(m, n, device=dev, dtype=dtype, generator=g) + 1.0
    dy = torch.randn(m, n, device=dev, dtype=dtype, generator=g)
    w = torch.randn(n, device=dev, dtype=dtype, generator=g)
    b = torch.randn(n, device=dev, dtype=dtype, generator=g) if op == "layer_norm" else None
    cfg = N.default_config(m, n, dtype, dev, op)
    fwd = N.NormLauncher(op, m, n, dtype, n, dev, cfg, 1e-5, True, b is not None, (m, n), like_input=True).run
    backward = NB.make_backward(op, m, n, dtype, n, 1e-5, True, b is not None)
    (stats,) = backward.saves(x, w)
    y = fwd(x, w, b, saved=(stats,))
    tail = ((b,) if b is not None else ()) + (y,)
    xs, ws = x.float().requires_grad_(), w.float().requires_grad_()
    ref = F.rms_norm(xs, (n,), ws, 1e-5) if op == "rms_norm" else F.layer_norm(xs, (n,), ws, b.float(), 1e-5)
    gx, = torch.autograd.grad(ref, [xs], dy.float())
    runs = {"forward": lambda: fwd(x, w, b), "forward+stats": lambda: fwd(x, w, b, saved=(stats,)),
            "backward recomputing": lambda: backward(dy, x, w, *tail),
            "backward given stats": lambda: backward(dy, x, w, *tail, stats)}
    err = {k: float((runs[k]()[0].float() - gx).abs().max() / gx.abs().max()) for k in list(runs)[2:]}
    times = {k: [] for k in runs}
    for _ in range(3):
        for k, fn in runs.items():
            times[k].append(bench(fn))
    esz = x.element_size()
    for k, ts in times.items():
        us = statistics.median(ts)
        moved = (2 if k.startswith("forward") else 3) * m * n * esz
        extra = f", dx error {err[k]:.2e}" if k in err else ""
        print(f"{op:10s} {dtype_name:8s} {shape:10s} {k:21s} {us:8.1f} us {moved / us / 1e3:6.0f} GB/s "
              f"(rounds {', '.join(f'{t:.1f}' for t in ts)}){extra}", flush=True)


def main() -> None:
    cases = (sys.argv[1] if len(sys.argv) > 1 else DEFAULT).split(",")
    print(f"device {torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}")
    for c in cases:
        case(*c.split(":"))


if __name__ == "__main__":
    main()
