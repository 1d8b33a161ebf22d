"""Which backend serves a call, with which config, and why: the selection order in one place.

Order: a forced backend (``backend=`` > innermost ``use()`` > ``configure(backend=)`` /
``DISPATCH_BACKEND``) or, when none is forced, among the backends that may and can serve the
call: the cached decision; else, under the ``measured`` policy with autotune on, a race of every
server's tuned best; else the static order (each backend's priority for the device type).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import attrs
import torch
from attrs import field, frozen

from ._keys import decision_key, shape_bucket, tune_key
from ._plugins import Backend, Registry
from ._settings import Scope, Settings
from ._spec import CallSpec, Verdict
from .autotune.cache import DecisionCache
from .autotune.space import EMPTY, Config, Failure, Timing, TuneResult, TuneSettings
from .autotune.sweep import pick_winner, sweep
from .errors import BackendRefusedError, NoBackendError, TuneError, UnknownBackendError
from .tolerance import mismatch


@frozen
class Candidate:
    """One backend as seen for one call: its verdict and, when raced, its tuned latency."""

    name: str
    verdict: Verdict
    latency_us: float | None = None
    config: Config | None = None
    note: str = ""
    tune_s: float | None = None  # seconds this race spent tuning it (about 0 when its tune was cached)


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
    agreed: str = ""  # the torch.distributed group that agreed on it, and how; "" when decided alone

    @property
    def op(self) -> str:
        return self.spec.op


def static_order(backends: Sequence[Backend], device_type: str) -> list[Backend]:
    """Backends by descending priority on ``device_type``, ties broken by name."""
    return sorted(backends, key=lambda b: (-b.info.rank(device_type), b.name))


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
                 progress: Callable[[str], None] | None = None) -> None:
        self.registry = registry
        self.cache = cache
        self.settings = settings
        self.progress = progress

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
        dkey = decision_key(spec, {b.name: b.info.version for b in servers})
        from .distributed import agreed_decision  # under torch.distributed, the group decides
        agreed = agreed_decision(self, spec, servers, candidates, bucket, dkey)
        if agreed is not None:
            return agreed
        cached = self.cache.get(dkey)
        if cached is not None:
            by_name = {b.name: b for b in servers}
            backend = by_name.get(cached.get("backend"))
            if backend is not None:
                config = Config.of(cached.get("config") or {})
                timings = cached.get("timings") or {}
                candidates = [Candidate(c.name, c.verdict, timings.get(c.name)) for c in candidates]
                return Decision(spec, backend.name, config, f"cached decision ({cached.get('reason', '')})",
                                policy, candidates, bucket, cached=True, config_source="cache")
        if policy == "measured" and self.settings.autotune and len(servers) > 1:
            return self._race(spec, servers, candidates, bucket, dkey)
        notes: dict[str, str] = {}
        for backend in servers:
            try:
                config, source, tune = self.config_for(backend, spec)
            except Exception as exc:  # a hook that raised, or a failed tune: the next server serves
                notes[backend.name] = f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                continue
            why = "the only backend that serves this call" if len(servers) == 1 else (
                f"first in the static order for {spec.device.type} "
                f"({', '.join(b.name for b in servers)}; priority {backend.info.rank(spec.device.type)})")
            if notes:
                why += "; " + "; ".join(f"{name} {note}" for name, note in notes.items())
            candidates = [Candidate(c.name, c.verdict, note=notes.get(c.name, "")) for c in candidates]
            return Decision(spec, backend.name, config, why, policy, candidates, bucket,
                            config_source=source, tune=tune)
        raise NoBackendError(f"every backend that serves {spec.describe()} failed: "
                             + "; ".join(f"{n}: {w}" for n, w in notes.items()))

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
        config, source, tune = self.config_for(backend, spec)
        return Decision(spec, forced, config, "forced by the caller", self.settings.policy, candidates, bucket,
                        config_source=source, tune=tune, forced=True)

    # -- configs and tuning ----------------------------------------------------------------------

    def config_for(self, backend: Backend, spec: CallSpec) -> tuple[Config, str, TuneResult | None]:
        """The backend's config for ``spec``: tuned (cached), tuned now (autotune on), or default."""
        space = backend.tune_space(spec.op, spec)
        if space is None:
            return EMPTY, "no tune space", None
        key = tune_key(spec, backend.name, backend.info.version, dict(backend.info.versions))
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

    def tune(self, backend: Backend, spec: CallSpec, settings: TuneSettings = TuneSettings(),
             progress: Callable[[Config], None] | None = None) -> TuneResult:
        """Tune ``backend`` for ``spec`` (native tuner if it has one, else our sweep) and cache it."""
        key = tune_key(spec, backend.name, backend.info.version, dict(backend.info.versions))
        cached = self._cached_tune(key)
        if cached is not None:
            return cached
        space = backend.tune_space(spec.op, spec)
        x = example_input(spec)
        reference = self.reference()
        expected = None
        if reference is not None and reference is not backend:
            expected = expected_output(reference, spec, x)
        what = f"{backend.name} for {spec.describe()}"
        result = None
        if space is not None:
            result = backend.native_tune(spec.op, spec, space, (x,), settings)
            if result is not None and expected is not None:
                why = mismatch(backend.kernel(spec.op, spec, result.config)(x), expected)
                if why is not None:
                    raise TuneError(f"native tuning of {what} chose {result.config}, which is wrong: {why}")
        if result is None:
            candidates = space.configs if space is not None else (EMPTY,)

            def make_runner(config: Config):
                kernel = backend.kernel(spec.op, spec, config)
                return lambda: kernel(x)

            result = sweep(candidates, make_runner, expected, spec.device, settings, what=what, progress=progress)
        self.cache.put(key, result.to_json())
        return result

    def _race(self, spec, servers, candidates, bucket, dkey) -> Decision:
        results: dict[str, TuneResult] = {}
        notes: dict[str, str] = {}
        seconds: dict[str, float] = {}
        for backend in servers:
            start = time.perf_counter()
            try:
                results[backend.name] = self.tune(backend, spec, progress=self._reporter(backend.name))
            except Exception as exc:  # a backend that can't produce a correct, timed kernel can't win
                notes[backend.name] = f"{type(exc).__name__}: " + " ".join(
                    line.strip() for line in str(exc).splitlines()[:2])
            finally:
                seconds[backend.name] = time.perf_counter() - start
        if not results:
            raise TuneError(f"no backend could be tuned for {spec.describe()}: "
                            + "; ".join(f"{n}: {w}" for n, w in notes.items()))
        timings = [Timing(Config.of(name=name), r.latency_us, r.spread_us) for name, r in results.items()]
        best = pick_winner(timings, TuneSettings().tie_tolerance)
        winner = best.config["name"]
        result = results[winner]
        reason = (f"fastest when raced: {winner} {result.latency_us:.2f} us"
                  + "".join(f", {n} {r.latency_us:.2f} us" for n, r in results.items() if n != winner))
        self.cache.put(dkey, {"backend": winner, "config": result.config.as_dict(), "reason": reason,
                              "timings": {n: r.latency_us for n, r in results.items()}})
        candidates = [Candidate(c.name, c.verdict, results[c.name].latency_us if c.name in results else None,
                                results[c.name].config if c.name in results else None, notes.get(c.name, ""),
                                seconds.get(c.name))
                      for c in candidates]
        return Decision(spec, winner, result.config, reason, "measured", candidates, bucket,
                        config_source=result.source, tune=result)


