"""``python -m dispatch ab``: compare backends on shapes and dtypes; a table, files and a plot."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

EPILOG = """\
exit status: 0 every backend that ran passed (refusals are fine), 1 a backend failed the parity
check or raised, 2 bad arguments, an unknown backend or a file that could not be written.
example: python -m dispatch ab softmax --shape 4096x4096 --shape 8192x1024 --dtype bfloat16 \\
             --backends torch,triton,tilelang --tune --json ab.json --plot ab.png"""


def add_parser(sub) -> None:
    """Add the ``ab`` subcommand."""
    from ..cli import parse_arg, parse_dim, parse_dtype, parse_shape

    p = sub.add_parser("ab", help="A/B test backends: parity, latency, GB/s",
                       description="A/B test backends on the same inputs: parity with an fp64 reference, "
                                   "median latency, GB/s and % of the copy bandwidth measured in the same run.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ops", nargs="+", metavar="OP",
                   help="one or more declared ops (softmax, log_softmax, logsumexp, or ops plugins declare)")
    p.add_argument("--shape", type=parse_shape, action="append", required=True,
                   help="an input shape like 4096x4096 (repeat for several)")
    p.add_argument("--dtype", type=parse_dtype, action="append",
                   help="float32 (default), float16, bfloat16, float64 (repeat for several)")
    p.add_argument("--backends", default=None, help="comma-separated names (default: every loaded backend)")
    p.add_argument("--baseline", default="torch", help="what speedup is relative to (default torch; 'none')")
    p.add_argument("--dim", type=parse_dim, default=None,
                   help="the reduced dim, for ops that take one (default -1); several, 0,2, for logsumexp")
    p.add_argument("--arg", type=parse_arg, action="append", metavar="NAME=VALUE",
                   help="another argument of the op(s), e.g. --arg keepdim=True (repeat for several)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 or auto (default)")
    p.add_argument("--tune", action="store_true", help="tune every backend for every case first (cached)")
    p.add_argument("--warmup", type=int, default=25, help="untimed calls before timing (default 25)")
    p.add_argument("--rep", type=int, default=50, help="timed calls; the median is reported (default 50)")
    p.add_argument("--no-flush", action="store_true", help="don't flush the L2 between reps (GPU)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--json", metavar="FILE", help="write every result as JSON")
    p.add_argument("--csv", metavar="FILE", help="write one CSV row per backend and input")
    p.add_argument("--markdown", metavar="FILE", help="write the table as markdown")
    p.add_argument("--plot", metavar="FILE.png", help="draw GB/s against row length per backend")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_ab)


def cmd_ab(args: argparse.Namespace) -> int:
    import torch

    from . import compare

    if args.warmup < 1 or args.rep < 1:
        raise ValueError(f"--warmup and --rep must be >= 1 (got {args.warmup}, {args.rep})")
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1 (got {args.threads}); leave it out for torch's default")
        torch.set_num_threads(args.threads)
    if args.dim is not None and "dim" in dict(args.arg or ()):
        raise ValueError(f"--dim {args.dim} and --arg dim={dict(args.arg)['dim']!r} both give the dim: give one")
    if args.dim is not None:
        from .. import _opdecl, _plugins

        _plugins.registry()  # plugins may declare the ops
        if not any("dim" in _opdecl.get(op).attribute_names for op in args.ops):
            raise ValueError(f"--dim {args.dim}: none of {', '.join(args.ops)} takes a dim")
    from .._keys import device_flag

    device = device_flag(args.device)
    for flag in ("json", "csv", "markdown", "plot"):
        check_writable(f"--{flag}", getattr(args, flag))  # before the run, not after it
    named = [(flag, Path(getattr(args, flag)).expanduser().resolve()) for flag in ("json", "csv", "markdown", "plot")
             if getattr(args, flag)]
    for i, (flag, path) in enumerate(named):
        twice = next((other for other, p in named[:i] if p == path), None)
        if twice is not None:
            raise ValueError(f"--{twice} and --{flag} name one file, {getattr(args, flag)}: one would overwrite the "
                             "other; name a file for each")
    if args.plot:
        from ._plot import plot_problem

        problem = plot_problem(args.plot)
        if problem:
            raise ValueError(f"--plot {args.plot}: {problem}")
    run = compare(args.ops, shapes=args.shape, dtypes=args.dtype or [torch.float32], backends=args.backends,
                  baseline=None if args.baseline.lower() == "none" else args.baseline,
                  dim=-1 if args.dim is None else args.dim,
                  options=dict(args.arg or ()),
                  device=device, tune=args.tune, warmup=args.warmup, rep=args.rep,
                  flush_l2=not args.no_flush, progress=not args.quiet)
    print_table(run)
    return write_outputs(run, json=args.json, csv=args.csv, markdown=args.markdown, plot=args.plot) or (
        0 if run.ok else 1)


def print_table(run) -> None:
    from .._console import console as output

    console = output()
    console.print(run.table())
    bad = [r for r in run.results if r.status in ("fail", "error")]
    if bad:
        console.print(f"[bold red]{len(bad)} result(s) failed or raised:[/] "
                      + ", ".join(r.describe() for r in bad), highlight=False)


def check_writable(flag: str, path: str | None) -> None:
    """Raise ValueError naming ``flag`` where ``path`` could not be written: a folder, or in a folder
    that does not exist or is not writable."""
    if not path:
        return
    target = Path(path).expanduser()
    folder = target.parent
    if target.is_dir():
        raise ValueError(f"{flag} {path}: that is a folder; name a file in it")
    if not folder.is_dir():
        raise ValueError(f"{flag} {path}: its folder {folder} does not exist (or is not a folder); create it first")
    try:  # (a file made and removed: os.access says yes to root where writing still fails, as in /proc)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".dispatch-check-"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path}: its folder {folder} is not writable here ({exc.strerror or exc})") from None


def write_outputs(run, *, json=None, csv=None, markdown=None, plot=None) -> int:
    """Write the files asked for; return 2 if one could not be written (said on stderr), else 0."""
    status = 0
    for path, write in ((json, run.to_json), (csv, run.to_csv), (markdown, run.to_markdown), (plot, run.plot)):
        if not path:
            continue
        try:
            written = write(path)
            print(f"wrote {written if isinstance(written, Path) else path}")
        except (ImportError, OSError) as exc:
            print(f"error: cannot write {path}: {exc}", file=sys.stderr)
            status = 2
    return status
