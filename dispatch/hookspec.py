"""Every hook a dispatch backend plugin may implement, in one place.

A backend is a module (or object) registered under the entry-point group ``dispatch.backends``::

    [project.entry-points."dispatch.backends"]
    mybackend = "my_package"

One plugin is one backend. dispatch calls each hook of one backend directly (never fanned out to
all plugins), once per new call key, never on the hot path; so a hook may be slow-ish but must be
deterministic. A hook that raises is recorded against its backend (``python -m dispatch backends``)
and counts as a refusal for that call; it never takes other backends down.

Required: :func:`dispatch_backend_info`, :func:`dispatch_check`, :func:`dispatch_kernel`.
Optional: :func:`dispatch_tune_space`, :func:`dispatch_native_tune`, :func:`dispatch_backward`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import pluggy

if TYPE_CHECKING:
    import torch

    from ._spec import BackendInfo, CallSpec, Verdict
    from .autotune import Config, TuneResult, TuneSpace, TuneSettings

PROJECT = "dispatch"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

REQUIRED_HOOKS = ("dispatch_backend_info", "dispatch_check", "dispatch_kernel")


# -- identity -------------------------------------------------------------------------------------

@hookspec(firstresult=True)
def dispatch_backend_info() -> BackendInfo:
    """Return the backend's :class:`~dispatch.BackendInfo`: name, version, ops, priorities.

    Called once when the plugin loads. ``available`` says whether the backend can run at all
    here (its DSL imports, a compiler exists) and why not. Must be cheap: import heavy
    dependencies lazily, in the other hooks.
    """


# -- per call key ---------------------------------------------------------------------------------

@hookspec(firstresult=True)
def dispatch_check(op: str, spec: CallSpec) -> Verdict:
    """Return a :class:`~dispatch.Verdict`: can this backend serve ``op`` for ``spec``, and why.

    Called once per new call key, for each backend that lists ``op``. Never raise for an input
    you don't serve: refuse with a reason a user can act on ("dtype float64 not served; use
    float32/float16/bfloat16"). The reference backend serves every call.
    """


@hookspec(firstresult=True)
def dispatch_kernel(op: str, spec: CallSpec, config: Config) -> Callable[..., torch.Tensor]:
    """Return the callable that runs ``op`` for calls matching ``spec`` with ``config``.

    Called once per (call key, config). The callable takes the input tensor alone (everything
    else, dims, ``out_dtype``, ``keepdim``, is fixed by ``spec``) and returns the op's output
    exactly as torch would: shape, dtype, device. ``config`` is the empty config for backends
    without a tune space.
    """


# -- autotune -------------------------------------------------------------------------------------

@hookspec(firstresult=True)
def dispatch_tune_space(op: str, spec: CallSpec) -> TuneSpace | None:
    """Return the :class:`~dispatch.autotune.TuneSpace` of the kernel that serves ``spec``.

    The space declares candidate configs (pruned for the shape), the default config, the
    tunable parameter names and the aliases between JIT parameter names and config keys. None
    (or not implementing the hook) means the kernel has nothing to tune.
    """


@hookspec(firstresult=True)
def dispatch_native_tune(op: str, spec: CallSpec, space: TuneSpace, example: tuple[Any, ...],
                         settings: TuneSettings) -> TuneResult | None:
    """Tune with the DSL's own autotuner (TileLang's ``autotune``, Triton's ``autotune``).

    Optional. Return None to let dispatch's own sweep tune (always the case on the CPU). A result
    must have a config and a latency; dispatch checks the winner against the reference before it
    is used or cached.
    """


@hookspec(firstresult=True)
def dispatch_backward(op: str, spec: CallSpec) -> Callable[..., torch.Tensor] | None:
    """Return a backward kernel ``(grad_output, input, output) -> grad_input`` for ``spec``, or None.

    Optional. When None, dispatch differentiates the op from the saved output with the reference
    formula, so every backend's forward is differentiable.
    """