def expected_output(reference: Backend, spec: CallSpec, x: torch.Tensor) -> torch.Tensor:
    """What a correct backend returns for ``x``: the input cast to the output dtype (as ``dtype=``
    does), the reference computed in float64, rounded once to the output dtype (torch's own
    low-precision CPU kernels may round twice)."""
    if not spec.dtype.is_floating_point or not spec.out_dtype.is_floating_point or spec.out_dtype == torch.float64:
        return reference.kernel(spec.op, spec, EMPTY)(x)
    wide = attrs.evolve(spec, dtype=torch.float64, out_dtype=torch.float64)
    with torch.no_grad():
        return reference.kernel(spec.op, wide, EMPTY)(x.to(spec.out_dtype).to(torch.float64)).to(spec.out_dtype)


def example_input(spec: CallSpec, seed: int = 0) -> torch.Tensor:
    """A deterministic input with ``spec``'s shape, dtype, device and (when possible) strides."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    if spec.dtype.is_floating_point:
        values = (torch.randn(spec.shape, generator=gen, dtype=torch.float32) * 4).to(spec.dtype)
    else:
        values = torch.randint(-8, 8, spec.shape, generator=gen).to(spec.dtype)
    values = values.to(spec.device)
    try:
        x = torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device=spec.device)
        x.copy_(values)
        return x
    except RuntimeError:  # overlapping strides (an expanded view): a dense copy serves
        return values
