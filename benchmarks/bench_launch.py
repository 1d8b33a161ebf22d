"""Per-call cost on the GPU: host wall time of back-to-back calls and device time under CUDA graphs.

For each shape, each contender (torch, torch.compile'd torch, dispatch forced to each backend,
dispatch's own pick) is timed two ways:

``wall_us``
    A loop of back-to-back calls, synchronised once at the end, divided by the calls: what an
    eager caller pays per call. The contenders take turns, one loop each per round in a random
    order, 61 rounds; each dispatch contender's time over torch's is also given paired by round.
    At decode shapes (1x4096) the kernel runs for a few microseconds, so this is the host cost of
    the call path whenever that exceeds the kernel.
``graph_us``
    The same call captured ``GRAPH_CALLS`` times in one CUDA graph, replayed and timed with CUDA
    events, divided by the calls: the device time per call when the host is out of the way
    (the capture also checks that the contender can be captured; its output is compared with
    torch's after a replay).

Ops (``--ops``): the softmax family (softmax, log_softmax, logsumexp) over ``--dim`` (the last
dim unless told; several dims, ``--dim 0,2``, for logsumexp); rms_norm and layer_norm over the last
dim with a weight (and a bias for layer_norm), as a model's layers call them. A shape has any rank
(``512x64x512``). ``--grad`` times a
training call instead: the op, then ``torch.autograd.grad`` of its output for every input.

Medians over repeats. Writes ``launch.json`` and ``launch.md`` under ``--out``::

    python3 benchmarks/bench_launch.py --out DIR [--shapes 1x4096,32x4096,8x32000,16384x4096]
        [--dtype bfloat16] [--ops softmax,rms_norm,layer_norm] [--dim -1] [--no-compile] [--no-graph] [--rounds 61]
        [--python-key] [--device-timing] [--grad] [--autocast]

``--autocast`` times every call inside one ``torch.autocast("cuda", dtype=bfloat16)`` region (a
mixed-precision model's: the norms and the softmax family then return float32, as torch's do).

``--device-timing`` adds dispatch's pick in a ``use(timing="device")`` block: the kernel chosen
for code that CUDA graphs replay (its graph column is the one to read).

``--triton-twin K=V[,K=V]`` (repeatable; the softmax family over the last dim of 2-D shapes) adds
Triton's row kernel at its default config for the shape (``triton default``) and at that config
with the given keys changed (``num_stages=3``, ``maxnreg=64``, ``path=chunks``), each through the
launcher a resolved call runs: what a candidate config would cost a caller before it ships::

    python3 benchmarks/bench_launch.py --ops logsumexp --shapes 1024x65536,256x262144 \
        --triton-twin num_stages=3 --triton-twin maxnreg=80 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

import torch

import dispatch
from dispatch.ab import torch_compiled
from graph_timing import GRAPH_CALLS, graph_replay_us  # benchmarks/, beside this script



def wall_us_interleaved(fns: dict, calls: int = 200, rounds: int = 61) -> tuple[dict, dict]:
    """``({name: (median, spread)}, {name: [samples]})``: wall time per call of ``calls``
    back-to-back calls of each of ``fns``, in us, round by round, each round in a new random order
    (so a host that slows down or speeds up mid-run, or a contender's place in the round, weighs on
    every contender alike); the samples in round order, for paired comparisons."""
    for fn in fns.values():
        for _ in range(30):
            fn()
    torch.cuda.synchronize()
    samples: dict = {name: [] for name in fns}
    order, shuffle = list(fns), random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            fn = fns[name]
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    out = {}
    for name, ss in samples.items():
        ranked = sorted(ss)
        out[name] = (statistics.median(ranked), ranked[-2] - ranked[1])
    return out, samples


def paired_pct(samples: dict, base: str) -> dict:
    """``{name: %}``: the median, over rounds, of each contender's time over ``base``'s in the same
    round, minus one, in percent (round-to-round drift of the host cancels out)."""
    return {name: 100 * statistics.median(s / b - 1 for s, b in zip(ss, samples[base]))
            for name, ss in samples.items() if name != base}


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


NORMS = ("rms_norm", "layer_norm")


def torch_op(op: str):
    """torch's own function of ``op``: ``torch.<op>``, or ``torch.nn.functional.<op>`` for the norms."""
    return getattr(torch.nn.functional if op in NORMS else torch, op)


