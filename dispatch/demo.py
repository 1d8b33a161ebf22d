"""``python -m dispatch demo``: which backend serves each op, then an A/B of every backend on this machine
(its GPU where torch sees one, else its CPU)."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from ._keys import device_flag
from ._spec import dtype_name

#: Small enough that the A/B takes seconds even with Triton's interpreter on the CPU.
DEMO_SHAPES = ((64, 256), (16, 2048))
DEMO_WARMUP = 5
DEMO_REP = 20
#: On a GPU: rows of a model's hidden size and a vocabulary's few long rows, in bfloat16.
GPU_SHAPES = ((4096, 4096), (8, 32000))
GPU_WARMUP = 25
GPU_REP = 100
#: torch's CPU threads in the demo: its shapes are too small to gain from more, and on a shared or
#: 2-core machine OpenMP threads stall for milliseconds when another process holds a core.
DEMO_THREADS = 1


def _tour_inputs(device: torch.device | str = "cpu") -> list[tuple[torch.Tensor, int]]:
    gen = torch.Generator().manual_seed(0)
    if torch.device(device).type == "cpu":
        shapes = [((8, 128), torch.float32, -1), ((4, 1000), torch.bfloat16, -1), ((2, 3, 64), torch.float64, 1)]
    else:  # a model's rows, a vocabulary's few long rows, a reduction over dim 0, and a dtype kernels refuse
        shapes = [((4096, 4096), torch.bfloat16, -1), ((8, 32000), torch.bfloat16, -1),
                  ((4096, 1024), torch.float32, 0), ((2, 3, 64), torch.float64, 1)]
    return [(torch.randn(*shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype), dim)
            for shape, dtype, dim in shapes]


def tour(console, device: torch.device | str = "cpu") -> None:
    """Call each op on a few tensors of ``device`` and say which backend served each call, and why."""
    import dispatch

    calls = []
    inputs = _tour_inputs(device)
    for op in ("softmax", "log_softmax", "logsumexp"):
        calls += [(op, (x, dim), f"dim={dim}") for x, dim in inputs]
    for x, _ in inputs[:2]:  # the norms over the last dim, with a weight (and layer_norm's bias)
        n = x.shape[-1]
        w, b = torch.ones(n, dtype=x.dtype, device=x.device), torch.zeros(n, dtype=x.dtype, device=x.device)
        calls += [("rms_norm", (x, [n], w), "weight"), ("layer_norm", (x, [n], w, b), "weight+bias")]
    for op, args, what in calls:
        x = args[0]
        getattr(dispatch, op)(*args)
        decision = dispatch.explain(op, *args).decision
        call = f"{'x'.join(map(str, x.shape))} {dtype_name(x.dtype)} {what}"
        config = f" [{decision.config}]" if decision.config else ""
        console.print(f"  {op:<11} {call:<28} -> {decision.backend}{config}: {decision.reason}",
                      highlight=False, markup=False)
        for c in decision.candidates:
            if not c.verdict.ok:
                console.print(f"  {'':<11} {'':<28}    not {c.name}: {c.verdict.reason}", style="dim",
                              highlight=False, markup=False)


def run_demo(out: Path | str = "dispatch-demo", warmup: int | None = None, rep: int | None = None,
             progress: bool = True, device: torch.device | str = "auto"):
    """The tour, then ``compare("softmax")`` across every loaded backend: on the CPU at
    :data:`DEMO_SHAPES` in float32, on a GPU (``device`` ``"cuda"``, or ``"auto"`` where there is
    one) at :data:`GPU_SHAPES` in bfloat16. Writes ``ab.md``, ``ab.json``, ``ab.csv`` and ``ab.png``
    to ``out``. Returns the run and the writing's status."""
    device = device_flag(device) if isinstance(device, str) else device
    gpu = device.type == "cuda"
    warmup = warmup if warmup is not None else (GPU_WARMUP if gpu else DEMO_WARMUP)
    rep = rep if rep is not None else (GPU_REP if gpu else DEMO_REP)
    import dispatch
    from dispatch._console import console as output
    from dispatch.ab import compare
    from dispatch.ab.cli import print_table, write_outputs

    console = output()
    if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
        # Triton runs kernels on the CPU only in its interpreter, which must be on before triton is imported.
        os.environ["TRITON_INTERPRET"] = "1"
        console.print("TRITON_INTERPRET=1 (no GPU: Triton kernels run in its interpreter, which is slow; "
                      "its numbers below measure the interpreter, not Triton on a GPU)", style="dim")
    loaded = dispatch.backends()
    console.print(f"[bold]backends:[/] {', '.join(sorted(loaded))}" + "".join(
        f"\n  [red]failed to load[/] {f.name}: {f.error}" for f in dispatch.load_failures()), highlight=False)
    where = torch.cuda.get_device_name() if gpu else "CPU"
    console.print(f"\n[bold]1. each op on a few {where} tensors, and the backend that served it[/]", highlight=False)
    tour(console, device)
    ab_shapes = GPU_SHAPES if gpu else DEMO_SHAPES
    dtype = torch.bfloat16 if gpu else torch.float32
    shapes = ", ".join("x".join(map(str, s)) for s in ab_shapes)
    threads = "" if gpu else f", {torch.get_num_threads()} torch thread(s)"
    console.print(f"\n[bold]2. A/B: softmax {shapes} {dtype_name(dtype)} on the {where}, every backend, "
                  f"warmup {warmup}, rep {rep}{threads}[/]", highlight=False)
    start = time.perf_counter()
    run = compare("softmax", shapes=ab_shapes, dtypes=[dtype], backends=None, device=device,
                  warmup=warmup, rep=rep, progress=progress)
    print_table(run)
    out = Path(out)
    status = write_outputs(run, json=out / "ab.json", csv=out / "ab.csv", markdown=out / "ab.md",
                           plot=out / "ab.png")
    console.print(f"A/B took {time.perf_counter() - start:.1f} s", highlight=False)
    return run, status


