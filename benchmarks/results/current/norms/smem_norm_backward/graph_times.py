"""Device time of whole norm backwards from CUDA-graph replays (no host in the loop): TileLang's (kernel alone,
kernel + stage two) against Triton's (given the saved statistics) and torch eager's autograd.grad; and stage
two alone on the kernel's partials: TileLang's column sums against torch's sum and cast."""
import sys
import torch
sys.path.insert(0, "backends"); sys.path.insert(0, "benchmarks")
from dispatch_tilelang import column_sums as CS, smem_norm_backward as SB
from dispatch_tilelang.direct import args_call
from graph_timing import graph_replay_us
from sweep_norm_backward import backward_call, eager_call


def safe(fn):
    try:
        return graph_replay_us(fn, repeats=5)[0]  # 20 calls a graph, the median of 5 replays
    except Exception as exc:
        print("  error:", type(exc).__name__, str(exc)[:200], flush=True)
        return float("nan")

shapes = [(16384, 1024), (8192, 2048), (4096, 4096), (2048, 8192), (1024, 16384), (512, 32768), (256, 65536),
          (64, 262144)]
from concurrent.futures import ThreadPoolExecutor
jobs = [(op, n, dtype) for dtype in ("bfloat16", "float32")
        for _, n in (shapes if dtype == "bfloat16" else [(1, 16384), (1, 65536)])
        for op in ("rms_norm", "layer_norm")]
with ThreadPoolExecutor(16) as pool:
    list(pool.map(lambda j: SB.build(j[0], j[1], j[2], True, j[0] == "layer_norm", 1e-5,
                                     SB.default_config(j[1], j[2])), jobs))
print("op | dtype | M x N | config | tilelang kernel | tilelang kernel + stage two | triton | torch eager "
      "| stage two: column sums | stage two: torch sum + cast | (us, graph replays)")
for dtype in ("bfloat16", "float32"):
    for m, n in shapes if dtype == "bfloat16" else [(1024, 16384), (256, 65536)]:
        for op in ("rms_norm", "layer_norm"):
            dt = getattr(torch, dtype)
            g = torch.Generator(device="cuda").manual_seed(m + n)
            x = torch.randn((m, n), generator=g, device="cuda").to(dt)
            dy = torch.randn((m, n), generator=g, device="cuda").to(dt)
            w = (torch.randn(n, generator=g, device="cuda") * 0.5 + 1).to(dt)
            b = torch.zeros(n, device="cuda", dtype=dt) if op == "layer_norm" else None
            extra = (b,) if b is not None else ()
            cfg = SB.default_config(n, dtype)
            bwd = SB.make(op, m, n, dt, True, b is not None, 1e-5, cfg)
            k = SB.build(op, n, dtype, True, b is not None, 1e-5, cfg)
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            P = min(m, max(1, -(-cfg["per_sm"] * sms // cfg["cluster"])))
            parts = torch.empty((2, P, n), device="cuda"); dx = torch.empty_like(x)
            inp = dict(x=x, dy=dy, w=w, b=b, y=torch.empty_like(x))
            kc = args_call(k)
            cs = args_call(CS.build(n, dtype, 2, 0, CS.config(n, P, 2, sms)))
            sums = torch.empty((2, n), device="cuda", dtype=dt)
            t = [safe(lambda: kc(x, w, dy, dx, parts[0], parts[1])), safe(lambda: bwd(dy, x, w, *extra, None)),
                 safe(backward_call(op, m, n, dt, None, {}, inp)), safe(eager_call(op, inp)),
                 safe(lambda: cs(parts, sums)), safe(lambda: parts.sum(1).to(dt))]
            lab = f"c{cfg['cluster']} t{cfg['threads']} x{cfg['per_sm']}"
            print(f"{op} | {dtype} | {m}x{n} | {lab} | " + " | ".join(f"{v:.1f}" for v in t), flush=True)
