"""One ``smem_rows`` config of bf16 softmax, built and called three times (for Nsight Compute to profile the third).

    python3 ncu_rows.py M N TILE_N CLUSTER THREADS PERSIST
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 4, "backends"))
from dispatch_tilelang import build as B  # noqa: E402

m, n, tile, c, t, persist = map(int, sys.argv[1:7])
cfg = {"block_m": 1, "threads": t, "tile_n": tile, "cluster": c, "smem": 1}
if persist:
    cfg["persist"] = persist
k = B.build("softmax", m, n, torch.bfloat16, torch.bfloat16, cfg, "cuda")
x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    k(x)
torch.cuda.synchronize()
