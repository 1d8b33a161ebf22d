"""A training step of a norm (bf16, the forward and torch.autograd.grad for input and weight) through
dispatch[triton] and torch: back-to-back wall time per step and per forward, then torch.profiler's
host and kernel times for 50 Triton steps.

    python3 training_step.py rms_norm 256x65536 1024x16384
"""
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import dispatch

op = sys.argv[1]
for shape in sys.argv[2:]:
    m, n = (int(v) for v in shape.split("x"))
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    fn = getattr(dispatch, op)
    for be in ("triton", "torch"):
        def step():
            y = fn(x, (n,), w, backend=be)
            return torch.autograd.grad(y, (x, w), dy)

        def fwd():
            return fn(x, (n,), w, backend=be)
        for _ in range(30):
            step()
        torch.cuda.synchronize()
        for name, f in (("step", step), ("forward", fwd)):
            best = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(100):
                    f()
                torch.cuda.synchronize()
                best.append((time.perf_counter() - t0) * 1e4)
            best.sort()
            print(f"{op} {shape} {be} {name}: wall {best[2]:.1f} us per call (min {best[0]:.1f})", flush=True)
        if be != "triton":
            continue
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(50):
                step()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=50), flush=True)
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=8, max_name_column_width=50), flush=True)
