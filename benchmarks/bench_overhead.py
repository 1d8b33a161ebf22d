"""Hot-path overhead: dispatch.softmax vs torch.softmax on a small CPU tensor (torch backend).

Prints the median per-call time of each and the difference. Usage:
    python benchmarks/bench_overhead.py [--shape 8x8] [--calls 2000] [--repeats 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="8x8")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", help="also write the figures to this file")
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**rows, "overhead_us": overhead, "shape": args.shape}, f, indent=1)


if __name__ == "__main__":
    main()
