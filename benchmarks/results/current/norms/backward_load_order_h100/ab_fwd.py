"""A/B of the Triton exchange kernels' files (one process per variant, files copied in before it):
norm forward (dispatch's default and COOP bn2048 w4 forced), norm backward (graph replay), softmax family
of long rows (dispatch, Triton forced). argv[1]: label."""
import sys
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
    key = (numel, dt)
    if key not in copies:
        src = torch.empty(numel, device=dev, dtype=dt)
        dst = torch.empty_like(src)
        copies[key] = bench(lambda: dst.copy_(src))
    return copies[key]


def line(name, us, cu, err):
    print(f"{label} | {name} | {us:.1f} | {100 * cu / us:.0f}% | err {err:.1e}", flush=True)


for dtn in ("bfloat16", "float32"):
    dt = getattr(torch, dtn)
    for op in ("layer_norm", "rms_norm"):
        for m, n in ((256, 65536), (64, 262144), (128, 131072)):
            torch.manual_seed(0)
            x = torch.randn(m, n, device=dev, dtype=dt) + 0.5
            w = torch.randn(n, device=dev, dtype=dt)
            b = torch.randn(n, device=dev, dtype=dt) if op == "layer_norm" else None
            ref = getattr(F, op)(x.double(), (n,), w.double(), *((b.double(),) if b is not None else ()))
            fn = getattr(dispatch, op)
            args = (x, (n,), w) + ((b,) if b is not None else ())
            y = fn(*args, backend="triton")
            err = float((y.double() - ref).abs().max())
            line(f"{op} {dtn} {m}x{n} fwd default", bench(lambda: fn(*args, backend="triton")), copy_us(m * n, dt), err)
            config = dict(BLOCK_N=2048, ROWS=1, SPLIT=1, PERSIST=0, num_warps=4, num_stages=1, COOP=1)
            la = NT.NormLauncher(op, m, n, dt, n, dev, config, 1e-5, True, b is not None, (m, n))
            err = float((la.run(x, w, b).double() - ref).abs().max())
            line(f"{op} {dtn} {m}x{n} fwd coop2048w4", bench(lambda: la.run(x, w, b)), copy_us(m * n, dt), err)
