"""The normalization ops, declared: rms_norm and layer_norm, with torch.nn.functional's signatures and semantics.

Each op is one :class:`~dispatch.backend.OpDecl` (declared on import, like :mod:`dispatch.ops`).
A call normalizes the trailing ``normalized_shape`` dims of ``input``: its rows (M, everything
before them) are independent, each of N = prod(normalized_shape) elements. Backends read the
call through the functions here: :func:`norm_size`, :func:`norm_rows`, :func:`norm_eps`.
"""

from __future__ import annotations

import numbers
import operator

import torch
import torch.nn.functional as F

from ._autocast import torch_policy
from ._opdecl import OpDecl, TensorArg, _next_pow2, _next_pow4, declare, with_strides
from ._spec import CallSpec
from .strided import rows_stride


# -- argument checks: the op's signature, returning its attributes ------------------------------------

def _shape_of(normalized_shape) -> tuple[int, ...]:
    """``normalized_shape`` as torch reads it: a list, tuple or torch.Size of ints (no bools)."""
    if not isinstance(normalized_shape, (list, tuple, torch.Size)):
        raise TypeError
    out = []
    for d in normalized_shape:
        if isinstance(d, bool):
            raise TypeError
        out.append(operator.index(d))
    return tuple(out)


def _check(input, normalized_shape, params, eps, eps_may_be_none: bool) -> dict:
    """The attributes of a norm call; any argument torch would reject raises (caught by the caller)."""
    if (not isinstance(input, torch.Tensor) or input.layout != torch.strided
            or not (input.dtype.is_floating_point or input.dtype.is_complex)):
        raise TypeError
    shape = _shape_of(normalized_shape)
    if not shape or input.dim() < len(shape) or tuple(input.shape[input.dim() - len(shape):]) != shape:
        raise ValueError
    for p in params:
        if p is None:
            continue
        if (not isinstance(p, torch.Tensor) or p.layout != torch.strided or tuple(p.shape) != shape
                or p.device != input.device):  # any dtype: torch promotes (its reference serves what kernels don't)
            raise ValueError
    if eps is None:
        if not eps_may_be_none:
            raise TypeError
        eps = _compute_epsilon(input.dtype)  # resolved now: the float64 oracle must use this one too
    elif isinstance(eps, numbers.Real) and (isinstance(eps, (int, float)) or hasattr(eps, "__index__")
                                            or type(eps).__module__ == "numpy"):
        # Python's and numpy's ints and floats, bools (not a Fraction: torch refuses it)
        eps = float(eps)
    elif (isinstance(eps, torch.Tensor) and eps.dim() == 0 and not eps.requires_grad
          and not eps.dtype.is_complex):  # torch reads a 0-d tensor as its number
        eps = float(eps)
    else:
        raise TypeError
    return {"normalized_shape": shape, "eps": eps}


def _parse_rms_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
                    eps: float | None = None) -> dict:
    try:
        return _check(input, normalized_shape, (weight,), eps, True)
    except (TypeError, ValueError, IndexError):
        F.rms_norm(input, normalized_shape, weight, eps)  # raises torch's exception for these arguments
        raise TypeError(f"rms_norm(): unsupported arguments: input={_describe(input)}, "
                        f"normalized_shape={normalized_shape!r}, weight={_describe(weight)}, eps={eps!r}; "
                        "dispatch serves strided floating or complex tensors, weight of normalized_shape "
                        "on input's device") from None


def _parse_layer_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
                      bias: torch.Tensor | None = None, eps: float = 1e-05) -> dict:
    try:
        return _check(input, normalized_shape, (weight, bias), eps, False)
    except (TypeError, ValueError, IndexError):
        F.layer_norm(input, normalized_shape, weight, bias, eps)  # raises torch's exception for these arguments
        raise TypeError(f"layer_norm(): unsupported arguments: input={_describe(input)}, "
                        f"normalized_shape={normalized_shape!r}, weight={_describe(weight)}, "
                        f"bias={_describe(bias)}, eps={eps!r}; dispatch serves strided floating or complex "
                        "tensors, weight and bias of normalized_shape on input's device") from None


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"Tensor({list(t.shape)}, {t.dtype}, {t.device}, {t.layout})"
    return repr(t)


# -- what backends read from a norm call ----------------------------------------------------------

def norm_size(spec: CallSpec) -> int:
    """N: the number of elements each row normalizes over (prod of ``normalized_shape``)."""
    n = 1
    for s in spec.normalized_shape:
        n *= s
    return n


