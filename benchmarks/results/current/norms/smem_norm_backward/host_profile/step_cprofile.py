"""Host time of a training step's norm through dispatch at a decode shape (8x4096 bf16), and where it goes."""
import cProfile, pstats, statistics, sys, time
import torch
import torch.nn.functional as F
import dispatch

def per(fn, reps=500):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    r = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        r.append((time.perf_counter() - t0) / reps * 1e6)
    return round(statistics.median(r), 1)

m, n = 8, 4096
x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
for be in ("triton", "tilelang", "torch"):
    def step():
        y = dispatch.rms_norm(x, (n,), w, 1e-5, backend=be)
        return torch.autograd.grad(y, (x, w), dy)
    def fwd():
        return dispatch.rms_norm(x, (n,), w, 1e-5, backend=be)
    def fwd_ng():
        with torch.no_grad():
            return dispatch.rms_norm(x, (n,), w, 1e-5, backend=be)
    print(be, "step", per(step), "fwd (grad)", per(fwd), "fwd (no grad)", per(fwd_ng), flush=True)
def tstep():
    y = F.rms_norm(x, (n,), w, 1e-5)
    return torch.autograd.grad(y, (x, w), dy)
print("torch eager step", per(tstep), flush=True)
for be in ("triton", "tilelang"):
    def step():
        y = dispatch.rms_norm(x, (n,), w, 1e-5, backend=be)
        return torch.autograd.grad(y, (x, w), dy)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(2000):
        step()
    torch.cuda.synchronize()
    pr.disable()
    print("=====", be)
    pstats.Stats(pr).sort_stats("tottime").print_stats(32)
