"""The command line: ``dispatch backends|explain|tune|cache|ab|demo`` (or ``python -m dispatch ...``)."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

from . import _plugins, _settings
from ._keys import device_flag


def parse_shape(text: str) -> tuple[int, ...]:
    """``"8x128"`` -> ``(8, 128)``; ``""`` or ``"scalar"`` -> ``()``."""
    if text in ("", "scalar"):
        return ()
    try:
        shape = tuple(int(s) for s in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape must look like 8x128 (got {text!r})") from None
    if any(s < 0 for s in shape):
        raise argparse.ArgumentTypeError(f"--shape sizes must be >= 0 (got {text!r})")
    return shape


def parse_dim(text: str) -> int | tuple[int, ...]:
    """``"-1"`` -> ``-1``; ``"0,2"`` -> ``(0, 2)`` (several dims, for ops that reduce over several)."""
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--dim must be a dim like -1, or several like 0,2 for logsumexp (got {text!r})") from None
    return dims[0] if len(dims) == 1 else dims


def parse_dtype(text: str) -> torch.dtype:
    dtype = getattr(torch, text, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point or dtype.itemsize < 2:  # (float8: no op)
        raise argparse.ArgumentTypeError(
            f"--dtype must be a floating dtype like float32, float16, bfloat16, float64 (got {text!r})")
    return dtype


def cmd_backends(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from ._console import console as output

    table = Table(title="dispatch backends")
    for column in ("name", "version", "ops", "available", "priority", "depends on"):
        table.add_column(column, overflow="fold")  # a long word folds onto the next line, never cut short
    for name, info in sorted(_plugins.backends().items()):
        available = "yes" if info.available else f"no: {info.available.reason}"
        priority = ", ".join(f"{k} {v}" for k, v in sorted(info.priority.items()))
        versions = ", ".join(f"{k} {v}" for k, v in sorted(info.versions.items()))
        ops = "every declared op" if info.reference else ", ".join(sorted(info.ops))
        cells = (name + (" (reference)" if info.reference else ""), info.version, ops, available, priority, versions)
        table.add_row(*(escape(cell) for cell in cells))  # a plugin's text is text, not rich markup
    console = output()
    console.print(table)
    from . import _opdecl

    by_origin: dict[str, list[str]] = {}
    for op in _opdecl.declared():
        by_origin.setdefault(_opdecl.origin(op), []).append(op)
    for where, ops in by_origin.items():
        console.print(escape(f"ops declared by {where}: {', '.join(ops)}"))
    failures = _plugins.load_failures()
    if failures:
        console.print(f"[bold red]{len(failures)} plugin(s) failed to load:[/]")
        for f in failures:
            console.print(escape(f"  {f.name} ({f.origin}): {f.error}"))
            if args.verbose:
                console.print(escape(f.traceback))
    else:
        console.print("no load failures")
    faults = _plugins.faults()
    for f in faults:
        console.print(escape(f"  fault: {f.backend}.{f.hook}: {f.error}"))
    from . import _native

    console.print(escape(f"call key: {_native.status()}"))
    return 0


def parse_arg(text: str) -> tuple[str, object]:
    """``"eps=1e-6"`` -> ``("eps", 1e-06)``: an op argument, its value a Python literal, or a torch
    dtype where it names one (``"dtype=float32"`` -> ``("dtype", torch.float32)``)."""
    import ast

    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"--arg must look like NAME=VALUE, e.g. eps=1e-6 (got {text!r})")
    if value.lower() in ("true", "false"):  # a shell's spelling of a bool: never the string "false"
        return name, value.lower() == "true"
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        dtype = getattr(torch, value.removeprefix("torch."), None)
        return name, dtype if isinstance(dtype, torch.dtype) else value  # else a bare word: a string


def _call(args: argparse.Namespace) -> tuple[tuple, dict]:
    """The op's arguments for ``--shape``/``--dtype``/``--dim``/``--arg``, from its sample factory."""
    from . import _opdecl
    from .ab import make_call
    from .ab._run import sample_options

    _plugins.registry()  # plugins may declare the op
    decl = _opdecl.get(args.op)
    options = dict(args.arg or ())
    unknown = sorted(set(options) - sample_options(decl))
    if unknown:
        raise ValueError(f"--arg {unknown[0]}: {args.op} takes no such argument; it takes "
                         f"{', '.join(sorted(sample_options(decl))) or 'none'}")
    given = options
    options = decl.canonical(given)  # (``--arg axis=0``: dim)
    if args.dim is not None and "dim" in options:
        named = next(k for k in given if k == "dim" or dict(decl.aliases).get(k) == "dim")
        raise ValueError(f"--dim {args.dim} and --arg {named}={options['dim']!r} both give the dim: give one")
    if "dim" in decl.attribute_names:
        options.setdefault("dim", -1 if args.dim is None else args.dim)
    elif args.dim is not None:
        raise ValueError(f"--dim {args.dim}: {args.op} takes no dim; it takes "
                         f"{', '.join(sorted(sample_options(decl))) or 'none'}")
    numel = 1
    for s in args.shape:
        numel *= s
    if numel * args.dtype.itemsize > _MAX_INPUT_BYTES:
        raise ValueError(f"--shape {'x'.join(map(str, args.shape))}: its {args.dtype} input would take "
                         f"{numel * args.dtype.itemsize / 2**30:.1f} GiB; the CLI makes inputs of up to "
                         f"{_MAX_INPUT_BYTES // 2**30} GiB")
    call_args, call_kwargs = make_call(args.op, args.shape, args.dtype, device_flag(args.device), **options)
    try:  # arguments torch refuses are the caller's error, said in one line
        decl.spec(decl.bind(*call_args, **call_kwargs), grad_enabled=False)
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        given = [f"--shape {'x'.join(map(str, args.shape))}"] + [f"--arg {k}={v!r}" for k, v in (args.arg or ())]
        if "dim" in decl.attribute_names and "dim" not in dict(args.arg or ()):
            given.append(f"--dim {-1 if args.dim is None else args.dim}")
        raise ValueError(f"{args.op} on {' '.join(given)}: {exc}") from None
    return call_args, call_kwargs


