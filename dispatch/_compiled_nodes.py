"""What a compiled graph's nodes run: the backward node's kernel, and a forward that fills the buffers it reads.

A compiled graph's backward node runs the backward of a training call chosen by device time
(:meth:`CompiledNodes.backward_kernel`); a compiled training step's forward node of an op that
declares ``saved`` buffers runs the forward of that backward's backend where it fills them
(:meth:`CompiledNodes.saving_forward`). Both are kept until settings or backends change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch

from . import _backend, _opdecl, _plugins, _settings
from ._guard import _bucket_key
from ._keys import MAX_KEYS_PER_OP
from ._modes import _torch_only
from ._select import Decision, Selector
from ._spec import CallSpec
from .autotune.cache import default_cache

# the attribute that marks a compiled forward node's saved buffers with the backend whose forward
# filled them (Dispatcher.saving_forward): the backward node hands them to that backend's backward only
SAVED_BY = "_dispatch_saved_by"


class CompiledNodes:
    """The kernels of a compiled graph's nodes (a part of :class:`dispatch._dispatcher.Dispatcher`): kept
    in the dispatcher's ``_backwards`` and ``_savings``, chosen past its ``_quarantine``, checked and
    faulted by its guard (:class:`dispatch._guard.Guard`)."""

    def backward_kernel(self, spec: CallSpec, forced: str | None) -> tuple[Decision, Callable]:
        """``(decision, backward)``: the backward that a compiled graph's backward node runs for a
        call of ``spec`` (whose tensors say which gradients are wanted), and its decision: the chosen
        backend's own kernel, else the op's reference backward. Chosen as a training call by its
        device time, from the cards (tuning off): the node launches its kernels with no
        ``autograd.Function`` around them, so the host cost that an eager training call's pick
        weighs is not paid there (with it, norms of up to 16M elements went to torch's reference
        backward, which computes the forward again); nor may it follow the forward node's pick, an
        inference call's (TileLang's norm forward of few long rows, whose backward takes up to twice
        Triton's time). Made once per spec, backend forced and ``use()`` scope; nothing is raced in
        a backward pass."""
        key = (spec, forced, _settings.current_scope())
        found = self._backwards.get(key)
        if found is None:
            decision = self.compiled_backward_decision(spec, forced)
            found = (decision, self._backward(_plugins.registry().backends[decision.backend], decision, None))
            if len(self._backwards) >= MAX_KEYS_PER_OP:
                self._backwards.clear()
            self._backwards[key] = found
        return found

    def compiled_backward_decision(self, spec: CallSpec, forced: str | None, joins: bool = True) -> Decision:
        """The decision whose backward a compiled graph's backward node runs for a training call of
        ``spec`` (:meth:`backward_kernel`): by device time, from the cards, nothing tuned. Without
        ``joins``, under torch.distributed, the group's answer if it was agreed, else this rank's
        own (no exchange that the other ranks would have to join: what ``explain`` asks)."""
        scope = _settings.current_scope()
        settings = attrs.evolve(_settings.effective(scope), autotune=False, timing="device")
        selector = Selector(_plugins.registry(), default_cache(), settings, joins=joins)
        return selector.select(spec, forced, scope, self._quarantine.get(_bucket_key(spec)))

    def node_backward(self, key: tuple, backward: tuple[Decision, Callable] | None = None
                      ) -> tuple[Decision, Callable] | None:
        """The ``(decision, backward)`` (a :meth:`backward_kernel`) kept under ``key`` for a compiled
        graph's backward node, or None; with ``backward``, keep it there. ``key``: what the node reads
        of a call (its op, arguments text, wanted gradients, ``use()`` scope and tensors' dtypes,
        shapes, strides and devices), so that a node met again builds no spec. Forgotten with the
        resolved calls."""
        if backward is None:
            return self._backwards.get(key)
        if len(self._backwards) >= MAX_KEYS_PER_OP:
            self._backwards.clear()
        self._backwards[key] = backward
        return backward

    def saving_forward(self, node_key: tuple, tensors: tuple, plan: tuple | None = None
                       ) -> tuple[torch.Tensor, list] | None:
        """``(output, buffers)`` of a compiled training step's forward node of an op that declares
        ``saved`` buffers, by the plan kept under ``node_key`` (the node's call) or ``plan``
        (:meth:`saving_plan`); None where there is none yet. Where the backend whose backward the
        step's backward node runs (a training call by device time: :meth:`backward_kernel`) asks
        its forward to fill buffers of the op's declared shapes (``saves``), the node runs that
        backend's forward, as an eager training call under ``timing="device"`` would: its kernel,
        checked against the reference on its first call as any is, fills them, and each is marked
        with the backend's name (:data:`SAVED_BY`) for the backward node. Otherwise (no buffers
        asked for, the reference's backward, a view the guard resolves, a mode that runs torch's
        op, a CUDA graph being captured when the plan was made, a kernel that faulted) the plain
        node's call (an inference call) and new, unfilled, unmarked buffers."""
        plan = plan or self._savings.get(node_key)
        if plan is None:
            return None
        kernel, saves, decision, layout, qkey, plain, args = plan
        if kernel is not None and decision.backend not in self._quarantine.get(qkey, ()) and not _torch_only() \
                and not any(t is not None and (t.is_neg() or t.is_conj()) for t in tensors):
            try:
                buffers = tuple(saves(*tensors))
                out = (kernel(*tensors, saved=buffers)
                       if tuple((tuple(b.shape), b.dtype) for b in buffers) == layout else None)
            except Exception as exc:  # noqa: BLE001 - a fault of the backend; the plain call serves
                self._savings[node_key] = (None, *plan[1:])
                self._fault(decision, f"raised {type(exc).__name__}: {exc}", exc)
            else:
                if out is not None:
                    for b in buffers:
                        setattr(b, SAVED_BY, decision.backend)
                    return out, list(buffers)
                self._savings[node_key] = (None, *plan[1:])  # (buffers of other shapes: never filled)
        return plain(*tensors, args), unfilled(layout, tensors[0].device)

    def saving_plan(self, decl: _opdecl.OpDecl, node_key: tuple, values: dict[str, Any], backend: str | None,
                    needs: tuple[bool, ...], plain: Callable, args: str, fill: bool = True) -> tuple:
        """The plan of :meth:`saving_forward` for a node's call (``values``, the gradients ``needs``
        marks; ``plain(*tensors, args)``: the plain node's call; ``fill`` False: the plain call's
        always), kept under ``node_key`` until settings or backends change (not while a CUDA graph
        is captured: nothing may be checked then): ``(kernel, saves, decision, layout, quarantine
        key, plain, args)``, kernel None where the node fills nothing."""
        spec = decl.spec(values, grad_enabled=False)
        layout = tuple((tuple(shape), dtype) for shape, dtype in decl.saved(spec))
        tensors = decl.tensors_of(values)
        nothing = (None, None, None, layout, None, plain, args)
        if _capturing(tensors) or _torch_only():  # (made again by the next call outside them)
            return nothing
        plan = nothing
        decision, backward = self.backward_kernel(with_needs(spec, needs), backend) if fill else (None, None)
        saves = getattr(backward, "saves", None)
        chosen = _plugins.registry().backends[decision.backend] if decision is not None else None
        if saves is not None and not chosen.info.reference:
            try:
                kernel = chosen.kernel(decl.name, decision.spec, decision.config)
            except Exception as exc:  # noqa: BLE001 - dispatch_kernel raised: a fault of the backend
                self._fault(decision, _backend.raised_in("dispatch_kernel", exc), exc, "dispatch_kernel")
            else:
                if self._validate(decision, kernel, tensors) is not None:  # (None: faulted, said)
                    plan = (kernel, saves, decision, layout, _bucket_key(decision.spec), plain, args)
        if len(self._savings) >= MAX_KEYS_PER_OP:
            self._savings.clear()
        self._savings[node_key] = plan
        return plan


def _capturing(tensors) -> bool:
    """Whether a CUDA graph is being captured on the current stream of these CUDA tensors."""
    first = next((t for t in tensors if t is not None), None)
    return first is not None and first.is_cuda and torch.cuda.is_current_stream_capturing()


def unfilled(layout, device: torch.device) -> list[torch.Tensor]:
    """New buffers of ``layout`` (``(shape, dtype)`` pairs, an op's ``saved``) on ``device``."""
    return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in layout]


def with_needs(spec: CallSpec, needs) -> CallSpec:
    """``spec`` with its tensors wanting a gradient where ``needs`` says (and present)."""
    return attrs.evolve(spec, tensors=[attrs.evolve(t, requires_grad=bool(n) and t.present)
                                       for t, n in zip(spec.tensors, needs)])
