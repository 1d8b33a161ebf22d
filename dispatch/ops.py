"""The ops, with torch's signatures and semantics, plus a keyword-only ``backend=``.

Each op's hot path is one dictionary lookup and one call; a miss goes to the dispatcher.
"""

from __future__ import annotations

import torch

from ._dispatcher import DISPATCHER
from ._out import with_out
from ._settings import current_scope
from ._spec import CallSpec

_is_grad_enabled = torch.is_grad_enabled
_SOFTMAX = DISPATCHER.tables["softmax"]
_LOG_SOFTMAX = DISPATCHER.tables["log_softmax"]
_LOGSUMEXP = DISPATCHER.tables["logsumexp"]


def softmax(input: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None, *,
            backend: str | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.softmax(input, dim, dtype=dtype, out=out)``, served by the best backend for the call."""
    if out is not None:
        return with_out("softmax", lambda: softmax(input, dim, dtype, backend=backend), input, dtype, out)
    try:
        fn = _SOFTMAX[(input.dtype, input.device, input.shape, input.stride(), dim, dtype, backend,
                       current_scope(), input.requires_grad and _is_grad_enabled())]
    except (KeyError, AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse input has no strides
        fn = None
    if fn is None:  # outside the handler, so torch's own errors don't chain a KeyError
        return _miss("softmax", input, dim, dtype, False, backend)
    return fn(input)


def log_softmax(input: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None, *,
                backend: str | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.log_softmax(input, dim, dtype=dtype, out=out)``, served by the best backend for the call."""
    if out is not None:
        return with_out("log_softmax", lambda: log_softmax(input, dim, dtype, backend=backend), input, dtype, out)
    try:
        fn = _LOG_SOFTMAX[(input.dtype, input.device, input.shape, input.stride(), dim, dtype, backend,
                           current_scope(), input.requires_grad and _is_grad_enabled())]
    except (KeyError, AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse input has no strides
        fn = None
    if fn is None:  # outside the handler, so torch's own errors don't chain a KeyError
        return _miss("log_softmax", input, dim, dtype, False, backend)
    return fn(input)


def logsumexp(input: torch.Tensor, dim, keepdim: bool = False, *, backend: str | None = None,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.logsumexp(input, dim, keepdim, out=out)``, served by the best backend for the call."""
    if out is not None:
        return with_out("logsumexp", lambda: logsumexp(input, dim, keepdim, backend=backend), input, keepdim, out)
    try:
        fn = _LOGSUMEXP[(input.dtype, input.device, input.shape, input.stride(), dim, keepdim, backend,
                         current_scope(), input.requires_grad and _is_grad_enabled())]
    except (KeyError, AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse input has no strides
        fn = None
    if fn is None:  # outside the handler, so torch's own errors don't chain a KeyError
        return _miss("logsumexp", input, dim, None, keepdim, backend)
    return fn(input)


_TORCH = {"softmax": torch.softmax, "log_softmax": torch.log_softmax}


def _torch_raise(op: str, input, dim, dtype, keepdim) -> None:
    """Call torch's own op with the raw arguments so that bad input raises exactly torch's error."""
    if op == "logsumexp":
        torch.logsumexp(input, dim, keepdim)
    else:
        _TORCH[op](input, dim, dtype=dtype)


def normalize_dims(op: str, input, dim, dtype, keepdim) -> tuple[int, ...]:
    """The reduced dims of a call, non-negative and sorted; bad arguments raise torch's own error."""
    try:
        if not isinstance(input, torch.Tensor):
            raise TypeError
        if input.layout != torch.strided:  # sparse: torch's own op says what it thinks of it
            raise TypeError
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise TypeError
        if not isinstance(keepdim, bool):
            raise TypeError
        ndim = input.dim()
        rank = max(ndim, 1)
        raw = (dim,) if op != "logsumexp" or isinstance(dim, int) else tuple(dim)
        if op != "logsumexp" and not isinstance(dim, int):
            raise TypeError
        dims = []
        for d in raw:
            if isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < rank:
                raise IndexError
            dims.append(d % rank)
        if len(set(dims)) != len(dims) or (op == "logsumexp" and not dims and ndim > 0):
            raise IndexError
    except (TypeError, IndexError):
        _torch_raise(op, input, dim, dtype, keepdim)  # raises torch's exception for this input
        layout = f" ({input.layout}; dispatch serves strided tensors)" if isinstance(input, torch.Tensor) else ""
        raise TypeError(f"{op}(): unsupported arguments: input={type(input).__name__}{layout}, dim={dim!r}, "
                        f"dtype={dtype!r}, keepdim={keepdim!r}") from None
    return () if ndim == 0 else tuple(sorted(dims))


def make_spec(op: str, input, dim, dtype, keepdim) -> CallSpec:
    """The :class:`CallSpec` of a call (validating its arguments as torch would)."""
    dims = normalize_dims(op, input, dim, dtype, keepdim)
    return CallSpec.of(op, input, dims, dtype, keepdim)


def call_key(op: str, input: torch.Tensor, dim, dtype, keepdim, backend, spec: CallSpec) -> tuple:
    """The hot-path key of a call, exactly as the op functions above build it."""
    if isinstance(dim, list):
        dim = tuple(dim)
    third = keepdim if op == "logsumexp" else dtype
    return (input.dtype, input.device, input.shape, input.stride(), dim, third, backend, current_scope(),
            spec.requires_grad)


def _miss(op: str, input, dim, dtype, keepdim, backend) -> torch.Tensor:
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"'backend' must be a backend name (str) or None (got {backend!r})")
    spec = make_spec(op, input, dim, dtype, keepdim)
    return DISPATCHER.call(op, call_key(op, input, dim, dtype, keepdim, backend, spec), spec, backend, input)
