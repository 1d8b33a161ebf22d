"""Where the time of the one-launch (``COOP``) rms_norm / layer_norm backward of long rows goes, on one GPU.

Each case's backward (``dispatch_triton.norm_backward.make_backward``, the default plan or the
plan overrides given) is timed with ``triton.testing.do_bench`` (median, L2 flushed between
repetitions) next to a copy of the same byte count (x and dy read, dx written), in one of three
variants of the kernel:

* ``base``: the kernel as shipped; its dx is checked against torch's fp32 backward (max error
  relative to the reference's largest magnitude);
* ``nowait``: a row's partials read once, without waiting for them (wrong results): what the
  waiting costs;
* ``local``: nothing published, nothing read (wrong results; the partials' reductions go too, as
  nothing uses them): the kernel's streaming alone, in the same persistent structure.

A variant replaces the exchange helpers of ``dispatch_triton.norm_backward_kernels`` before the
first compile, so each runs in its own process (the JIT keeps a kernel's dependencies from its
first compile). Each line also gives the compiled kernel's registers a thread, registers spilled,
and the PTX's counts of atomics, barriers and volatile loads.

    python3 benchmarks/profile_norm_exchange.py base rms_norm:bfloat16:1024x16384,layer_norm:bfloat16:256x65536
    python3 benchmarks/profile_norm_exchange.py local layer_norm:bfloat16:64x262144 \
        '{}' '{"BLOCK_N": 1024, "num_warps": 2}'

Arguments: the variant, a comma-separated list of op:dtype:MxN cases, then plan overrides as JSON
(``{}``: the default plan; see ``backward_plan``).
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from dispatch_triton import norm_backward as NB
from dispatch_triton import norm_backward_kernels as K

VARIANTS = ("base", "nowait", "local")


@triton.jit
def _gather_nowait(slot_ptr, base, S, tag, N, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr):
    # the row's words read once, whatever their tag
    j = tl.arange(0, CHUNKS_P2)
    if IS_RMS:
        k = tl.arange(0, 2)
    else:
        k = tl.arange(0, 4)
    live = (j < S)[:, None] & (k >= 0)[None, :]
    v = tl.load(slot_ptr + base + j[:, None] * k.shape[0] + k[None, :], mask=live, other=0, volatile=True)
    f = (v & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
    t = tl.sum(tl.sum(f, 1), 0)
    return t, t + N, t * 0.5, t * 0.25


@triton.jit
def _gather_local(slot_ptr, base, S, tag, N, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr):
    z = (base * 0).to(tl.float32)
    return z + 1.0, z + N, z + 0.5, z + 0.25


@triton.jit
def _publish_none(slot_ptr, idx, s1, m2, sgd, sg, tag, IS_RMS: tl.constexpr):
    pass


def _kernels_seen() -> dict:
    return {id(c): c for e in K._norm_bwd_coop.device_caches.values() for c in e[0].values()}


def one(op: str, dtype_name: str, shape: str, variant: str, over: dict) -> str:
    m, n = (int(v) for v in shape.split("x"))
    dtype, dev = getattr(torch, dtype_name), torch.device("cuda")
    x = torch.randn(m, n, device=dev, dtype=dtype)
    dy = torch.randn(m, n, device=dev, dtype=dtype)
    w = torch.randn(n, device=dev, dtype=dtype)
    b = torch.randn(n, device=dev, dtype=dtype) if op == "layer_norm" else None
    backward = NB.make_backward(op, m, n, dtype, n, 1e-5, True, b is not None, plan=over or None)
    args = (dy, x, w) + ((b,) if b is not None else ()) + (torch.empty_like(x),)
    plan = NB.backward_plan(m, n, dtype, dev, None, over or None)
    before = _kernels_seen()
    out = backward(*args)
    kernels = [(c.n_regs, c.n_spills, c.asm["ptx"].count("atom."), c.asm["ptx"].count("bar.sync"),
                c.asm["ptx"].count("ld.volatile")) for key, c in _kernels_seen().items() if key not in before]
    err = float("nan")
    if variant == "base":
        xs, ws = x.float().requires_grad_(), w.float().requires_grad_()
        ref = F.rms_norm(xs, (n,), ws, 1e-5) if op == "rms_norm" else F.layer_norm(xs, (n,), ws, b.float(), 1e-5)
        gx, = torch.autograd.grad(ref, [xs], dy.float())
        err = float((out[0].float() - gx).abs().max() / gx.abs().max())
    us = triton.testing.do_bench(lambda: backward(*args), warmup=25, rep=200, return_mode="median") * 1e3
    src = torch.empty(int(1.5 * m * n), device=dev, dtype=dtype)
    dst = torch.empty_like(src)
    copy_us = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median") * 1e3
    gbs = 3 * m * n * x.element_size() / us / 1e3
    return (f"{op} {dtype_name} {shape} {variant} {json.dumps(over)} plan GR{plan['GR']} S{plan.get('S')} "
            f"bn{plan['BLOCK_N']} w{plan['num_warps']} coop {plan.get('COOP')} "
            f"(registers, spilled, atomics, barriers, volatile loads) {kernels}: {us:.1f} us {gbs:.0f} GB/s, "
            f"{100 * copy_us / us:.1f}% of a same-size copy ({copy_us:.1f} us), dx error {err:.2e}")


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in VARIANTS:
        print(__doc__)
        return 2
    variant = sys.argv[1]
    if variant == "nowait":
        K._gather = _gather_nowait
    elif variant == "local":
        K._gather, K._publish = _gather_local, _publish_none
    cases = [c.split(":") for c in sys.argv[2].split(",")]
    configs = [json.loads(c) for c in sys.argv[3:]] or [{}]
    for op, dtype_name, shape in cases:
        for over in configs:
            try:
                print(one(op, dtype_name, shape, variant, over), flush=True)
            except Exception as exc:  # a plan that does not build: say so, go on
                print(f"{op} {dtype_name} {shape} {variant} {json.dumps(over)}: failed: {type(exc).__name__}: "
                      f"{str(exc)[:200]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
