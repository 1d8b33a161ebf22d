"""What a training step's host time is made of, piece by piece, on the GPU.

Back-to-back wall time per call (us) of: ``torch.autograd.grad`` through one native op and
through the same op wrapped in a Python ``autograd.Function`` (what autograd itself charges for a
Python node); torch's norm step; dispatch's (Triton forced) forward with autograd recording, its
backward alone, its step; dispatch's backward function called directly with the saved tensors
(its Python and launch, no autograd engine); and ``torch.empty`` of the step's buffers. Then a
cProfile of the direct backward calls. Prints and writes ``autograd_host.txt``::

    python3 benchmarks/profile_autograd_host.py --out DIR [--op rms_norm] [--shapes 1x4096,4096x4096]
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


class _Twice(torch.autograd.Function):
    """``x * 2`` as a Python autograd node saving what a norm's node saves (input, weight, output)."""

    @staticmethod
    def forward(ctx, x, w):
        y = x.mul(2)
        ctx.save_for_backward(x, w, y)
        return y

    @staticmethod
    def backward(ctx, g):
        ctx.saved_tensors  # noqa: B018 - unpacked, as a norm's backward does
        return g.mul(2), None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/autograd_host")
    ap.add_argument("--op", default="rms_norm", choices=("rms_norm", "layer_norm"))
    ap.add_argument("--shapes", default="1x4096,4096x4096")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--calls", type=int, default=500)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dtype = getattr(torch, a.dtype)
    lines: list[str] = []

    def say(name, us=None):
        line = name if us is None else f"{name:72s} {us:8.2f} us"
        print(line, flush=True)
        lines.append(line)

    def both(name, fn):  # wall per call synced, and the host's own (clock stopped before the sync)
        say(f"{name} [synced / host only]", per_call(fn, calls=a.calls))
        say(f"{name} [host only]", per_call(fn, calls=a.calls, synced=False))

    say(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {a.op} {a.dtype}")
    for shape in a.shapes.split(","):
        m, n = (int(s) for s in shape.split("x"))
        say(f"--- {m}x{n}")
        x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
        w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
        gy = torch.randn(m, n, device="cuda", dtype=dtype)
        args = (x, (n,), w)
        torch_fn = getattr(torch.nn.functional, a.op)
        ours = getattr(dispatch, a.op)

        both("native x.mul(2): autograd.grad", lambda: torch.autograd.grad(x.mul(2), (x,), gy))
        both("Python Function x*2 (saves 3): autograd.grad", lambda: torch.autograd.grad(_Twice.apply(x, w), (x,), gy))
        both("Python Function x*2: forward alone", lambda: _Twice.apply(x, w))
        both("x.mul(2) with autograd recording", lambda: x.mul(2))
        both("torch step (forward + autograd.grad)", lambda: torch.autograd.grad(torch_fn(*args), (x, w), gy))
        both("dispatch[triton] step", lambda: torch.autograd.grad(ours(*args, backend="triton"), (x, w), gy))
        both("dispatch[triton] forward, recording", lambda: ours(*args, backend="triton"))
        with torch.no_grad():
            both("dispatch[triton] forward, no grad", lambda: ours(*args, backend="triton"))
        y = ours(*args, backend="triton")
        both("dispatch[triton] backward alone (retain_graph)",
             lambda: torch.autograd.grad(y, (x, w), gy, retain_graph=True))
        node = y.grad_fn
        cls = node._forward_cls
        kept = node.saved_tensors
        out_at = len(kept) - node.n_extra - 1
        inputs = list(kept[:out_at])
        tensors = tuple(None if absent else inputs.pop(0) for absent in node.absent)
        saved = (*tensors, *kept[out_at:])
        backward = cls._backward_kernel
        both("dispatch[triton] backward function called directly", lambda: backward(gy, *saved))
        both("torch.empty (M, N) dtype", lambda: torch.empty((m, n), dtype=dtype, device="cuda"))
        both("torch.empty (N,) dtype", lambda: torch.empty((n,), dtype=dtype, device="cuda"))
        both("torch.empty_like(x)", lambda: torch.empty_like(x))
        for name, step in (("torch", lambda: torch.autograd.grad(torch_fn(*args), (x, w), gy)),
                           ("dispatch[triton]", lambda: torch.autograd.grad(ours(*args, backend="triton"), (x, w), gy))):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(50):
                    step()
                torch.cuda.synchronize()
            table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=22, max_name_column_width=70)
            say(f"--- torch.profiler, CPU time, 50 steps of {name}\n{table}")
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(a.calls):
            backward(gy, *saved)
        torch.cuda.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
        say(f"--- cProfile by tottime, {a.calls} direct backward calls\n{s.getvalue()}")
    with open(os.path.join(a.out, "autograd_host.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
