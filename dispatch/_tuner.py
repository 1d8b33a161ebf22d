"""Tuning a backend for a call: its candidates compiled ahead, all at once, then timed one by one.

:class:`Tuner` is what a race (:class:`~dispatch._select.Selector`) and a torch.distributed
agreement tune with: the backend's ``dispatch_precompile`` (every backend of a race at once, each
on its own thread pool), then its native tuner or dispatch's :func:`~dispatch.autotune.sweep`, on
inputs made once per race, the result checked against the reference and cached under its tune key.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
import warnings
from collections.abc import Callable, Sequence

import attrs
import torch

from . import _opdecl
from ._keys import tune_key
from ._opdecl import with_strides
from ._backend import Backend
from ._plugins import Registry
from ._settings import Settings
from ._spec import CallSpec
from .autotune import compiling
from .autotune.cache import CacheWarning, DecisionCache
from .autotune.compiling import CompileReport
from .autotune.space import EMPTY, Config, TuneResult, TuneSettings, TuneSpace, config_fits
from .autotune.sweep import sweep
from .errors import TuneError
from .reference import check_output, example_inputs, expected_output, input_safety, tolerance_of

_log = logging.getLogger("dispatch.tune")
_ASK = object()  # tune(): compile the candidates ahead unless the caller already did; usable(): ask the space
_STALE: set = set()  # (entry, backend, spec, config) of stored configs outside their tune space (warned once)
WARM_FRACTION = 0.25  # calls moving less than this share of the device's L2 are timed without a flush


def flushes_l2(spec: CallSpec) -> bool:
    """Whether a tune of ``spec`` flushes the L2 before each timed call.

    A call that moves less than a quarter of the L2 finds its input there in a model (the kernel
    before it has just written it), so it is timed that way: a flush would charge a kernel that
    runs from L2 in practice for a read from memory, and favour whichever kernel waits on the
    host. Larger calls are timed from a flushed L2 (their input cannot all stay there)."""
    share = _l2_share(spec)
    return share is None or share >= WARM_FRACTION


def device_bound(spec: CallSpec) -> bool:
    """Whether a GPU call moves at least the L2's size: it then takes longer on the device (15 us or
    more on an H100 or H200) than the host takes to launch it, so a race by wall time (back-to-back
    calls from a flushed L2) measures its device time, and decides as a race by device time would."""
    share = _l2_share(spec)
    return spec.device.type == "cuda" and share is not None and share >= 1.0


def _l2_share(spec: CallSpec) -> float | None:
    """The bytes a GPU call moves over its device's L2 size; None off a GPU or where the L2 is unknown."""
    if spec.device.type != "cuda":
        return None
    index = spec.device.index if spec.device.index is not None else torch.cuda.current_device()
    l2 = _l2_bytes(index)
    return _opdecl.get(spec.op).bytes_of(spec) / l2 if l2 > 0 else None


@functools.lru_cache(maxsize=None)
def _l2_bytes(index: int) -> int:
    return int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0))


