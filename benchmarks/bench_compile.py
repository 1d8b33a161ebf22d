"""torch.compile around dispatch ops: what a compiled function calling them costs per call, against
the same call in eager code and against torch's own op, eager and compiled.

The function timed is the bare op, ``lambda t: op(t, -1)``, for dispatch and torch alike (with
``--epilogue mul`` it is ``op(t, -1) * 2``: a pointwise op after it, which Inductor fuses into its
own softmax kernel but runs as a second kernel after dispatch's opaque op). Contenders, for each
op and shape:

``dispatch eager`` / ``torch eager``
    the function called as it is.
``dispatch compiled`` / ``torch compiled``
    ``torch.compile(fn, fullgraph=True, dynamic=False)`` (Inductor, default mode).
``dispatch ro`` / ``torch ro``
    the same with ``mode="reduce-overhead"`` (CUDA graphs through cudagraph trees), the input
    a static tensor as a model's buffers and parameters are (``torch._dynamo.mark_static_address``):
    each call replays the recorded graph, with no copy of the input.
``dispatch ro, input copied`` / ``torch ro, input copied``
    reduce-overhead with plain input tensors, two of them taking turns call by call (a new
    activation at each step, as a decode loop passes): cudagraph trees copy each into the graph's
    own static buffer (what a call pays when its input is not static; one plain tensor passed
    again and again at the same address was seen replayed with no copy, torch 2.11). Only at
    decode shapes (at most ``--copy-variant-max`` elements; 0 leaves them out).

Every contender is compiled for its (op, shape) alone, from a function with a code object of its
own (Dynamo keeps its compiled entries per code object, and a shared one would make every call
check the guards of the others); a recompile while timing is an error, reported in its cell.

Timing:

``wall``
    per call, a burst of back-to-back calls synchronised once at its end, divided by the calls:
    what the caller pays per call (the host's cost of the call wherever that exceeds the kernel's).
    The contenders take turns, one burst each per round (``--rounds`` rounds), so a host that
    speeds up or slows down mid-run weighs on each alike; median over the rounds. Before each
    burst of a reduce-overhead contender ``torch.compiler.cudagraph_mark_step_begin()`` is called
    (each call also starts a new cudagraph-trees iteration by itself: no call here needs a grad).
``graph``
    the device time per call: the eager and default-mode compiled contenders captured
    ``GRAPH_CALLS`` times in one ``torch.cuda.CUDAGraph``, replayed and timed with CUDA events,
    median over replays (reduce-overhead contenders replay those same kernels; not repeated).

Outputs are compared with torch's op computed in float32 (atol = rtol = 2e-2). Writes
``compile.json`` and ``compile.md`` (which names the command line) under ``--out``::

    python3 benchmarks/bench_compile.py --out DIR [--shapes 1x4096,32x4096,16384x4096,4096x16384]
        [--ops softmax,log_softmax,logsumexp] [--dtype bfloat16] [--epilogue none|mul] [--rounds 15]

On the CPU (``--device cpu``, a smoke check) there are no CUDA graphs: the reduce-overhead
contenders and the graph column are left out, and the md says so.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import statistics
import sys
import time
import types

import torch

import dispatch
from graph_timing import GRAPH_CALLS, graph_replay_us  # benchmarks/, beside this script

BURST_SECONDS = 0.02  # a burst's length aimed at (fewer calls per burst at large shapes), calls in [20, 200]


def fresh(fn):
    """``fn`` with a code object of its own: Dynamo keeps its cache per code object."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def body(f, epilogue: str):
    if epilogue == "mul":
        return lambda t: f(t, -1) * 2
    return lambda t: f(t, -1)


def contenders(op: str, x: torch.Tensor, epilogue: str, copy_variant: bool) -> dict:
    """``{name: (fn, inputs, reduce_overhead)}`` in the column order of the tables; a contender with
    several inputs takes them in turn, call by call."""
    cuda = x.device.type == "cuda"
    static = other = None
    if cuda:
        static = x.clone()
        torch._dynamo.mark_static_address(static)
        other = x.clone()
    out = {}
    for who, f in (("dispatch", getattr(dispatch, op)), ("torch", getattr(torch, op))):
        out[f"{who} eager"] = (body(f, epilogue), (x,), False)
        out[f"{who} compiled"] = (torch.compile(fresh(body(f, epilogue)), fullgraph=True, dynamic=False), (x,), False)
        if cuda:
            out[f"{who} ro"] = (torch.compile(fresh(body(f, epilogue)), fullgraph=True, dynamic=False,
                                              mode="reduce-overhead"), (static,), True)
            if copy_variant:
                out[f"{who} ro, input copied"] = (torch.compile(fresh(body(f, epilogue)), fullgraph=True,
                                                                dynamic=False, mode="reduce-overhead"), (x, other), True)
    return out


