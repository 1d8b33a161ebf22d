"""The conformance cases: one call each, and the default grid.

A case is anything with ``op``, ``id``, ``grad`` and ``arguments(device) -> (args, kwargs)``, the
arguments of one ``dispatch.<op>`` call. :class:`Case` describes calls of the reduction ops
(softmax, log_softmax, logsumexp: dtype, shape, dim, layout, values); :class:`OpCase` any declared
op, from its sample factory.
"""

from __future__ import annotations

import zlib

import torch
from attrs import field, frozen
from attrs.validators import in_, instance_of, optional

import dispatch

#: Memory layouts of a case's input: ``transposed`` is column-major in the last two dims,
#: ``strided`` takes every other column, ``offset`` starts one element into its storage,
#: ``expanded`` repeats one row with stride 0 along the first dim.
LAYOUTS = ("contiguous", "transposed", "strided", "offset", "expanded")
#: Values of a case's input: ``random`` is N(0, 4^2); ``large`` is N(0, 200^2), which overflows
#: ``exp`` unless the maximum is subtracted first; ``special`` plants NaN/+inf/-inf rows
#: (see :func:`plant_special_rows`).
VALUES = ("random", "special", "large", "boundary")
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
#: The ``dtype=`` casts certified for softmax and log_softmax, (input dtype, dtype=).
CASTS = ((torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float64),
         (torch.float32, torch.float16))
_SCALE = {"random": 4.0, "special": 4.0, "large": 200.0, "boundary": 4.0}
#: Block sizes whose edges the ``boundary`` values straddle (every power of two a kernel may tile by).
BLOCK_EDGES = (16, 32, 64, 128, 256, 512, 1024)


def _dim(value: int | tuple[int, ...] | list[int]) -> int | tuple[int, ...]:
    return value if isinstance(value, int) else tuple(value)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@frozen
