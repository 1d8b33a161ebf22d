"""Pre-tuning: race every backend that serves a call, store the decision, show progress."""

from __future__ import annotations

import attrs
import torch

from . import _plugins, _settings
from ._select import Selector
from .autotune.cache import default_cache
from .explain import Explanation
from .ops import make_spec


def tune_call(op: str, input: torch.Tensor, dim=-1, dtype=None, keepdim: bool = False, *,
              backends: str | None = None, progress: bool = False) -> Explanation:
    """Tune ``op`` for calls like this one on every backend that serves it (or ``backends``,
    comma-separated) and store the winner in the cache. A warm cache makes this a lookup."""
    spec = make_spec(op, input, dim, dtype, keepdim)
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
