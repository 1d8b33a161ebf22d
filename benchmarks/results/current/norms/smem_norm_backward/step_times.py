"""A training step's norm through dispatch, forward and backward (autograd.grad), with TileLang or Triton forced:
device time per step from CUDA-graph replays (the step captured whole), and the wall time of back-to-back eager
steps (what an eager step pays, host included), bf16 with weight (and bias for layer_norm)."""
import statistics, sys, time
import torch
sys.path.insert(0, "benchmarks")
import dispatch
from graph_timing import graph_replay_us


def wall_us(fn, reps=200):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / reps * 1e6)
    return statistics.median(rounds)


print("op | M x N | backend | device us a step (graph replays) | wall us a step (eager, back to back)")
for op in ("rms_norm", "layer_norm"):
    for m, n in ((16384, 1024), (8192, 2048), (4096, 4096), (1024, 16384), (256, 65536)):
        g = torch.Generator(device="cuda").manual_seed(m + n)
        x = torch.randn((m, n), generator=g, device="cuda").to(torch.bfloat16).requires_grad_()
        dy = torch.randn((m, n), generator=g, device="cuda").to(torch.bfloat16)
        w = (torch.rand(n, generator=g, device="cuda") + 0.5).to(torch.bfloat16).requires_grad_()
        b = torch.randn(n, generator=g, device="cuda").to(torch.bfloat16).requires_grad_()
        params = (w,) if op == "rms_norm" else (w, b)
        for backend in ("triton", "tilelang"):
            def step():
                y = getattr(dispatch, op)(x, (n,), *params, 1e-5, backend=backend)
                return torch.autograd.grad(y, (x, *params), dy)
            try:
                dev = graph_replay_us(step, repeats=5)[0]
            except Exception as exc:  # noqa: BLE001
                print("  error:", type(exc).__name__, str(exc)[:200], flush=True)
                dev = float("nan")
            print(f"{op} | {m}x{n} | {backend} | {dev:.1f} | {wall_us(step):.1f}", flush=True)