def op_args(op: str, x: torch.Tensor, dim: int | tuple = -1) -> tuple:
    """The arguments after the input of a call timed for ``op``: ``dim`` for the softmax family;
    for the norms, the last dim as ``normalized_shape`` and a weight (and a bias for layer_norm), as
    a model's layers call them."""
    if op not in NORMS:
        return (dim,)
    n = x.shape[-1]
    w = torch.randn(n, device=x.device, dtype=x.dtype)
    return ((n,), w) if op == "rms_norm" else ((n,), w, torch.randn(n, device=x.device, dtype=x.dtype))


def contenders(op: str, compile_too: bool, python_key: bool = False, device_timing: bool = False,
               compiled_pick: bool = False) -> dict:
    """``{name: fn(x, *args)}``: torch, torch.compile'd torch, dispatch forced to each available
    backend, and dispatch's own pick (and, with ``python_key``, its pick with the Python call key;
    with ``device_timing``, its pick in a ``use(timing="device")`` block, the choice for code that
    CUDA graphs replay: read its device time, as its wall time pays for entering the block; with
    ``compiled_pick``, its pick inside a torch.compile'd function, one custom-op node)."""
    tfn = torch_op(op)
    out = {"torch": tfn}
    if compile_too:
        # a Python function around torch's, as a model would call it (``torch.softmax`` is a builtin)
        out["torch.compile"] = torch_compiled(lambda *a: tfn(*a))
    dispatch_op = getattr(dispatch, op)
    for name, info in dispatch.backends().items():
        if info.available:
            out[f"dispatch[{name}]"] = lambda *a, name=name: dispatch_op(*a, backend=name)
    out["dispatch (pick)"] = dispatch_op
    if python_key:
        from dispatch.backend import python_key_op

        python_op = python_key_op(op)
        out["dispatch (pick, Python key)"] = python_op
    if device_timing:
        def device_pick(*a):
            with dispatch.use(timing="device"):
                return dispatch_op(*a)

        out["dispatch (pick, device timing)"] = device_pick
    if compiled_pick:
        out["torch.compile(dispatch)"] = torch_compiled(lambda *a: dispatch_op(*a))
    return out


def parse_twin(spec: str) -> dict:
    """``"num_stages=3,maxnreg=64"`` -> ``{"num_stages": 3, "maxnreg": 64}`` (ints where they parse)."""
    over = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"--triton-twin {spec!r}: expected KEY=VALUE[,KEY=VALUE], e.g. num_stages=3,maxnreg=64")
        value = value.strip()
        over[key.strip()] = int(value) if value.lstrip("-").isdigit() else value
    return over


def triton_twins(op: str, x: torch.Tensor, specs: list[str]) -> dict:
    """``{name: fn(x, *args)}``: Triton's row kernel over the rows of a 2-D ``x`` at its default config
    (``triton default``) and at that config changed by each of ``specs`` (``triton K=V``), each
    through a :class:`dispatch_triton.launch.Launcher`'s ``run``, the path of a resolved call. A
    twin whose config the launcher refuses raises when called (the row reports it)."""
    from dispatch_triton import configs, launch

    m, n = x.shape
    base = configs.default_config(op, m, n, x.dtype)
    out = {}
    for label, over in [("triton default", {})] + [(f"triton {spec}", parse_twin(spec)) for spec in specs]:
        try:
            run = launch.Launcher(op, m, n, x.dtype, x.dtype, x.stride(0), x.device, dict(base, **over)).run
        except ValueError as exc:
            def run(x, exc=exc):
                raise exc
        out[label] = lambda x, *args, run=run: run(x)
    return out


def training_calls(op: str, fns: dict, x: torch.Tensor, args: tuple) -> tuple[dict, torch.Tensor]:
    """``({name: fn(x, *args)}, reference)``: each contender's call as a training step runs it, the
    op and then ``torch.autograd.grad`` of its output (against a fixed random gradient) for the
    input and every tensor argument; the call returns the input's gradient, and the reference is
    that gradient computed by torch in fp32."""
    leaves = [x] + [v for v in args if isinstance(v, torch.Tensor)]
    for t in leaves:
        t.requires_grad_(True)
    f32 = [t.detach().float().requires_grad_(True) for t in leaves]
    it = iter(f32[1:])
    args32 = tuple(next(it) if isinstance(v, torch.Tensor) else v for v in args)
    y32 = torch_op(op)(f32[0], *args32)
    gy = torch.randn_like(y32).to(x.dtype)  # the output's shape: logsumexp's is not the input's
    ref = torch.autograd.grad(y32, f32, gy.float())[0]
    return {name: (lambda *a, fn=fn: torch.autograd.grad(fn(*a), leaves, gy)[0]) for name, fn in fns.items()}, ref