def caller(fn, inputs: tuple):
    """A call of ``fn`` without arguments: on its one input, or on its inputs in turn."""
    if len(inputs) == 1:
        only = inputs[0]
        return lambda: fn(only)
    turns = itertools.cycle(inputs)
    return lambda: fn(next(turns))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_us_interleaved(fns: dict, device: torch.device, rounds: int, errors: dict) -> dict:
    """``{name: (median, spread, calls)}``: wall time per call of a burst of back-to-back calls of
    each of ``fns`` (``{name: (call, reduce_overhead)}``), in us, the contenders taking turns round by
    round. A contender that fails or recompiles while timed is dropped, its error in ``errors``."""
    mark = torch.compiler.cudagraph_mark_step_begin
    live = dict(fns)
    one = {}
    for name, (fn, ro) in list(live.items()):
        try:
            for _ in range(30):
                if ro:
                    mark()
                fn()
            synchronize(device)
            start = time.perf_counter()
            for _ in range(5):
                fn()
            synchronize(device)
            one[name] = (time.perf_counter() - start) / 5
        except Exception as exc:  # noqa: BLE001 - a contender that fails is a result, not the end of the run
            errors[name] = f"warm-up: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            del live[name]
    calls = max(20, min(200, int(BURST_SECONDS / max(max(one.values(), default=1e-6), 1e-9))))
    samples: dict = {name: [] for name in live}
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(rounds):
            for name, (fn, ro) in list(live.items()):
                try:
                    if ro:
                        mark()
                    synchronize(device)
                    start = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    synchronize(device)
                    samples[name].append((time.perf_counter() - start) / calls * 1e6)
                except Exception as exc:  # noqa: BLE001
                    errors[name] = f"timed: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
                    del live[name]
    out = {}
    for name in live:
        ss = sorted(samples[name])
        out[name] = (statistics.median(ss), ss[-2] - ss[1] if len(ss) > 3 else 0.0, calls)
    return out


def graph_us(fn, repeats: int = 15) -> float:
    """Device time per call of ``fn`` captured ``GRAPH_CALLS`` times in one CUDA graph, replayed."""
    return graph_replay_us(fn, repeats)[0]


def close(out: torch.Tensor, expected: torch.Tensor) -> bool:
    return out.shape == expected.shape and bool(torch.allclose(out.float(), expected, atol=2e-2, rtol=2e-2))


