"""Every hook a dispatch backend plugin may implement, in one place.

A backend is a module (or object) registered under the entry-point group ``dispatch.backends``::

    [project.entry-points."dispatch.backends"]
    mybackend = "my_package"

One plugin is one backend, one op package (it declares ops), or both. pluggy validates each
plugin's hook implementations against these specs when it registers, but dispatch does not call
hooks through pluggy's hook relay: it calls each backend's own implementation directly, for the
backend it is asking (never fanned out to all plugins, so ``firstresult`` has no meaning here and
is not used), once per new call key, never on the hot path. A hook may be slow-ish but must be
deterministic. A hook that raises is recorded against its backend (``python -m dispatch backends``)
and counts as a refusal for that call; it never takes other backends down.

Backends, required: :func:`dispatch_backend_info`, :func:`dispatch_check`, :func:`dispatch_kernel`.
Backends, optional: :func:`dispatch_tune_space`, :func:`dispatch_precompile`, :func:`dispatch_native_tune`,
:func:`dispatch_backward`.
Op packages: :func:`dispatch_ops`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable

import pluggy

if TYPE_CHECKING:
    import torch

    from ._opdecl import OpDecl
    from ._spec import BackendInfo, CallSpec, Verdict
    from .autotune import Config, Failure, TuneResult, TuneSpace, TuneSettings

PROJECT = "dispatch"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

REQUIRED_HOOKS = ("dispatch_backend_info", "dispatch_check", "dispatch_kernel")


# -- ops ------------------------------------------------------------------------------------------

@hookspec
def dispatch_ops() -> Iterable[OpDecl]:
    """Return the :class:`~dispatch.backend.OpDecl` of every op this package declares.

    Called once when the plugin loads, before any call. Each op becomes ``dispatch.<name>`` and
    ``dispatch.op("<name>")``, and is listed, explained, tuned, A/B-tested and certified like the
    built-in ops. An op name already declared by another package is a load failure.
    """


# -- identity -------------------------------------------------------------------------------------

@hookspec
def dispatch_backend_info() -> BackendInfo:
    """Return the backend's :class:`~dispatch.BackendInfo`: name, version, ops, priorities.

    Called once when the plugin loads. ``available`` says whether the backend can run at all
    here (its DSL imports, a compiler exists) and why not. Must be cheap: import heavy
    dependencies lazily, in the other hooks.
    """


# -- per call key ---------------------------------------------------------------------------------

@hookspec
def dispatch_check(op: str, spec: CallSpec) -> Verdict:
    """Return a :class:`~dispatch.Verdict`: can this backend serve ``op`` for ``spec``, and why.

    Called once per new call key, for each backend that lists ``op``. Never raise for an input
    you don't serve: refuse with a reason a user can act on ("dtype float64 not served; use
    float32/float16/bfloat16"). The reference backend serves every call.
    """


@hookspec
def dispatch_kernel(op: str, spec: CallSpec, config: Config) -> Callable[..., torch.Tensor]:
    """Return the callable that runs ``op`` for calls matching ``spec`` with ``config``.

    Called once per (call key, config). The callable takes the call's tensors positionally, in
    the op's declared order (None for an absent optional one): ``kernel(input)`` for softmax,
    ``kernel(input, weight)`` for an op with an optional weight. Everything else (dims,
    ``out_dtype``, ``keepdim``, eps...) is fixed by ``spec``. It returns the op's output exactly
    as the op's reference would: shape, dtype, device. ``config`` is the empty config for
    backends without a tune space.
    """


# -- autotune -------------------------------------------------------------------------------------

@hookspec
def dispatch_tune_space(op: str, spec: CallSpec) -> TuneSpace | None:
    """Return the :class:`~dispatch.autotune.TuneSpace` of the kernel that serves ``spec``.

    The space declares candidate configs (pruned for the shape), the default config, the
    tunable parameter names and the aliases between JIT parameter names and config keys. None
    (or not implementing the hook) means the kernel has nothing to tune.
    """


@hookspec
def dispatch_precompile(op: str, spec: CallSpec, configs: tuple[Config, ...]) -> Iterable[Failure] | None:
    """Compile the kernels of ``configs`` for ``spec`` before any of them is timed.

    Optional. Called once per tune, with the tune space's configs, before
    :func:`dispatch_native_tune` or dispatch's sweep times them, possibly while other backends
    compile theirs (never while anything is timed). Compile them concurrently (a thread pool:
    :func:`dispatch.backend.compile_all`) into the caches that building and tuning them will read,
    so that the tune only times. Return the configs that failed to compile as
    :class:`~dispatch.backend.Failure` records (they are dropped from the tune, with their
    reasons), or None when there is nothing to compile ahead here (an interpreter, the CPU).
    """


@hookspec
def dispatch_native_tune(op: str, spec: CallSpec, space: TuneSpace, example: tuple[Any, ...],
                         settings: TuneSettings) -> TuneResult | None:
    """Tune with the DSL's own autotuner (TileLang's ``autotune``, Triton's ``autotune``).

    Optional. Return None to let dispatch's own sweep tune (always the case on the CPU). A result
    must have a config and a latency; dispatch checks the winner against the reference before it
    is used or cached.
    """


@hookspec
def dispatch_backward(op: str, spec: CallSpec) -> Callable[..., torch.Tensor] | None:
    """Return a backward kernel for ``spec``, or None.

    ``backward(grad_output, *tensors, output)`` returns the gradient of each tensor argument (a
    tuple, None where there is none; a tensor for one-tensor ops). Optional. When None, dispatch
    uses the op's declared reference backward, so every backend's forward is differentiable.

    A backward may carry ``backward.saves(*tensors) -> tuple[Tensor, ...]``: new buffers that the
    backend's own forward kernel fills when called as ``kernel(*tensors, saved=buffers)`` (what
    its backward would otherwise recompute, a norm's per-row statistics), handed back after the
    output: ``backward(grad_output, *tensors, output, *buffers)``. The backward must also run
    without them: a torch.compile'd step hands them on only where the op declares their shapes
    (``OpDecl.saved``) and this backend's forward filled them; otherwise it calls the backward
    with the output alone.

    A backward that never reads the output sets ``backward.reads_output = False``: autograd then
    does not keep the output (the backward gets None in its place), so a caller may change it in
    place before the backward, as torch's norms allow (``F.layer_norm(x).relu_()``).
    """
