"""Per-call cost on the GPU: host wall time of back-to-back calls and device time under CUDA graphs.

For each shape, each contender (torch, torch.compile'd torch, dispatch forced to each backend,
dispatch's own pick) is timed two ways:

``wall_us``
    A loop of back-to-back calls, synchronised once at the end, divided by the calls: what an
    eager caller pays per call. The contenders take turns, one loop each per round, 15 rounds. At decode shapes (1x4096) the kernel runs for a few
    microseconds, so this is the host cost of the call path whenever that exceeds the kernel.
``graph_us``
    The same call captured ``GRAPH_CALLS`` times in one CUDA graph, replayed and timed with CUDA
    events, divided by the calls: the device time per call when the host is out of the way
    (the capture also checks that the contender can be captured; its output is compared with
    torch's after a replay).

Medians over repeats. Writes ``launch.json`` and ``launch.md`` under ``--out``::

    python3 benchmarks/bench_launch.py --out DIR [--shapes 1x4096,32x4096,8x32000,16384x4096]
        [--dtype bfloat16] [--ops softmax] [--no-compile] [--no-graph]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

import dispatch
from graph_timing import GRAPH_CALLS, graph_replay_us  # benchmarks/, beside this script



def wall_us_interleaved(fns: dict, calls: int = 200, rounds: int = 15) -> dict:
    """``{name: (median, spread)}``: wall time per call of ``calls`` back-to-back calls of each of
    ``fns``, in us, the contenders taking turns round by round (so a host that slows down or speeds
    up mid-run weighs on every contender alike)."""
    for fn in fns.values():
        for _ in range(30):
            fn()
    torch.cuda.synchronize()
    samples: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    out = {}
    for name, ss in samples.items():
        ss.sort()
        out[name] = (statistics.median(ss), ss[-2] - ss[1])
    return out


def warm_up_host_and_gpu(seconds: float = 3.0) -> None:
    """Back-to-back small calls for a few seconds before anything is timed: the host's and the
    GPU's clocks ramp up during a process's first seconds, and the first shape measured would
    otherwise run 10-30% slower than the same shape measured later."""
    x = torch.randn(8, 1024, device="cuda")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(100):
            torch.softmax(x, -1)
        torch.cuda.synchronize()


def graph_us(fn, reference: torch.Tensor, repeats: int = 15) -> tuple[float, float, bool]:
    """(median, spread, correct): device time per call of ``fn`` replayed in a CUDA graph."""
    median, spread, outs = graph_replay_us(fn, repeats)
    return median, spread, all(torch.allclose(o.float(), reference, atol=2e-2, rtol=2e-2) for o in outs)


def contenders(op: str, compile_too: bool) -> dict:
    torch_op = getattr(torch, op)
    out = {f"torch.{op}": lambda x: torch_op(x, -1)}
    if compile_too:
        compiled = torch.compile(lambda x: torch_op(x, -1), dynamic=False)
        out[f"torch.compile({op})"] = compiled
    dispatch_op = getattr(dispatch, op)
    for name, info in dispatch.backends().items():
        if info.available:
            out[f"dispatch[{name}]"] = lambda x, name=name: dispatch_op(x, -1, backend=name)
    out["dispatch (pick)"] = lambda x: dispatch_op(x, -1)
    return out


def markdown(rows: list[dict]) -> str:
    names = list(dict.fromkeys(k for r in rows for k in r["wall_us"]))
    head = "| op | shape | dtype | " + " | ".join(names) + " |"
    lines = [head, "|" + "---|" * (3 + len(names))]
    for r in rows:
        cells = []
        for n in names:
            w, g = r["wall_us"].get(n), r["graph_us"].get(n)
            ok = r["graph_ok"].get(n, True)
            if w is None:
                cells.append("-")
            elif g is None:
                cells.append(f"{w:.1f}" + (" / capture failed" if n in r["errors"] else ""))
            else:
                cells.append(f"{w:.1f} / {g:.1f}" + ("" if ok else " WRONG"))
        lines.append(f"| {r['op']} | {r['shape'][0]}x{r['shape'][1]} | {r['dtype']} | " + " | ".join(cells) + " |")
    return ("Per call, us: wall time of back-to-back eager calls / device time under CUDA-graph replay "
            f"({GRAPH_CALLS} calls per graph); medians.\n\n" + "\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x4096,32x4096,8x32000,16384x4096")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--ops", default="softmax")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--no-graph", action="store_true", help="eager wall time only (no CUDA-graph capture)")
    ap.add_argument("--out", default="", help="folder for launch.json and launch.md")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    warm_up_host_and_gpu()
    rows = []
    for op in a.ops.split(","):
        fns = contenders(op, not a.no_compile)
        for shape in a.shapes.split(","):
            m, n = (int(v) for v in shape.split("x"))
            x = torch.randn(m, n, device="cuda").to(dtype)
            ref = getattr(torch, op)(x.float(), -1)
            row = {"op": op, "shape": [m, n], "dtype": a.dtype, "wall_us": {}, "wall_spread_us": {},
                   "graph_us": {}, "graph_ok": {}, "errors": {}}
            running = {}
            for name, fn in fns.items():
                try:
                    out = fn(x)
                    if not torch.allclose(out.float(), ref, atol=2e-2, rtol=2e-2):
                        row["errors"][name] = "wrong eager result"
                    running[name] = lambda fn=fn: fn(x)
                except Exception as exc:  # noqa: BLE001 - a contender that fails is reported, not fatal
                    row["errors"][name] = f"eager: {type(exc).__name__}: {exc}"
            for name, (median, spread) in wall_us_interleaved(running).items():
                row["wall_us"][name], row["wall_spread_us"][name] = median, spread
            for name, fn in fns.items():
                if a.no_graph or name not in running:
                    continue
                try:
                    g, _, ok = graph_us(lambda fn=fn: fn(x), ref)
                    row["graph_us"][name], row["graph_ok"][name] = g, ok
                except Exception as exc:  # noqa: BLE001
                    row["errors"][name] = f"graph: {type(exc).__name__}: {str(exc)[:300]}"
            row["pick"] = dispatch.explain(op, x, -1).decision.backend
            rows.append(row)
            print(f"{op} {m}x{n} {a.dtype}: " + "  ".join(
                f"{k} {v:.1f}/{row['graph_us'].get(k, float('nan')):.1f}" for k, v in row["wall_us"].items())
                + f"  (pick {row['pick']}) {row['errors'] or ''}", flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "graph_calls": GRAPH_CALLS}
        with open(os.path.join(a.out, "launch.json"), "w") as f:
            json.dump({**meta, "rows": rows}, f, indent=1)
        with open(os.path.join(a.out, "launch.md"), "w") as f:
            f.write(f"{meta['device']}, torch {meta['torch']}\n\n" + markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
