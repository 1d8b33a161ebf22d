"""What a read of dim 0 of 4096x4096 bf16 (32 MB) costs on this GPU: torch's reductions, a copy,
and dispatch's strided kernels, do_bench medians (L2 flushed by a 256 MB write), us."""
import torch, triton
import dispatch
dev = "cuda"
x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
dst = torch.empty_like(x)
xt = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16).t()
big = torch.randn(64, 262144, device=dev, dtype=torch.bfloat16)
cases = [
    ("copy 32 MB", lambda: dst.copy_(x)),
    ("x.sum() (contiguous read)", lambda: x.sum()),
    ("x.sum(1) (rows)", lambda: x.sum(1)),
    ("x.sum(0) (columns)", lambda: x.sum(0)),
    ("x.amax(0)", lambda: x.amax(0)),
    ("x.sum(0, dtype=float32)", lambda: x.sum(0, dtype=torch.float32)),
    ("big.sum(1) 64x262144", lambda: big.sum(1)),
    ("dispatch logsumexp(x, 0)", lambda: dispatch.logsumexp(x, 0)),
    ("dispatch softmax(x, 0)", lambda: dispatch.softmax(x, 0)),
    ("torch logsumexp(x, 1)", lambda: torch.logsumexp(x, 1)),
    ("dispatch logsumexp(x, 1)", lambda: dispatch.logsumexp(x, 1)),
    ("dispatch softmax(x, -1)", lambda: dispatch.softmax(x, -1)),
    ("torch softmax(x, -1)", lambda: torch.softmax(x, -1)),
]
for rep in range(2):
    for name, fn in cases:
        fn(); torch.cuda.synchronize()
        t = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
        print(f"rep{rep} {name}: {t:.1f} us", flush=True)
