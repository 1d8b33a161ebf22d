"""Host time per call of the norm backwards (back-to-back calls; on small rows the host is the bound), and its
pieces."""
import sys, time
import torch
sys.path.insert(0, "backends"); sys.path.insert(0, "benchmarks")
from dispatch_tilelang import column_sums as CS, smem_norm_backward as SB
from dispatch_tilelang.direct import args_call, entry_of
from dispatch_tilelang.norms import aligned
from sweep_norm_backward import backward_call, eager_call

def per_call(fn, iters=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6

for op in ("rms_norm", "layer_norm"):
    for m, n in ((8, 4096), (4096, 4096)):
        dt = torch.bfloat16
        x = torch.randn(m, n, device="cuda", dtype=dt); dy = torch.randn_like(x)
        w = torch.ones(n, device="cuda", dtype=dt); b = torch.zeros(n, device="cuda", dtype=dt)
        extra = (b,) if op == "layer_norm" else ()
        cfg = SB.default_config(n, "bfloat16")
        bwd = SB.make(op, m, n, dt, True, op == "layer_norm", 1e-5, cfg)
        k = SB.build(op, n, "bfloat16", True, op == "layer_norm", 1e-5, cfg)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        P = min(m, max(1, -(-cfg["per_sm"] * sms // cfg["cluster"])))
        parts = torch.empty((2, P, n), device="cuda")
        dx = torch.empty_like(x)
        args = (x, w, dy, dx, parts[0], parts[1])
        exe = entry_of(k.adapter._get_executable())
        cs = args_call(CS.build(n, "bfloat16", 2, 0, CS.config(n, P, 2, sms)))
        sums = torch.empty((2, n), device="cuda", dtype=dt)
        inp = dict(x=x, dy=dy, w=w, b=b if op == "layer_norm" else None, y=torch.empty_like(x))
        tri = backward_call(op, m, n, dt, None, {}, inp)
        res = {
            "tilelang backward (all)": per_call(lambda: bwd(dy, x, w, *extra, None)),
            "  JITKernel call": per_call(lambda: k(*args)),
            "  executable call": per_call(lambda: exe(*args)),
            "  stage two: column sums (executable)": per_call(lambda: cs(parts, sums)),
            "  stage two: torch sum + cast": per_call(lambda: parts.sum(1).to(dt)),
            "  empty x2 + aligned x4": per_call(lambda: (torch.empty((2, P, n), device="cuda"), torch.empty_like(x),
                                                         [aligned(a) for a in (x, w, dy, dx)])),
            "triton backward (all)": per_call(tri),
            "torch eager autograd.grad": per_call(eager_call(op, inp)),
        }
        print(f"{op} {m}x{n}: " + "; ".join(f"{k_}: {v:.1f} us" for k_, v in res.items()), flush=True)
