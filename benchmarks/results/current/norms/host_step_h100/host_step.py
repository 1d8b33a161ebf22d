"""Where a training step's host time goes: torch's step against dispatch's Triton step, piece by piece.
(benchmarks/profile_autograd_host.py also times the backward function called directly with its saved tensors.)"""
import cProfile, pstats, sys
import torch
import torch.nn.functional as F
sys.path.insert(0, "benchmarks")
import dispatch
from profile_call import per_call


def per(fn):
    return round(per_call(fn, calls=300, repeats=5), 1)


def case(op, m, n, be):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True) if op == "layer_norm" else None
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    leaves = (x, w) if b is None else (x, w, b)
    if be == "eager":
        f = (lambda: F.rms_norm(x, (n,), w, 1e-5)) if op == "rms_norm" else (lambda: F.layer_norm(x, (n,), w, b, 1e-5))
    else:
        f = ((lambda: dispatch.rms_norm(x, (n,), w, 1e-5, backend=be)) if op == "rms_norm"
             else (lambda: dispatch.layer_norm(x, (n,), w, b, 1e-5, backend=be)))
    return f, leaves, dy

def pieces(op, m, n, be):
    f, leaves, dy = case(op, m, n, be)
    def step():
        return torch.autograd.grad(f(), leaves, dy)
    def fwd_ng():
        with torch.no_grad():
            return f()
    y = f()
    def bwd():
        return torch.autograd.grad(y, leaves, dy, retain_graph=True)
    out = dict(step=per(step), fwd=per(f), fwd_nograd=per(fwd_ng), bwd=per(bwd))
    torch.autograd.set_multithreading_enabled(False)
    out["step_1thread"] = per(step)
    out["bwd_1thread"] = per(bwd)
    torch.autograd.set_multithreading_enabled(True)
    return out

for op, m, n in (("rms_norm", 8, 4096), ("layer_norm", 8, 4096), ("layer_norm", 1024, 16384), ("rms_norm", 1024, 16384)):
    for be in ("eager", "torch", "triton"):
        print(op, f"{m}x{n}", be, pieces(op, m, n, be), flush=True)

def prof(op, m, n, what, sort):
    f, leaves, dy = case(op, m, n, "triton")
    fn = {"step": lambda: torch.autograd.grad(f(), leaves, dy), "fwd": f}[what]
    torch.autograd.set_multithreading_enabled(False)
    for _ in range(50):
        fn()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(2000):
        fn()
    torch.cuda.synchronize()
    pr.disable()
    torch.autograd.set_multithreading_enabled(True)
    print("=====", op, f"{m}x{n}", what, "(2000 calls, one thread)", flush=True)
    pstats.Stats(pr, stream=sys.stdout).sort_stats(sort).print_stats(40)

prof("layer_norm", 1024, 16384, "step", "tottime")
prof("layer_norm", 1024, 16384, "fwd", "cumulative")
