"""``compare``: run backends apples to apples on the same inputs and measure them the same way.

The protocol, in order:
1. For every (op, shape, dtype) and backend: ask whether it serves the case (a refusal is a
   result, with its reason); when asked, tune it (the result goes to the decision cache).
2. Call each once, untimed, through the public op with ``backend=`` (this resolves the call and
   pre-warms its JIT and autotuner); check that output against an fp64 reference at the output
   dtype's tolerance; record the config it used.
3. Measure the device's copy bandwidth (``dst.copy_(src)`` of a large buffer).
4. Time every backend that ran with :func:`dispatch.autotune.measure` (CUDA events and an L2
   flush between repetitions on the GPU, ``perf_counter`` on the CPU), same warm-up and reps.
Nothing is timed before every backend has been warmed, so no tuning or compilation is timed.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from .. import _opdecl, _plugins, _settings
from .._dispatcher import DISPATCHER
from .._keys import resolve_device
from .._select import Selector
from ..autotune.cache import default_cache
from ..autotune.space import TuneSettings
from ..autotune.timer import measure
from ..errors import BackendFaultError, BackendRefusedError, UnknownBackendError
from ..explain import explain
from ..reference import exact_output, tolerance_of, torch_error
from ..tolerance import max_errors, mismatch
from ._result import BackendResult, Comparison, CopyBandwidth, as_dtype, as_shape, dtype_name, gbps, shape_text

#: ``progress(done, total, what)``: called as the run advances (``what`` names the current step).
ProgressFn = Callable[[int, int, str], None]

COPY_BYTES_CPU = 64 * 1024 * 1024
COPY_BYTES_CUDA = 512 * 1024 * 1024


def compare(op: str | Sequence[str], shapes: Iterable[tuple[int, ...] | str] = ((4096, 4096),),
            dtypes: Iterable[torch.dtype | str] = (torch.float32,), backends: Iterable[str] | str | None = None, *,
            baseline: str | None = "torch", dim: int = -1, device: torch.device | str | None = None,
            tune: bool = False, warmup: int = 25, rep: int = 50, flush_l2: bool = True,
            copy_bytes: int | None = None, seed: int = 0, options: dict[str, Any] | None = None,
            progress: bool | ProgressFn = False) -> Comparison:
    """A/B test ``backends`` on ``op`` (one op or several) for every shape and dtype.

    ``backends``: names (a list or ``"torch,triton"``); None compares every loaded backend. The
    ``baseline`` (default ``"torch"``, None for none) is always run and is what ``speedup`` is
    relative to. ``tune=True`` tunes each backend for each case before anything is measured
    (results go to the decision cache, so later calls use them). ``warmup``/``rep`` are counts
    (protocol: 25/50). ``copy_bytes`` sizes the copy-bandwidth buffer (default 64 MB on CPU,
    512 MB on CUDA). ``progress=True`` shows a rich progress bar; a callable receives
    ``(done, total, what)``.

    A backend that refuses a case is a ``refused`` result with its reason; one that raises is an
    ``error`` result; neither stops the run. Naming a backend that is not loaded raises
    :class:`~dispatch.UnknownBackendError`, unless it failed to load (then it is ``refused``, and
    the reason is the load failure).
    """
    _check_arguments(tune=tune, flush_l2=flush_l2, warmup=warmup, rep=rep, seed=seed, copy_bytes=copy_bytes,
                     progress=progress, options=options)
    op_names = (op,) if isinstance(op, str) else tuple(dict.fromkeys(
        _listed(op, "op", "an op name or a list of them, like 'softmax' or ['softmax', 'log_softmax']")))
    if not op_names:
        raise ValueError("'op' must name at least one op (got none): a comparison of nothing passes nothing")
    _plugins.registry()  # plugins may declare ops
    for name in op_names:
        if not isinstance(name, str):
            raise TypeError(f"'op' must hold op names, str (got {name!r} in {op!r})")
        _opdecl.get(name)  # a ValueError naming the declared ops
    one_shape = isinstance(shapes, str) or (isinstance(shapes, (tuple, list)) and shapes
                                            and all(isinstance(s, int) for s in shapes))
    shapes = list(dict.fromkeys(as_shape(s) for s in _listed(  # (a shape or dtype named twice: one case)
        shapes, "shapes", "a list of shapes, like [(4096, 4096)] or ['64x256']", one="shape" if one_shape else None)))
    dtypes = list(dict.fromkeys(as_dtype(d) for d in _listed(
        dtypes, "dtypes", "a list of dtypes, like [torch.bfloat16] or ['float32']",
        one="dtype" if isinstance(dtypes, (str, torch.dtype)) else None)))
    if not shapes or not dtypes:
        raise ValueError("'shapes' and 'dtypes' must each name at least one (got "
                         f"{len(shapes)} shapes, {len(dtypes)} dtypes)")
    device = resolve_device(device)
    settings = TuneSettings(warmup=warmup, rep=rep, flush_l2=flush_l2)
    names = _backend_names(backends, baseline)
    cases = [(o, s, d) for o in op_names for s in shapes for d in dtypes]
    taken = set().union(*(sample_options(_opdecl.get(name)) for name in op_names))
    unknown = sorted(set(options or {}) - taken)
    if unknown:
        raise ValueError(f"options: {unknown[0]!r} is an argument of none of {', '.join(op_names)}; "
                         f"they take {', '.join(sorted(taken)) or 'none'}")
    aliases = {alias: name for op in op_names for alias, name in _opdecl.get(op).aliases}
    both = [k for k in options or {} if aliases.get(k) in (options or {})]
    if both:
        raise ValueError(f"options: {aliases[both[0]]!r} and its alias {both[0]!r} are both given; give one")
    options = {aliases.get(k, k): v for k, v in (options or {}).items()}  # (``axis``: dim)
    if dim != -1 and "dim" not in taken:
        raise ValueError(f"'dim' is an argument of none of {', '.join(op_names)} (got dim={dim}); leave it -1")
    if options and "dim" in options and dim != -1 and options["dim"] != dim:
        raise ValueError(f"dim is given twice: dim={dim} and options={{'dim': {options['dim']!r}}}; give one")
    options = {"dim": dim, **(options or {})}  # options' dim where it gives one
    if progress is True:
        from ._progress import rich_progress

        with rich_progress() as bar:
            return _run(op_names, cases, names, baseline, options, device, tune, settings, copy_bytes, seed, bar)
    return _run(op_names, cases, names, baseline, options, device, tune, settings, copy_bytes, seed,
                progress or None)


def _given(op_names: Sequence[str], options: dict[str, Any]) -> dict[str, Any]:
    """The ops' arguments a run was given, as the result keeps them: ``dim`` only where an op takes
    one, and each value as JSON holds it (a dtype by its name, a tuple as a list)."""
    takes_dim = any("dim" in _opdecl.get(op).attribute_names for op in op_names)
    return {k: dtype_name(v) if isinstance(v, torch.dtype) else list(v) if isinstance(v, tuple) else v
            for k, v in options.items() if k != "dim" or takes_dim}


def _check_arguments(*, tune, flush_l2, warmup, rep, seed, copy_bytes, progress, options) -> None:
    """compare()'s plain arguments, each checked before anything runs: a TypeError or ValueError
    naming the argument, what it got and what would work."""
    for name, value in (("tune", tune), ("flush_l2", flush_l2)):
        if not isinstance(value, bool):
            raise TypeError(f"'{name}' must be True or False (got {value!r})")
    for name, value, least in (("warmup", warmup, 1), ("rep", rep, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"'{name}' must be an int (got {value!r})")
        if value < least:
            raise ValueError(f"'{name}' must be >= {least} (got {value})")
    if copy_bytes is not None and (isinstance(copy_bytes, bool) or not isinstance(copy_bytes, int) or copy_bytes < 1):
        raise ValueError(f"'copy_bytes' must be a positive int or None for the default (got {copy_bytes!r})")
    if not (isinstance(progress, bool) or callable(progress)):
        raise TypeError(f"'progress' must be True, False or a callable (done, total, what) (got {progress!r})")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"'options' must be a dict of the op's other arguments, like {{'eps': 1e-6}} (got {options!r})")


def _listed(value: Any, name: str, what: str, one: str | None = None) -> list:
    """The items of compare()'s list argument ``name``; a TypeError naming it and ``what`` it must be
    when it is no collection, or when ``one`` names what ``value`` is instead: one item of the list
    (a lone shape), shown wrapped in the list it would be."""
    if one is not None:
        raise TypeError(f"'{name}' must be {what} (got {value!r}; for one {one}: [{value!r}])")
    try:
        return list(value)
    except TypeError:
        raise TypeError(f"'{name}' must be {what} (got {value!r})") from None


def _backend_names(backends: Iterable[str] | str | None, baseline: str | None) -> list[str]:
    loaded = dict(_plugins.registry().backends)
    failed = {f.name for f in _plugins.load_failures()}
    if backends is None:
        names = sorted(loaded)
    elif isinstance(backends, str):
        names = [n for n in backends.replace(" ", "").split(",") if n]
    else:
        names = _listed(backends, "backends",
                        "backend names, like ['torch', 'triton'] or 'torch,triton', or None for all")
        for n in names:
            if not isinstance(n, str):
                raise TypeError(f"'backends' must hold backend names, str (got {n!r} in {backends!r})")
    if backends is not None and not names:
        raise ValueError(f"'backends' must name at least one backend (got {backends!r}); leave it None to compare "
                         f"every loaded backend: {', '.join(sorted(loaded)) or 'none'}")
    if baseline is not None:
        names = [baseline] + [n for n in names if n != baseline]
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in loaded and n not in failed]
    if unknown:
        raise UnknownBackendError(
            f"cannot compare {', '.join(map(repr, unknown))}: not loaded; loaded backends: "
            f"{', '.join(sorted(loaded)) or 'none'} (see `python -m dispatch backends` for load failures)")
    if not names:
        raise ValueError("'backends' must name at least one backend (got none)")
    return names


_FACTORY_PARAMS = frozenset({"shape", "dtype", "device", "seed"})  # a sample factory's own parameters


def make_call(op: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int = 0, /,
              **options: Any) -> tuple[tuple, dict[str, Any]]:
    """The arguments every backend gets for one case, from the op's declared sample factory
    (deterministic; for the built-in ops N(0, 4^2) so softmax has tails). ``dtype`` is the input's;
    ``options`` are the op's arguments (softmax's own ``dtype=`` among them) and the factory's."""
    decl = _opdecl.get(op)
    names = sample_options(decl)
    wanted = {k: v for k, v in decl.canonical(options).items() if k in names}
    # an op argument named like one of the factory's own parameters (softmax's ``dtype=``, the
    # output's dtype) goes to the call's keywords: the factory's ``dtype`` is the input's
    own = {k: wanted.pop(k) for k in list(wanted) if k in _FACTORY_PARAMS}
    args, kwargs = decl.sample_call(shape, dtype, device, seed, **wanted)
    return args, {**kwargs, **own}


