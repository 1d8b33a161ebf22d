"""Host cost of a call at few long rows: per-call wall of back-to-back calls for each op and backend,
kernels a call launches (torch.profiler), and cProfile of the pick's call path."""
import cProfile, io, pstats, time
import torch
import dispatch
from torch.profiler import ProfilerActivity, profile

dispatch.configure(autotune=False)
dev = torch.device("cuda")


def per_call(fn, n=3000):
    for _ in range(300):
        fn()
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def kernels(fn):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    names = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            names[e.name[:70]] = names.get(e.name[:70], 0) + 1
    return {k: v / 10 for k, v in names.items()}


for shape in ((1, 32000), (4, 50257), (1, 262144)):
    x = torch.randn(*shape, device=dev, dtype=torch.bfloat16)
    for op in ("softmax", "log_softmax", "logsumexp"):
        tf = getattr(torch, op)
        f = getattr(dispatch, op)
        row = [f"{op} {shape[0]}x{shape[1]}: torch {per_call(lambda: tf(x, -1)):.1f}"]
        for be in (None, "triton", "tilelang", "torch"):
            kw = {} if be is None else dict(backend=be)
            row.append(f"{be or 'pick'} {per_call(lambda: f(x, -1, **kw)):.1f}")
        print(" | ".join(row), flush=True)
        for be in (None, "triton", "tilelang"):
            kw = {} if be is None else dict(backend=be)
            print(f"   kernels {be or 'pick'}: {kernels(lambda: f(x, -1, **kw))}", flush=True)
x = torch.randn(1, 32000, device=dev, dtype=torch.bfloat16)
for op in ("softmax", "logsumexp"):
    for be in ("triton", "tilelang"):
        f = getattr(dispatch, op)
        fn = lambda: f(x, -1, backend=be)
        per_call(fn, 100)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3000):
            fn()
        pr.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
        print(f"==== cProfile {op} {be} 1x32000, 3000 calls\n" + s.getvalue()[-4500:], flush=True)
