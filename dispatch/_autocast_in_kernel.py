"""Autocast calls whose kernel reads the half-precision input and writes float32, under keys of their own.

An op that declares ``autocast_in_kernel`` has its ``"fp32"`` calls under autocast served without
the float32 copy of its first tensor (:func:`dispatch._autocast.in_kernel`): such a call resolves
under ``(_IN_KERNEL, its key)``, a key that no call as made has, in the op's one table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import _autocast, _opdecl, _plugins
from ._modes import _torch_only, _tracing
from ._spec import CallSpec
from .errors import BackendRefusedError, NoBackendError

_IN_KERNEL = "autocast, read in the kernel"  # the first part of the key an autocast_in_kernel call resolves under


class AutocastInKernel:
    """The calls read in the kernel under autocast (a part of :class:`dispatch._dispatcher.Dispatcher`):
    resolved in the dispatcher's ``tables``, chosen by its ``decide`` and served by its ``_serve``."""

    def _autocast_in_kernel(self, decl: _opdecl.OpDecl, key, values: dict[str, Any], kept: dict[str, Any],
                            backend: str | None, views_keyed: bool) -> Callable[..., torch.Tensor]:
        """``fn(*tensors)`` for a call key met under autocast whose op reads its half-precision input
        in the kernel (:func:`dispatch._autocast.in_kernel`): the call ``kept`` (the other tensors
        cast as autocast casts them) with a float32 result, resolved under a key of its own."""
        names = decl.tensor_names
        cast = _autocast.cast_of(decl, values, kept)
        fixed = {name: kept[name] for name in kept if name not in names}
        inner = None if key is None else (_IN_KERNEL, key)
        table = self.tables.setdefault(decl.name, {})  # (the op's one table: cleared, never replaced)

        def autocast_in_kernel(*tensors: torch.Tensor | None) -> torch.Tensor:
            if cast:
                tensors = tuple(t.float() if i in cast else t for i, t in enumerate(tensors))
            fn = table.get(inner) if inner is not None else None
            if fn is not None:  # resolved: the hot path
                return fn(*tensors)
            return self.in_kernel(decl, inner, dict(fixed, **dict(zip(names, tensors))), backend, views_keyed)

        return autocast_in_kernel

    def in_kernel_key(self, decl: _opdecl.OpDecl, values: dict[str, Any], backend: str | None):
        """The key a call read in the kernel under autocast resolves under (None: resolved each call)."""
        key = self.function(decl.name).call_key(values, backend)
        return None if key is None else (_IN_KERNEL, key)

    def in_kernel(self, decl: _opdecl.OpDecl, inner, values: dict[str, Any], backend: str | None,
                  views_keyed: bool = False) -> torch.Tensor:
        """A call of ``values`` whose half-precision input the kernel reads, with a float32 result
        (``OpDecl.autocast_in_kernel``: an eager call under autocast, or a compiled graph's node of
        one), resolved under ``inner``, a key that no call as made has (``(_IN_KERNEL, its key)``)."""
        tensors = decl.tensors_of(values)
        fn = self.tables.get(decl.name, {}).get(inner) if inner is not None else None
        if fn is not None:
            return fn(*tensors)
        spec, copied = self.in_kernel_spec(decl, values, backend)
        if copied:  # autocast's float32 call (the input cast too), as without autocast_in_kernel
            fn = _autocast.through(self.function(decl.name).function, decl, values, (0,), backend)
            if inner is not None and not _tracing():
                self.tables.setdefault(decl.name, {})[inner] = fn
            return fn(*tensors)
        return self._serve(decl, inner, spec, backend, tensors, views_keyed)

    def in_kernel_spec(self, decl: _opdecl.OpDecl, values: dict[str, Any],
                       backend: str | None) -> tuple[CallSpec, bool]:
        """``(spec, copied)`` for a call read in the kernel under autocast: its spec (float32 result),
        and whether it is made on a float32 copy of the input instead. It is where no kernel backend
        would serve it (a forced backend that refuses it, or the reference chosen: a kernel may still
        serve the float32 call) and where the op's ``output`` rule ignores ``spec.out_dtype`` (an op
        evolved from a norm with an ``output`` of its own)."""
        spec = decl.spec(values, out_dtype=torch.float32)
        if spec.out_dtype != torch.float32:
            return spec, True
        if _torch_only() or (spec.device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            return spec, False  # (torch's op serves it, or the capture's choice: nothing decided here)
        try:
            decision = self.decide(spec, backend)
        except (BackendRefusedError, NoBackendError):
            return spec, True
        return spec, _plugins.registry().backends[decision.backend].info.reference