_MAX_INPUT_BYTES = 16 * 2**30  # what the CLI allocates for one input at most


def cmd_explain(args: argparse.Namespace) -> int:
    from .explain import explain

    call_args, call_kwargs = _call(args)
    if args.grad:  # a training call: autograd records it (its decision and backward differ)
        for t in (*call_args, *call_kwargs.values()):
            if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
                t.requires_grad_(True)
    if args.autotune:
        _settings.configure(autotune=True)
    with _settings.use(timing=args.timing):
        print(explain(args.op, *call_args, backend=args.backend, **call_kwargs))
    return 0


def parse_sweep(text: str) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """``"softmax/logsumexp:bfloat16/float32:8x128/1x4096"`` -> every (op, dtype, shape) of the product;
    items are separated by spaces, commas or new lines, ``@FILE`` reads them from a file (``#`` comments)."""
    if text.startswith("@"):
        try:
            text = "\n".join(line.partition("#")[0] for line in Path(text[1:]).read_text().splitlines())
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"--sweep {text}: cannot read it ({exc.strerror or exc})") from None
    calls = []
    for item in text.replace(",", " ").split():
        parts = item.split(":")
        if len(parts) != 3 or not all(parts):
            raise argparse.ArgumentTypeError(
                f"--sweep items must look like OPS:DTYPES:SHAPES, e.g. softmax/logsumexp:bfloat16/float32:8x128/1x4096 "
                f"(got {item!r})")
        if any(not alternative for part in parts for alternative in part.split("/")):
            raise argparse.ArgumentTypeError(f"--sweep {item!r}: an empty alternative between '/'s; name one in "
                                             "each (a trailing '/' is one)")
        dtypes = [parse_dtype(d) for d in parts[1].split("/")]
        shapes = [parse_shape(s) for s in parts[2].split("/")]
        calls += [(op, dtype, shape) for op in parts[0].split("/") for dtype in dtypes for shape in shapes]
    if not calls:
        raise argparse.ArgumentTypeError("--sweep names no call; e.g. --sweep softmax:float32:8x128")
    return calls


