"""The built-in ops, declared: softmax, log_softmax and logsumexp, with torch's signatures and semantics.

Each op is one :class:`~dispatch.backend.OpDecl`; its function (``dispatch.softmax``...) is made
from the declaration by :mod:`dispatch._opfunc`, like every op a plugin declares.
"""

from __future__ import annotations

import operator

import torch

from ._autocast import torch_policy
from ._opdecl import OpDecl, TensorArg, _next_pow2, _next_pow4, declare
from ._spec import CallSpec


def _index(d) -> int:
    """A dim as torch reads it: anything with ``__index__`` but a bool."""
    if isinstance(d, bool):
        raise TypeError
    return operator.index(d)


def _dims(op: str, input, dim, dtype, keepdim) -> tuple[int, ...]:
    """The reduced dims of a call, non-negative and sorted; bad arguments raise torch's own error."""
    try:
        if not isinstance(input, torch.Tensor) or input.layout != torch.strided:  # sparse: torch's op says
            raise TypeError
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise TypeError
        if not isinstance(keepdim, bool):
            raise TypeError
        ndim = input.dim()
        rank = max(ndim, 1)
        if op == "logsumexp" and isinstance(dim, (list, tuple)):
            raw = tuple(dim)
        elif op != "logsumexp" and (isinstance(dim, torch.Tensor) and (dim.dim() or dim.dtype == torch.bool)
                                    or type(dim).__name__ == "ndarray"):  # (torch: an int, a 0-d int tensor)
            raise TypeError
        else:
            raw = (_index(dim),)
        dims = []
        for i, d in enumerate(raw):
            d = int(d) if i and isinstance(d, bool) else _index(d)  # (torch checks only a first bool)
            if not -rank <= d < rank:
                raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], "
                                 f"but got {d})")
            dims.append(d % rank)
        if op == "logsumexp" and not dims and ndim > 0:
            if not keepdim and input.numel():  # (torch raises for it; an empty input gives -inf)
                raise IndexError
            dims = list(range(ndim))  # torch reduces every dim
        if len(set(dims)) != len(dims):
            raise IndexError
    except (TypeError, IndexError, ValueError) as exc:
        _raise_as_torch(op, input, dim, dtype, keepdim)  # raises torch's exception for this input
        if isinstance(exc, IndexError) and str(exc):  # (on fake tensors, which torch's op does not check)
            raise IndexError(str(exc)) from None
        raise TypeError(f"{op}(): unsupported arguments: input={type(input).__name__}, dim={dim!r}, "
                        f"dtype={dtype!r}, keepdim={keepdim!r}") from None
    return () if ndim == 0 else tuple(sorted(dims))


def _raise_as_torch(op: str, input, dim, dtype, keepdim) -> None:
    """Call torch's own op with the raw arguments so that bad input raises exactly torch's error."""
    if op == "logsumexp":
        torch.logsumexp(input, dim, keepdim)
    else:
        getattr(torch, op)(input, dim, dtype=dtype)


# -- argument checks: the op's signature, returning its attributes ------------------------------------

_PYTHON_DTYPES = {float: torch.float64, int: torch.int64, bool: torch.bool, complex: torch.complex128}


def _dtype_arg(dtype):
    """``dtype=`` as torch reads it: a torch.dtype, or a Python type standing for one (``float``:
    float64, ...); anything else is left for the checks to refuse."""
    return _PYTHON_DTYPES.get(dtype, dtype) if isinstance(dtype, type) else dtype


def _parse_softmax(input: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None) -> dict:
    dtype = _dtype_arg(dtype)
    return {"dims": _dims("softmax", input, dim, dtype, False), "out_dtype": dtype or input.dtype}


def _parse_log_softmax(input: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None) -> dict:
    dtype = _dtype_arg(dtype)
    return {"dims": _dims("log_softmax", input, dim, dtype, False), "out_dtype": dtype or input.dtype}


def _parse_logsumexp(input: torch.Tensor, dim, keepdim: bool = False) -> dict:
    parsed = {"dims": _dims("logsumexp", input, dim, None, keepdim), "keepdim": keepdim}
    if not (input.is_floating_point() or input.is_complex()):  # integers and bools: torch's default dtype
        parsed["out_dtype"] = torch.get_default_dtype()
    return parsed


# -- references, outputs, backward ------------------------------------------------------------------

def _row_reference(fn, spec: CallSpec):
    # a closure passing positional arguments: torch parses keywords more slowly than a Python
    # frame costs (functools.partial(fn, dim=dim) measured 0.13 us a call more on a CPU)
    dim = spec.dims[0] if spec.dims else 0
    if spec.out_dtype == spec.dtype:
        return lambda x: fn(x, dim)
    out_dtype = spec.out_dtype
    return lambda x: fn(x, dim, out_dtype)


def _logsumexp_reference(spec: CallSpec):
    lse, dims, keepdim = torch.logsumexp, spec.dims or (0,), spec.keepdim
    return lambda x: lse(x, dims, keepdim)


def _same_shape(spec: CallSpec):
    return spec.shape, spec.out_dtype


def _reduced_shape(spec: CallSpec):
    dims = spec.dims
    shape = tuple(1 if i in dims else s for i, s in enumerate(spec.shape) if spec.keepdim or i not in dims)
    return shape, spec.out_dtype


def _fused_backward(fused, dim: int, in_dtype: torch.dtype, out_dtype: torch.dtype):
    """``backward(grad, x, y)`` by torch's own fused kernel ``fused`` (``torch._softmax_backward_data``
    or ``_log_softmax_backward_data``: one kernel, as torch's autograd runs it, reading grad and y
    once) in y's dtype, then cast to the input's where a ``dtype=`` call cast it."""
    if in_dtype == out_dtype:
        def backward(grad, x, y):
            return fused(grad if grad.dtype == out_dtype else grad.to(out_dtype), y, dim, out_dtype)
    else:
        def backward(grad, x, y):
            return fused(grad if grad.dtype == out_dtype else grad.to(out_dtype), y, dim, out_dtype).to(in_dtype)
    return backward


