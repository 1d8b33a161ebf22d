"""``torch_compiled``: torch.compile as a benchmark's contender, never torch eager under its name.

Functions that torch.compile wraps share code objects: every ``torch.compile(torch.softmax)`` runs
through one wrapper of dynamo's, and lambdas made on one source line share theirs. Dynamo keeps 8
compiled graphs per code object and, past them, runs the function eagerly with no error: a sweep
of more than 8 shapes timed torch eager as "torch.compile" from the 9th on. Here the limits are
raised for the whole process and a recompile past them raises instead of falling back.
"""

from __future__ import annotations

from collections.abc import Callable

RECOMPILE_LIMIT = 1024
ACCUMULATED_RECOMPILE_LIMIT = 4096


def torch_compiled(fn: Callable, **options) -> Callable:
    """``torch.compile(fn, **options)`` (``dynamic=False`` unless given), with dynamo's recompile
    limits raised for the process (:data:`RECOMPILE_LIMIT` graphs per code object) and
    ``fail_on_recompile_limit_hit`` set, so that a contender named torch.compile is compiled for
    every shape it is timed on or raises, never silently runs eager."""
    import torch
    import torch._dynamo

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, ACCUMULATED_RECOMPILE_LIMIT)
    config.fail_on_recompile_limit_hit = True
    options.setdefault("dynamic", False)
    return torch.compile(fn, **options)