class Tuner:
    """Tunes backends for calls with one registry, cache and set of settings."""

    def __init__(self, registry: Registry, cache: DecisionCache, settings: Settings,
                 progress: Callable[[str], None] | None = None,
                 report: Callable[[str], None] | None = None) -> None:
        self.registry = registry
        self.cache = cache
        self.settings = settings
        self.progress = progress  # an event per step of a tune (a config timed, a compile begun or ended)
        self.report = report  # a line per backend tuned (also logged at INFO on dispatch.tune)
        self._local = threading.local()  # .examples: (spec, future of (inputs, expected)) of a race on this thread

    def reference(self) -> Backend | None:
        for backend in self.registry.backends.values():
            if backend.info.reference:
                return backend
        return None

    def _reporter(self, name: str) -> Callable[[Config], None] | None:
        if self.progress is None:
            return None
        return lambda config: self.progress(f"{name} [{config}]")

    def _tune_key(self, backend: Backend, spec: CallSpec) -> dict[str, str]:
        return tune_key(spec, backend.name, backend.info.version, dict(backend.info.versions), self.settings.timing)

    def _cached_tune(self, backend: Backend, spec: CallSpec, space: object = _ASK) -> TuneResult | None:
        """``backend``'s cached tune result for ``spec``, or None: none, malformed (the next tune
        rewrites it) or holding a config outside the backend's tune space (:meth:`usable`)."""
        value = self.cache.get(self._tune_key(backend, spec))
        if value is None:
            return None
        try:
            result = TuneResult.from_json(value)
        except (KeyError, TypeError, ValueError):
            return None
        return result if self.usable(backend, spec, result.config, "tune cache entry", space) else None

    def usable(self, backend: Backend, spec: CallSpec, config: Config, what: str, space: object = _ASK) -> bool:
        """Whether a stored ``config`` (a cache entry's, a shipped table's) is one of ``backend``'s
        tune space for ``spec`` now. One that is not (its kernels changed since, or the entry was
        edited) is not used: a CacheWarning says so, once per entry kind, backend, call and config
        in this process, and the call goes on as if there were no entry (tuned again with tuning
        on, else the default config)."""
        if space is _ASK:
            try:
                space = backend.tune_space(spec.op, spec)
            except Exception:  # noqa: BLE001 - the hook's fault is met, and reported, where its space is used
                return False
        if config_fits(config, space):
            return True
        note = (what, backend.name, spec, config)
        if note not in _STALE:
            _STALE.add(note)
            warnings.warn(f"the {what} for {backend.name} on {spec.describe()} holds config {config.as_dict()}, "
                          f"which is not in {backend.name}'s tune space now (its kernels changed since, or the "
                          "entry was edited): not used", CacheWarning, stacklevel=5)
        return False

    def _event(self, event: str) -> None:
        if self.progress is not None:
            self.progress(event)

    def _line(self, line: str) -> None:
        _log.info(line)
        if self.report is not None:
            self.report(line)

    def precompile(self, backend: Backend, spec: CallSpec, space: TuneSpace) -> CompileReport | None:
        """Compile ``space``'s configs ahead of timing (the backend's ``dispatch_precompile``): a
        report of what compiled and what failed, or None when the backend compiles nothing ahead
        (or its hook failed: then the tune builds each candidate as it times it)."""
        configs = tuple(space.configs)
        start = time.perf_counter()
        self._event(f"{backend.name}: compile step, {len(configs)} config(s)")
        try:
            failed = backend.precompile(spec.op, spec, configs)
        except Exception as exc:  # noqa: BLE001 - a broken hook costs the head start, not the tune
            _log.warning("%s: dispatch_precompile failed (%s: %s); candidates are built as they are timed",
                         backend.name, type(exc).__name__, exc)
            return None
        if failed is None:
            return None
        seconds = time.perf_counter() - start
        bad = {f.config for f in failed}
        report = CompileReport([c for c in configs if c not in bad], [f for f in failed if f.config in configs],
                               seconds)
        self._event(f"{backend.name}: compiled {len(report.compiled)}/{len(configs)} in {seconds:.1f} s")
        self._line(f"compiled {len(report.compiled)}/{len(configs)} config(s) of {backend.name} for {spec.describe()} "
                   f"in {seconds:.1f} s" + (f" ({len(report.failures)} failed: "
                                             + "; ".join(f"[{f.config}] {f.reason}" for f in report.failures[:3])
                                             + ")" if report.failures else ""))
        return report

    def _precompile_all(self, spec: CallSpec, backends: Sequence[Backend]) -> dict[str, CompileReport | None]:
        """Every backend's ahead-of-timing compile, all at once (each on its own thread pool):
        compiling is the CPU's work, so one backend's need not wait for another's. Nothing is
        timed meanwhile. One compile thread (``DISPATCH_COMPILE_WORKERS=1``) compiles the
        backends one after another too."""
        compiling.resume()
        spaces = {}
        for backend in backends:
            try:
                space = backend.tune_space(spec.op, spec)
            except Exception:  # noqa: BLE001 - the tune will meet (and report) it again
                continue
            if space is not None:
                spaces[backend.name] = (backend, space)
        if not spaces:
            return {}
        if len(spaces) == 1 or compiling.default_workers() == 1:
            return {name: self.precompile(backend, spec, space) for name, (backend, space) in spaces.items()}
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(spaces), thread_name_prefix="dispatch-precompile")
        try:
            futures = {name: pool.submit(self.precompile, backend, spec, space)
                       for name, (backend, space) in spaces.items()}
            return {name: future.result() for name, future in futures.items()}
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                compiling.interrupt()  # the backends' pools start no more compiles
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=False)

    def compile_for_race(self, spec: CallSpec, servers: Sequence[Backend], fresh: bool = False
                         ) -> tuple[list[Backend], dict[str, CompileReport | None]]:
        """The servers a race must tune (no cached tune, or ``fresh``) and their compile reports,
        all compiled at once (:meth:`_precompile_all`): pass each report to :meth:`tune`."""
        untuned = [b for b in servers if fresh or self._cached_tune(b, spec) is None]
        if untuned:
            self._line(f"racing {', '.join(b.name for b in servers)} for {spec.describe()}: tuning "
                       f"{', '.join(b.name for b in untuned)} (every compile first, then the timing)")
        return untuned, self._precompile_all(spec, untuned)

    def tune(self, backend: Backend, spec: CallSpec, settings: TuneSettings | None = None,
             progress: Callable[[Config], None] | None = None, fresh: bool = False,
             compiled: CompileReport | None | object = _ASK) -> TuneResult:
        """Tune ``backend`` for ``spec`` (native tuner if it has one, else our sweep) and cache it;
        ``fresh`` measures again even when a tune result is cached. By default a call is charged at
        least its back-to-back rate unless the ``timing`` setting is ``"device"``, and the L2 is
        flushed before each timed call only where the call moves a quarter of it or more
        (:func:`flushes_l2`).

        The candidates are compiled first, all at once (the backend's ``dispatch_precompile``;
        ``compiled`` is that step's report when the caller already ran it), then timed one by
        one; a candidate that failed to compile is left out, with its reason in the result's
        failures. The result says how long each step took (``compile_s``, ``timing_s``)."""
        if settings is None:
            settings = TuneSettings(host_bound=self.settings.timing == "wall", flush_l2=flushes_l2(spec))
        key = self._tune_key(backend, spec)
        cached = None if fresh else self._cached_tune(backend, spec)
        if cached is not None:
            return cached
        what = f"{backend.name} for {spec.describe()}"
        space = backend.tune_space(spec.op, spec)
        report = None
        if space is not None:
            if compiled is _ASK:
                compiling.resume()
                self._line(f"tuning {what}: {len(space.configs)} config(s)")
            report = self.precompile(backend, spec, space) if compiled is _ASK else compiled
        compile_failures: tuple = ()
        if report is not None and report.failures:
            compile_failures = report.failures
            if not report.compiled:
                raise TuneError(f"tuning {what}: no config compiled:\n"
                                + "\n".join(f"  - {f.config}: {f.reason}" for f in report.failures))
            kept = tuple(c for c in space.configs if c in set(report.compiled))
            space = attrs.evolve(space, configs=kept, default=space.default if space.default in kept else kept[0])
        start = time.perf_counter()
        xs, expected = self._inputs(spec)
        before = tuple(None if t is None else t.clone() for t in xs)
        if backend.info.reference:
            expected = None
        result = None
        if space is not None:
            result = backend.native_tune(spec.op, spec, space, xs, settings)
            if input_safety(xs, before, None) is not None:
                raise TuneError(f"native tuning of {what} (its dispatch_native_tune hook) wrote into the example "
                                "inputs it was given; the backend is not used for this call")
            if result is not None and expected is not None:
                out = backend.kernel(spec.op, spec, result.config)(*xs)
                why = input_safety(xs, before, out) or check_output(spec, out, expected)
                if why is not None:
                    raise TuneError(f"native tuning of {what} chose {result.config}, which is wrong: {why}")
        if result is None:
            candidates = space.configs if space is not None else (EMPTY,)

            def make_runner(config: Config):
                kernel = backend.kernel(spec.op, spec, config)
                return lambda: kernel(*xs)

            result = sweep(candidates, make_runner, expected, spec.device, settings, what=what, progress=progress,
                           tolerance=tolerance_of(spec), first=space.default if space is not None else None,
                           intact=lambda: input_safety(xs, before, None))
        why = input_safety(xs, before, None)
        if why is not None:  # a kernel that writes into its input can't win a race, nor be cached
            raise TuneError(f"tuning {what}: a candidate {why}; the backend is not used for this call")
        result = attrs.evolve(result, failures=compile_failures + tuple(result.failures),
                              compile_s=report.seconds if report is not None else 0.0,
                              timing_s=time.perf_counter() - start)
        self.cache.put(key, result.to_json())
        self._line(_tuned_line(what, result, report))
        return result

    def _make_examples(self, spec: CallSpec) -> tuple[tuple, object]:
        xs = example_inputs(spec)
        return xs, (expected_output(spec, xs) if self.reference() is not None else None)

    def _inputs(self, spec: CallSpec) -> tuple[tuple, object]:
        """A tune's inputs and the reference's output on them. In a race every backend gets its
        own copy of one set, made once (while the compiles run) rather than once per backend: a
        large input takes seconds to make on the CPU, deterministically, and a copy on the device
        next to nothing."""
        shared = getattr(self._local, "examples", None)
        if shared is None or shared[0] != spec:
            return self._make_examples(spec)
        xs, expected = shared[1].result()
        return tuple(None if t is None else with_strides(t, t.stride()) for t in xs), expected

    @contextlib.contextmanager
    def shared_inputs(self, spec: CallSpec):
        """Within it, the tunes of ``spec`` share one set of inputs (see :meth:`_inputs`), begun at
        once on a thread of its own, so that it is made while the candidates compile."""
        making = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="dispatch-examples")
        outer = getattr(self._local, "examples", None)
        self._local.examples = (spec, making.submit(self._make_examples, spec))
        try:
            yield
        finally:
            self._local.examples = outer
            making.shutdown(wait=False, cancel_futures=True)


def _tuned_line(what: str, result: TuneResult, report: CompileReport | None) -> str:
    """One line for a finished tune: its time split, what was dropped or stopped early, the winner."""
    timed = len(result.timings)
    full = max((t.reps for t in result.timings), default=0)
    stopped = sum(1 for t in result.timings if 0 < t.reps < full)
    compiled = (f"compile {result.compile_s:.1f} s ({len(report.compiled)} built, {len(report.failures)} failed)"
                if report is not None else "no compile ahead")
    return (f"tuned {what} in {result.compile_s + result.timing_s:.1f} s: {compiled}, timing {result.timing_s:.1f} s "
            f"({timed} timed, {stopped} stopped early, source {result.source}) -> [{result.config}] "
            f"{result.latency_us:.2f} us")
