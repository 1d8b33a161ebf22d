"""Pre-tuning: race every backend that serves a call, store the decision, show progress."""

from __future__ import annotations

import attrs

from . import _plugins, _settings
from ._select import Selector
from .autotune.cache import default_cache
from .explain import Explanation


def tune_call(op: str, *args, backends: str | None = None, progress: bool = False, **kwargs) -> Explanation:
    """Tune ``op`` for calls like ``dispatch.<op>(*args, **kwargs)`` on every backend that serves it
    (or ``backends``, comma-separated) and store the winner in the cache. A warm cache makes this a
    lookup."""
    from ._dispatcher import DISPATCHER

    decl = DISPATCHER.function(op).decl
    spec = decl.spec(decl.bind(*args, **kwargs))
    settings = attrs.evolve(_settings.settings(), autotune=True, policy="measured")
    if backends:
        settings = attrs.evolve(settings, allow=backends)
    bar = None
    report = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc=f"tuning {spec.describe()}", unit="config", leave=True)

        def report(event: str) -> None:
            bar.set_postfix_str(event[:60])
            bar.update()
    try:
        selector = Selector(_plugins.registry(), default_cache(), settings, progress=report)
        decision = selector.select(spec, scope=_settings.current_scope())
    finally:
        if bar is not None:
            bar.close()
    from ._dispatcher import DISPATCHER

    DISPATCHER.clear()  # calls resolved before the tune now see its decision
    return Explanation(decision, hot=False)
