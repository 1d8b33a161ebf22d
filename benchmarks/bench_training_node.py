"""Host cost of a compiled training step's forward node against the plain (inference) node.

A ``torch.compile``d training step of an op that declares ``saved`` buffers (the norms) calls
``torch.ops.dispatch_training.<op>`` (the output and the buffers), where an inference graph calls
``torch.ops.dispatch.<op>``. This finds each node in the forward graph that AOTAutograd makes
for a compiled call (with and without gradients), calls both with the graph's own arguments, back
to back, interleaved over rounds (median us per call), on small tensors where the kernel is cheap
and the difference is host work::

    python3 benchmarks/bench_training_node.py [--ops rms_norm,layer_norm] [--shape 8x64] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch._dynamo.backends.common import aot_autograd

import dispatch


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def node_call(op: str, tensors: tuple, train: bool):
    """``call()``: the one dispatch node that a compiled forward graph of ``op`` runs (a training
    step's if ``train``, else an inference graph's), called with the graph's own arguments."""
    found = []

    def forward_compiler(gm, inputs):
        holders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for n in gm.graph.nodes:
            if n.op == "call_function" and str(n.target).startswith(("dispatch.", "dispatch_training.")):
                found.append((n.target, [("input", holders.index(a)) if isinstance(a, torch.fx.Node) else ("value", a)
                                         for a in n.args]))
        return gm

    leaves = [t.detach().requires_grad_(train) for t in tensors]
    fn = getattr(dispatch, op)
    step = torch.compile(lambda *ts: fn(ts[0], ts[0].shape[-1:], *ts[1:]), fullgraph=True,
                         backend=aot_autograd(fw_compiler=forward_compiler))
    with torch.set_grad_enabled(train):
        step(*leaves)
    (target, args), = found
    real = [leaves[v].detach() if kind == "input" else v for kind, v in args]
    return target, lambda: target(*real)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="rms_norm,layer_norm")
    ap.add_argument("--shape", default="8x64")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    m, n = (int(s) for s in a.shape.split("x"))
    x = torch.randn(m, n, device=a.device)
    w = torch.randn(n, device=a.device)
    print(f"{a.device}, torch {torch.__version__}, {a.shape} float32, weight given; us per call, median of "
          f"{a.rounds} interleaved rounds of {a.calls}")
    print("| op | plain node | training node | difference |")
    print("|---|---|---|---|")
    for op in a.ops.split(","):
        tensors = (x, w)
        (plain, plain_call), (training, training_call) = node_call(op, tensors, False), node_call(op, tensors, True)
        assert str(plain).startswith("dispatch.") and str(training).startswith("dispatch_training."), (plain, training)
        calls = {"plain": plain_call, "training": training_call}
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