def shape_text(row: dict) -> str:
    """``512x64x512``, and ``, dim (0, 2)`` where the softmax family's dim is not the last."""
    text = "x".join(str(v) for v in row["shape"])
    return text if row.get("dim", -1) == -1 else f"{text}, dim {row['dim']}"


def markdown(rows: list[dict]) -> str:
    names = list(dict.fromkeys(k for r in rows for k in r["wall_us"]))
    head = "| op | shape | dtype | " + " | ".join(names) + " |"
    lines = [head, "|" + "---|" * (3 + len(names))]
    for r in rows:
        cells = []
        for n in names:
            w, g = r["wall_us"].get(n), r["graph_us"].get(n)
            ok = r["graph_ok"].get(n, True)
            pct = r.get("vs_torch_pct", {}).get(n)
            paired = "" if pct is None else f" ({pct:+.0f}%)"
            if w is None:
                cells.append("-")
            elif g is None:
                cells.append(f"{w:.1f}{paired}" + (" / capture failed" if n in r["errors"] else ""))
            else:
                cells.append(f"{w:.1f}{paired} / {g:.1f}" + ("" if ok else " WRONG"))
        lines.append(f"| {r['op']} | {shape_text(r)} | {r['dtype']} | " + " | ".join(cells) + " |")
    return ("Per call, us: wall time of back-to-back eager calls (in brackets: the median over rounds of "
            "its time over torch's in the same round) / device time under CUDA-graph replay "
            f"({GRAPH_CALLS} calls per graph); medians.\n\n" + "\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x4096,32x4096,8x32000,16384x4096")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--ops", default="softmax",
                    help="comma-separated: softmax, log_softmax, logsumexp, rms_norm, layer_norm")
    ap.add_argument("--dim", default="-1",
                    help="the softmax family's dim: one (0, -1) or, for logsumexp, several (0,2)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--no-graph", action="store_true", help="eager wall time only (no CUDA-graph capture)")
    ap.add_argument("--out", default="", help="folder for launch.json and launch.md")
    ap.add_argument("--rounds", type=int, default=61, help="rounds of back-to-back calls per contender")
    ap.add_argument("--grad", action="store_true",
                    help="time a training call: the op and torch.autograd.grad of its output for every input")
    ap.add_argument("--python-key", action="store_true",
                    help="also time dispatch's pick with the call key computed in Python")
    ap.add_argument("--device-timing", action="store_true",
                    help='also time dispatch\'s pick in a use(timing="device") block (for CUDA graphs)')
    ap.add_argument("--compiled-pick", action="store_true",
                    help="also time dispatch's pick inside a torch.compile'd function")
    ap.add_argument("--autocast", action="store_true",
                    help='time every call inside torch.autocast("cuda", dtype=torch.bfloat16)')
    ap.add_argument("--triton-twin", action="append", default=[], metavar="K=V[,K=V]",
                    help="also time Triton's row kernel at its default config for the shape and at that config "
                         "with these keys changed (repeatable; softmax family, last dim, 2-D shapes)")
    a = ap.parse_args()
    ops = a.ops.split(",")
    unknown = [op for op in ops if op not in ("softmax", "log_softmax", "logsumexp") + NORMS]
    if unknown:
        ap.error(f"--ops {a.ops!r}: unknown {unknown}; choose among softmax, log_softmax, logsumexp, "
                 "rms_norm, layer_norm")
    try:
        dims = tuple(int(d) for d in a.dim.split(","))
    except ValueError:
        ap.error(f"--dim {a.dim!r}: give a dim (-1) or several dims for logsumexp (0,2)")
    if len(dims) > 1 and set(ops) - {"logsumexp"}:
        ap.error(f"--dim {a.dim!r}: several dims are for logsumexp only; --ops {a.ops!r} has others")
    if dims != (-1,) and set(ops) & set(NORMS):
        ap.error(f"--dim {a.dim!r}: the norms run over the last dim; time them with --dim -1")
    a.dim = dims[0] if len(dims) == 1 else dims
    if a.triton_twin:
        try:
            for spec in a.triton_twin:
                parse_twin(spec)
        except ValueError as exc:
            ap.error(str(exc))
        if dims != (-1,) or set(ops) & set(NORMS) or a.grad or any(len(s.split("x")) != 2 for s in a.shapes.split(",")):
            ap.error("--triton-twin times the softmax family's row kernel: --dim -1, 2-D --shapes, no norms, no --grad")
    if a.autocast:  # one region for the whole run, as a model's forward is (no cast cache: graphs replay)
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            return run(a)
    return run(a)