def sample_options(decl: _opdecl.OpDecl) -> set[str]:
    """The options a case of ``decl`` takes: the op's attributes (and their aliases) and its sample
    factory's own keywords."""
    import inspect

    own = {p.name for p in inspect.signature(decl.sample).parameters.values()
           if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - _FACTORY_PARAMS
    return set(decl.attribute_names) | {alias for alias, _ in decl.aliases} | own


class _Case:
    """One op on one input: the call's arguments, its spec and tensors, and the fp64 result."""

    def __init__(self, op: str, shape, dtype, device, seed: int, options: dict[str, Any]) -> None:
        self.decl = _opdecl.get(op)
        try:  # the op's own code (its sample and parse): torch's error for arguments it refuses
            self.args, self.kwargs = make_call(op, shape, dtype, device, seed, **options)
            values = self.decl.bind(*self.args, **self.kwargs)
            self.spec = self.decl.spec(values, grad_enabled=False)
        except (RuntimeError, IndexError) as exc:  # (a dim out of range: which case, as ValueError and TypeError say)
            raise ValueError(f"{self.what(op, shape, dtype, options)}: {exc}") from exc
        self.tensors = self.decl.tensors_of(values)
        try:  # torch's op itself may refuse what the op's checks let through (an integer softmax, a float8 one)
            self.exact = exact_output(self.spec, self.tensors)
            self.floor = torch_error(self.spec, self.tensors, self.exact)  # what the reference itself meets
        except (RuntimeError, NotImplementedError) as exc:
            raise ValueError(f"{self.what(op, shape, dtype, options)}: torch's op refuses it: {exc}") from exc
        self.fn = DISPATCHER.function(op).function

    @staticmethod
    def what(op: str, shape, dtype, options: dict[str, Any]) -> str:
        return f"{op} on {shape_text(tuple(shape))} {dtype_name(dtype)}{' with ' + repr(options) if options else ''}"


class _Run:
    """One backend on one case, between the untimed warm call and the timed one."""

    def __init__(self, op: str, shape: tuple[int, ...], dtype: torch.dtype, backend: str) -> None:
        self.op, self.shape, self.dtype, self.backend = op, shape, dtype, backend
        self.fields: dict[str, Any] = {}
        self.runner: Callable[[], object] | None = None
        self.tune_failed = ""  # why tuning failed, when asked and it did

    @property
    def what(self) -> str:
        return f"{self.op} {shape_text(self.shape)} {dtype_name(self.dtype)} on {self.backend}"


def _run(op_names, cases, names, baseline, options, device, tune, settings, copy_bytes, seed,
         progress: ProgressFn | None) -> Comparison:
    failures = {f.name: f.error for f in _plugins.load_failures()}
    total = 2 * len(cases) * len(names) + 1
    done = 0

    def step(what: str, advance: int = 1) -> None:
        nonlocal done
        done += advance
        if progress is not None:
            progress(done, total, what)

    if progress is not None:
        progress(0, total, "starting")
    inputs: dict[tuple, _Case] = {}
    runs: list[_Run] = []
    # 1. who serves what, and tuning first when asked (then nothing resolved before keeps a stale config)
    for op, shape, dtype in cases:
        case = inputs[(op, shape, dtype)] = _Case(op, shape, dtype, device, seed, options)
        for name in names:
            run = _Run(op, shape, dtype, name)
            runs.append(run)
            if name in failures and name not in _plugins.registry().backends:
                run.fields = {"status": "refused",
                              "reason": f"not loaded: the plugin failed to load ({failures[name]})"}
            else:
                if progress is not None:
                    progress(done, total, f"{'tuning' if tune else 'checking'} {run.what}")
                _judge(run, case, tune, settings,
                       (lambda text: progress(done, total, text)) if progress is not None else None)
    if tune:
        DISPATCHER.clear()
    # 2. warm every backend on every case (JIT, autotuners), untimed, and check its output
    for run in runs:
        if "status" not in run.fields:
            if progress is not None:
                progress(done, total, f"warming {run.what}")
            _warm(run, inputs[(run.op, run.shape, run.dtype)])
            if run.tune_failed:
                said = run.fields.get("reason") or ""
                run.fields["reason"] = f"{said}{'; ' if said else ''}tuning failed ({run.tune_failed}): run untuned"
        step(f"warmed {run.what}")
    # 3. the ceiling, in the same run
    if progress is not None:
        progress(done, total, "measuring copy bandwidth")
    copy = measure_copy_bandwidth(device, settings, copy_bytes)
    step("measured copy bandwidth")
    # 4. time every backend that ran, the same way
    for run in runs:
        if run.runner is not None:
            if progress is not None:
                progress(done, total, f"timing {run.what}")
            try:
                timing = measure(run.runner, device, settings)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # its checked first call passed; a later one raised
                run.fields.update(status="error", reason=f"raised while it was timed: {_why(exc)}")
            else:
                run.fields.update(median_us=timing.median_us, spread_us=timing.spread_us, reps=timing.reps)
        step(f"timed {run.what}")
    results = _finish(runs, inputs, options.get("dim", -1), copy, baseline)
    versions = {n: b.info.version for n, b in _plugins.registry().backends.items() if n in names}
    return Comparison(ops=op_names, device=str(device), device_name=device_description(device), copy=copy,
                      results=results, baseline=baseline, warmup=settings.warmup, rep=settings.rep, tuned=tune,
                      flush_l2=settings.flush_l2, versions=versions, options=_given(op_names, options))


def _judge(run: _Run, case: _Case, tune: bool, settings: TuneSettings,
           report: Callable[[str], None] | None) -> None:
    """Does the backend serve this case (a refusal is recorded with its reason)? Tune it if asked."""
    try:
        explain(run.op, *case.args, backend=run.backend, **case.kwargs)  # a refusal raises here, with its reason
    except BackendRefusedError as exc:
        run.fields = {"status": "refused", "reason": exc.reason}
        return
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a plugin cannot end the process
        run.fields = {"status": "error", "reason": _why(exc)}
        return
    if tune:
        try:
            _tune(run, case, settings, report)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit included: a plugin cannot end the process
            run.tune_failed = _why(exc)  # (no config could be tuned: the untuned call is checked and timed)


def _warm(run: _Run, case: _Case) -> None:
    """The untimed first call through the public op, its parity check, and the config it used."""
    fn, args, kwargs = case.fn, case.args, case.kwargs
    try:
        with torch.no_grad():
            out = fn(*args, backend=run.backend, **kwargs)
    except BackendFaultError as exc:
        _warm_rejected(run, case, exc)
        return
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a plugin cannot end the process
        run.fields = {"status": "error", "reason": _why(exc)}
        return
    decision = explain(run.op, *args, backend=run.backend, **kwargs).decision
    run.fields = {"via": "op", "config": decision.config, "config_source": decision.config_source,
                  **_check(out, case)}
    run.runner = _no_grad(lambda: fn(*args, backend=run.backend, **kwargs))


def _warm_rejected(run: _Run, case: _Case, fault: BackendFaultError) -> None:
    """dispatch would not serve this backend (it raised, or differed from the reference on its
    first call). Run its kernel directly, to report how wrong it is and how fast; else an error."""
    backend = _plugins.registry().backends[run.backend]
    try:
        decision = explain(run.op, *case.args, backend=run.backend, **case.kwargs).decision
        kernel = backend.kernel(run.op, decision.spec, decision.config)
        tensors = tuple(None if t is None else t.clone() for t in case.tensors)
        with torch.no_grad():
            out = kernel(*tensors)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: a plugin cannot end the process
        run.fields = {"status": "error", "reason": _why(exc)}
        return
    checked = _check(out, case)
    if checked["status"] == "fail":
        reason = f"{checked['reason']} (dispatch won't serve it: run and timed through its kernel)"
    else:  # right against fp64, wrong against torch in its own dtype: say what dispatch said
        reason = f"dispatch won't serve it ({_why(fault)}): run and timed through its kernel"
    run.fields = {"via": "kernel", "config": decision.config, "config_source": decision.config_source,
                  **checked, "status": "fail", "reason": reason}
    run.runner = _no_grad(lambda: kernel(*tensors))


def _tune(run: _Run, case: _Case, settings: TuneSettings, report: Callable[[str], None] | None) -> None:
    backend = _plugins.registry().backends[run.backend]
    space = backend.tune_space(run.op, case.spec)
    if space is None or len(space.configs) < 2:
        return  # nothing to tune: config_for would not tune it either
    selector = Selector(_plugins.registry(), default_cache(), _settings.effective())
    on_config = None if report is None else (lambda config: report(f"tuning {run.what} [{config}]"))
    selector.tune(backend, case.spec, settings, progress=on_config)


def _no_grad(fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with torch.no_grad():
            return fn()
    return run


def _check(out: object, case: _Case) -> dict[str, Any]:
    """Errors of ``out`` against the fp64 reference; pass if it has the op's output dtype and
    matches the reference rounded to that dtype within the op's tolerance for it, or, where it
    does not, is no further from the exact result than torch's own op in that dtype (its max abs
    and max rel errors both within torch's: the floor every backend, torch included, is held to)."""
    out_dtype = case.spec.out_dtype
    if not isinstance(out, torch.Tensor):
        return {"status": "fail", "reason": f"returned {type(out).__name__}, not a tensor"}
    rtol, atol = tolerance_of(case.spec)
    expected = case.exact
    fields: dict[str, Any] = {"out_dtype": out_dtype, "rtol": rtol, "atol": atol}
    if out.shape != expected.shape or out.dtype != out_dtype:
        return {**fields, "status": "fail", "reason": f"returned {tuple(out.shape)} {dtype_name(out.dtype)}; "
                f"expected {tuple(expected.shape)} {dtype_name(out_dtype)}"}
    abs_err, rel_err = max_errors(out, expected)
    fields.update(max_abs_err=abs_err, max_rel_err=rel_err)
    why = mismatch(out, expected.to(out_dtype), (rtol, atol))
    if why is not None and case.floor is not None and "outside" in why:
        floor_abs, floor_rel = case.floor
        if abs_err <= floor_abs and rel_err <= floor_rel:  # the rule the reference itself meets
            return {**fields, "status": "pass",
                    "reason": f"{why}; no further from the exact result than torch's own {case.spec.op} "
                              f"(max abs err {floor_abs:.3g}, max rel err {floor_rel:.3g}): passes as the reference does"}
    if why is not None and "outside" not in why:  # NaN or inf where the reference has none: no finite error
        fields.update(max_abs_err=float("inf"), max_rel_err=float("inf"))
    return {**fields, "status": "pass" if why is None else "fail", "reason": why or ""}


def _why(exc: BaseException) -> str:
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = text[0] if text else ""
    if first.endswith(":") and len(text) > 1:  # (a heading: its first item says what it heads)
        first = f"{first} {text[1]}" + (f" (and {len(text) - 2} more)" if len(text) > 2 else "")
    return f"{type(exc).__name__}: {first}"


def _finish(runs: list[_Run], inputs, dim: int, copy: CopyBandwidth, baseline: str | None) -> list[BackendResult]:
    base_us = {(r.op, r.shape, r.dtype): r.fields.get("median_us") for r in runs if r.backend == baseline}
    results = []
    for run in runs:
        case = inputs[(run.op, run.shape, run.dtype)]
        f = dict(run.fields)
        out_dtype = f.pop("out_dtype", None) or case.spec.out_dtype
        nbytes = case.decl.bytes_of(case.spec)
        median = f.get("median_us")
        rate = gbps(nbytes, median)
        base = base_us.get((run.op, run.shape, run.dtype))
        extra = {} if case.decl.row_size is None else {"row_length": case.decl.row_size(case.spec)}
        results.append(BackendResult(
            op=run.op, shape=run.shape, dtype=run.dtype, backend=run.backend, dim=dim, out_dtype=out_dtype,
            bytes_moved=nbytes, gbps=rate, **extra,
            pct_of_copy=None if rate is None or not copy.gbps else 100.0 * rate / copy.gbps,
            speedup=base / median if base and median else None, **f))
    return results


def measure_copy_bandwidth(device: torch.device, settings: TuneSettings = TuneSettings(),
                           nbytes: int | None = None) -> CopyBandwidth:
    """Time ``dst.copy_(src)`` of ``nbytes`` on ``device`` (read + write bytes over time)."""
    if nbytes is None:
        nbytes = COPY_BYTES_CUDA if device.type == "cuda" else COPY_BYTES_CPU
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    timing = measure(lambda: dst.copy_(src), device, settings)
    del src, dst
    return CopyBandwidth(str(device), nbytes, timing.median_us, timing.spread_us, timing.reps)


def device_description(device: torch.device) -> str:
    """The hardware's name: the GPU model, or the CPU model and core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    threads = torch.get_num_threads()
    return f"{model} ({threads} thread{'' if threads == 1 else 's'})"
