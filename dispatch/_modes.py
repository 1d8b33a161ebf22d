"""The modes in which a call runs no backend's kernel: torch's own op, or a node of a traced graph.

Under forward-mode AD, torch.jit.trace or a torch.func transform a call runs torch's own op
(:func:`_torch_only`), and a call forced to a kernel backend there is refused
(:func:`_refuse_if_forced`); under torch.compile or torch.export a call is traced (:func:`_tracing`).
"""

from __future__ import annotations

import torch

from . import _plugins
from ._select import unknown_backend
from ._spec import CallSpec
from .errors import BackendRefusedError


_forward_ad = torch.autograd.forward_ad
_jit_tracing = torch._C._is_tracing
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def _torch_only() -> bool:
    """Whether a call must run torch's own op, not a backend's kernel: a forward-mode AD level is
    open (a kernel drops the tangent), torch.jit.trace records (it would record the kernel's
    empty output), or a torch.func transform runs (vmap, grad, jacrev...: its tensors are wrappers
    without storage). One Python read and two C calls."""
    return _forward_ad._current_level >= 0 or _jit_tracing() or _functorch_active()


def _refuse_if_forced(spec: CallSpec, name: str) -> None:
    """Raise for a call forced to backend ``name`` that must run torch's own op (see _torch_only),
    unless ``name`` is the reference: nothing falls back silently."""
    backend = _plugins.registry().backends.get(name)
    if backend is None:
        raise unknown_backend(name, _plugins.registry().backends)
    if backend.info.reference:
        return
    if _forward_ad._current_level >= 0:
        why = "a forward-mode AD level is open (a kernel would drop the tangent)"
    elif _jit_tracing():
        why = "torch.jit.trace is recording (it would record the kernel's output as a constant)"
    else:
        why = "a torch.func transform (vmap, grad, jacrev...) is running (its tensors have no storage for a kernel)"
    raise BackendRefusedError(
        f"backend {name!r} was forced but cannot serve {spec.describe()}: {why}, so torch's own op serves it; "
        "call without forcing a backend there", backend=name, op=spec.op, reason=why, servers=("torch",))


def _tracing() -> bool:
    """Whether torch.compile or torch.export is tracing this call (never true in eager code)."""
    compiler = getattr(torch, "compiler", None)
    return compiler is not None and compiler.is_compiling()
