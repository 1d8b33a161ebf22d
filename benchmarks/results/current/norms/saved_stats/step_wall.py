"""What a training step's norm costs its caller, per call: forward + backward through autograd, back to back.

Per case (op, dtype, M x N, weight and bias): the wall time per step of ``reps`` back-to-back
steps (``y = op(x, ...)``, ``y.backward(dy)``; one synchronize at the end), for dispatch with
the Triton backend forced, its backward given the forward's statistics (as shipped) and
recomputing them (``saves`` taken off the backward), next to torch eager and torch.compile
(a compiled function of the forward; its backward is torch.compile's), median of seven rounds
of 200 steps.

    python3 benchmarks/results/current/norms/saved_stats/step_wall.py [CASES]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

import dispatch
from dispatch_triton import norms as N

DEFAULT = ("layer_norm:bfloat16:64x262144,layer_norm:bfloat16:1024x16384,layer_norm:float32:64x262144,"
           "rms_norm:bfloat16:64x262144,rms_norm:bfloat16:256x65536,layer_norm:bfloat16:8x4096")


def per_step(step, reps: int = 200) -> float:
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / reps * 1e6)
    return statistics.median(rounds)


def case(op: str, dtype_name: str, shape: str, shipped_backward) -> None:
    m, n = (int(v) for v in shape.split("x"))
    dtype, dev = getattr(torch, dtype_name), torch.device("cuda")
    x = torch.randn(m, n, device=dev, dtype=dtype, requires_grad=True)
    w = torch.randn(n, device=dev, dtype=dtype, requires_grad=True)
    b = torch.randn(n, device=dev, dtype=dtype, requires_grad=True) if op == "layer_norm" else None
    dy = torch.randn(m, n, device=dev, dtype=dtype)
    args = (x, (n,), w) + ((b, 1e-5) if b is not None else (1e-5,))
    ours = getattr(dispatch, op)
    ref = getattr(F, op)
    compiled = torch.compile(ref)

    def step_with(fn, **kw):
        def step():
            fn(*args, **kw).backward(dy)
        return step

    out = {"torch eager": per_step(step_with(ref)), "torch.compile": per_step(step_with(compiled))}
    N.backward = shipped_backward
    dispatch.reset()  # forget resolved calls: the next one asks the backend for its backward again
    out["dispatch (given stats)"] = per_step(step_with(ours, backend="triton"))

    def stripped(spec):
        fn = shipped_backward(spec)
        if hasattr(fn, "saves"):
            del fn.saves
        return fn

    N.backward = stripped
    dispatch.reset()  # forget resolved calls: the next one asks the backend for its backward again
    out["dispatch (recomputing)"] = per_step(step_with(ours, backend="triton"))
    N.backward = shipped_backward
    print(f"{op:10s} {dtype_name:8s} {shape:10s} " + "  ".join(f"{k} {v:7.1f} us" for k, v in out.items()),
          flush=True)


def main() -> None:
    print(f"device {torch.cuda.get_device_name()}; per-step wall time of back-to-back training steps, us")
    shipped = N.backward
    for c in (sys.argv[1] if len(sys.argv) > 1 else DEFAULT).split(","):
        case(*c.split(":"), shipped)


if __name__ == "__main__":
    main()