def run(a: argparse.Namespace) -> int:
    dtype = getattr(torch, a.dtype)
    warm_up_host_and_gpu()
    rows = []

    def save() -> None:  # after each op and shape: a run stopped by a time limit keeps what it timed
        if not a.out:
            return
        os.makedirs(a.out, exist_ok=True)
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "graph_calls": GRAPH_CALLS}
        with open(os.path.join(a.out, "launch.json"), "w") as f:
            json.dump({**meta, "rows": rows}, f, indent=1)
        with open(os.path.join(a.out, "launch.md"), "w") as f:
            f.write(f"{meta['device']}, torch {meta['torch']}\n\n" + markdown(rows))

    for op in a.ops.split(","):
        fns = contenders(op, not a.no_compile, a.python_key, a.device_timing, a.compiled_pick)
        for shape in a.shapes.split(","):
            size = [int(v) for v in shape.split("x")]
            x = torch.randn(size, device="cuda").to(dtype)
            args = op_args(op, x, a.dim)
            ref = torch_op(op)(x.float(), *(a.float() if isinstance(a, torch.Tensor) else a for a in args))
            calls = fns if not a.triton_twin else {**fns, **triton_twins(op, x, a.triton_twin)}
            if a.grad:
                calls, ref = training_calls(op, fns, x, args)
            name = op + (" (forward + backward)" if a.grad else "") + (" (autocast)" if a.autocast else "")
            row = {"op": name, "shape": size, "dtype": a.dtype,
                   "wall_us": {}, "wall_spread_us": {},
                   "graph_us": {}, "graph_ok": {}, "errors": {}}
            if op not in NORMS:
                row["dim"] = a.dim
            running = {}
            for name, fn in calls.items():
                try:
                    out = fn(x, *args)
                    if not torch.allclose(out.float(), ref, atol=2e-2, rtol=2e-2):
                        row["errors"][name] = "wrong eager result"
                    running[name] = lambda fn=fn: fn(x, *args)
                except Exception as exc:  # noqa: BLE001 - a contender that fails is reported, not fatal
                    row["errors"][name] = f"eager: {type(exc).__name__}: {exc}"
            walls, samples = wall_us_interleaved(running, rounds=a.rounds)
            for name, (median, spread) in walls.items():
                row["wall_us"][name], row["wall_spread_us"][name] = median, spread
            if "torch" in samples:
                row["vs_torch_pct"] = paired_pct(samples, "torch")
            if "triton default" in samples:  # each twin's wall time over the default's, paired by round
                row["vs_triton_default_pct"] = {k: v for k, v in paired_pct(samples, "triton default").items()
                                                if k.startswith("triton ")}
            for name, fn in calls.items():
                if a.no_graph or name not in running:
                    continue
                try:
                    g, _, ok = graph_us(lambda fn=fn: fn(x, *args), ref)
                    row["graph_us"][name], row["graph_ok"][name] = g, ok
                except Exception as exc:  # noqa: BLE001
                    row["errors"][name] = f"graph: {type(exc).__name__}: {str(exc)[:300]}"
            row["pick"] = dispatch.explain(op, x, *args).decision.backend
            rows.append(row)
            print(f"{row['op']} {shape} {a.dtype}: " + "  ".join(
                f"{k} {v:.1f}" + (f" ({row['vs_torch_pct'][k]:+.0f}%)" if k in row.get("vs_torch_pct", {}) else "")
                + f"/{row['graph_us'].get(k, float('nan')):.1f}" for k, v in row["wall_us"].items())
                + f"  (pick {row['pick']}) {row['errors'] or ''}", flush=True)
            save()
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
