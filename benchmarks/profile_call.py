"""Where a dispatched call's host time goes, layer by layer, on the GPU.

For one shape (default bf16 softmax 1x4096) it times back-to-back calls (wall us per call) of:
torch.softmax; dispatch.softmax forced to each backend; each backend's kernel for the call as its
``dispatch_kernel`` hook returns it (no key lookup, no dispatcher); for Triton, the launch into a
given output, its direct launch and the JIT path. Then a cProfile of the forced calls, and the
same forced calls again after torch.compile has run in the process. Prints and writes
``profile.txt``::

    python3 benchmarks/profile_call.py --out DIR [--shape 1x4096] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import os
import pstats
import time

import torch

import dispatch
from dispatch.backend import spec_of


def per_call(fn, calls: int = 2000, repeats: int = 7, synced: bool = True) -> float:
    """us per call of ``calls`` back-to-back calls, the median of ``repeats`` loops; ``synced``
    False stops each loop's clock before synchronising (the host's own cost where the GPU keeps up)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if synced:
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    samples.sort()
    return samples[len(samples) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/profile")
    ap.add_argument("--shape", default="1x4096")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shape = tuple(int(s) for s in a.shape.split("x"))
    x = torch.randn(shape, device="cuda", dtype=getattr(torch, a.dtype))
    lines: list[str] = []

    def say(name, us=None):
        line = name if us is None else f"{name:60s} {us:8.2f} us"
        print(line, flush=True)
        lines.append(line)

    say("torch.softmax(x, -1)", per_call(lambda: torch.softmax(x, -1)))
    say("torch.empty_like(x)", per_call(lambda: torch.empty_like(x)))
    say("x.data_ptr()", per_call(lambda: x.data_ptr()))
    spec = spec_of("softmax", x, -1)
    for backend in ("torch", "tilelang", "triton"):
        try:
            y = dispatch.softmax(x, -1, backend=backend)
            torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=2e-3)
        except Exception as exc:  # noqa: BLE001
            say(f"{backend}: unavailable: {type(exc).__name__}: {exc}")
            continue
        say(f"dispatch.softmax(x, -1, backend={backend!r})",
            per_call(lambda b=backend: dispatch.softmax(x, -1, backend=b)))
        module = importlib.import_module(f"dispatch_{backend}")
        kernel = module.dispatch_kernel(op="softmax", spec=spec, config=None)
        kernel(x)
        say(f"  its dispatch_kernel hook's kernel(x) ({backend})", per_call(lambda k=kernel: k(x)))
        launcher = getattr(kernel, "launcher", None)
        if launcher is not None:
            out = torch.empty_like(x)
            say("  Launcher.launch(x, out)", per_call(lambda: launcher.launch(x, out)))
            for d in launcher.direct:
                say(f"  direct launch state: {d.state} {d.why}")
            d = launcher.direct[0]
            if d.direct is not None:
                say("  DirectLaunch.direct(x, out)", per_call(lambda: d.direct(x, out)))
                say("  DirectLaunch._jit(x, out) (the JIT path)", per_call(lambda: d._jit(x, out)))
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3000):
            dispatch.softmax(x, -1, backend=backend)
        torch.cuda.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
        say(f"--- cProfile, 3000 calls, backend={backend}\n{s.getvalue()}")
    # the same calls after torch.compile has compiled (and run) a function in this process
    compiled = torch.compile(lambda t: torch.softmax(t, -1))
    compiled(x)
    say("after torch.compile: torch.softmax(x, -1)", per_call(lambda: torch.softmax(x, -1)))
    for backend in ("torch", "tilelang", "triton"):
        try:
            say(f"after torch.compile: dispatch.softmax(backend={backend!r})",
                per_call(lambda b=backend: dispatch.softmax(x, -1, backend=b)))
        except Exception as exc:  # noqa: BLE001
            say(f"after torch.compile: {backend}: {type(exc).__name__}: {exc}")
    with open(os.path.join(a.out, "profile.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