def cmd_tune_sweep(args: argparse.Namespace) -> int:
    import datetime
    import shlex

    from .autotune.tables import write_table
    from .tune import tune_sweep

    if args.op is not None or args.shape is not None:
        raise ValueError("--sweep names the calls: give no OP or --shape with it "
                         f"(got {args.op!r} {'--shape' if args.shape is not None else ''})")
    calls = []
    for op, dtype, shape in args.sweep:
        call_args, call_kwargs = _call(argparse.Namespace(**{**vars(args), "op": op, "dtype": dtype, "shape": shape}))
        calls.append((op, call_args, call_kwargs))
    from .ab.cli import check_writable

    check_writable("--export", args.export)  # before the sweep, not after it
    timing = args.timing or _settings.effective().timing
    print(f"tuning {len(calls)} calls ({timing} timing)", file=sys.stderr)
    try:
        with _settings.use(timing=args.timing):
            entries = tune_sweep(calls, backends=args.backends, report=lambda line: print(line, file=sys.stderr))
    except KeyboardInterrupt:
        print("interrupted: every finished decision is in the cache; the same command again measures only "
              "the calls left" + (f" (nothing was written to {args.export})" if args.export else ""), file=sys.stderr)
        return 130
    print(f"{len(entries)} decisions of {len(calls)} calls are in the cache")
    if args.export:
        devices = {key["device"] for key, _ in entries}
        if len(devices) != 1:
            raise ValueError(f"--export writes a table for one device; the sweep decided for "
                             f"{', '.join(sorted(devices)) or 'none (no call was raced)'}")
        command = "python -m dispatch " + shlex.join(args.argv)
        if args.timing is None and timing != "wall":  # the timing came from the environment: say so
            command = f"{_settings.ENV_TIMING}={timing} {command}"
        created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        count = write_table(args.export, devices.pop(), entries, command, created)
        print(f"wrote {count} decisions to {args.export}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from .tune import tune_call

    if args.sweep is not None:
        return cmd_tune_sweep(args)
    if args.export is not None:
        raise ValueError("--export writes the decisions of a --sweep; add --sweep OPS:DTYPES:SHAPES")
    if args.op is None or args.shape is None:
        raise ValueError("tune needs an OP and --shape (e.g. tune softmax --shape 8x128), or --sweep")
    call_args, call_kwargs = _call(args)
    with _settings.use(timing=args.timing):
        print(tune_call(args.op, *call_args, backends=args.backends, progress=True, **call_kwargs))
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from .autotune.cache import CacheWarning, default_cache

    cache = default_cache()
    if cache.directory.exists() and not cache.directory.is_dir():
        raise ValueError(f"the cache dir {cache.directory} is not a folder; point DISPATCH_CACHE_DIR at one")
    if args.action == "show":
        entries = list(cache.entries())
        print(f"cache dir: {cache.directory} ({len(entries)} entries)")
        for key, value in entries:
            what = value.get("backend") or value.get("config")
            print(f"  {key.get('kind', '?'):<8} {key.get('op')} {key.get('dtype')} {key.get('bucket')} "
                  f"{key.get('device')} {key.get('backend', key.get('candidates', ''))} -> {what}")
        if cache.rejected:
            print(f"skipped {len(cache.rejected)} invalid entries (see the warnings)")
    elif args.action == "clear":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CacheWarning)
            removed = cache.clear()
        print(f"removed {removed} entries from {cache.directory}")
        for w in caught:
            print(f"error: {w.message}", file=sys.stderr)
        return 1 if caught else 0
    elif args.action == "export":
        print(f"exported {cache.export(args.file)} entries to {args.file}")
    elif args.action == "import":
        if not Path(args.file).is_file():
            raise ValueError(f"cache import {args.file}: no such file; give a file that `cache export` wrote")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CacheWarning)  # the report below names every rejected entry
            report = cache.import_(args.file)
        print(report, file=sys.stdout if not report.rejected else sys.stderr)
        return 0 if not report.rejected else 1
    return 0


