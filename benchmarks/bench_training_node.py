"""Host cost of a compiled training step's forward node against the plain (inference) node.

A ``torch.compile``d training step of an op that declares ``saved`` buffers (the norms) calls
``torch.ops.dispatch_training.<op>`` (the output and the buffers), where an inference graph calls
``torch.ops.dispatch.<op>``. This times both called directly with the same arguments, back to
back, interleaved over rounds (median us per call), on small tensors where the kernel is cheap and
the difference is host work::

    python3 benchmarks/bench_training_node.py [--ops rms_norm,layer_norm] [--shape 8x64] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import dispatch
import dispatch._compile as compiled


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="rms_norm,layer_norm")
    ap.add_argument("--shape", default="8x64")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    compiled.install()
    import torch._dynamo  # noqa: F401 - registers the custom ops

    m, n = (int(s) for s in a.shape.split("x"))
    x = torch.randn(m, n, device=a.device)
    w = torch.randn(n, device=a.device)
    print(f"{a.device}, torch {torch.__version__}, {a.shape} float32, weight given; us per call, median of "
          f"{a.rounds} interleaved rounds of {a.calls}")
    print("| op | plain node | training node | difference |")
    print("|---|---|---|---|")
    for op in a.ops.split(","):
        tensors = (x, w) if op == "rms_norm" else (x, w, None)
        args = compiled.encode({"normalized_shape": (n,), "eps": 1e-5, "backend": None})
        plain = getattr(torch.ops.dispatch, op).default
        training = getattr(torch.ops.dispatch_training, op).default
        needs = [True, True] + ([False] if op == "layer_norm" else [])
        calls = {"plain": lambda: plain(*tensors, args), "training": lambda: training(*tensors, args, needs)}
        times: dict[str, list[float]] = {k: [] for k in calls}
        for fn in calls.values():
            per_call_us(fn, 200)
        for _ in range(a.rounds):
            for k, fn in calls.items():
                times[k].append(per_call_us(fn, a.calls))
        p, t = statistics.median(times["plain"]), statistics.median(times["training"])
        print(f"| {op} | {p:.1f} | {t:.1f} | {t - p:+.1f} |")


if __name__ == "__main__":
    main()
