"""Hot-path overhead: dispatch.softmax vs torch.softmax on a small CPU tensor (torch backend).

Prints the median per-call time of each and the difference; ``--breakdown`` also times each step
of the hot path on its own (the tensor attributes the key reads, the kernel). Usage:
    python benchmarks/bench_overhead.py [--shape 8x8] [--calls 2000] [--repeats 200] [--breakdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import timeit

import torch

import dispatch


def per_call_us(fn, calls: int, repeats: int) -> list[float]:
    for _ in range(calls):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return samples


def breakdown(x: torch.Tensor) -> dict[str, float]:
    """Per-call ns of steps of ``dispatch.softmax(x, -1)``'s hot path, timed alone: the tensor
    attributes its key reads and the kernel it runs (timeit's loop and the name lookups included)."""
    from dispatch.backend import reference_kernel, spec_of

    names = {"x": x, "torch": torch, "dispatch": dispatch, "kernel": reference_kernel(spec_of("softmax", x, -1))}
    steps = {
        "pass (timeit's loop)": "pass",
        "x.dtype": "x.dtype", "x.device": "x.device", "x.shape": "x.shape", "x.stride()": "x.stride()",
        "x.requires_grad": "x.requires_grad",
        "kernel(x) (the torch backend's kernel)": "kernel(x)",
        "torch.softmax(x, -1)": "torch.softmax(x, -1)",
        "dispatch.softmax(x, -1)": "dispatch.softmax(x, -1)",
    }
    number = 100_000
    return {label: min(timeit.repeat(stmt, globals=names, number=number, repeat=7)) / number * 1e9
            for label, stmt in steps.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="8x8")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--breakdown", action="store_true", help="also time each step of the hot path alone")
    args = parser.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(*(int(s) for s in args.shape.split("x")))
    assert torch.equal(dispatch.softmax(x, -1), torch.softmax(x, -1))
    assert dispatch.explain("softmax", x).decision.backend == "torch"
    rows = {}
    # interleave the two so that drifting machine load hits both alike
    torch_samples, dispatch_samples = [], []
    for _ in range(5):
        torch_samples += per_call_us(lambda: torch.softmax(x, -1), args.calls, args.repeats // 5)
        dispatch_samples += per_call_us(lambda: dispatch.softmax(x, -1), args.calls, args.repeats // 5)
    rows["torch.softmax"] = statistics.median(torch_samples)
    rows["dispatch.softmax"] = statistics.median(dispatch_samples)
    overhead = rows["dispatch.softmax"] - rows["torch.softmax"]
    print(f"shape {args.shape} float32, CPU, torch {torch.__version__}, median of {args.repeats} x {args.calls} calls")
    for name, us in rows.items():
        print(f"  {name:<18} {us:6.2f} us/call")
    print(f"  overhead           {overhead:6.2f} us/call (budget 1.0 us)")
    if args.breakdown:
        print("each step alone (best of 7 x 100000, ns/call):")
        for label, ns in breakdown(x).items():
            print(f"  {label:<40} {ns:7.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**rows, "overhead_us": overhead, "shape": args.shape}, f, indent=1)


if __name__ == "__main__":
    main()
