"""Where a dispatched call's host time goes, layer by layer, on the GPU.

For one op and shape (default bf16 softmax 1x4096) it times back-to-back calls (wall us per
call) of: torch's op; the dispatch op forced to each backend; each backend's kernel for the call
as its ``dispatch_kernel`` hook returns it (no key lookup, no dispatcher); for Triton's softmax
family, the launch into a given output, its direct launch and the JIT path; for TileLang's norms,
the executable called on prepared inputs and the preparing alone. Then a cProfile of the forced
calls, and the same forced calls again after torch.compile has run in the process. Prints and
writes ``profile.txt``::

    python3 benchmarks/profile_call.py --out DIR [--op softmax] [--shape 1x4096] [--dtype bfloat16]

``--op``: softmax, log_softmax, logsumexp, rms_norm (with a weight) or layer_norm (with a weight and
a bias), over the last dim.
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


NORMS = ("rms_norm", "layer_norm")


def torch_call(op: str, x: torch.Tensor):
    """torch's function of ``op`` and the arguments after ``x`` that both it and dispatch take."""
    n = x.shape[-1]
    if op in NORMS:
        w = torch.rand(n, device=x.device, dtype=x.dtype) + 0.5
        b = torch.randn(n, device=x.device, dtype=x.dtype)
        fn = getattr(torch.nn.functional, op)
        return fn, ((n,), w, b, 1e-5) if op == "layer_norm" else ((n,), w, 1e-5)
    return getattr(torch, op), (-1,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/profile")
    ap.add_argument("--shape", default="1x4096")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--op", default="softmax", choices=("softmax", "log_softmax", "logsumexp") + NORMS)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shape = tuple(int(s) for s in a.shape.split("x"))
    x = torch.randn(shape, device="cuda", dtype=getattr(torch, a.dtype))
    lines: list[str] = []

    def say(name, us=None):
        line = name if us is None else f"{name:60s} {us:8.2f} us"
        print(line, flush=True)
        lines.append(line)

    torch_op, args = torch_call(a.op, x)
    say(f"torch {a.op}", per_call(lambda: torch_op(x, *args)))
    say("torch.empty_like(x)", per_call(lambda: torch.empty_like(x)))
    say("x.data_ptr()", per_call(lambda: x.data_ptr()))
    spec = spec_of(a.op, x, *args)
    dop = getattr(dispatch, a.op)
    kernel_args = tuple(t for t in args if torch.is_tensor(t))  # a norm kernel's run(x, weight[, bias])
    for backend in ("torch", "tilelang", "triton"):
        try:
            y = dop(x, *args, backend=backend)
            torch.testing.assert_close(y.float(), torch_op(x.float(), *(t.float() if torch.is_tensor(t) else t
                                                                        for t in args)), rtol=2e-2, atol=2e-2)
        except Exception as exc:  # noqa: BLE001
            say(f"{backend}: unavailable: {type(exc).__name__}: {exc}")
            continue
        say(f"dispatch.{a.op}(x, ..., backend={backend!r})", per_call(lambda b=backend: dop(x, *args, backend=b)))
        module = importlib.import_module(f"dispatch_{backend}")
        kernel = module.dispatch_kernel(op=a.op, spec=spec, config=None)
        kernel(x, *kernel_args)
        say(f"  its dispatch_kernel hook's kernel ({backend})", per_call(lambda k=kernel: k(x, *kernel_args)))
        launcher = getattr(kernel, "launcher", None)
        if launcher is not None and a.op != "logsumexp":  # Launcher.launch(x, out): rows out
            out = torch.empty_like(x)
            say("  Launcher.launch(x, out)", per_call(lambda: launcher.launch(x, out)))
            for d in launcher.direct:
                say(f"  direct launch state: {d.state} {d.why}")
            d = launcher.direct[0]
            if d.direct is not None:
                say("  DirectLaunch.direct(x, out)", per_call(lambda: d.direct(x, out)))
                say("  DirectLaunch._jit(x, out) (the JIT path)", per_call(lambda: d._jit(x, out)))
        path = getattr(kernel, "path", None)
        if backend == "tilelang" and a.op in NORMS and path is not None:
            say(f"  call path state: {path.state} {path.why or ''}")
            prepared = path.prepare(x, *kernel_args)
            say("  prepare(x, weight, bias)", per_call(lambda: path.prepare(x, *kernel_args), synced=False))
            if path.executable is not None:
                from dispatch_tilelang.direct import entry_of

                exe, out = entry_of(path.executable), torch.empty_like(x)
                call = (lambda: exe(*prepared, prepared[0])) if path.abi == "callee" else \
                    (lambda: exe(*prepared, out))
                say("  the executable on prepared inputs", per_call(call))
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3000):
            dop(x, *args, backend=backend)
        torch.cuda.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
        say(f"--- cProfile, 3000 calls, backend={backend}\n{s.getvalue()}")
    # the same calls after torch.compile has compiled (and run) a function in this process
    compiled = torch.compile(lambda t: torch_op(t, *args))
    compiled(x)
    say(f"after torch.compile: torch {a.op}", per_call(lambda: torch_op(x, *args)))
    for backend in ("torch", "tilelang", "triton"):
        try:
            say(f"after torch.compile: dispatch.{a.op}(backend={backend!r})",
                per_call(lambda b=backend: dop(x, *args, backend=b)))
        except Exception as exc:  # noqa: BLE001
            say(f"after torch.compile: {backend}: {type(exc).__name__}: {exc}")
    with open(os.path.join(a.out, "profile.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
