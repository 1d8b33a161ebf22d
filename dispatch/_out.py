"""``out=``: an op's result written into the caller's tensor, with torch's checks and resizing rule.

An ``out`` that torch refuses raises torch's exception type, with a message that names ``out``,
its value and what would work; then the op runs through dispatch as usual and its result is
copied into ``out``, resized first as torch resizes it (with torch's warning when ``out`` held
elements). Calls without ``out=`` never come here.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable

import torch

from . import _autocast
from ._opdecl import overriders
from .errors import BackendRefusedError


def with_out(op: str, function: Callable[..., torch.Tensor], values: dict, out, backend) -> torch.Tensor:
    """Check ``out`` as torch would, call ``function(**values, backend=backend)`` (the op without
    ``out``) and write its result into ``out``; ``values`` are the call's arguments by name."""
    overriding = overriders((*values.values(), out))
    if overriding:  # torch's override protocol: the object's __torch_function__ serves the whole call
        from . import op as public

        extra = {} if backend is None else {"backend": backend}
        return torch.overrides.handle_torch_function(public(op), overriding, **values, out=out, **extra)
    input = next(iter(values.values()))
    third = values.get("dtype", values.get("keepdim"))
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}(): argument 'out' must be Tensor, not {type(out).__name__}")
    family = op in _SOFTMAX_FAMILY
    if family and isinstance(input, torch.Tensor) and input.layout == torch.strided:
        _check_like_torch(op, input, third, out)
    if not family and torch.is_grad_enabled() and any(
            isinstance(v, torch.Tensor) and v.requires_grad for v in (*values.values(), out)):
        raise _no_autograd(op)
    upcast = op == "logsumexp" and _finer(out, input)
    if upcast:  # torch sums into out: the result as precise as out's dtype (a complex out's real one)
        values = {**values, next(iter(values)): input.to(_real(out.dtype))}
    # torch's autocast leaves out= calls as they are; a bad input or dim raises torch's exception here
    with _autocast.leave_as_is(input) if _autocast.on_for(input) else contextlib.nullcontext():
        try:
            result = function(**values, backend=backend)
        except BackendRefusedError as exc:
            if not upcast:
                raise
            dtype, given, wanted = (str(t).removeprefix("torch.") for t in (input.dtype, out.dtype, _real(out.dtype)))
            raise BackendRefusedError(
                f"{exc}. (out= is {given}, finer than the {dtype} input: torch then computes logsumexp in "
                f"{wanted}, and so does dispatch; an out of {dtype} keeps the input's dtype)",
                backend=exc.backend, op=exc.op, reason=exc.reason, servers=exc.servers) from exc
    if not family and out.dtype != result.dtype:  # (an op of a package: its result's dtype, from its output rule)
        raise RuntimeError(f"{op}(): 'out' must have the result's dtype {result.dtype} (got {out.dtype}); pass "
                           f"an out of {result.dtype}")
    if out.device != result.device:
        raise RuntimeError(f"{op}(): 'out' must be on the input's device {result.device} (got a tensor on "
                           f"{out.device}); pass out=torch.empty(0, device={str(result.device)!r})")
    if out.shape != result.shape:
        if out.numel() != 0:
            warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                          f"which does not match the required output shape {list(result.shape)}. This behavior "
                          "is deprecated, and in a future PyTorch release outputs will not be resized unless "
                          "they have zero elements. You can explicitly reuse an out tensor t by resizing it, "
                          "inplace, to zero elements with t.resize_(0).", UserWarning, stacklevel=3)
        out.resize_(result.shape)
    if result.requires_grad:  # (softmax and log_softmax: torch records out= calls, with a backward that raises)
        result = _NoDerivative.apply(result, op)
    out.copy_(result)
    return out


class _NoDerivative(torch.autograd.Function):
    """What torch records for a softmax or log_softmax call with ``out=`` whose input wants a
    gradient: a node whose backward raises (the gradient does not flow through ``out=``)."""

    @staticmethod
    def forward(ctx, result, op):
        ctx.op = op
        return result.view_as(result)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(f"the derivative of {ctx.op}() with out= is not implemented (as torch's, whose "
                           f"out= calls autograd can't differentiate); call {ctx.op}() without out= to differentiate")


def _finer(out: torch.Tensor, input) -> bool:
    """Whether ``out`` holds floats (or complex numbers of floats) more precise than the floating
    tensor ``input``."""
    return (isinstance(input, torch.Tensor) and input.dtype.is_floating_point
            and (out.dtype.is_floating_point or out.dtype.is_complex)
            and torch.finfo(_real(out.dtype)).eps < torch.finfo(input.dtype).eps)


def _real(dtype: torch.dtype) -> torch.dtype:
    """The dtype of a complex dtype's parts; a real dtype itself."""
    return dtype.to_real() if dtype.is_complex else dtype


def _no_autograd(op: str) -> RuntimeError:
    return RuntimeError(f"{op}(): functions with out=... arguments don't support automatic differentiation, but "
                        "one of the arguments requires grad; call it under torch.no_grad() or without out=")


_SOFTMAX_FAMILY = frozenset({"softmax", "log_softmax", "logsumexp"})  # torch's own rules, below; other ops:
# no input that requires grad (under grad mode), and out of the result's dtype


def _check_like_torch(op: str, input: torch.Tensor, third, out: torch.Tensor) -> None:
    """The out= rules of torch 2.x for the softmax family, each raising torch's exception type."""
    grad = torch.is_grad_enabled()
    if grad and (out.requires_grad or (op == "logsumexp" and input.requires_grad)):
        raise _no_autograd(op)
    if op == "logsumexp":
        if not (out.dtype.is_floating_point or out.dtype.is_complex):
            raise RuntimeError(f"logsumexp(): 'out' must have a floating point dtype (got {out.dtype}); "
                               "pass out=torch.empty(0, dtype=torch.float32), say")
    elif isinstance(third, torch.dtype | None) and out.dtype != (third or input.dtype):
        expected = third or input.dtype
        ways = ([f"pass an out of {expected}"] if expected.is_floating_point else []) + (
            [f"pass dtype={out.dtype} to compute in it"] if out.dtype.is_floating_point else [])
        fix = ", or ".join(ways) or f"{op} computes in a floating point dtype: pass one as dtype= and an out of it"
        raise RuntimeError(f"{op}(): 'out' must have the result's dtype {expected} (got {out.dtype}); {fix}")