def _softmax_backward(spec: CallSpec):
    # torch's own fused backward (_fused_backward); a 0-d input (no dim): the formula
    dims, in_dtype = spec.dims or (), spec.dtype
    if len(dims) == 1:
        return _fused_backward(torch._softmax_backward_data, dims[0], in_dtype, spec.out_dtype)

    def backward(grad, x, y):
        g = grad.to(y.dtype)
        return (y * (g - (g * y).sum(dims, keepdim=True))).to(in_dtype)
    return backward


def _log_softmax_backward(spec: CallSpec):
    dims, in_dtype = spec.dims or (), spec.dtype
    if len(dims) == 1:
        return _fused_backward(torch._log_softmax_backward_data, dims[0], in_dtype, spec.out_dtype)

    def backward(grad, x, y):
        g = grad.to(y.dtype)
        return (g - torch.exp(y) * g.sum(dims, keepdim=True)).to(in_dtype)
    return backward


def _logsumexp_backward(spec: CallSpec):
    dims, in_dtype, keepdim = spec.dims or (), spec.dtype, spec.keepdim

    def backward(grad, x, y):
        if not keepdim and dims:
            for d in sorted(dims):
                grad = grad.unsqueeze(d)
                y = y.unsqueeze(d)
        return (grad * torch.exp(x - y)).to(in_dtype)
    return backward


# -- buckets and bytes ------------------------------------------------------------------------------

def reduction_bucket(spec: CallSpec) -> str:
    """``"M<=m,N<=n,layout"``: rows M to the next power of 4, the reduced length N to the next power
    of 2 (so dynamic shapes don't re-tune); layout is lastdim, dim<k> or dims<...>of<rank>. Rows of
    the last dim whose bytes are not a multiple of 16 (bf16 rows of 30001) are ``lastdim,unaligned``:
    the kernels' 16-byte copies don't serve them, so a decision raced on such rows (or on aligned
    ones) never serves the others. A non-contiguous input (a slice, a transposed or permuted view)
    adds ``,strided``: a config raced on a contiguous input may name a kernel that reads only such
    inputs (TileLang's shared-memory families), and a strided call must not be handed it."""
    if spec.last_dim_contiguous:
        layout = "lastdim" + (",unaligned" if spec.reduced_size * spec.dtype.itemsize % 16 else "")
    elif len(spec.dims) == 1:
        layout = f"dim{spec.dims[0] - spec.ndim}"
    else:
        layout = "dims" + "".join(str(d) for d in spec.dims) + f"of{spec.ndim}"
    strided = "" if spec.input.dense else ",strided"
    keepdim = ",keepdim" if spec.attrs.get("keepdim") else ""
    return f"M<={_next_pow4(spec.rows)},N<={_next_pow2(spec.reduced_size)},{layout}{strided}{keepdim}"


def reduction_bytes(spec: CallSpec) -> int:
    """The input read once and the output written once."""
    out = 1
    for s in spec.out_shape:
        out *= s
    return spec.numel * spec.dtype.itemsize + out * spec.out_dtype.itemsize


def reduction_row_size(spec: CallSpec) -> int:
    """How many elements one result element reduces over."""
    return spec.reduced_size


def _row_sample(shape, dtype, device, seed=0, dim=-1, **options):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.randn(shape, generator=gen, dtype=torch.float32) * 4).to(dtype).to(device)
    return (x, dim), options


_ROWS = (TensorArg("input"),)

SOFTMAX = OpDecl(
    name="softmax", parse=_parse_softmax, tensors=_ROWS, out=True, aliases={"axis": "dim"},
    autocast=torch_policy("aten::softmax.int", "fp32_set_opt_dtype"),
    reference=lambda spec: _row_reference(torch.softmax, spec), output=_same_shape, backward=_softmax_backward,
    backward_reads_inputs=False,
    bucket=reduction_bucket, bytes_moved=reduction_bytes, row_size=reduction_row_size, sample=_row_sample,
    doc="``torch.softmax(input, dim, dtype=dtype)``, served by the best backend for the call.")
LOG_SOFTMAX = OpDecl(
    name="log_softmax", parse=_parse_log_softmax, tensors=_ROWS, out=True, aliases={"axis": "dim"},
    autocast=torch_policy("aten::log_softmax.int", "fp32_set_opt_dtype"),
    reference=lambda spec: _row_reference(torch.log_softmax, spec), output=_same_shape,
    backward=_log_softmax_backward, backward_reads_inputs=False, bucket=reduction_bucket, bytes_moved=reduction_bytes,
    row_size=reduction_row_size, sample=_row_sample,
    doc="``torch.log_softmax(input, dim, dtype=dtype)``, served by the best backend for the call.")
LOGSUMEXP = OpDecl(
    name="logsumexp", parse=_parse_logsumexp, tensors=_ROWS, out=True, aliases={"axis": "dim", "keepdims": "keepdim"},
    autocast=torch_policy("aten::logsumexp", "fp32"),
    reference=_logsumexp_reference,
    output=_reduced_shape, backward=_logsumexp_backward, bucket=reduction_bucket, bytes_moved=reduction_bytes,
    row_size=reduction_row_size, sample=_row_sample,
    doc="``torch.logsumexp(input, dim, keepdim)``, served by the best backend for the call.")

BUILTIN = (SOFTMAX, LOG_SOFTMAX, LOGSUMEXP)

for _decl in BUILTIN:
    declare(_decl)
