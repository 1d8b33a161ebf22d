"""torch.compile around dispatch ops: what a compiled function calling them costs per call, against
the same call in eager code and against torch's own op compiled, on the GPU.

For each op and shape, the per-call wall time of back-to-back calls (synchronised once per burst)
of: the eager call ``dispatch.<op>(x, -1)``; ``torch.compile(fullgraph=True)`` of a function making
that call; the same with ``mode="reduce-overhead"`` (CUDA graphs); and ``torch.compile`` of
``torch.<op>`` (default and reduce-overhead). Outputs are checked against torch's op.
Writes ``compile.json`` and ``compile.md`` under ``--out``::

    python3 benchmarks/bench_compile.py --out DIR [--shapes 1x4096,32x4096,16384x4096,4096x16384]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

import dispatch


def wall_us(fn, x, calls: int = 100, repeats: int = 11) -> float:
    for _ in range(20):
        fn(x)
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", default="1x4096,32x4096,16384x4096,4096x16384")
    parser.add_argument("--ops", default="softmax,log_softmax")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dtype = getattr(torch, args.dtype)
    rows = []
    for op in args.ops.split(","):
        ours, theirs = getattr(dispatch, op), getattr(torch, op)
        contenders = {
            "dispatch eager": lambda t, f=ours: f(t, -1),
            "dispatch compiled": torch.compile(lambda t, f=ours: f(t, -1), fullgraph=True),
            "dispatch compiled reduce-overhead": torch.compile(lambda t, f=ours: f(t, -1), fullgraph=True,
                                                               mode="reduce-overhead"),
            "torch eager": lambda t, f=theirs: f(t, -1),
            "torch compiled": torch.compile(lambda t, f=theirs: f(t, -1), fullgraph=True),
            "torch compiled reduce-overhead": torch.compile(lambda t, f=theirs: f(t, -1), fullgraph=True,
                                                            mode="reduce-overhead"),
        }
        for text in args.shapes.split(","):
            shape = tuple(int(s) for s in text.split("x"))
            x = (torch.randn(shape, device="cuda") * 4).to(dtype)
            expected = theirs(x.float(), -1)
            row = {"op": op, "shape": text, "dtype": args.dtype}
            for name, fn in contenders.items():
                try:
                    out = fn(x)
                    ok = torch.allclose(out.float(), expected, atol=2e-2, rtol=2e-2)
                    row[name] = round(wall_us(fn, x), 2) if ok else "wrong result"
                except Exception as exc:  # a contender that fails is a result, not the end of the run
                    row[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
            print(row, flush=True)
            rows.append(row)
    names = [k for k in rows[0] if k not in ("op", "shape", "dtype")]
    with open(os.path.join(args.out, "compile.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    lines = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}; us per call (wall time, back to back)", "",
             "| op | shape | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    lines += [f"| {r['op']} | {r['shape']} | " + " | ".join(str(r[n]) for n in names) + " |" for r in rows]
    with open(os.path.join(args.out, "compile.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
