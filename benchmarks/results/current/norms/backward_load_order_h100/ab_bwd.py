"""A/B of the Triton exchange kernels' files (one process per variant, files copied in before it):
norm forward (dispatch's default and COOP bn2048 w4 forced), norm backward (graph replay), softmax family
of long rows (dispatch, Triton forced). argv[1]: label."""
import sys
import torch
import torch.nn.functional as F
import triton
import dispatch

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
        for m, n in ((1536, 10240), (1024, 16384), (256, 65536), (128, 131072), (64, 262144), (8, 131072), (16, 262144)):
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
