"""Where a training call's host time goes (a norm's forward and ``torch.autograd.grad``), on the GPU.

For one op and shape (default bf16 rms_norm 1x4096 with a weight that wants its gradient) it
times back-to-back calls (wall us per call) of: the forward alone with autograd recording, the
backward alone (``retain_graph``, the same graph each time), and the whole step; for torch's
function and for dispatch forced to each backend. Then a cProfile of the whole step on each
dispatch backend but torch. Prints and writes ``profile_training.txt``::

    python3 benchmarks/profile_training_call.py --out DIR [--op rms_norm] [--shape 1x4096] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats

import torch

import dispatch
from profile_call import per_call  # benchmarks/, beside this script


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/profile_training")
    ap.add_argument("--op", default="rms_norm", choices=("rms_norm", "layer_norm"))
    ap.add_argument("--shape", default="1x4096")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    m, n = (int(s) for s in a.shape.split("x"))
    dtype = getattr(torch, a.dtype)
    x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
    gy = torch.randn(m, n, device="cuda", dtype=dtype)
    lines: list[str] = []

    def say(name, us=None):
        line = name if us is None else f"{name:70s} {us:8.2f} us"
        print(line, flush=True)
        lines.append(line)

    fns = {"torch": lambda: getattr(torch.nn.functional, a.op)(x, (n,), w)}
    for backend in ("torch", "triton", "tilelang"):
        if dispatch.backends().get(backend) is not None and dispatch.backends()[backend].available:
            fns[f"dispatch[{backend}]"] = lambda b=backend: getattr(dispatch, a.op)(x, (n,), w, backend=b)
    for name, fn in fns.items():
        try:
            y = fn()
        except Exception as exc:  # noqa: BLE001 - a backend that refuses is reported
            say(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        say(f"{name}: forward, autograd recording", per_call(fn, calls=500))
        say(f"{name}: backward alone (retain_graph)",
            per_call(lambda y=y: torch.autograd.grad(y, (x, w), gy, retain_graph=True), calls=500))
        say(f"{name}: forward + torch.autograd.grad",
            per_call(lambda fn=fn: torch.autograd.grad(fn(), (x, w), gy), calls=500))
        if name.startswith("dispatch[") and name != "dispatch[torch]":
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(500):
                torch.autograd.grad(fn(), (x, w), gy)
            torch.cuda.synchronize()
            pr.disable()
            for key in ("tottime", "cumtime"):
                s = io.StringIO()
                pstats.Stats(pr, stream=s).sort_stats(key).print_stats(22)
                say(f"--- cProfile by {key}, 500 steps, {name}\n{s.getvalue()}")
    with open(os.path.join(a.out, "profile_training.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