class Case:
    """One call to certify: ``dispatch.<op>(input, dim, dtype=out_dtype)`` (or ``keepdim=`` for logsumexp).

    ``grad`` also certifies the backend's ``dispatch_backward`` (when it has one) against
    autograd through the reference.
    """

    op: str = field()
    dtype: torch.dtype = field(validator=instance_of(torch.dtype))
    shape: tuple[int, ...] = field(converter=tuple)
    dim: int | tuple[int, ...] = field(default=-1, converter=_dim)

    @op.validator
    def _softmax_family(self, attribute, value):
        if value not in ("softmax", "log_softmax", "logsumexp"):
            raise ValueError(f"Case(op={value!r}): Case covers softmax, log_softmax and logsumexp; for {value!r} use "
                             "dispatch_pytest.cases.OpCase(op, dtype, shape, options, grad)")
    layout: str = field(default="contiguous", validator=in_(LAYOUTS))
    values: str = field(default="random", validator=in_(VALUES))
    out_dtype: torch.dtype | None = field(default=None, validator=optional(instance_of(torch.dtype)))
    keepdim: bool = field(default=False, validator=instance_of(bool))
    grad: bool = field(default=False, validator=instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if self.out_dtype is not None and self.op == "logsumexp":
            raise ValueError(f"'out_dtype' must be None for logsumexp, which has no dtype= (got {self.out_dtype})")
        if self.keepdim and self.op != "logsumexp":
            raise ValueError(f"'keepdim' must be False for {self.op}, which has no keepdim=")
        if not isinstance(self.dim, int) and self.op != "logsumexp":
            raise ValueError(f"'dim' must be an int for {self.op} (got {self.dim!r})")
        if self.layout in ("transposed",) and len(self.shape) < 2:
            raise ValueError(f"layout 'transposed' needs at least 2 dims (got shape {self.shape})")
        if self.layout in ("strided", "offset", "expanded") and (len(self.shape) < 1 or self.shape[0] < 1):
            raise ValueError(f"layout {self.layout!r} needs at least 1 dim of size >= 1 (got shape {self.shape})")
        if self.grad and self.layout != "contiguous":
            raise ValueError(f"'grad' cases must be contiguous (got layout {self.layout!r})")
        if self.values == "boundary" and not _fits_boundary_rows(self.shape, self.dim):
            raise ValueError("values 'boundary' need a 2-d shape with >= 8 rows of > 1024 along 'dim' "
                             f"(got shape {self.shape}, dim {self.dim!r})")
        if self.values == "special" and not _fits_special_rows(self.shape, self.dim):
            raise ValueError("values 'special' need a 2-d shape with >= 10 rows of >= 4 along 'dim' "
                             f"(got shape {self.shape}, dim {self.dim!r})")

    @property
    def id(self) -> str:
        """A readable, stable name: ``softmax-float16-8x128-dim-1-transposed``."""
        shape = "x".join(map(str, self.shape)) or "scalar"
        dim = str(self.dim) if isinstance(self.dim, int) else ",".join(map(str, self.dim))
        parts = [self.op, _dtype_name(self.dtype), shape, f"dim{dim}"]
        if self.out_dtype is not None:
            parts.append(f"to-{_dtype_name(self.out_dtype)}")
        if self.keepdim:
            parts.append("keepdim")
        parts += [p for p in (self.layout, self.values) if p not in ("contiguous", "random")]
        if self.grad:
            parts.append("grad")
        return "-".join(parts)

    def make_input(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The case's input, the same on every run: seeded by :attr:`id`, laid out as :attr:`layout`."""
        gen = torch.Generator().manual_seed(zlib.crc32(self.id.encode()))
        base = torch.randn(self.shape, generator=gen, dtype=torch.float64) * _SCALE[self.values]
        if self.values == "special":
            plant_special_rows(base.movedim(self.dim, -1))
        if self.values == "boundary":
            plant_boundary_rows(base.movedim(self.dim, -1))
        x = lay_out(base.to(device=device, dtype=self.dtype), self.layout)
        if self.grad:
            x.requires_grad_(True)
        return x

    def arguments(self, device: torch.device | str = "cpu") -> tuple[tuple, dict]:
        """The call's arguments: ``(input, dim), {"dtype": ...}`` (``keepdim`` for logsumexp)."""
        x = self.make_input(device)
        if self.op == "logsumexp":
            return (x, self.dim, self.keepdim), {}
        return (x, self.dim), {"dtype": self.out_dtype}

    def call(self, fn, x: torch.Tensor, **kwargs) -> torch.Tensor:
        """``fn(x, dim, ...)`` with this case's arguments (``fn`` is a dispatch or torch op)."""
        if self.op == "logsumexp":
            return fn(x, self.dim, self.keepdim, **kwargs)
        return fn(x, self.dim, dtype=self.out_dtype, **kwargs)


@frozen
class OpCase:
    """One call of any declared op, made by its sample factory: ``sample(shape, dtype, device, seed, **options)``."""

    op: str = field(validator=instance_of(str))
    dtype: torch.dtype = field(validator=instance_of(torch.dtype))
    shape: tuple[int, ...] = field(converter=tuple)
    options: tuple[tuple[str, object], ...] = field(default=(), converter=lambda o: tuple(sorted(dict(o).items())))
    grad: bool = field(default=False, validator=instance_of(bool))
    # the call as torch.autocast hands it to an op that reads its half-precision input in the kernel
    # (OpDecl.autocast_in_kernel): the input of ``dtype``, the other tensors and the result float32
    autocast: bool = field(default=False, validator=instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if self.autocast and self.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"'autocast' cases read a float16 or bfloat16 input (got dtype {self.dtype})")

    @property
    def id(self) -> str:
        shape = "x".join(map(str, self.shape)) or "scalar"
        parts = [self.op, _dtype_name(self.dtype), shape,
                 *("-".join(f"no{name}" for name in v) if k == "absent" else f"{k}{v}" for k, v in self.options)]
        return "-".join(parts + (["autocast"] if self.autocast else []) + (["grad"] if self.grad else []))

    @property
    def out_dtype(self) -> torch.dtype | None:
        """The result's dtype where it is not the call's own (``OpDecl.spec``'s ``out_dtype``)."""
        return torch.float32 if self.autocast else None

    def arguments(self, device: torch.device | str = "cpu") -> tuple[tuple, dict]:
        """The sample call's arguments; option ``absent``: optional tensors passed as None instead."""
        decl = dispatch.declared_ops()[self.op]
        options = dict(self.options)
        absent = options.pop("absent", ())
        args, kwargs = decl.sample_call(self.shape, self.dtype, torch.device(device), zlib.crc32(self.id.encode()),
                                        **options)
        if absent:
            values = decl.bind(*args, **kwargs)
            args, kwargs = (), {**values, **{name: None for name in absent}}
        if self.autocast:  # the other floating tensors as autocast casts them
            values = decl.bind(*args, **kwargs)
            rest = [t.name for t in decl.tensors[1:]]
            args, kwargs = (), {k: v.float() if k in rest and isinstance(v, torch.Tensor) and v.dtype.is_floating_point
                                else v for k, v in values.items()}
        if self.grad:
            args = tuple(a.requires_grad_(True) if isinstance(a, torch.Tensor) and a.dtype.is_floating_point
                         else a for a in args)
            kwargs = {k: v.requires_grad_(True) if isinstance(v, torch.Tensor) and v.dtype.is_floating_point
                      else v for k, v in kwargs.items()}
        return args, kwargs


def sample_cases(op: str) -> tuple[OpCase, ...]:
    """The grid for an op declared outside the reduction family: every float dtype on a few shapes
    (rows, odd sizes, a 3-d input, empty rows, one long row), and backward in float32/float64
    (and on rows of 9000, in float32: a backward may keep buffers from the forward there);
    then each optional tensor absent (and all of them, where there are several), forward in
    float32 and bfloat16 and backward in float32; for an op that reads a half-precision input in
    the kernel under autocast, that call (bfloat16 and float16, forward; bfloat16, backward)."""
    cases = [OpCase(op, dtype, shape) for dtype in DTYPES
             for shape in ((8, 128), (7, 33), (3, 5, 17), (4, 0), (1, 4099))]
    cases += [OpCase(op, dtype, (8, 128), grad=True) for dtype in (torch.float32, torch.float64)]
    cases.append(OpCase(op, torch.float32, (2, 9000), grad=True))  # long rows: where a backward may use saves
    optional = tuple(t.name for t in dispatch.declared_ops()[op].tensors if t.optional)
    for absent in [(name,) for name in optional] + ([optional] if len(optional) > 1 else []):  # each, then all
        cases += [OpCase(op, dtype, (7, 33), options={"absent": absent}) for dtype in (torch.float32, torch.bfloat16)]
        cases.append(OpCase(op, torch.float32, (8, 128), options={"absent": absent}, grad=True))
    if dispatch.declared_ops()[op].autocast_in_kernel:  # half-precision input, float32 result
        cases += [OpCase(op, dtype, (7, 33), autocast=True) for dtype in (torch.bfloat16, torch.float16)]
        cases.append(OpCase(op, torch.bfloat16, (8, 128), autocast=True, grad=True))
    return tuple(cases)


def _fits_boundary_rows(shape: tuple[int, ...], dim: int | tuple[int, ...]) -> bool:
    if len(shape) != 2 or not isinstance(dim, int) or not -2 <= dim < 2:
        return False
    return shape[dim] > BLOCK_EDGES[-1] and shape[(dim + 1) % 2] >= 8


def plant_boundary_rows(rows: torch.Tensor) -> None:
    """Write -inf runs and NaN/+inf at block edges into the first 8 rows of a 2-d ``rows`` (in place).

    0: the first 100 values -inf (a run longer than a small block); 1: all -inf; 2: -inf up to the
    last value; 3: -inf in every block but the last; 4: NaN at each edge of :data:`BLOCK_EDGES`
    (the last value of a block); 5: +inf at each edge's first value of the next block; 6: +inf
    at the last value of the row; 7: -inf over [64, 1025), the max after it.
    """
    inf, nan = float("inf"), float("nan")
    n = rows.shape[1]
    rows[0, :100] = -inf
    rows[1, :] = -inf
    rows[2, : n - 1] = -inf
    rows[3, : BLOCK_EDGES[-1]] = -inf
    for edge in BLOCK_EDGES:
        rows[4, edge - 1] = nan
        rows[5, edge] = inf
    rows[6, n - 1] = inf
    rows[7, 64:1025] = -inf
    rows[7, 1025] = 50.0


def _fits_special_rows(shape: tuple[int, ...], dim: int | tuple[int, ...]) -> bool:
    if len(shape) != 2 or not isinstance(dim, int) or not -2 <= dim < 2:
        return False
    along, across = shape[dim], shape[(dim + 1) % 2]  # the reduced dim, and the other one
    return along >= 4 and across >= 10


def plant_special_rows(rows: torch.Tensor) -> None:
    """Write NaN/inf patterns into the first 9 rows of a 2-d ``rows`` (in place; a view is fine).

    0: a NaN; 1: one +inf; 2: all -inf; 3: two +inf; 4: some -inf; 5: +inf and -inf; 6: NaN and
    +inf; 7: -inf except one value; 8: finite but far below zero. The other rows stay ordinary.
    """
    inf, nan = float("inf"), float("nan")
    rows[0, 1] = nan
    rows[1, 2] = inf
    rows[2, :] = -inf
    rows[3, 0] = rows[3, 3] = inf
    rows[4, 0] = rows[4, 2] = -inf
    rows[5, 1], rows[5, 2] = inf, -inf
    rows[6, 0], rows[6, 3] = nan, inf
    rows[7, :] = -inf
    rows[7, 1] = 0.5
    rows[8, :] -= 1000.0


def lay_out(x: torch.Tensor, layout: str) -> torch.Tensor:
    """``x``'s values in ``layout``'s memory layout (see :data:`LAYOUTS`)."""
    if layout == "contiguous":
        return x.contiguous()
    if layout == "transposed":
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "strided":
        wide = x.new_zeros(*x.shape[:-1], 2 * x.shape[-1])
        wide[..., ::2] = x
        return wide[..., ::2]
    if layout == "offset":
        flat = x.new_zeros(x.numel() + 1)
        flat[1:] = x.reshape(-1)
        return flat[1:].view(x.shape)
    if layout == "expanded":
        return x.narrow(0, 0, 1).expand(x.shape)
    raise ValueError(f"'layout' must be one of {', '.join(LAYOUTS)} (got {layout!r})")


def default_cases(ops=None) -> tuple[Case | OpCase, ...]:
    """The grid :func:`~dispatch_pytest.conformance.certify` runs unless given other cases
    (``ops``: the op names to cover; default every declared op).

    Per reduction op and dtype: row and odd shapes, a middle and a first dim, 1-d and 0-d inputs,
    every layout, empty rows and no rows, long rows, NaN/inf rows along the last and the first dim,
    large values. Then logsumexp's multi-dim and keepdim forms, softmax's ``dtype=`` casts, and
    backward checks. Every other declared op: :func:`sample_cases`.
    """
    names = tuple(dispatch.declared_ops()) if ops is None else tuple(ops)
    reductions = [op for op in ("softmax", "log_softmax", "logsumexp") if op in names]
    cases: list[Case | OpCase] = []
    for op in names:
        if op not in reductions:
            cases += sample_cases(op)
    for op in reductions:
        for dtype in DTYPES:
            cases += _grid(op, dtype)
        for dtype in (torch.float32, torch.float64):
            cases.append(Case(op, dtype, (8, 128), grad=True))
            cases.append(Case(op, dtype, (3, 5, 17), 1, grad=True))
    for op in [o for o in ("softmax", "log_softmax") if o in reductions]:
        for src, dst in CASTS:
            cases.append(Case(op, src, (8, 128), out_dtype=dst))
        cases.append(Case(op, torch.float16, (10, 37), out_dtype=torch.float32, values="special"))
    return tuple(cases)


def _grid(op: str, dtype: torch.dtype) -> list[Case]:
    """The cases of one op and dtype in :func:`default_cases`."""
    def case(shape, dim=-1, **kwargs) -> Case:
        return Case(op, dtype, shape, dim, **kwargs)

    cases = [case((8, 128)), case((3, 5, 17)), case((3, 5, 17), 1), case((16, 33), 0), case((7,), 0), case((), 0)]
    cases += [case((6, 40), layout=layout) for layout in LAYOUTS[1:]]
    cases += [case((4, 0)), case((0, 16)), case((2, 16387)), case((1, 65536))]
    cases += [case((10, 37), values="special"), case((37, 10), 0, values="special"), case((4, 64), values="large")]
    cases += [case((8, 1100), values="boundary")]
    if op == "logsumexp":
        cases += [case((3, 5, 17), (0, 1)), case((8, 128), keepdim=True), case((4, 0), keepdim=True)]
    return cases