def _add_call_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("op", nargs=None if required else "?",
                   help="a declared op: softmax, log_softmax, logsumexp, rms_norm, layer_norm, or one a plugin "
                        "declares")
    p.add_argument("--shape", type=parse_shape, required=required, help="e.g. 8x128 (the first tensor's)")
    p.add_argument("--dtype", type=parse_dtype, default=torch.float32)
    p.add_argument("--dim", type=parse_dim, default=None,
                   help="for ops with a dim argument (default -1); several, 0,2, for logsumexp")
    p.add_argument("--arg", type=parse_arg, action="append", metavar="NAME=VALUE",
                   help="another argument of the op, e.g. --arg keepdim=True (repeat for several)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 or auto (default)")


def _add_timing_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--timing", choices=_settings.TIMINGS, default=None,
                   help=f"{what}: wall (what an eager call pays) or device (for code replayed in CUDA graphs); "
                        f"default: {_settings.ENV_TIMING}, else wall")


def _prog() -> str:
    """How the user called us: ``dispatch`` (the installed script) or ``python -m dispatch``."""
    return "python -m dispatch" if Path(sys.argv[0]).name == "__main__.py" else "dispatch"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(), description="Which backend serves each call, tuning, the decision cache and A/B tests.")
    parser.add_argument("--traceback", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("backends", help="list backends and plugin load failures")
    p.add_argument("-v", "--verbose", action="store_true", help="show load-failure tracebacks")
    p.set_defaults(func=cmd_backends)

    p = sub.add_parser("explain", help="which backend and config a call gets, and why")
    _add_call_args(p)
    p.add_argument("--backend", default=None)
    p.add_argument("--autotune", action="store_true", help="tune if the key is new")
    p.add_argument("--grad", action="store_true",
                   help="as a training call: the tensor arguments require grad (says which backward runs)")
    _add_timing_arg(p, "the decision for calls raced by this timing")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("tune", help="tune every backend for a call (or a sweep of calls) and store the decision")
    _add_call_args(p, required=False)
    p.add_argument("--backends", default=None, help="comma-separated names (default: all that serve)")
    p.add_argument("--sweep", type=parse_sweep, default=None, metavar="SPEC",
                   help="tune many calls: OPS:DTYPES:SHAPES items ('/' between alternatives), or @FILE")
    p.add_argument("--export", default=None, metavar="FILE",
                   help="with --sweep: write its decisions as a decision table (e.g. dispatch/tables/<gpu>.json)")
    _add_timing_arg(p, "race by this timing")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("cache", help="show, clear, export or import the decision cache",
                       description="show: list every entry; clear: delete every entry; export FILE: write them "
                                   "to FILE; import FILE: store the entries of FILE that fit this machine")
    p.add_argument("action", choices=("show", "clear", "export", "import"))
    p.add_argument("file", nargs="?", help="the file export writes and import reads (show and clear take none)")
    p.set_defaults(func=cmd_cache)

    from .ab.cli import add_parser as add_ab_parser

    add_ab_parser(sub)
    from .demo import add_parser as add_demo_parser

    add_demo_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if getattr(args, "action", None) in ("export", "import") and not args.file:
        parser.error(f"cache {args.action} needs a FILE")
    if getattr(args, "action", None) in ("show", "clear") and args.file:
        parser.error(f"cache {args.action} takes no FILE (got {args.file!r}); it works on the whole cache")
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            return args.func(args)
        except Exception as exc:  # one line, never a traceback (``--traceback`` shows where it came from)
            if args.traceback:
                raise
            from .errors import DispatchError

            if isinstance(exc, (DispatchError, ValueError, TypeError, IndexError, OSError)):
                print(f"error: {exc}", file=sys.stderr)
            else:
                print(f"error: {type(exc).__name__}: {exc} (unexpected: rerun with --traceback and report it)",
                      file=sys.stderr)
            return 2


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line on stderr: ``warning: <message>``."""
    print(f"warning: {message}", file=sys.stderr)
