"""torch.profiler of a training step's norm (8x4096 bf16) through dispatch: TileLang against Triton, CPU self time by op."""
import torch
import dispatch
from torch.profiler import profile, ProfilerActivity

m, n = 8, 4096
x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
for be in ("tilelang", "triton"):
    def step():
        y = dispatch.rms_norm(x, (n,), w, 1e-5, backend=be)
        return torch.autograd.grad(y, (x, w), dy)
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(100):
            step()
        torch.cuda.synchronize()
    print("=====", be, flush=True)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60), flush=True)
