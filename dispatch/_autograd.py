"""Differentiability for every backend: a backend's forward, with its own or the op's reference backward."""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import _opdecl
from ._spec import CallSpec


def reference_backward(spec: CallSpec) -> Callable[..., object]:
    """The op's declared backward for ``spec``, or autograd through its reference implementation.

    Either way: ``backward(grad_output, *tensors, output)`` -> the gradient of each tensor.
    """
    decl = _opdecl.get(spec.op)
    if decl.backward is not None:
        declared = decl.backward(spec)
        if decl.backward_reads_inputs:
            return declared

        def output_only(grad, *saved):  # (a distinct function: the forward keeps the output alone for it)
            return declared(grad, *saved)
        output_only.output_only = True
        return output_only
    reference = decl.reference(spec)

    def backward(grad, *saved):
        leaves = [t.detach().requires_grad_(t.dtype.is_floating_point) if t is not None else None
                  for t in saved[:-1]]
        return _through(reference, grad, leaves, [t is not None and t.requires_grad for t in leaves])
    return backward


def _through(reference: Callable[..., torch.Tensor], grad: torch.Tensor, tensors, needs,
             create_graph: bool = False) -> tuple:
    """The gradients of ``tensors`` where ``needs`` (None elsewhere): autograd through
    ``reference(*tensors)``; with ``create_graph``, differentiable in turn."""
    with torch.enable_grad():
        out = reference(*tensors)
        wanted = [t for t, n in zip(tensors, needs) if n and t is not None]
        grads = iter(torch.autograd.grad(out, wanted, grad, create_graph=create_graph, allow_unused=True))
    return tuple(next(grads) if n and t is not None else None for t, n in zip(tensors, needs))


class _BackendFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kernel, backward, spec, *tensors):
        saves = getattr(backward, "saves", None)  # buffers the forward fills for the backward (hookspec)
        extra = tuple(saves(*tensors)) if saves is not None else ()
        y = kernel(*tensors, saved=extra) if extra else kernel(*tensors)
        ctx.backward_kernel = backward
        ctx.spec = spec
        ctx.output_only = getattr(backward, "output_only", False)  # (the op's backward reads y alone)
        ctx.absent = tuple(t is None or ctx.output_only for t in tensors)
        ctx.n_extra = len(extra)
        ctx.save_for_backward(*(t for t, absent in zip(tensors, ctx.absent) if not absent), y, *extra)
        return y

    @staticmethod
    def backward(ctx, grad):
        kept = ctx.saved_tensors  # the present inputs, the output, then the forward's buffers
        out_at = len(kept) - ctx.n_extra - 1
        saved = iter(kept[:out_at])
        tensors = tuple(None if absent else next(saved) for absent in ctx.absent)
        if torch.is_grad_enabled() and not ctx.output_only:  # create_graph=True: gradients that can be
            # differentiated again, through the reference on the saved inputs (a kernel's carry no
            # graph; the op's backward of y alone is torch's ops on y, differentiable as it is)
            reference = _opdecl.get(ctx.spec.op).reference(ctx.spec)
            return (None, None, None, *_through(reference, grad, tensors, ctx.needs_input_grad[3:], True))
        try:
            grads = ctx.backward_kernel(grad, *tensors, *kept[out_at:])
        except (Exception, KeyboardInterrupt):
            raise
        except BaseException as exc:  # SystemExit in a backend's backward: its fault, not the end of the process
            from .errors import PluginError

            raise PluginError(f"a backward kernel raised {type(exc).__name__}: {exc}; a plugin may not end "
                              "the process") from exc
        if isinstance(grads, torch.Tensor) or grads is None:
            grads = (grads,)
        grads = tuple(grads) + (None,) * (len(tensors) - len(grads))
        return (None, None, None, *grads)


def own_backward(backend, spec: CallSpec) -> Callable[..., object] | None:
    """``backend``'s own backward kernel for a call of ``spec``, or None (then the op's reference
    backward runs; a reference backend's kernels are torch's, so it has none of its own)."""
    return None if backend.info.reference else backend.backward(spec.op, spec)


def differentiable(kernel: Callable[..., torch.Tensor], backward: Callable[..., object],
                   spec: CallSpec) -> Callable[..., torch.Tensor]:
    """Wrap ``kernel`` (a call of ``spec``) so autograd flows through it, with ``backward`` (a
    backend's own backward kernel or :func:`reference_backward`'s); a backward taken with
    ``create_graph=True`` goes through the reference instead, so that it can be differentiated again."""

    reference = _opdecl.get(spec.op).reference(spec)
    function = _function_of(spec.op)

    def run(*tensors: torch.Tensor) -> torch.Tensor:
        if any(t is not None and t.is_inference() for t in tensors):  # (made under inference_mode: autograd
            return reference(*tensors)  # can't save it for a backward; torch's op saves what it needs)
        return function.apply(kernel, backward, spec, *tensors)

    return run


_FUNCTIONS: dict[str, type[_BackendFunction]] = {}


def _function_of(op: str) -> type[_BackendFunction]:
    """The autograd function of op ``op``'s kernel calls: ``_BackendFunction`` under a name of the
    op's (``DispatchLayerNorm``), so that a result's ``grad_fn`` (``DispatchLayerNormBackward``) and
    a profile's backward nodes say which op they are."""
    function = _FUNCTIONS.get(op)
    if function is None:
        name = "Dispatch" + "".join(part[:1].upper() + part[1:] for part in op.split("_"))
        function = _FUNCTIONS.setdefault(op, type(name, (_BackendFunction,), {"__module__": __name__}))
    return function
