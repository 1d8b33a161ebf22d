"""A/B of the one-launch norm forward's row shift: argv[1] label, argv[2] a variant of
benchmarks/profile_norm_coop.py (base, first-shift, zero-shift) installed before any compile.
Each line: label | case | us (median of three do_bench medians, L2 flushed) | % of a same-size copy | err"""
import sys
sys.path.insert(0, "benchmarks")
import profile_norm_coop as P
P.use_variant(sys.argv[2])
import torch
import torch.nn.functional as F
import triton
import dispatch
from dispatch_triton import norms as NT

dispatch.configure(autotune=False)
label = sys.argv[1]
dev = torch.device("cuda")
copies = {}


def bench(fn):
    r = sorted(triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median") for _ in range(3))
    return r[1] * 1e3


def copy_us(numel, dt):
    if (numel, dt) not in copies:
        src = torch.empty(numel, device=dev, dtype=dt)
        dst = torch.empty_like(src)
        copies[(numel, dt)] = bench(lambda: dst.copy_(src))
    return copies[(numel, dt)]


cases = [("bfloat16", 64, 262144), ("bfloat16", 128, 131072), ("bfloat16", 64, 65536), ("bfloat16", 32, 262144),
         ("bfloat16", 256, 65536), ("float32", 256, 65536), ("float32", 64, 262144), ("float32", 512, 32768)]
for dtn, m, n in cases:
    dt = getattr(torch, dtn)
    torch.manual_seed(0)
    x = torch.randn(m, n, device=dev, dtype=dt) + 0.5
    w = torch.randn(n, device=dev, dtype=dt)
    b = torch.randn(n, device=dev, dtype=dt)
    ref = F.layer_norm(x.double(), (n,), w.double(), b.double())
    args = (x, (n,), w, b)
    for name, kw in (("triton", dict(backend="triton")), ("pick", {})):
        if name == "pick" and dtn == "float32":
            continue
        err = float((dispatch.layer_norm(*args, **kw).double() - ref).abs().max())
        us = bench(lambda: dispatch.layer_norm(*args, **kw))
        print(f"{label} | {dtn} {m}x{n} {name} | {us:.1f} | {100 * copy_us(m * n, dt) / us:.0f}% | err {err:.1e}",
              flush=True)
    cfg = dict(BLOCK_N=2048, ROWS=1, SPLIT=1, PERSIST=0, num_warps=4, num_stages=1, COOP=1)
    la = NT.NormLauncher("layer_norm", m, n, dt, n, dev, cfg, 1e-5, True, True, (m, n))
    err = float((la.run(x, w, b).double() - ref).abs().max())
    us = bench(lambda: la.run(x, w, b))
    print(f"{label} | {dtn} {m}x{n} coop2048w4 | {us:.1f} | {100 * copy_us(m * n, dt) / us:.0f}% | err {err:.1e}",
          flush=True)
