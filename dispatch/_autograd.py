"""Differentiability for every backend: a backend's forward, its own or the reference backward."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._spec import CallSpec


def reference_backward(spec: CallSpec) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The reference gradient of ``spec.op`` w.r.t. its input, from the saved input and output."""
    dims = spec.dims or ()
    in_dtype = spec.dtype

    if spec.op == "softmax":
        def backward(grad, x, y):
            g = grad.to(y.dtype)
            return (y * (g - (g * y).sum(dims, keepdim=True))).to(in_dtype)
    elif spec.op == "log_softmax":
        def backward(grad, x, y):
            g = grad.to(y.dtype)
            return (g - torch.exp(y) * g.sum(dims, keepdim=True)).to(in_dtype)
    else:
        keepdim = spec.keepdim

        def backward(grad, x, y):
            if not keepdim and dims:
                for d in sorted(dims):
                    grad = grad.unsqueeze(d)
                    y = y.unsqueeze(d)
            return (grad * torch.exp(x - y)).to(in_dtype)
    return backward


class _BackendFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, kernel, backward):
        y = kernel(x)
        ctx.backward_kernel = backward
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return ctx.backward_kernel(grad, x, y), None, None


def differentiable(kernel: Callable[[torch.Tensor], torch.Tensor],
                   backward: Callable | None, spec: CallSpec) -> Callable[[torch.Tensor], torch.Tensor]:
    """Wrap ``kernel`` so autograd flows through it, with ``backward`` or the reference formula."""
    grad_fn = backward if backward is not None else reference_backward(spec)

    def run(x: torch.Tensor) -> torch.Tensor:
        return _BackendFunction.apply(x, kernel, grad_fn)

    return run
