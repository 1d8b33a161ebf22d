"""Which backend serves a call, with which config, and why: the selection order in one place.

Order: a forced backend (``backend=`` > innermost ``use()`` > ``configure(backend=)`` /
``DISPATCH_BACKEND``) or, when none is forced, among the backends that may and can serve the
call: the cached decision; else a shipped decision (:mod:`.autotune.tables`); else, under the
``measured`` policy with autotune on, a race of every server's tuned best; else the estimated cost
or the static order (each backend's priority for the device type).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from attrs import field, frozen

from . import _opdecl
from ._keys import decision_key, shape_bucket
from ._backend import Backend, forced_fault
from ._plugins import Registry
from ._settings import Scope, Settings
from ._spec import CallSpec, Verdict
from ._tuner import Tuner, device_bound, flushes_l2
from .autotune.cache import DecisionCache, decision_trusted
from .autotune.space import EMPTY, Config, Timing, TuneResult
from .autotune.sweep import pick_backend, race_verdict
from .autotune.tables import ShippedTables, shipped_tables
from .autotune.timer import interleaved_wall
from .errors import (BackendFaultError, BackendRefusedError, FaultWarning, NoBackendError, TuneError,
                     UnknownBackendError)


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


def static_order(backends: Sequence[Backend], device_type: str) -> list[Backend]:
    """Backends by descending priority on ``device_type``, ties broken by name."""
    return sorted(backends, key=lambda b: (-b.info.rank(device_type), b.name))


def by_estimated_cost(servers: Sequence[Backend], spec: CallSpec, timing: str = "wall",
                      cards: Mapping[str, str] | None = None) -> tuple[list[Backend], dict[str, float]]:
    """``servers`` ordered by estimated cost when every one's card has figures for the device type
    (ties keep the static order), with the estimates; else unchanged, with no estimates.

    The estimate is the card's launch cost plus the op's declared bytes moved over the card's
    bandwidth (plus, where the card says so, a cost per element of one row): the host decides small
    calls (where torch's launch is cheapest) and bandwidth decides large ones, without measuring
    anything. With ``timing="device"`` (code under CUDA graphs, where nothing is launched from the
    host per call) the launch is not counted. ``cards``: each backend's verdict's ``card`` for the
    call (the figures of its card that apply, :class:`Verdict`).
    """
    if len(servers) < 2:
        return list(servers), {}
    decl = _opdecl.get(spec.op)
    nbytes = decl.bytes_of(spec)
    row_size = decl.row_size(spec) if decl.row_size is not None else 0
    strided = not (getattr(spec, "reads_rows", True) and spec.input.dense)  # only reductions have dims
    cast = spec.out_dtype != spec.dtype
    estimates = {b.name: b.info.estimate_us(spec.device.type, nbytes, launch=timing == "wall", op=spec.op,
                                            grad=spec.requires_grad, strided=strided, row_size=row_size, cast=cast,
                                            card=(cards or {}).get(b.name, ""))
                 for b in servers}
    if any(e is None for e in estimates.values()):
        return list(servers), {}
    order = {b.name: i for i, b in enumerate(servers)}
    return sorted(servers, key=lambda b: (estimates[b.name], order[b.name])), estimates


def _shown_us(estimate: float) -> str:
    return "last (its card ranks such calls after every figure)" if math.isinf(estimate) else f"{estimate:.1f} us"


def allowed(name: str, settings: Settings, scope: Scope | None) -> str | None:
    """Why ``name`` may not serve calls under these settings and scope, or None if it may."""
    deny = settings.deny | (scope.deny if scope else frozenset())
    if name in deny:
        return "denied (deny list)"
    for allow, where in ((settings.allow, "process"), (scope.allow if scope else None, "use() block")):
        if allow is not None and name not in allow:
            return f"not in the {where} allow list ({', '.join(sorted(allow))})"
    return None


_NAMED_UNKNOWN: set[str] = set()  # allow/deny names already said to be no loaded backend


def _warn_unknown_names(registry: Registry, settings: Settings, scope: Scope | None) -> None:
    """One warning per name in an allow or deny list (settings, env, ``use()``) that is no loaded
    backend and none that failed to load: a typo there would otherwise filter nothing, unsaid."""
    listed = settings.deny | (settings.allow or frozenset())
    if scope is not None:
        listed = listed | scope.deny | (scope.allow or frozenset())
    unknown = listed - set(registry.backends) - _NAMED_UNKNOWN
    if not unknown:
        return
    from ._plugins import load_failures

    unknown -= {f.name for f in load_failures()}
    _NAMED_UNKNOWN.update(unknown)
    for name in sorted(unknown):
        warnings.warn(f"{name!r} is in an allow or deny list but is no loaded backend (loaded: "
                      f"{', '.join(sorted(registry.backends))}); a misspelt name there filters nothing",
                      UserWarning, stacklevel=6)


class Selector(Tuner):
    """Selection for one registry, cache and set of settings; stateless between calls."""

    def __init__(self, registry: Registry, cache: DecisionCache, settings: Settings,
                 progress: Callable[[str], None] | None = None, tables: ShippedTables | None | str = "shipped",
                 report: Callable[[str], None] | None = None, joins: bool = True) -> None:
        super().__init__(registry, cache, settings, progress, report)
        self.tables = shipped_tables() if tables == "shipped" else tables  # None: no shipped decisions
        self.pruned: dict[str, tuple] = {}  # per backend: the configs its tune space dropped, and why
        self.joins = joins  # under torch.distributed: whether a decision the group has not made yet is agreed now

    # -- verdicts --------------------------------------------------------------------------------

    def verdicts(self, spec: CallSpec, scope: Scope | None, excluded: dict[str, str]) -> list[tuple[Backend, Verdict]]:
        _warn_unknown_names(self.registry, self.settings, scope)
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

    # -- the order -------------------------------------------------------------------------------

    def select(self, spec: CallSpec, forced: str | None = None, scope: Scope | None = None,
               excluded: dict[str, str] | None = None) -> Decision:
        excluded = excluded or {}
        named_by = ("the call's backend=" if forced else "dispatch.use(...)" if scope and scope.backend
                    else "dispatch.configure(backend=...) or DISPATCH_BACKEND")
        forced = forced or (scope.backend if scope else None) or self.settings.backend
        judged = self.verdicts(spec, scope, excluded)
        candidates = [Candidate(b.name, v) for b, v in judged]
        servers = [b for b, v in judged if v.ok]
        bucket = shape_bucket(spec)
        policy = self.settings.policy
        if forced is not None:
            return self._forced(spec, forced, judged, candidates, servers, bucket, named_by)
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
            found = self.usable_decision(spec, cached, servers)
            if found is not None:
                backend, config = found
                timings = cached.get("timings") or {}
                candidates = [Candidate(c.name, c.verdict, timings.get(c.name)) for c in candidates]
                return Decision(spec, backend.name, config, f"cached decision ({cached.get('reason', '')})",
                                policy, candidates, bucket, cached=True, config_source="cache")
        if cached is None:
            shipped = self._shipped(spec, dkey, servers, candidates, bucket)
            if shipped is not None:
                return shipped
        if may_race:  # a new key, a cached race that noise may have decided (raced once more), or a
            # cached winner that no longer serves the call (raced as a new key, and said so)
            noisy = cached is not None and not decision_trusted(cached)
            gone = None if cached is None or noisy else (
                f"raced again: the cached winner {cached.get('backend')!r} with config {cached.get('config') or {}} "
                "does not serve this call now")
            return self._race(spec, servers, candidates, bucket, dkey, rerace=noisy, note=gone)
        notes: dict[str, str] = {}
        cards = {c.name: c.verdict.card for c in candidates if c.verdict.card}
        servers, estimates = by_estimated_cost(servers, spec, self.settings.timing, cards)
        for backend in servers:
            try:
                config, source, tune = self.config_for(backend, spec)
            except Exception as exc:  # a hook that raised, or a failed tune: the next server serves (said so)
                notes[backend.name] = f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                message = (f"backend {backend.name!r} could not give a config for {spec.describe()} "
                           f"({notes[backend.name]})")
                if self.settings.strict:
                    raise BackendFaultError(message + "; strict mode forbids falling back",
                                            backend=backend.name, op=spec.op) from exc
                warnings.warn(message + "; the next backend serves it", FaultWarning, stacklevel=5)
                continue
            if len(servers) == 1:
                why = "the only backend that serves this call"
            elif estimates:
                why = (f"lowest estimated cost on {spec.device.type} (launch + bytes moved / bandwidth, from the "
                       "backends' cards): " + ", ".join(f"{b.name} {_shown_us(estimates[b.name])}"
                                                        + (f" ('{cards[b.name]}' figures)" if b.name in cards else "")
                                                        for b in servers))
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

    def usable_decision(self, spec: CallSpec, cached: Mapping[str, Any], servers: Sequence[Backend]
                        ) -> tuple[Backend, Config] | None:
        """``(backend, config)`` of a cached decision where its backend is one of ``servers`` and its
        config one of that backend's tune space now (:meth:`usable` warns where it is not); else None."""
        backend = next((b for b in servers if b.name == cached.get("backend")), None)
        if backend is None:
            return None
        config = Config.of(cached.get("config") or {})
        return (backend, config) if self.usable(backend, spec, config, "cached decision") else None

    def _shipped(self, spec, dkey, servers, candidates, bucket) -> Decision | None:
        """The shipped table's decision for ``dkey`` if its backend serves this call, else None. A
        call under ``timing="device"`` that no entry raced by device time matches takes the entry
        raced by wall time where the call is bound by its device time (:func:`device_bound`)."""
        if self.tables is None:
            return None
        found, by_wall = self.tables.lookup(dkey), ""
        if found is None and dkey.get("timing") == "device" and device_bound(spec):
            found = self.tables.lookup({k: v for k, v in dkey.items() if k != "timing"})
            by_wall = ("raced by wall time, which a call moving the L2's size or more pays in device time; "
                       "no race by device time shipped; ")
        by_name = {b.name: b for b in servers}
        if found is None or found.value["backend"] not in by_name:
            return None
        value = found.value
        if not self.usable(by_name[value["backend"]], spec, Config.of(value.get("config") or {}),
                            f"shipped decision ({found.file})"):
            return None
        timings = value.get("timings") or {}
        candidates = [Candidate(c.name, c.verdict, timings.get(c.name)) for c in candidates]
        reason = f"shipped decision ({found.file}: {by_wall}{value.get('reason', '')})"
        return Decision(spec, value["backend"], Config.of(value.get("config") or {}), reason, self.settings.policy,
                        candidates, bucket, config_source="shipped table")

    def _forced(self, spec, forced, judged, candidates, servers, bucket, named_by: str = "") -> Decision:
        by_name = {b.name: (b, v) for b, v in judged}
        if forced not in by_name:
            raise unknown_backend(forced, by_name, named_by)
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
        cached = self._cached_tune(backend, spec, space)
        if cached is not None:
            return cached.config, "tune cache", cached
        if self.settings.autotune and len(space.configs) > 1:
            result = self.tune(backend, spec, progress=self._reporter(backend.name))
            return result.config, "tuned now", result
        return space.default, "default config", None

    def timed_in_turns(self, spec, servers, results: dict[str, TuneResult]) -> dict[str, Timing] | None:
        """Each tuned backend's kernel timed again, all in turns (:func:`interleaved_wall`), where
        :func:`_finals_wanted` says so; None otherwise (the tunes' timings decide)."""
        if not _finals_wanted(spec, self.settings.timing, len(results)):
            return None
        xs, _ = self._inputs(spec)
        runs = {}
        for backend in servers:
            if backend.name in results:
                kernel = backend.kernel(spec.op, spec, results[backend.name].config)
                runs[backend.name] = lambda kernel=kernel: kernel(*xs)
        try:
            return interleaved_wall(runs, spec.device)
        except Exception as exc:  # noqa: BLE001 - the tunes' own timings still decide, and the reason says so
            why = (f"timing {', '.join(runs)} in turn for {spec.describe()} failed ({type(exc).__name__}: {exc}); "
                   "the race is decided on the tunes' timings")
            warnings.warn(why, RuntimeWarning, stacklevel=2)
            return None

    def _race(self, spec, servers, candidates, bucket, dkey, rerace: bool = False, note: str | None = None) -> Decision:
        with self.shared_inputs(spec):
            return self._race_with_inputs(spec, servers, candidates, bucket, dkey, rerace, note)

    def _race_with_inputs(self, spec, servers, candidates, bucket, dkey, rerace: bool = False,
                          note: str | None = None) -> Decision:
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
                warnings.warn(f"backend {backend.name!r} could not be tuned for {spec.describe()} "
                              f"({notes[backend.name]}); it is left out of this race", FaultWarning, stacklevel=2)
            finally:
                report = compiled.get(backend.name)
                seconds[backend.name] = time.perf_counter() - start + (report.seconds if report is not None else 0.0)
        if not results:
            raise TuneError(f"no backend could be tuned for {spec.describe()}: "
                            + "; ".join(f"{n}: {w}" for n, w in notes.items()))
        finals = self.timed_in_turns(spec, servers, results)
        if finals is None:
            timings = [Timing(Config.of(name=name), r.latency_us, r.spread_us) for name, r in results.items()]
        else:
            timings = list(finals.values())
        latency = {t.config["name"]: t.median_us for t in timings}
        reference = next((b.name for b in servers if b.info.reference), None)
        on_device = races_on_device(spec, self.settings.timing)
        best = pick_backend(timings, reference, on_device=on_device)
        winner = best.config["name"]
        result = results[winner]
        reason = (f"{race_verdict(timings, best, reference, on_device=on_device)}: {winner} "
                  f"{latency[winner]:.2f} us"
                  + "".join(f", {n} {us:.2f} us" for n, us in latency.items() if n != winner))
        if finals is not None:
            reason += f" (back-to-back calls, {best.reps} rounds in turn)"
        if rerace:
            reason += " (raced again: the cached race's winner was within its own timing noise)"
        elif note:
            reason += f" ({note})"
        self.cache.put(dkey, {"backend": winner, "config": result.config.as_dict(), "reason": reason,
                              "timings": latency, "spread_us": best.spread_us, "reraced": rerace})
        candidates = [Candidate(c.name, c.verdict, latency[c.name] if c.name in results else None,
                                results[c.name].config if c.name in results else None, notes.get(c.name, ""),
                                seconds.get(c.name),
                                *_split_of(results.get(c.name), c.name in results and c.name in {b.name for b in untuned}))
                      for c in candidates]
        return Decision(spec, winner, result.config, reason, "measured", candidates, bucket,
                        config_source=result.source, tune=result)


def races_on_device(spec: CallSpec, timing: str) -> bool:
    """Whether a race between backends for ``spec`` is timed on the device (a GPU call timed from a
    flushed L2, or any under ``timing="device"``), so that a smaller lead over the reference decides
    it (:func:`~dispatch.autotune.sweep.reference_margin`)."""
    return spec.device.type == "cuda" and (timing == "device" or flushes_l2(spec))


def _finals_wanted(spec: CallSpec, timing: str, contenders: int) -> bool:
    """Whether a race's backends are timed once more in turns (:func:`interleaved_wall`): on a GPU,
    with wall timing, two contenders or more, for calls timed without an L2 flush (calls that
    take a few microseconds, whose cost is mostly the host's, and drifts with it)."""
    return spec.device.type == "cuda" and timing == "wall" and contenders > 1 and not flushes_l2(spec)


def _split_of(result: TuneResult | None, tuned_now: bool) -> tuple[float | None, float | None]:
    """(compile_s, timing_s) of a result tuned in this race; (None, None) for one read from the cache."""
    if result is None or not tuned_now:
        return None, None
    return result.compile_s, result.timing_s


def unknown_backend(name: str, loaded: Iterable[str], named_by: str = "") -> UnknownBackendError:
    """The error for a forced backend ``name`` (named by ``named_by``, where said) that is not loaded."""
    names = ", ".join(sorted(loaded)) or "none"
    several = ("; a forced backend is one name (to let several serve, allow them: allow=... or DISPATCH_ALLOW)"
               if "," in name else "")
    return UnknownBackendError(f"backend {name!r} is not loaded; loaded backends: {names} (see `python -m dispatch "
                               f"backends` for load failures){f'; {named_by} named it' if named_by else ''}{several}")