def measure(op: str, shape: tuple, args, device: torch.device) -> dict:
    dtype = getattr(torch, args.dtype)
    torch._dynamo.reset()  # each (op, shape) compiles afresh; nothing of the last one's is kept
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.randn(shape, generator=gen) * 4).to(device=device, dtype=dtype)
    expected = getattr(torch, op)(x.float(), -1)
    if args.epilogue == "mul":
        expected = expected * 2
    copy_variant = x.numel() <= args.copy_variant_max
    row = {"op": op, "shape": "x".join(map(str, shape)), "dtype": args.dtype, "wall_us": {}, "wall_spread_us": {},
           "calls_per_burst": None, "graph_us": {}, "errors": {}}
    try:
        row["pick"] = dispatch.explain(op, x, -1).decision.backend
    except Exception as exc:  # noqa: BLE001
        row["pick"] = f"? ({type(exc).__name__})"
    fns = {}
    for name, (fn, inputs, ro) in contenders(op, x, args.epilogue, copy_variant).items():
        try:
            wrong = False
            for inp in inputs * 3:  # reduce-overhead: a warm-up call, a recording, then replays
                if ro:
                    torch.compiler.cudagraph_mark_step_begin()
                wrong = wrong or not close(fn(inp), expected)
            if wrong:
                row["errors"][name] = "wrong result"
                continue
            fns[name] = (caller(fn, inputs), ro)
        except Exception as exc:  # noqa: BLE001 - a contender that fails is a result, not the end of the run
            row["errors"][name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        finally:
            row["wall_us"][name] = None
    for name, (median, spread, calls) in wall_us_interleaved(fns, device, args.rounds, row["errors"]).items():
        row["wall_us"][name], row["wall_spread_us"][name], row["calls_per_burst"] = median, spread, calls
    if device.type == "cuda" and not args.no_graph:
        for name, (call, ro) in fns.items():
            if ro or name in row["errors"]:
                continue
            try:
                row["graph_us"][name] = graph_us(call)
            except Exception as exc:  # noqa: BLE001
                row["errors"][name + " (graph)"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return row


def cell(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def ratio(a, b) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}"


def markdown(meta: dict, rows: list[dict]) -> str:
    names = list(dict.fromkeys(n for r in rows for n in r["wall_us"]))
    lines = [f"{meta['device']}, torch {meta['torch']}, triton {meta['triton']}; {meta['dtype']}; "
             f"function compiled: `{meta['function']}`", "",
             f"Command: `{meta['command']}`", "",
             "Wall time per call, us: bursts of back-to-back calls synchronised once per burst, the contenders "
             f"taking turns over {meta['rounds']} rounds; medians. `ro` = torch.compile mode=\"reduce-overhead\" "
             "(CUDA graphs) with a static input (mark_static_address); `ro, input copied` = the same with two plain "
             "inputs taking turns, each copied into the graph's static buffer (decode shapes only). "
             "compiled/eager = dispatch compiled / dispatch eager; ro/torch ro = dispatch ro / torch ro.", ""]
    if meta["note"]:
        lines += [meta["note"], ""]
    derived = ["compiled/eager"] + (["ro/torch ro"] if any("dispatch ro" in n for n in names) else [])
    lines += ["| op | shape | pick | " + " | ".join(names + derived) + " |",
              "|" + "---|" * (3 + len(names) + len(derived))]
    for r in rows:
        w = r["wall_us"]
        cells = [cell(w.get(n)) if w.get(n) is not None else ("error" if n in r["errors"] else "-") for n in names]
        cells.append(ratio(w.get("dispatch compiled"), w.get("dispatch eager")))
        if len(derived) > 1:
            cells.append(ratio(w.get("dispatch ro"), w.get("torch ro")))
        lines.append(f"| {r['op']} | {r['shape']} | {r['pick']} | " + " | ".join(cells) + " |")
    graph_names = list(dict.fromkeys(n for r in rows for n in r["graph_us"]))
    if graph_names:
        lines += ["", f"Device time per call under CUDA-graph replay, us ({GRAPH_CALLS} calls captured in one "
                  "graph, timed with CUDA events; medians):", "",
                  "| op | shape | " + " | ".join(graph_names) + " |", "|" + "---|" * (2 + len(graph_names))]
        lines += [f"| {r['op']} | {r['shape']} | " + " | ".join(cell(r["graph_us"].get(n)) for n in graph_names) + " |"
                  for r in rows]
    errors = [(r, n, e) for r in rows for n, e in r["errors"].items()]
    if errors:
        lines += ["", "Errors:", ""] + [f"- {r['op']} {r['shape']} {n}: {e}" for r, n, e in errors]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for compile.json and compile.md")
    parser.add_argument("--shapes", default="1x4096,32x4096,16384x4096,4096x16384")
    parser.add_argument("--ops", default="softmax,log_softmax,logsumexp")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a smoke check)")
    parser.add_argument("--epilogue", choices=("none", "mul"), default="none",
                        help="the function compiled: op(t, -1) (none) or op(t, -1) * 2 (mul)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--copy-variant-max", type=int, default=1 << 20,
                        help="the 'ro, input copied' contenders at shapes of at most this many elements")
    parser.add_argument("--no-graph", action="store_true", help="leave out the device time under CUDA graphs")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here; --device cpu runs the smoke check")
    if not dispatch.backends():
        parser.error("dispatch has no backend loaded (is the package installed, with its entry points?)")
    os.makedirs(args.out, exist_ok=True)
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    function = "lambda t: op(t, -1)" + (" * 2" if args.epilogue == "mul" else "")
    meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
            "torch": torch.__version__, "triton": triton_version, "dtype": args.dtype, "function": function,
            "rounds": args.rounds, "graph_calls": GRAPH_CALLS,
            "command": shlex.join(["python3", "benchmarks/bench_compile.py", *sys.argv[1:]]),
            "note": "" if device.type == "cuda" else (
                "CPU smoke check: no CUDA graphs here, so no reduce-overhead contenders and no device-time "
                "table; the figures say nothing of the GPU.")}
    rows = []
    began = time.perf_counter()
    with torch.no_grad():
        for op in args.ops.split(","):
            for text in args.shapes.split(","):
                shape = tuple(int(s) for s in text.split("x"))
                t0 = time.perf_counter()
                row = measure(op, shape, args, device)
                rows.append(row)
                print(f"[{time.perf_counter() - began:6.1f}s] {op} {text} {args.dtype} (pick {row['pick']}, "
                      f"{time.perf_counter() - t0:.1f}s): "
                      + "  ".join(f"{k} {cell(v)}" for k, v in row["wall_us"].items())
                      + ("  | graph " + "  ".join(f"{k} {cell(v)}" for k, v in row["graph_us"].items())
                         if row["graph_us"] else "")
                      + (f"  errors {row['errors']}" if row["errors"] else ""), flush=True)
    with open(os.path.join(args.out, "compile.json"), "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "compile.md"), "w") as f:
        f.write(markdown(meta, rows))
    print(f"wrote {args.out}/compile.md and compile.json in {time.perf_counter() - began:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
