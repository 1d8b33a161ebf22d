"""Which backend serves a call, with which config, and why: the selection order in one place.

Order: a forced backend (``backend=`` > innermost ``use()`` > ``configure(backend=)`` /
``DISPATCH_BACKEND``) or, when none is forced, among the backends that may and can serve the
call: the cached decision; else a shipped decision (:mod:`.autotune.tables`); else, under the
``measured`` policy with autotune on, a race of every server's tuned best; else the estimated cost
or the static order (each backend's priority for the device type).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

import attrs
import torch
from attrs import field, frozen

from . import _opdecl
from ._keys import decision_key, shape_bucket, tune_key
from ._plugins import Backend, Registry, forced_fault
from ._settings import Scope, Settings
from ._spec import CallSpec, Verdict
from .autotune.cache import DecisionCache, decision_trusted
from .autotune import compiling
from .autotune.compiling import CompileReport
from .autotune.space import EMPTY, Config, Timing, TuneResult, TuneSettings, TuneSpace
from .autotune.sweep import pick_winner, sweep
from .autotune.tables import ShippedTables, shipped_tables
from .errors import BackendRefusedError, NoBackendError, TuneError, UnknownBackendError
from .reference import check_output, example_inputs, expected_output, input_safety, tolerance_of


@frozen
class Candidate:
    """One backend as seen for one call: its verdict and, when raced, its tuned latency."""

    name: str
    verdict: Verdict
    latency_us: float | None = None
    config: Config | None = None
    note: str = ""
    tune_s: float | None = None  # seconds this race spent tuning it (about 0 when its tune was cached)
    compile_s: float | None = None  # of which compiling its candidates ahead of timing (alongside the others')
    timing_s: float | None = None  # and timing them


@frozen
class Decision:
    """The answer for one call key: the backend, its config, and everything that led there."""

    spec: CallSpec
    backend: str
    config: Config
    reason: str
    policy: str
    candidates: tuple[Candidate, ...] = field(converter=tuple)
    bucket: str = ""
    cached: bool = False
    config_source: str = "default"
    tune: TuneResult | None = None
    forced: bool = False
    pruned: tuple = field(default=(), converter=tuple)  # (config, why) the chosen backend's space dropped
    agreed: str = ""  # the torch.distributed group that agreed on it, and how; "" when decided alone

    @property
    def op(self) -> str:
        return self.spec.op


_log = logging.getLogger("dispatch.tune")
_ASK = object()  # tune(): compile the candidates ahead unless the caller already did


def static_order(backends: Sequence[Backend], device_type: str) -> list[Backend]:
    """Backends by descending priority on ``device_type``, ties broken by name."""
    return sorted(backends, key=lambda b: (-b.info.rank(device_type), b.name))


def by_estimated_cost(servers: Sequence[Backend], spec: CallSpec,
                      timing: str = "wall") -> tuple[list[Backend], dict[str, float]]:
    """``servers`` ordered by estimated cost when every one's card has figures for the device type
    (ties keep the static order), with the estimates; else unchanged, with no estimates.

    The estimate is the card's launch cost plus the op's declared bytes moved over the card's
    bandwidth: the host decides small calls (where torch's launch is cheapest) and bandwidth
    decides large ones, without measuring anything. With ``timing="device"`` (code under CUDA
    graphs, where nothing is launched from the host per call) the launch is not counted.
    """
    if len(servers) < 2:
        return list(servers), {}
    nbytes = _opdecl.get(spec.op).bytes_moved(spec)
    estimates = {b.name: b.info.estimate_us(spec.device.type, nbytes, launch=timing == "wall", op=spec.op,
                                            grad=spec.requires_grad)
                 for b in servers}
    if any(e is None for e in estimates.values()):
        return list(servers), {}
    order = {b.name: i for i, b in enumerate(servers)}
    return sorted(servers, key=lambda b: (estimates[b.name], order[b.name])), estimates


def allowed(name: str, settings: Settings, scope: Scope | None) -> str | None:
    """Why ``name`` may not serve calls under these settings and scope, or None if it may."""
    deny = settings.deny | (scope.deny if scope else frozenset())
    if name in deny:
        return "denied (deny list)"
    for allow, where in ((settings.allow, "process"), (scope.allow if scope else None, "use() block")):
        if allow is not None and name not in allow:
            return f"not in the {where} allow list ({', '.join(sorted(allow))})"
    return None


class Selector:
    """Selection for one registry, cache and set of settings; stateless between calls."""

    def __init__(self, registry: Registry, cache: DecisionCache, settings: Settings,
                 progress: Callable[[str], None] | None = None, tables: ShippedTables | None | str = "shipped",
                 report: Callable[[str], None] | None = None) -> None:
        self.registry = registry
        self.tables = shipped_tables() if tables == "shipped" else tables  # None: no shipped decisions
        self.cache = cache
        self.settings = settings
        self.progress = progress  # an event per step of a tune (a config timed, a compile begun or ended)
        self.report = report  # a line per backend tuned (also logged at INFO on dispatch.tune)
        self._local = threading.local()  # .examples: (spec, future of (inputs, expected)) of a race on this thread
        self.pruned: dict[str, tuple] = {}  # per backend: the configs its tune space dropped, and why

    # -- verdicts --------------------------------------------------------------------------------

    def verdicts(self, spec: CallSpec, scope: Scope | None, excluded: dict[str, str]) -> list[tuple[Backend, Verdict]]:
        out = []
        for backend in static_order(list(self.registry.backends.values()), spec.device.type):
            why_not = allowed(backend.name, self.settings, scope)
            if why_not is not None:
                out.append((backend, Verdict.no(why_not)))
            elif backend.name in excluded:
                out.append((backend, Verdict.no(f"quarantined for this key: {excluded[backend.name]}")))
            else:
                out.append((backend, backend.check(spec.op, spec)))
        return out

    def reference(self) -> Backend | None:
        for backend in self.registry.backends.values():
            if backend.info.reference:
                return backend
        return None

    # -- the order -------------------------------------------------------------------------------

    def select(self, spec: CallSpec, forced: str | None = None, scope: Scope | None = None,
               excluded: dict[str, str] | None = None) -> Decision:
        excluded = excluded or {}
        forced = forced or (scope.backend if scope else None) or self.settings.backend
        judged = self.verdicts(spec, scope, excluded)
        candidates = [Candidate(b.name, v) for b, v in judged]
        servers = [b for b, v in judged if v.ok]
        bucket = shape_bucket(spec)
        policy = self.settings.policy
        if forced is not None:
            return self._forced(spec, forced, judged, candidates, servers, bucket)
        if not servers:
            lines = "; ".join(f"{c.name}: {c.verdict.reason}" for c in candidates) or "no backend is loaded"
            raise NoBackendError(f"no backend can serve {spec.describe()}: {lines}")
        dkey = decision_key(spec, {b.name: b.info.version for b in servers}, self.settings.timing)
        from .distributed import agreed_decision  # under torch.distributed, the group decides
        agreed = agreed_decision(self, spec, servers, candidates, bucket, dkey)
        if agreed is not None:
            return agreed
        cached = self.cache.get(dkey)
        may_race = policy == "measured" and self.settings.autotune and len(servers) > 1
        if cached is not None and (not may_race or decision_trusted(cached)):
            by_name = {b.name: b for b in servers}
            backend = by_name.get(cached.get("backend"))
            if backend is not None:
                config = Config.of(cached.get("config") or {})
                timings = cached.get("timings") or {}
                candidates = [Candidate(c.name, c.verdict, timings.get(c.name)) for c in candidates]
                return Decision(spec, backend.name, config, f"cached decision ({cached.get('reason', '')})",
                                policy, candidates, bucket, cached=True, config_source="cache")
        if cached is None:
            shipped = self._shipped(spec, dkey, servers, candidates, bucket)
            if shipped is not None:
                return shipped
        if may_race:  # a new key, or a cached race that noise may have decided (raced once more)
            return self._race(spec, servers, candidates, bucket, dkey, rerace=cached is not None)
        notes: dict[str, str] = {}
        servers, estimates = by_estimated_cost(servers, spec, self.settings.timing)
        for backend in servers:
            try:
                config, source, tune = self.config_for(backend, spec)
            except Exception as exc:  # a hook that raised, or a failed tune: the next server serves
                notes[backend.name] = f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                continue
            if len(servers) == 1:
                why = "the only backend that serves this call"
            elif estimates:
                why = (f"lowest estimated cost on {spec.device.type} (launch + bytes moved / bandwidth, from the "
                       "backends' cards): " + ", ".join(f"{b.name} {estimates[b.name]:.1f} us" for b in servers))
            else:
                why = (f"first in the static order for {spec.device.type} "
                       f"({', '.join(b.name for b in servers)}; priority {backend.info.rank(spec.device.type)})")
            if notes:
                why += "; " + "; ".join(f"{name} {note}" for name, note in notes.items())
            candidates = [Candidate(c.name, c.verdict, note=notes.get(c.name, "")) for c in candidates]
            return Decision(spec, backend.name, config, why, policy, candidates, bucket,
                            config_source=source, tune=tune, pruned=self.pruned.get(backend.name, ()))
        raise NoBackendError(f"every backend that serves {spec.describe()} failed: "
                             + "; ".join(f"{n}: {w}" for n, w in notes.items()))

    def _shipped(self, spec, dkey, servers, candidates, bucket) -> Decision | None:
        """The shipped table's decision for ``dkey`` if its backend serves this call, else None."""
        found = self.tables.lookup(dkey) if self.tables is not None else None
        if found is None or found.value["backend"] not in {b.name for b in servers}:
            return None
        value = found.value
        timings = value.get("timings") or {}
        candidates = [Candidate(c.name, c.verdict, timings.get(c.name)) for c in candidates]
        reason = f"shipped decision ({found.file}: {value.get('reason', '')})"
        return Decision(spec, value["backend"], Config.of(value.get("config") or {}), reason, self.settings.policy,
                        candidates, bucket, config_source="shipped table")

    def _forced(self, spec, forced, judged, candidates, servers, bucket) -> Decision:
        by_name = {b.name: (b, v) for b, v in judged}
        if forced not in by_name:
            raise UnknownBackendError(
                f"backend {forced!r} is not loaded; loaded backends: {', '.join(sorted(by_name)) or 'none'} "
                "(see `python -m dispatch backends` for load failures)")
        backend, verdict = by_name[forced]
        if not verdict.ok:
            names = tuple(b.name for b in servers)
            raise BackendRefusedError(
                f"backend {forced!r} was forced but cannot serve {spec.describe()}: {verdict.reason}. "
                f"Backends that would serve it: {', '.join(names) or 'none'}",
                backend=forced, op=spec.op, reason=verdict.reason, servers=names)
        try:
            config, source, tune = self.config_for(backend, spec)
        except Exception as exc:  # a hook fault is the forced backend's, as one in dispatch_kernel is
            raise forced_fault(backend, spec, exc) from exc
        return Decision(spec, forced, config, "forced by the caller", self.settings.policy, candidates, bucket,
                        config_source=source, tune=tune, forced=True, pruned=self.pruned.get(forced, ()))

    # -- configs and tuning ----------------------------------------------------------------------

    def config_for(self, backend: Backend, spec: CallSpec) -> tuple[Config, str, TuneResult | None]:
        """The backend's config for ``spec``: tuned (cached), tuned now (autotune on), or default."""
        space = backend.tune_space(spec.op, spec)
        if space is None:
            return EMPTY, "no tune space", None
        self.pruned[backend.name] = space.pruned
        key = tune_key(spec, backend.name, backend.info.version, dict(backend.info.versions), self.settings.timing)
        cached = self._cached_tune(key)
        if cached is not None:
            return cached.config, "tune cache", cached
        if self.settings.autotune and len(space.configs) > 1:
            result = self.tune(backend, spec, progress=self._reporter(backend.name))
            return result.config, "tuned now", result
        return space.default, "default config", None

    def _reporter(self, name: str) -> Callable[[Config], None] | None:
        if self.progress is None:
            return None
        return lambda config: self.progress(f"{name} [{config}]")

    def _cached_tune(self, key: dict[str, str]) -> TuneResult | None:
        value = self.cache.get(key)
        if value is None:
            return None
        try:
            return TuneResult.from_json(value)
        except (KeyError, TypeError, ValueError):
            return None  # a malformed entry is ignored; the next tune rewrites it

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
        untuned = [b for b in servers if fresh or self._cached_tune(
            tune_key(spec, b.name, b.info.version, dict(b.info.versions), self.settings.timing)) is None]
        if untuned:
            self._line(f"racing {', '.join(b.name for b in servers)} for {spec.describe()}: tuning "
                       f"{', '.join(b.name for b in untuned)} (every compile first, then the timing)")
        return untuned, self._precompile_all(spec, untuned)

    def tune(self, backend: Backend, spec: CallSpec, settings: TuneSettings | None = None,
             progress: Callable[[Config], None] | None = None, fresh: bool = False,
             compiled: CompileReport | None | object = _ASK) -> TuneResult:
        """Tune ``backend`` for ``spec`` (native tuner if it has one, else our sweep) and cache it;
        ``fresh`` measures again even when a tune result is cached. By default a call is charged at
        least its back-to-back rate unless the ``timing`` setting is ``"device"``.

        The candidates are compiled first, all at once (the backend's ``dispatch_precompile``;
        ``compiled`` is that step's report when the caller already ran it), then timed one by
        one; a candidate that failed to compile is left out, with its reason in the result's
        failures. The result says how long each step took (``compile_s``, ``timing_s``)."""
        if settings is None:
            settings = TuneSettings(host_bound=self.settings.timing == "wall")
        key = tune_key(spec, backend.name, backend.info.version, dict(backend.info.versions), self.settings.timing)
        cached = None if fresh else self._cached_tune(key)
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
                           tolerance=tolerance_of(spec), first=space.default if space is not None else None)
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
        return tuple(None if t is None else _copy(t) for t in xs), expected

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

    def _race(self, spec, servers, candidates, bucket, dkey, rerace: bool = False) -> Decision:
        with self.shared_inputs(spec):
            return self._race_with_inputs(spec, servers, candidates, bucket, dkey, rerace)

    def _race_with_inputs(self, spec, servers, candidates, bucket, dkey, rerace: bool = False) -> Decision:
        results: dict[str, TuneResult] = {}
        notes: dict[str, str] = {}
        seconds: dict[str, float] = {}
        untuned, compiled = self.compile_for_race(spec, servers, rerace)
        for backend in servers:
            start = time.perf_counter()
            try:
                results[backend.name] = self.tune(backend, spec, progress=self._reporter(backend.name), fresh=rerace,
                                                  compiled=compiled.get(backend.name))
            except Exception as exc:  # a backend that can't produce a correct, timed kernel can't win
                notes[backend.name] = f"{type(exc).__name__}: " + " ".join(
                    line.strip() for line in str(exc).splitlines()[:2])
            finally:
                report = compiled.get(backend.name)
                seconds[backend.name] = time.perf_counter() - start + (report.seconds if report is not None else 0.0)
        if not results:
            raise TuneError(f"no backend could be tuned for {spec.describe()}: "
                            + "; ".join(f"{n}: {w}" for n, w in notes.items()))
        timings = [Timing(Config.of(name=name), r.latency_us, r.spread_us) for name, r in results.items()]
        best = pick_winner(timings, TuneSettings().tie_tolerance)
        winner = best.config["name"]
        result = results[winner]
        reason = (f"fastest when raced: {winner} {result.latency_us:.2f} us"
                  + "".join(f", {n} {r.latency_us:.2f} us" for n, r in results.items() if n != winner))
        if rerace:
            reason += " (raced again: the cached race's winner was within its own timing noise)"
        self.cache.put(dkey, {"backend": winner, "config": result.config.as_dict(), "reason": reason,
                              "timings": {n: r.latency_us for n, r in results.items()},
                              "spread_us": result.spread_us, "reraced": rerace})
        candidates = [Candidate(c.name, c.verdict, results[c.name].latency_us if c.name in results else None,
                                results[c.name].config if c.name in results else None, notes.get(c.name, ""),
                                seconds.get(c.name),
                                *_split_of(results.get(c.name), c.name in results and c.name in {b.name for b in untuned}))
                      for c in candidates]
        return Decision(spec, winner, result.config, reason, "measured", candidates, bucket,
                        config_source=result.source, tune=result)


def _split_of(result: TuneResult | None, tuned_now: bool) -> tuple[float | None, float | None]:
    """(compile_s, timing_s) of a result tuned in this race; (None, None) for one read from the cache."""
    if result is None or not tuned_now:
        return None, None
    return result.compile_s, result.timing_s


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


def _copy(t):
    """A new tensor equal to ``t`` in the same layout (strides; a view's gaps included)."""
    fresh = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    return fresh.copy_(t)