def norm_rows(spec: CallSpec) -> int:
    """M: the number of independent rows (the product of the dims before ``normalized_shape``)."""
    m = 1
    for s in spec.shape[:spec.ndim - len(spec.normalized_shape)]:
        m *= s
    return m


def _compute_epsilon(dtype: torch.dtype) -> float:
    """rms_norm's ``eps=None``, as torch reads it: the machine epsilon of the type it computes in
    (float32 for float32/float16/bfloat16/complex64 input, float64 for float64/complex128)."""
    return torch.finfo(torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32).eps


def norm_eps(spec: CallSpec) -> float:
    """The eps a call uses (rms_norm's ``eps=None`` is resolved when the call is parsed: see
    :func:`_compute_epsilon`)."""
    return _compute_epsilon(spec.dtype) if spec.eps is None else spec.eps


def norm_dims_contiguous(spec: CallSpec) -> bool:
    """Whether the normalized dims of the input are dense and row-major (unit stride at the end),
    so a row is N consecutive elements; the rows themselves may have any stride."""
    expected = 1
    k = len(spec.normalized_shape)
    for size, stride in zip(reversed(spec.shape[spec.ndim - k:]), reversed(spec.stride[spec.ndim - k:])):
        if size > 1 and stride != expected:
            return False
        expected *= size
    return True


def norm_row_stride(spec: CallSpec) -> int | None:
    """The stride between consecutive rows if the leading dims collapse to rows without a copy, else None."""
    leading = spec.ndim - len(spec.normalized_shape)
    n = norm_size(spec)
    if all(s == 1 for s in spec.shape[:leading]):
        return n
    return rows_stride(spec.shape[:leading] + (n,), spec.stride[:leading] + (1,))


def norm_layout_refusal(spec: CallSpec) -> str | None:
    """Why a kernel that reads a norm call's rows in place (dense normalized dims, rows one stride
    apart) can't serve ``spec``, or None when it can: the reason a backend's verdict gives."""
    if not norm_dims_contiguous(spec):
        return (f"the normalized dims {list(spec.normalized_shape)} must be dense (row-major, unit stride last); "
                f"got strides {list(spec.stride)}")
    if norm_row_stride(spec) is None:
        return (f"the leading dims (shape {list(spec.shape)}, strides {list(spec.stride)}) don't collapse to rows "
                "with one stride without a copy")
    return None


# -- references, outputs, buckets, bytes, samples -----------------------------------------------------

def _rms_reference(spec: CallSpec):
    shape, eps, out_dtype = list(spec.normalized_shape), spec.eps, spec.out_dtype
    if out_dtype != spec.dtype:  # a float32 result of a half-precision input (autocast_in_kernel): its cast
        def rms_norm_cast(input, weight=None):
            return F.rms_norm(input.to(out_dtype), shape, weight, eps)
        return rms_norm_cast

    def rms_norm(input, weight=None):
        return F.rms_norm(input, shape, weight, eps)
    return rms_norm


def _layer_reference(spec: CallSpec):
    shape, eps, out_dtype = list(spec.normalized_shape), spec.eps, spec.out_dtype
    if out_dtype != spec.dtype:
        def layer_norm_cast(input, weight=None, bias=None):
            return F.layer_norm(input.to(out_dtype), shape, weight, bias, eps)
        return layer_norm_cast

    def layer_norm(input, weight=None, bias=None):
        return F.layer_norm(input, shape, weight, bias, eps)
    return layer_norm


def _same_shape(spec: CallSpec):
    # torch: the result has the input's dtype, whatever the weight's; float32 for a half-precision
    # input read in the kernel under autocast (OpDecl.autocast_in_kernel)
    return spec.shape, spec.out_dtype


def norm_bucket(spec: CallSpec) -> str:
    """``"M<=m,N<=n,<layout>,weight,bias"``: rows M to the next power of 4, normalized size N to the
    next power of 2, the layout (``rows``: dense rows; ``rows_apart``: rows one stride apart, a slice
    of wider rows; else ``strided``), and which of weight/bias are present. Dense rows and rows
    apart have buckets of their own: a kernel that reads dense rows only (TileLang's rows in shared
    memory) may win the one and must not be handed the other."""
    stride = norm_row_stride(spec) if norm_dims_contiguous(spec) else None
    layout = "strided" if stride is None else ("rows" if stride == norm_size(spec) else "rows_apart")
    parts = [f"M<={_next_pow4(norm_rows(spec))}", f"N<={_next_pow2(norm_size(spec))}", layout,
             f"k={len(spec.normalized_shape)}"]
    parts += [t.name for t in spec.tensors[1:] if t.present]
    return ",".join(parts)


