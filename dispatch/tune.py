"""Pre-tuning: race every backend that serves a call (or a sweep of calls), store the decisions, show progress."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from . import _plugins, _settings
from ._select import Selector, unknown_backend
from .autotune.cache import default_cache
from .explain import Explanation

_log = logging.getLogger("dispatch.tune")


def tune_call(op: str, *args, backends: str | None = None, progress: bool = False,
              lines: Callable[[str], None] | None = None, **kwargs) -> Explanation:
    """Tune ``op`` for calls like ``dispatch.<op>(*args, **kwargs)`` on every backend that serves it
    (or ``backends``, comma-separated) and store the winner in the cache. A warm cache makes this a
    lookup; shipped decision tables are not consulted (a tune races). With ``progress``, a progress
    bar of the tune's steps and a line per backend (what it compiled, and its compile/timing seconds);
    the same lines are logged at INFO on ``dispatch.tune``, and passed to ``lines`` when given."""
    from ._dispatcher import DISPATCHER

    decl = DISPATCHER.function(op).decl
    spec = decl.spec(decl.bind(*args, **kwargs))
    settings = attrs.evolve(_settings.effective(), autotune=True, policy="measured")
    if backends is not None:
        if isinstance(backends, str) and not backends.replace(",", "").strip():
            raise ValueError(f"backends={backends!r} names no backend: name one or more, comma-separated "
                             "(e.g. 'triton,torch'), or leave it out to tune every backend that serves the call")
        settings = attrs.evolve(settings, allow=backends)
        loaded = _plugins.registry().backends
        unknown = sorted(name for name in settings.allow if name not in loaded)
        if unknown:
            raise unknown_backend(unknown[0], loaded)
    bar = None
    report = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc=f"tuning {spec.describe()}", unit="step", leave=True)

        def report(event: str) -> None:  # a step: a backend's compile begun or ended, a config timed
            bar.set_postfix_str(event[:60])
            bar.update()

        lines = lines or bar.write  # a line per backend: its compile, then its tune (compile/timing seconds)
    try:
        selector = Selector(_plugins.registry(), default_cache(), settings, progress=report, tables=None,
                            report=lines)
        decision = selector.select(spec, scope=_settings.current_scope())
    finally:
        if bar is not None:
            bar.close()
    from ._dispatcher import DISPATCHER

    DISPATCHER.clear()  # calls resolved before the tune now see its decision
    return Explanation(decision, hot=False, timing=settings.timing, tuned=True)


def tune_sweep(calls: Sequence[tuple[str, tuple, dict]], backends: str | None = None,
               report: Callable[[str], None] | None = None) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """Tune each ``(op, args, kwargs)`` of ``calls`` as :func:`tune_call` does and return the decision
    entries (key, value) they left in the cache, for :func:`~dispatch.autotune.tables.write_table`.

    ``report`` gets one line per call (also logged at INFO on ``dispatch.tune``), and before it, as
    the call is tuned, a line per backend (indented). A call that only
    one backend serves is not raced and leaves no entry (its line says so); nor does one that none
    of ``backends`` serves (its line says why), and the sweep goes on. Every decision is in the
    cache as soon as it is made, so an interrupted sweep run again measures only what is left.
    """
    from ._dispatcher import DISPATCHER
    from ._keys import decision_key
    from .errors import NoBackendError

    entries = []
    for i, (op, args, kwargs) in enumerate(calls, 1):
        start = time.perf_counter()
        try:
            decision = tune_call(op, *args, backends=backends,
                                 lines=(lambda line: report("    " + line)) if report else None, **kwargs).decision
        except NoBackendError as exc:  # (this call only: the others are still tuned and exported)
            line = f"[{i}/{len(calls)}] not tuned: {exc} ({time.perf_counter() - start:.1f} s)"
            _log.info(line)
            if report is not None:
                report(line)
            continue
        registry = _plugins.registry().backends
        servers = {c.name: registry[c.name].info.version for c in decision.candidates if c.verdict.ok}
        key = decision_key(decision.spec, servers, _settings.effective().timing)
        value = default_cache().get(key) if len(servers) > 1 else None
        what = f"[{i}/{len(calls)}] {decision.spec.describe()}: {decision.backend}"
        if value is None:
            what += f" (not raced: {', '.join(servers)} the only server; no entry)"
        else:
            entries.append((key, value))
            what += f" [{decision.config}] {decision.reason}"
        line = f"{what} ({time.perf_counter() - start:.1f} s)"
        _log.info(line)
        if report is not None:
            report(line)
    DISPATCHER.clear()
    return entries
