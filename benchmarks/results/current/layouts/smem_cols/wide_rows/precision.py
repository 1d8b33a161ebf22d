"""fp32 softmax / log_softmax over a leading dim: each backend and torch against a float64 reference (one GPU)."""
import sys

import torch
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "backends")
import dispatch
from sweep_smem_cols import edge_input
torch.manual_seed(0)
for op in ("log_softmax", "softmax"):
    for shape, dim in (((4096, 4096), 0), ((8, 4096, 1024), 1)):
        worst = {}
        for trial in range(3):
            x = edge_input(torch, shape, dim, torch.float32)
            x = torch.randn(shape, device="cuda") * 3 if trial == 2 else x
            ref = getattr(torch, op)(x.double(), dim)
            ours = getattr(dispatch, op)(x, dim, backend="tilelang")
            tri = getattr(dispatch, op)(x, dim, backend="triton")
            tor = getattr(torch, op)(x, dim)
            fin = torch.isfinite(ref)
            for name, y in (("tilelang", ours), ("triton", tri), ("torch", tor)):
                d = (y.double() - ref).abs()[fin]
                rel = d / ref.abs()[fin].clamp_min(1e-30)
                bad = (d > 1e-5 + 1e-5 * ref.abs()[fin]).sum().item()
                worst[name] = max(worst.get(name, (0, 0, 0)), (d.max().item(), rel.max().item(), bad))
        print(op, shape, dim, {k: tuple(f"{v:.3g}" for v in w) for k, w in worst.items()}, flush=True)
# the worst element of tilelang log_softmax 4096x4096 dim 0 on an edge input
x = edge_input(torch, (4096, 4096), 0, torch.float32)
ref = torch.log_softmax(x.double(), 0); ours = dispatch.log_softmax(x, 0, backend="tilelang")
d = (ours.double() - ref).abs(); d[~torch.isfinite(ref)] = 0
i = int(d.argmax()); r, c = divmod(i, 4096)
col = x[:, c].double()
top = col.topk(3).values.tolist()
print("worst", r, c, "ours", ours[r, c].item(), "ref", ref[r, c].item(), "x", x[r, c].item(), "top3", top,
      "lse64", torch.logsumexp(col, 0).item(), "ours_lse", (x[r, c].double() - ours[r, c].double()).item())
print(dispatch.explain if hasattr(dispatch, "explain") else "")
