"""The custom ops of a compiled training step: its backward node, and the forward node that keeps an op's buffers.

An op's backward in a compiled graph is a second custom op,
``dispatch_training::name_backward(grad, output, *tensors, saved, args, needs) -> Tensor[]``,
which runs the backward of the backend a training call of the op gets when chosen by its device
time (its own backward kernel, else the op's reference backward; no autograd host cost is weighed,
as the node pays none), so a compiled training step keeps dispatch's backward kernels too. For an
op that declares ``saved`` buffers (a norm's row statistics) a training step's forward node is
``dispatch_training::name(*tensors, args, needs) -> (Tensor, Tensor[])``, which returns them
with the output (filled where the step's backward reads them: ``Dispatcher.saving_forward``).
"""

from __future__ import annotations

import torch

from . import _native, _opdecl, _settings
from ._compile import _NAMESPACE, _never_traced, _node_call, _values

_TRAINING = "dispatch_training"  # the forward nodes of compiled training steps that keep buffers (_training_op)
_training_lib: torch.library.Library | None = None


def _training_library() -> torch.library.Library:
    global _training_lib
    if _training_lib is None:
        _training_lib = torch.library.Library(_TRAINING, "FRAGMENT")
    return _training_lib


def _training_op(decl: _opdecl.OpDecl, plain):
    """``dispatch_training::<op>(*tensors, args, needs) -> (Tensor, Tensor[])``: the forward node of a
    compiled training step of an op that declares ``saved`` buffers (:attr:`OpDecl.saved`): the
    output, as the plain node ``plain`` gives it, and the buffers, filled by the kernel where the
    backend it runs has its own backward in the step (:meth:`Dispatcher.saving_forward`), else
    new and unfilled. Its own namespace: no op's name can meet it there."""
    from ._compiled_nodes import unfilled
    from ._dispatcher import DISPATCHER

    name = decl.name
    lib = _training_library()
    tensors = ", ".join(f"Tensor{'?' if t.optional else ''} {t.name}" for t in decl.tensors)
    lib.define(f"{name}({tensors}, str args, bool[] needs) -> (Tensor, Tensor[])",
               tags=(torch.Tag.pt2_compliant_tag,))

    def impl(*rest):
        *tensors, args, needs = rest
        tensors = tuple(tensors)
        current = _opdecl.get(name)
        key = _node_key(current, args, needs, tensors)
        found = DISPATCHER.saving_forward(key, tensors)  # (a node met before)
        if found is not None:
            return found
        values, backend, out_dtype = _values(current, tensors, args)
        # (a call read in the kernel under autocast: the plain node's call, nothing filled)
        plan = DISPATCHER.saving_plan(current, key, values, backend, tuple(needs), plain, args, out_dtype is None)
        return DISPATCHER.saving_forward(key, tensors, plan)

    def fake(*rest):
        *tensors, args, _needs = rest
        current = _opdecl.get(name)
        values, _backend, out_dtype = _values(current, tuple(tensors), args)
        spec, given = _node_call(current, values, out_dtype)
        return current.reference(spec)(*given), unfilled(current.saved(spec), tensors[0].device)

    lib.impl(name, _never_traced(impl), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{_TRAINING}::{name}", fake, lib=lib)
    return getattr(getattr(torch.ops, _TRAINING), name).default


def _node_key(decl: _opdecl.OpDecl, args: str, needs, tensors: tuple) -> tuple:
    """What a training step's node reads of its call: the op, its arguments text, the wanted
    gradients, the ``use()`` scope and the tensors' dtypes, shapes, strides and devices (read
    natively, as the op functions' keys are, where the native key is built)."""
    native = _native.tensor_key()
    if native is not None:
        try:
            return (decl, args, tuple(needs), _settings.current_scope(),
                    *[None if t is None else native(t) for t in tensors])
        except (RuntimeError, TypeError):  # (no strides, or symbolic sizes: the Python key's)
            pass
    return (decl, args, tuple(needs), _settings.current_scope(),
            *[None if t is None else (t.dtype, t.shape, t.stride(), t.device) for t in tensors])


def _backward_op(decl: _opdecl.OpDecl, lib: torch.library.Library):
    """``dispatch_training::<op>_backward(grad, output, *tensors, saved, args, needs) -> Tensor[]``:
    the gradients of the tensors that ``needs`` marks, by the backward of the backend a training
    call gets when chosen by its device time (its own kernel, else the op's reference backward;
    :meth:`Dispatcher.backward_kernel`), one opaque node in a compiled graph's backward. ``saved``:
    the forward node's buffers (:func:`_training_op`), handed to that backward where its backend's
    forward filled them. The gradients are contiguous (the fake's layout). Also defined as
    ``dispatch::<op>_backward(grad, output, *tensors, args, needs)``, without buffers: the node
    that graphs made before buffers were kept call (an exported program that holds one)."""
    from ._compiled_nodes import SAVED_BY, with_needs
    from ._dispatcher import DISPATCHER

    name = decl.name
    tensors = ", ".join(f"Tensor{'?' if t.optional else ''} {t.name}" for t in decl.tensors)
    lib.define(f"{name}_backward(Tensor grad, Tensor output, {tensors}, str args, bool[] needs) -> Tensor[]",
               tags=(torch.Tag.pt2_compliant_tag,))
    training = _training_library()
    training.define(f"{name}_backward(Tensor grad, Tensor output, {tensors}, Tensor[] saved, str args, "
                    "bool[] needs) -> Tensor[]", tags=(torch.Tag.pt2_compliant_tag,))

    def resolve(current, tensors, args, needs):
        # ((backend, backward), the tensors it takes): the call's spec built, its backward chosen
        values, backend, out_dtype = _values(current, tensors, args)
        spec, given = _node_call(current, values, out_dtype, backend)
        return DISPATCHER.backward_kernel(with_needs(spec, needs), backend), given, out_dtype is None

    def impl(grad, output, *rest):
        *tensors, saved, args, needs = rest
        tensors = tuple(tensors)
        current = _opdecl.get(name)
        key = _node_key(current, args, needs, tensors)
        found = DISPATCHER.node_backward(key)
        if found is not None:  # met before: the tensors as they came (no float32 copy made)
            given = tensors
        else:
            found, given, keep = resolve(current, tensors, args, needs)
            if keep:  # (a call read in the kernel under autocast may take a copy: resolved each time)
                DISPATCHER.node_backward(key, found)
        decision, backward = found
        if saved and hasattr(backward, "saves") and all(getattr(b, SAVED_BY, None) == decision.backend for b in saved):
            grads = backward(grad, *given, output, *saved)
        else:
            grads = backward(grad, *given, output)
        grads = (grads,) if isinstance(grads, torch.Tensor) or grads is None else tuple(grads)
        # None for a tensor the output does not depend on (autograd through a reference that does
        # not read it): eager leaves its .grad None; the node's output promises a tensor: zeros.
        # Each in its input's dtype, as the fake promises (autograd casts an eager call's so: a
        # float32 gradient of a bfloat16 input read in the kernel, or of its float32 copy)
        wanted = [torch.zeros_like(t, memory_format=torch.contiguous_format) if g is None
                  else g.to(t.dtype) if g.dtype != t.dtype and g.dtype.is_floating_point else g
                  for g, t, n in zip(grads, tensors, needs) if n]
        inputs = (grad, output, *tensors)
        # a fresh contiguous tensor each: the layout the fake promises, and never an alias of an input
        return [g.clone(memory_format=torch.contiguous_format) if any(g is t for t in inputs) else g.contiguous()
                for g in wanted]

    def fake(grad, output, *rest):
        *tensors, _saved, _args, needs = rest
        return [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t, n in zip(tensors, needs) if n]

    def without_buffers(grad, output, *rest):
        return impl(grad, output, *rest[:-2], [], *rest[-2:])

    def fake_without_buffers(grad, output, *rest):
        return fake(grad, output, *rest[:-2], [], *rest[-2:])

    training.impl(f"{name}_backward", _never_traced(impl), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{_TRAINING}::{name}_backward", fake, lib=training)
    lib.impl(f"{name}_backward", _never_traced(without_buffers), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{_NAMESPACE}::{name}_backward", fake_without_buffers, lib=lib)
    return getattr(getattr(torch.ops, _TRAINING), f"{name}_backward").default