def _row_statistics(per_row: int):
    """``OpDecl.saved`` of a norm: one float32 buffer of ``per_row`` statistics a row (rms_norm: its
    rstd; layer_norm: its rstd and mean), the buffer a backend's forward fills for its backward."""
    def saved(spec: CallSpec) -> tuple[tuple[tuple[int, ...], torch.dtype], ...]:
        return (((per_row * norm_rows(spec),), torch.float32),)
    return saved


def norm_bytes(spec: CallSpec) -> int:
    """The input (and weight/bias) read once, the output written once."""
    read = sum(t.numel * t.dtype.itemsize for t in spec.tensors if t.present)
    return read + spec.numel * spec.out_dtype.itemsize


def _sample(shape, dtype, device, seed=0, *, normalized_shape=None, eps=None, weight=True, bias=True,
            layer=False):
    for name, flag in (("weight", weight), ("bias", bias)):
        if not isinstance(flag, bool):
            raise TypeError(f"'{name}' of a sample is True or False: whether the call has one (got {flag!r})")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = tuple(shape)
    if normalized_shape is None:
        normalized_shape = shape[-1:]
    if not (isinstance(normalized_shape, (list, tuple)) and all(isinstance(d, int) for d in normalized_shape)):
        last = shape[-1] if shape else 1
        raise TypeError(f"'normalized_shape' of a sample is a list of ints, the input's last dims (got "
                        f"{normalized_shape!r}); on the command line --arg normalized_shape=[{last}]")
    normalized_shape = tuple(normalized_shape)
    x = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype).to(device)
    w = (1 + 0.5 * torch.randn(normalized_shape, generator=gen)).to(dtype).to(device) if weight else None
    kwargs = {}
    if eps is not None:
        kwargs["eps"] = eps
    if not layer:
        return (x, list(normalized_shape), w), kwargs
    b = (0.5 * torch.randn(normalized_shape, generator=gen)).to(dtype).to(device) if bias else None
    return (x, list(normalized_shape), w, b), kwargs


def _rms_sample(shape, dtype, device, seed=0, *, normalized_shape=None, eps=None, weight=True):
    """N(0, 1) input; weight 1 + N(0, 0.5^2) unless ``weight=False``; normalized_shape: the last dim."""
    return _sample(shape, dtype, device, seed, normalized_shape=normalized_shape, eps=eps, weight=weight)


def _layer_sample(shape, dtype, device, seed=0, *, normalized_shape=None, eps=None, weight=True, bias=True):
    """N(0, 1) input; weight 1 + N(0, 0.5^2), bias N(0, 0.5^2) unless ``weight=False``/``bias=False``."""
    return _sample(shape, dtype, device, seed, normalized_shape=normalized_shape, eps=eps, weight=weight,
                   bias=bias, layer=True)


def _examples(spec: CallSpec, seed: int = 0):
    """N(0, 1) input (any strides of the spec), weight near 1, bias near 0."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    for i, t in enumerate(spec.tensors):
        if not t.present:
            out.append(None)
            continue
        values = torch.randn(t.shape, generator=gen, dtype=torch.float32)
        if i == 1:
            values = 1 + 0.5 * values
        elif i == 2:
            values = 0.5 * values
        out.append(with_strides(values.to(t.dtype).to(t.device), t.stride))
    return tuple(out)


RMS_NORM = OpDecl(
    name="rms_norm", parse=_parse_rms_norm,
    tensors=(TensorArg("input"), TensorArg("weight", optional=True)),
    reference=_rms_reference, output=_same_shape, saved=_row_statistics(1), bucket=norm_bucket,
    bytes_moved=norm_bytes, row_size=norm_size,
    examples=_examples, autocast=torch_policy("aten::rms_norm", "fp32"), autocast_in_kernel=True, sample=_rms_sample,
    doc="``torch.nn.functional.rms_norm(input, normalized_shape, weight, eps)``, served by the best "
        "backend for the call.")
LAYER_NORM = OpDecl(
    name="layer_norm", parse=_parse_layer_norm,
    tensors=(TensorArg("input"), TensorArg("weight", optional=True), TensorArg("bias", optional=True)),
    reference=_layer_reference, output=_same_shape, saved=_row_statistics(2), bucket=norm_bucket,
    bytes_moved=norm_bytes, row_size=norm_size,
    examples=_examples, autocast=torch_policy("aten::layer_norm", "fp32"), autocast_in_kernel=True,
    sample=_layer_sample,
    doc="``torch.nn.functional.layer_norm(input, normalized_shape, weight, bias, eps)``, served by the "
        "best backend for the call.")

NORMS = (RMS_NORM, LAYER_NORM)

for _decl in NORMS:
    declare(_decl)