def _check_writable(out: Path) -> None:
    """Refuse an ``--out`` the demo could not write into, before its A/B runs rather than after."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ValueError(f"--out {str(out)!r}: cannot write there ({exc.strerror or exc}); name a folder "
                         "this user may write") from None


def cmd_demo(args: argparse.Namespace) -> int:
    for flag, value in (("--warmup", args.warmup), ("--rep", args.rep)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1 (got {value}); leave it out for the default")
    device = device_flag(args.device)
    if args.threads < 0:
        raise ValueError(f"--threads must be >= 0 (0: torch's default; got {args.threads})")
    _check_writable(Path(args.out))
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    run, status = run_demo(args.out, warmup=args.warmup, rep=args.rep, progress=not args.quiet, device=device)
    return status or (0 if run.ok else 1)


def add_parser(sub) -> None:
    """Add the ``demo`` subcommand to ``python -m dispatch`` (once, however often it is called)."""
    if "demo" in sub.choices:
        return
    p = sub.add_parser("demo", help="the tour: which backend serves each op, then an A/B table and plot",
                       description="The tour: call each op on a few tensors and show which backend served "
                                   "it and why; then A/B every installed backend on softmax and write the table "
                                   "(md, json, csv) and the plot to --out. On the GPU where there is one "
                                   "(--device auto), else on the CPU.")
    p.add_argument("--out", default="dispatch-demo", help="where to write ab.{md,json,csv,png} (./dispatch-demo)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="where the tour and the A/B run (default auto: the GPU where torch sees one, else the CPU)")
    p.add_argument("--warmup", type=int, default=None,
                   help=f"A/B warm-up calls (default {DEMO_WARMUP} on the CPU, {GPU_WARMUP} on a GPU)")
    p.add_argument("--rep", type=int, default=None,
                   help=f"A/B timed calls (default {DEMO_REP} on the CPU, {GPU_REP} on a GPU)")
    p.add_argument("--threads", type=int, default=DEMO_THREADS,
                   help=f"torch CPU threads (default {DEMO_THREADS}: steady timings on a busy machine; "
                        "0: torch's default)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_demo)
