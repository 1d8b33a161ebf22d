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
    for op in ("rms_norm", "layer_norm"):
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
        for m, n in ((1024, 16384), (256, 65536), (64, 262144)):
            torch.manual_seed(0)
            x = torch.randn(m, n, device=dev, dtype=dt)
            w = torch.randn(n, device=dev, dtype=dt)
            b = torch.randn(n, device=dev, dtype=dt) if op == "layer_norm" else None
            dy = torch.randn(m, n, device=dev, dtype=dt)
            fn = getattr(dispatch, op)
            xg = x.detach().requires_grad_()
            wg = w.detach().requires_grad_()
            bargs = (xg, (n,), wg) + ((b,) if b is not None else ())
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = fn(*bargs, backend="triton")
                g = torch.autograd.grad(out, [xg, wg], dy, retain_graph=True)
                torch.autograd.grad(out, [xg, wg], dy, retain_graph=True)
            torch.cuda.synchronize()
            xd = x.double().requires_grad_()
            rout = getattr(F, op)(xd, (n,), w.double(), *((b.double(),) if b is not None else ()))
            rg, = torch.autograd.grad(rout, [xd], dy.double())
            err = float((g[0].double() - rg).abs().max() / rg.abs().max())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                torch.autograd.grad(out, [xg, wg], dy, retain_graph=True)
            line(f"{op} {dtn} {m}x{n} bwd", bench(graph.replay), copy_us(3 * m * n // 2, dt), err)
for dtn in ("bfloat16", "float32"):
    dt = getattr(torch, dtn)
    for m, n in ((16, 151936), (32, 151936), (4, 262144), (32, 262144), (64, 65536), (256, 65536), (128, 98304),
                 (1024, 65536), (256, 262144)):
        torch.manual_seed(0)
        x = torch.randn(m, n, device=dev, dtype=dt)
        for op in ("softmax", "log_softmax", "logsumexp"):
            fn = getattr(dispatch, op)
            y = fn(x, -1, backend="triton")
            ref = getattr(torch, op)(x.double(), -1)
            err = float((y.double() - ref).abs().max())
            cu = copy_us(m * n, dt) if op != "logsumexp" else copy_us(m * n // 2, dt)
            line(f"{op} {dtn} {m}x{n}", bench(lambda: fn(x, -1, backend="triton")), cu, err)
