"""Per-call cost at decode shapes on the GPU: back-to-back calls, each backend forced, and torch.

At (1, 4096) a softmax kernel runs for a few microseconds, so the time per call of a loop of
back-to-back calls (synchronised once at the end) is the host-side cost of the call path --
argument checks, dispatch, the backend's launch -- whenever that exceeds the kernel's time.

    python3 benchmarks/bench_launch.py [--shapes 1x4096,32x4096] [--dtype bfloat16] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import dispatch


def per_call_us(fn, calls: int = 200, repeats: int = 15) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x4096,32x4096")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--ops", default="softmax")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    backends = [n for n, i in dispatch.backends().items() if i.available]
    rows = []
    for op in a.ops.split(","):
        for shape in a.shapes.split(","):
            m, n = (int(v) for v in shape.split("x"))
            x = torch.randn(m, n, device="cuda").to(dtype)
            ref = getattr(torch, op)(x.float(), -1)
            row = {"op": op, "shape": [m, n], "dtype": a.dtype, "us_per_call": {}}
            row["us_per_call"]["torch." + op] = per_call_us(lambda: getattr(torch, op)(x, -1))
            for name in backends:
                out = getattr(dispatch, op)(x, -1, backend=name)
                assert torch.allclose(out.float(), ref, atol=2e-2, rtol=2e-2), name
                row["us_per_call"][name] = per_call_us(lambda name=name: getattr(dispatch, op)(x, -1, backend=name))
            row["us_per_call"]["dispatch (pick)"] = per_call_us(lambda: getattr(dispatch, op)(x, -1))
            row["pick"] = dispatch.explain(op, x, -1).decision.backend
            rows.append(row)
            print(f"{op} {m}x{n} {a.dtype}: " + "  ".join(f"{k} {v:.1f} us" for k, v in row["us_per_call"].items())
                  + f"  (pick {row['pick']})", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
