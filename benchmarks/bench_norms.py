"""GPU sweep of rms_norm and layer_norm, forward and backward: every backend forced, torch eager and
torch.compile, in GB/s and % of the device-to-device copy bandwidth measured in the same run.

Bytes counted (what an ideal kernel moves):
  forward   read x (M*N) and weight/bias (N each), write y (M*N)
  backward  read x and dy (M*N each) and weight (N), write dx (M*N) and dweight/dbias (N each)
Two ceilings, both timed like the kernels (``dispatch.backend.measure``: CUDA events, L2 flushed
before each repetition, the back-to-back rate as a floor):

  pct_copy       % of the copy bandwidth of a large buffer (``dispatch.ab.measure_copy_bandwidth``,
                 ``dst.copy_(src)`` of 512 MiB on a GPU): the device's streaming rate, which a case
                 moving tens of MB cannot fully reach (launch, ramp-up and tail, the write-back of
                 the flush's dirty L2 lines are a larger share of a short kernel).
  pct_copy_same  % of the rate of ``y.copy_(x)`` moving the case's own byte count (forward: an
                 M x N tensor of the case's dtype; backward: 1-D, half the case's bytes, in that
                 dtype), timed the same way: the fair ceiling of a kernel of that size.

The backward is timed alone (``torch.autograd.grad`` on a graph built once, kept with retain_graph),
on CUDA captured in a CUDA graph and replayed (device time, without autograd's host cost; a row's
``timed`` says ``graph``, or ``eager`` where the capture failed and the host cost is included).
Every row is checked (``check``: "ok" or why not; the table marks the others WRONG): the forward
against torch's float64 output; the backward's gradients against torch's float64 ones, each
relative to its largest magnitude (``GRAD_TOL``), and a replay against the eager backward.
Shapes: for each N in 1024..262144, M = elements // N (M*N = --elements, 16M by default), plus the
decode shapes M = 1..32 at N = 4096 (and 8192). Each forced backend tunes first (autotune on),
except with ``--quick``, which times the default configs (what a call gets with tuning off; ``--tune``
tunes anyway) and forces only the Triton backend unless ``--backends`` says otherwise.

``--jobs K`` (default 8 with ``--quick``) first compiles every case's kernels in K processes
(torch.compile's graphs and dispatch's Triton kernels, into their on-disk caches), so that the
timed sweep, one process, mostly finds them compiled.

    python benchmarks/bench_norms.py --out benchmarks/results/norms_h200     # the full sweep
    python benchmarks/bench_norms.py --quick --ops rms_norm,layer_norm --out DIR  # ~3 minutes on an H200
    TRITON_INTERPRET=1 python benchmarks/bench_norms.py --device cpu --quick --elements 8192 \
        --ops rms_norm --dtypes float32 --no-compile   # a CPU smoke run (the interpreter: minutes)
    python benchmarks/bench_norms.py --resume --out DIR   # go on with a sweep that was stopped

Results are saved after every case (a run that is stopped keeps what it measured).

Writes <out>/norms_sweep.json, .md and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import dispatch
from dispatch.ab import measure_copy_bandwidth, torch_compiled
from dispatch.backend import TuneSettings, measure, mismatch

N_SWEEP = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
DECODE = [(m, 4096) for m in (1, 2, 4, 8, 16, 32)] + [(m, 8192) for m in (1, 4, 32)]
DECODE_QUICK = [(1, 4096), (8, 4096), (32, 4096)]
TORCH = {"rms_norm": F.rms_norm, "layer_norm": F.layer_norm}
# (rtol, atol) of a gradient divided by its largest magnitude: a sum over M rows (dweight) and
# the cancellation in dx are coarser than one rounding of the output
GRAD_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (5e-2, 5e-2), torch.float16: (1e-2, 1e-2)}


def shapes(elements: int, quick: bool) -> list[tuple[int, int]]:
    ns = N_SWEEP[::2] if quick else N_SWEEP
    return [(max(1, elements // n), n) for n in ns] + (DECODE_QUICK if quick else DECODE)


def case_args(op: str, m: int, n: int, dtype: torch.dtype, device: torch.device, affine: bool):
    decl = dispatch.declared_ops()[op]
    options = {"weight": affine} if op == "rms_norm" else {"weight": affine, "bias": affine}
    args, kwargs = decl.sample((m, n), dtype, device, 0, **options)
    return args, kwargs


def fwd_bytes(op: str, m: int, n: int, esz: int, affine: bool) -> int:
    params = (1 if op == "rms_norm" else 2) * n * esz if affine else 0
    return 2 * m * n * esz + params


def bwd_bytes(op: str, m: int, n: int, esz: int, affine: bool) -> int:
    params = (2 if op == "rms_norm" else 3) * n * esz if affine else 0  # weight read, dweight (dbias) written
    return 3 * m * n * esz + params


_COMPILED: dict = {}


def _runners(op: str, backends: list[str], compiled: bool, auto: bool = True, compiled_dispatch: bool = False):
    fn = TORCH[op]
    out = {"torch eager": fn}
    if compiled:
        if op not in _COMPILED:
            _COMPILED[op] = torch_compiled(fn)
        out["torch.compile"] = _COMPILED[op]
    dispatch_fn = getattr(dispatch, op)
    for name in backends:
        out[f"dispatch[{name}]"] = (lambda b: lambda *a, **k: dispatch_fn(*a, backend=b, **k))(name)
    if auto:
        out["dispatch (auto)"] = dispatch_fn
    if compiled_dispatch:  # dispatch's pick in a compiled function: its nodes decide as inference calls
        if ("dispatch", op) not in _COMPILED:
            _COMPILED["dispatch", op] = torch_compiled(lambda *a, **k: dispatch_fn(*a, **k))
        out["torch.compile(dispatch)"] = _COMPILED["dispatch", op]
    return out


def cases(args) -> list[tuple[str, str, int, int]]:
    return [(op, dtype_name, m, n) for op in args.ops.split(",") for dtype_name in args.dtypes.split(",")
            for m, n in shapes(args.elements, args.quick)]


def warm(args, device) -> None:
    """Compile (run once, forward and backward) every case of this process's shard: the kernels
    land in the on-disk caches that the timed sweep then reads."""
    backends = [b for b in args.backends.split(",") if b and b in dispatch.backends()]
    k, of = (int(v) for v in args.shard.split("/"))
    for i, (op, dtype_name, m, n) in enumerate(cases(args)):
        if i % of != k:
            continue
        call, kwargs = case_args(op, m, n, getattr(torch, dtype_name), device, not args.no_affine)
        for name, run in _runners(op, backends, not args.no_compile, auto=False).items():
            if name == "torch eager":
                continue
            try:
                with torch.no_grad():
                    run(*call, **kwargs)
                leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in call]
                run(*leaves, **kwargs).sum().backward()
            except Exception as exc:  # the sweep reports it
                print(f"warm {op} {dtype_name} {m}x{n} {name}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
    if device.type == "cuda":
        torch.cuda.synchronize()


def warm_in_parallel(args) -> None:
    if args.jobs <= 0:
        return
    base = [a for a in sys.argv[1:] if a not in ("--resume",)]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *base, "--warm-only", "--shard",
                               f"{i}/{args.jobs}", "--jobs", "0"]) for i in range(args.jobs)]
    for p in procs:
        p.wait()


def same_size_copy(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, settings) -> tuple[float, int]:
    """``(microseconds, bytes moved)`` of ``y.copy_(x)`` of a tensor of ``shape`` and ``dtype``, timed
    as the kernels are (the ceiling of a kernel moving that many bytes)."""
    x = torch.randn(shape, device=device).to(dtype)
    y = torch.empty_like(x)
    t = measure(lambda: y.copy_(x), device, settings)
    return t.median_us, 2 * x.numel() * x.element_size()


def time_forward(run, args, kwargs, device, settings):
    with torch.no_grad():
        y = run(*args, **kwargs)
        t = measure(lambda: run(*args, **kwargs), device, settings)
    return y, t


def reference_grads(op: str, args, kwargs, dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """torch's float64 gradients of the call's tensors (x, then weight and bias where given) for ``dy``."""
    leaves = [a.detach().double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    y = TORCH[op](*leaves, **kwargs)
    return torch.autograd.grad(y, [a for a in leaves if isinstance(a, torch.Tensor)], dy.double())


def grads_check(grads, ref, dtype: torch.dtype) -> str:
    """"ok", or which gradient is not torch's float64 one and why: each divided by the largest
    magnitude of its reference, then compared at ``GRAD_TOL``."""
    names = ("input", "weight", "bias")
    for name, g, r in zip(names, grads, ref):
        scale = r.abs().max().clamp_min(torch.finfo(torch.float64).tiny)
        why = mismatch(g.detach().double() / scale, r / scale, GRAD_TOL.get(dtype, (1e-4, 1e-4)))
        if why:
            return f"d{name}: {why}"
    return "ok"


def time_backward(run, args, kwargs, device, settings, dy: torch.Tensor):
    """``(grads, timing, how, replay)``: the backward of one call for ``dy``, timed alone; ``replay``
    is "ok" or how a CUDA graph replay differs from the eager backward (the eager one is then timed).

    On CUDA the backward (``torch.autograd.grad`` of a graph built once) is captured in a CUDA
    graph, and its replays are timed (``how="graph"``): device time, as for the forward, without
    autograd's own host cost (about 90 us a call on an H200 host, longer than the kernels at most
    shapes); the forward runs on the capture stream so that autograd puts the backward there too.
    The replay's gradients are compared with those of the eager backward. Where the capture fails,
    or a replay differs, the eager ``autograd.grad`` is timed (``how="eager"``: an upper bound, host
    cost included)."""
    leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    inputs = [a for a in leaves if isinstance(a, torch.Tensor)]
    replay = "ok"
    if device.type == "cuda":
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        try:
            with torch.cuda.stream(stream):
                y = run(*leaves, **kwargs)
                grads = torch.autograd.grad(y, inputs, dy, retain_graph=True)
                torch.autograd.grad(y, inputs, dy, retain_graph=True)  # warm: nothing first-time in the capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                captured = torch.autograd.grad(y, inputs, dy, retain_graph=True)
            graph.replay()
            torch.cuda.synchronize(device)
            differs = [why for a, b in zip(captured, grads) if (why := mismatch(a, b))]
            if not differs:
                return grads, measure(graph.replay, device, settings), "graph", replay
            replay = f"a CUDA graph replay differs from the eager backward: {differs[0]}"
            print(f"{replay[:200]}; timing autograd.grad", file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - timed eagerly, and said so
            torch.cuda.synchronize(device)
            print(f"backward not captured ({type(exc).__name__}: {str(exc)[:120]}); timing autograd.grad",
                  file=sys.stderr)
    y = run(*leaves, **kwargs)
    grads = torch.autograd.grad(y, inputs, dy, retain_graph=True)
    t = measure(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True), device, settings)
    return grads, t, "eager", replay


def sweep(args, device, settings, copy_gbs, rows: list[dict], save) -> list[dict]:
    """Measure every case not in ``rows`` yet (a ``--resume``d sweep), calling ``save()`` after each."""
    backends = [b for b in args.backends.split(",") if b and b in dispatch.backends()]
    done = {(r["op"], r["dtype"], r["M"], r["N"]) for r in rows}
    eager: dict = {}
    same_copy: dict = {}  # (shape, dtype) -> (us, GB/s) of the same-size copy, or None
    for op in args.ops.split(","):
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            for m, n in shapes(args.elements, args.quick):
                if (op, dtype_name, m, n) in done:
                    continue
                call, kwargs = case_args(op, m, n, dtype, device, not args.no_affine)
                esz = torch.empty((), dtype=dtype).element_size()
                ref = TORCH[op](*[a.double() if isinstance(a, torch.Tensor) else a for a in call], **kwargs).to(dtype)
                dy = torch.randn(call[0].shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
                ref_grads = None if args.forward_only else reference_grads(op, call, kwargs, dy)
                for direction in ("forward", "backward"):
                    if direction == "backward" and args.forward_only:
                        continue
                    nbytes = (fwd_bytes if direction == "forward" else bwd_bytes)(op, m, n, esz, not args.no_affine)
                    copy_shape = (m, n) if direction == "forward" else (max(1, nbytes // (2 * esz)),)
                    key = (copy_shape, dtype_name)
                    if key not in same_copy:
                        try:
                            c_us, c_bytes = same_size_copy(copy_shape, dtype, device, settings)
                            same_copy[key] = (c_us, c_bytes / (c_us * 1e-6) / 1e9)
                        except Exception as exc:  # noqa: BLE001 - the column stays empty
                            print(f"same-size copy {copy_shape} {dtype_name}: {type(exc).__name__}: {exc}"[:200],
                                  file=sys.stderr)
                            same_copy[key] = None
                    same = same_copy[key]
                    for name, run in _runners(op, backends, not args.no_compile, args.auto,
                                              args.compiled_dispatch).items():
                        row = {"op": op, "dtype": dtype_name, "M": m, "N": n, "direction": direction,
                               "impl": name, "bytes": nbytes}
                        try:
                            if direction == "forward":
                                y, t = time_forward(run, call, kwargs, device, settings)
                                row["check"] = mismatch(y, ref) or "ok"
                            else:
                                grads, t, row["timed"], replay = time_backward(run, call, kwargs, device, settings, dy)
                                check = grads_check(grads, ref_grads, dtype)
                                row["check"] = replay if check == "ok" else check
                            row.update(us=t.median_us, spread_us=t.spread_us,
                                       gbps=nbytes / (t.median_us * 1e-6) / 1e9)
                            row["pct_copy"] = 100 * row["gbps"] / copy_gbs
                            if same is not None:
                                row.update(copy_same_us=same[0], copy_same_gbps=same[1],
                                           pct_copy_same=100 * row["gbps"] / same[1])
                            if name == "torch eager":
                                eager[direction] = t.median_us
                            elif direction in eager:
                                row["vs_eager"] = eager[direction] / t.median_us
                        except Exception as exc:  # a refusal or a failure is a row too, with its reason
                            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                        rows.append(row)
                        shown = (f"{row['us']:9.1f} us {row['gbps']:7.0f} GB/s {row['pct_copy']:5.1f}% of copy"
                                 + (f" {row['pct_copy_same']:5.1f}% of same-size copy ({row['copy_same_us']:.1f} us)"
                                    if "pct_copy_same" in row else "")
                                 + (f"  x{row['vs_eager']:.2f} vs eager" if "vs_eager" in row else "")
                                 + (f"  WRONG: {row['check'][:100]}" if row.get("check", "ok") != "ok" else "")
                                 if "us" in row else row["error"][:90])
                        print(f"{op:10} {dtype_name:8} {m:>7}x{n:<7} {direction:8} {name:23} {shown}", flush=True)
                save()  # a run stopped part way keeps every finished case
    return rows


def write_markdown(path: Path, meta: dict, rows: list[dict]) -> None:
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    lines = [f"# rms_norm / layer_norm sweep on {meta['device']}", "",
             f"copy bandwidth {meta['copy_gbs']:.0f} GB/s (a large buffer); cells: GB/s (% of that copy / % of a "
             f"copy of the case's own bytes, timed the same way); command: `{meta['command']}`", "",
             "Bytes: forward reads x (+ weight/bias) and writes y; backward reads x, dy (+ weight) and writes dx "
             "(+ dweight/dbias).", ""]
    lines.append("| op | dtype | dir | M x N | " + " | ".join(impls) + " |")
    lines.append("|---" * (4 + len(impls)) + "|")
    cases = list(dict.fromkeys((r["op"], r["dtype"], r["direction"], r["M"], r["N"]) for r in rows))
    for op, dt, d, m, n in cases:
        cells = []
        for impl in impls:
            r = next((r for r in rows if (r["op"], r["dtype"], r["direction"], r["M"], r["N"], r["impl"])
                      == (op, dt, d, m, n, impl)), None)
            if r is None:
                cells.append("")
            elif "gbps" in r:
                bad = "" if r.get("check", "ok") == "ok" else " WRONG"
                same = f" / {r['pct_copy_same']:.0f}%" if "pct_copy_same" in r else ""
                cells.append(f"{r['gbps']:.0f} ({r['pct_copy']:.0f}%{same}){bad}")
            else:
                cells.append("refused" if "Refused" in r["error"] else "error")
        lines.append(f"| {op} | {dt} | {d[:3]} | {m}x{n} | " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")


def write_plot(path: Path, meta: dict, rows: list[dict]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    groups = list(dict.fromkeys((r["op"], r["dtype"], r["direction"]) for r in rows))
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 3.2 * len(groups)), squeeze=False)
    for ax, (op, dt, d) in zip(axes[:, 0], groups):
        mine = [r for r in rows if (r["op"], r["dtype"], r["direction"]) == (op, dt, d) and "gbps" in r]
        cases = list(dict.fromkeys((r["M"], r["N"]) for r in mine))
        impls = list(dict.fromkeys(r["impl"] for r in mine))
        width = 0.8 / max(1, len(impls))
        for k, impl in enumerate(impls):
            ys = [next((r["pct_copy"] for r in mine if (r["M"], r["N"], r["impl"]) == (*c, impl)), 0) for c in cases]
            ax.bar([i + k * width for i in range(len(cases))], ys, width, label=impl)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))])
        ax.set_xticklabels([f"{m}x{n}" for m, n in cases], rotation=30, fontsize=7)
        ax.axhline(100, color="k", lw=0.5)
        ax.set_ylabel("% of copy")
        ax.set_title(f"{op} {dt} {d} ({meta['device']}, copy {meta['copy_gbs']:.0f} GB/s)", fontsize=9)
        ax.legend(fontsize=6, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="rms_norm,layer_norm")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--elements", type=int, default=16 * 1024 * 1024, help="M*N of the large shapes (>= 8M)")
    parser.add_argument("--backends", default=None,
                        help="backends to force, one column each (default triton,tilelang,torch; triton with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="every other N, three decode shapes, default configs (no tuning), only Triton forced")
    parser.add_argument("--tune", action="store_true", help="with --quick: tune the forced backends anyway")
    parser.add_argument("--auto", action="store_true", help="with --quick: add the dispatch (auto) column")
    parser.add_argument("--jobs", type=int, default=None,
                        help="processes that compile every case first (default 8 with --quick, else 0)")
    parser.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--compiled-dispatch", action="store_true",
                        help="add a torch.compile(dispatch) column: dispatch's pick inside a compiled function "
                             "(a compiled training step's backward node runs the backward of the forward's backend)")
    parser.add_argument("--no-affine", action="store_true", help="no weight/bias")
    parser.add_argument("--forward-only", action="store_true")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default="benchmarks/results/norms")
    parser.add_argument("--name", default="norms_sweep")
    parser.add_argument("--resume", action="store_true",
                        help="keep the cases of <out>/<name>.json and measure only the missing ones")
    args = parser.parse_args()
    if args.backends is None:
        args.backends = "triton" if args.quick else "triton,tilelang,torch"
    if args.jobs is None:
        args.jobs = 8 if args.quick and args.device == "cuda" else 0
    args.auto = args.auto or not args.quick
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA device (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    # the backward is taken again and again from one graph (retain_graph): torch.compile's
    # backward must not donate its saved buffers to the first one
    import torch._functorch.config as functorch_config

    functorch_config.donated_buffer = False
    settings = TuneSettings() if device.type == "cuda" else TuneSettings(warmup=2, rep=5)
    dispatch.configure(autotune=args.tune or not args.quick, policy="measured")
    if args.warm_only:  # compiles only: nothing timed, nothing tuned
        dispatch.configure(autotune=False)
        warm(args, device)
        return 0
    warm_in_parallel(args)
    copy_gbs = measure_copy_bandwidth(device, settings).gbps
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"device {name}; copy bandwidth {copy_gbs:.0f} GB/s; backends "
          f"{[n for n, i in dispatch.backends().items() if i.available]}")
    meta = {"device": name, "copy_gbs": copy_gbs, "torch": torch.__version__, "python": platform.python_version(),
            "backends": {n: dict(i.versions) for n, i in dispatch.backends().items()},
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "settings": vars(args)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    previous = out / f"{args.name}.json"
    rows: list[dict] = json.loads(previous.read_text())["rows"] if args.resume and previous.exists() else []

    def save() -> None:
        previous.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        write_markdown(out / f"{args.name}.md", meta, rows)

    sweep(args, device, settings, copy_gbs, rows, save)
    save()
    write_plot(out / f"{args.name}.png", meta, rows)
    print(f"wrote {out}/{args.name}.json, .md, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
