"""A/B of the norm kernels' files: forward and backward of long rows through dispatch (Triton forced,
tuning off), do_bench median with L2 flush (the backward: replays of a CUDA graph of
torch.autograd.grad), next to a same-size copy, then softmax and logsumexp of a few long rows (the
exchange's users). argv[1]: a label for the lines. Run once per variant of the kernel files, each
copied over backends/dispatch_triton/ before its process starts:

    python3 ab_norm.py old; (copy the variant's files in); python3 ab_norm.py new
"""
import sys
import torch
import torch.nn.functional as F
import triton
import dispatch

dispatch.configure(autotune=False)
label = sys.argv[1]
cases = [(op, dt, m, n) for dt in ("bfloat16", "float32") for op in ("rms_norm", "layer_norm")
         for m, n in ((1024, 16384), (256, 65536), (64, 262144))]
dev = torch.device("cuda")
for op, dtn, m, n in cases:
    dt = getattr(torch, dtn)
    x = torch.randn(m, n, device=dev, dtype=dt)
    w = torch.randn(n, device=dev, dtype=dt)
    b = torch.randn(n, device=dev, dtype=dt) if op == "layer_norm" else None
    dy = torch.randn(m, n, device=dev, dtype=dt)
    fn = getattr(dispatch, op)
    args = (x, (n,), w) + ((b,) if b is not None else ())
    y = fn(*args, backend="triton")
    ref = getattr(F, op)(x.double(), (n,), w.double(), *((b.double(),) if b is not None else ()))
    ferr = float((y.double() - ref).abs().max())
    fus = triton.testing.do_bench(lambda: fn(*args, backend="triton"), warmup=25, rep=200, return_mode="median") * 1e3
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
    berr = float((g[0].double() - rg).abs().max() / rg.abs().max())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=side):
        torch.autograd.grad(out, [xg, wg], dy, retain_graph=True)
    bus = triton.testing.do_bench(g.replay, warmup=25, rep=200, return_mode="median") * 1e3
    src = torch.empty(m * n, device=dev, dtype=dt)
    dst = torch.empty_like(src)
    c1 = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median") * 1e3
    src3 = torch.empty(3 * m * n // 2, device=dev, dtype=dt)
    dst3 = torch.empty_like(src3)
    c3 = triton.testing.do_bench(lambda: dst3.copy_(src3), warmup=25, rep=200, return_mode="median") * 1e3
    print(f"{label} {op} {dtn} {m}x{n}: fwd {fus:.1f} us ({100 * c1 / fus:.0f}% of copy {c1:.1f}), err {ferr:.1e}; "
          f"bwd {bus:.1f} us ({100 * c3 / bus:.0f}% of copy {c3:.1f}), rel err {berr:.1e}", flush=True)
for m, n in ((4, 262144), (32, 262144), (8, 1048576)):
    x = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
    for op in ("softmax", "logsumexp"):
        fn = getattr(dispatch, op)
        y = fn(x, -1, backend="triton")
        ref = getattr(torch, op)(x.double(), -1)
        err = float((y.double() - ref).abs().max())
        us = triton.testing.do_bench(lambda: fn(x, -1, backend="triton"), warmup=25, rep=200,
                                     return_mode="median") * 1e3
        print(f"{label} {op} bfloat16 {m}x{n}: {us:.1f} us, err {err:.1e}", flush=True)
