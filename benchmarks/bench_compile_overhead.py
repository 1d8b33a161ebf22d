"""Host cost of a compiled function calling a dispatch op, on small CPU tensors (torch backend).

For each shape, the per-call wall time (median and fastest of interleaved rounds) of: ``torch.softmax`` and ``dispatch.softmax``
eager; the custom op the compiled graph calls, ``torch.ops.dispatch.softmax.default``, called
directly; and ``torch.compile(fullgraph=True)`` of ``lambda t: torch.softmax(t, -1)`` and of
``lambda t: dispatch.softmax(t, -1)`` (Inductor, and ``backend="aot_eager"``). The kernels take
about a microsecond at these shapes, so the differences are host work: what the compiled route
adds over the eager call is the custom op's dispatch plus our run-time implementation.
``--profile`` also prints a cProfile of the compiled dispatch call (cumulative time). Usage::

    python3 benchmarks/bench_compile_overhead.py [--shapes 8x8,1x4096] [--rounds 10] [--json FILE] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time

import torch

import dispatch


def per_call_us(fn, x, calls: int, repeats: int) -> list[float]:
    for _ in range(calls):
        fn(x)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return samples


def graph_call(fn, x) -> tuple:
    """The custom op and arguments of the one dispatch node that Dynamo records for ``fn(x)``."""
    found = []

    def backend(gm, inputs):
        found.extend((n.target, n.args) for n in gm.graph.nodes
                     if n.op == "call_function" and str(n.target).startswith("dispatch."))
        return gm

    torch.compile(fn, backend=backend, fullgraph=True)(x)
    (target, args), = found
    return target, args


def contenders() -> dict:
    op, (_, args) = graph_call(lambda t: dispatch.softmax(t, -1), torch.randn(2, 3))
    return {
        "torch.softmax": lambda t: torch.softmax(t, -1),
        "dispatch.softmax": lambda t: dispatch.softmax(t, -1),
        "torch.ops.dispatch.softmax": lambda t: op(t, args),
        "compiled torch.softmax": torch.compile(lambda t: torch.softmax(t, -1), fullgraph=True),
        "compiled dispatch.softmax": torch.compile(lambda t: dispatch.softmax(t, -1), fullgraph=True),
        "aot_eager torch.softmax": torch.compile(lambda t: torch.softmax(t, -1), fullgraph=True,
                                                 backend="aot_eager"),
        "aot_eager dispatch.softmax": torch.compile(lambda t: dispatch.softmax(t, -1), fullgraph=True,
                                                    backend="aot_eager"),
    }


def profile(fn, x, calls: int, lines: int) -> str:
    for _ in range(100):
        fn(x)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn(x)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(lines)
    return text.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8x8,1x4096")
    parser.add_argument("--calls", type=int, default=1000, help="calls per timed round")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds of each contender in turn")
    parser.add_argument("--rounds", type=int, default=10, help="turns over every contender")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the compiled dispatch call")
    args = parser.parse_args()
    torch.set_num_threads(1)
    fns = contenders()
    rows, fastest = [], []
    for text in args.shapes.split(","):
        x = torch.randn(*(int(s) for s in text.split("x")))
        expected = torch.softmax(x, -1)
        for fn in fns.values():
            torch.testing.assert_close(fn(x), expected)
        # interleaved rounds, so that drifting machine load hits every contender alike
        samples: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                samples[name] += per_call_us(fn, x, args.calls, args.repeats)
        rows.append({"shape": text, **{name: round(statistics.median(s), 2) for name, s in samples.items()}})
        fastest.append({"shape": text, **{name: round(min(s), 2) for name, s in samples.items()}})
    names = list(fns)
    for stat, table in (("median", rows), ("fastest round", fastest)):
        print(f"CPU, float32, torch {torch.__version__}, 1 thread; us per call ({stat}, back to back)")
        print("| shape | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for r in table:
            print(f"| {r['shape']} | " + " | ".join(f"{r[n]:.2f}" for n in names) + " |")
        for r in table:
            print(f"{r['shape']}: compiled dispatch - compiled torch = "
                  f"{r['compiled dispatch.softmax'] - r['compiled torch.softmax']:.2f} us; "
                  f"custom op - eager dispatch = {r['torch.ops.dispatch.softmax'] - r['dispatch.softmax']:.2f} us")
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": "cpu", "dtype": "float32", "median": rows,
                       "fastest": fastest}, f, indent=1)
    if args.profile:
        x = torch.randn(*(int(s) for s in args.shapes.split(",")[0].split("x")))
        print(profile(fns["compiled dispatch.softmax"], x, 2000, 45))


if __name__ == "__main__":
    main()
