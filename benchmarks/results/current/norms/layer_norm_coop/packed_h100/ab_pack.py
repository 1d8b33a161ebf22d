"""A/B of layer_norm's one-launch forward with a chunk's two partials in one word (PACK) against two
(the shipped default), interleaved in one process: us (median of three do_bench medians, L2 flushed),
% of a same-size copy, max error against float64 (and torch's own)."""
import torch
import torch.nn.functional as F
import triton
from dispatch_triton import norms as NT
from dispatch_triton.norm_configs import coop, default_config

dev = torch.device("cuda")


def bench(fn):
    r = sorted(triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median") for _ in range(3))
    return r[1] * 1e3


cases = [("bfloat16", 64, 262144), ("bfloat16", 128, 131072), ("bfloat16", 64, 65536), ("bfloat16", 32, 262144),
         ("bfloat16", 16, 262144), ("bfloat16", 256, 65536), ("float16", 64, 262144), ("bfloat16", 512, 32768),
         ("bfloat16", 8, 131072)]
for dtn, m, n in cases:
    dt = getattr(torch, dtn)
    torch.manual_seed(0)
    x = torch.randn(m, n, device=dev, dtype=dt) + 0.5
    x[:, 7] = 300.0  # a massive channel
    w = torch.randn(n, device=dev, dtype=dt)
    b = torch.randn(n, device=dev, dtype=dt)
    ref = F.layer_norm(x.double(), (n,), w.double(), b.double())
    own = float((F.layer_norm(x, (n,), w, b).double() - ref).abs().max())
    base = default_config(m, n, dt, dev, "layer_norm")
    if not coop(base):
        base = dict(BLOCK_N=2048, ROWS=1, SPLIT=1, PERSIST=0, num_warps=4, num_stages=1, COOP=1)
    src = torch.empty(m * n, device=dev, dtype=dt)
    dst = torch.empty_like(src)
    runs = {}
    for pack in (0, 1):
        la = NT.NormLauncher("layer_norm", m, n, dt, n, dev, dict(base, PACK=pack), 1e-5, True, True, (m, n))
        err = float((la.run(x, w, b).double() - ref).abs().max())
        runs[pack] = (la, err, [])
    for _ in range(2):
        for pack in (0, 1, 1, 0):
            la = runs[pack][0]
            runs[pack][2].append(bench(lambda: la.run(x, w, b)))
    cu = bench(lambda: dst.copy_(src))
    t0, t1 = min(runs[0][2]), min(runs[1][2])
    print(f"layer_norm {dtn} {m}x{n} {base}: two words {t0:.1f} us ({100 * cu / t0:.0f}%), packed {t1:.1f} us "
          f"({100 * cu / t1:.0f}%), {t1 / t0:.3f}; rounds {' '.join(f'{v:.1f}' for v in runs[0][2])} / "
          f"{' '.join(f'{v:.1f}' for v in runs[1][2])}; err {runs[0][1]:.2e} / {runs[1][1]:.2e} (torch {own:.2e})",
          flush=True)
