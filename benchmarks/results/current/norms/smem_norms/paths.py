"""Where a norm call's time goes, per backend: device time (CUDA events, L2 flushed, no host floor),
the per-call time of 200 back-to-back calls, and the host side of one call (no sync), with the
config dispatch runs. bf16, weight (and layer_norm's bias), tuning off.

    python3 benchmarks/results/current/norms/smem_norms/paths.py
"""

import statistics
import sys
import time

import torch

import dispatch
from dispatch.autotune.timer import measure
from dispatch.backend import TuneSettings

CASES = [("rms_norm", 4096, 4096), ("rms_norm", 16384, 1024), ("layer_norm", 4096, 4096),
         ("layer_norm", 1024, 16384), ("layer_norm", 256, 65536), ("layer_norm", 64, 262144)]


def back_to_back(fn, calls=200):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def host(fn, calls=50):
    out = []
    for _ in range(calls):
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000)  # the GPU busy: the call's host side alone
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def main():
    dispatch.configure(autotune=False)
    dev = TuneSettings(host_bound=False)
    print("| op | M x N | backend | config | device us | back-to-back us/call | host us |")
    print("|---|---|---|---|---|---|---|")
    for op, m, n in CASES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(n, device="cuda", dtype=torch.bfloat16) + 0.5
        args = (x, (n,), w) + ((torch.randn(n, device="cuda", dtype=torch.bfloat16),) if op == "layer_norm" else ())
        fn = getattr(dispatch, op)
        for backend in ("triton", "tilelang", None):
            d = dispatch.explain(op, *args, backend=backend).decision
            call = (lambda b=backend: fn(*args, backend=b))
            dt = measure(call, torch.device("cuda"), dev).median_us
            print(f"| {op} | {m}x{n} | {backend or 'auto -> ' + d.backend} | {d.config.as_dict()} | {dt:.1f} | "
                  f"{back_to_back(call):.1f} | {host(call):.1f} |", flush=True)
            if backend == "tilelang":  # the compiled kernel alone, no dispatch around it
                from dispatch_tilelang import norms as NM

                k = NM.build(op, n, "bfloat16", True, op == "layer_norm", 1e-5 if op == "layer_norm" else
                             float(torch.finfo(torch.bfloat16).eps), "cuda", 0, d.config.as_dict())
                raw = (lambda k=k: k(x, w, args[3] if op == "layer_norm" else w))
                print(f"| {op} | {m}x{n} | tilelang kernel alone | same | "
                      f"{measure(raw, torch.device('cuda'), dev).median_us:.1f} | {back_to_back(raw):.1f} | "
                      f"{host(raw):.1f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
