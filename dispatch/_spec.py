"""The frozen data that crosses the core/backend boundary: a call's spec, a verdict, a backend's card."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from attrs import field, frozen
from attrs.validators import deep_iterable, optional

from ._card_checks import (LAST, costs, exact_bool, frozen_mapping, frozen_set, kind_of, op_collection, priorities,
                           string_mapping, text)


@frozen
class TensorSpec:
    """One tensor argument of a call: present (with its metadata) or absent (an optional one left out).

    An absent tensor has the dtype its placeholder stands for (so a kernel keyed on dtypes sees
    the same key with and without it), shape ``()`` and stride ``()``.
    """

    name: str = field(validator=kind_of(str))
    dtype: torch.dtype = field(validator=kind_of(torch.dtype))
    shape: tuple[int, ...] = field(default=(), converter=tuple)
    stride: tuple[int, ...] = field(default=(), converter=tuple)
    device: torch.device | None = field(default=None, validator=optional(kind_of(torch.device)))
    present: bool = field(default=True, validator=kind_of(bool))
    requires_grad: bool = field(default=False, validator=kind_of(bool))

    @classmethod
    def of(cls, name: str, t: torch.Tensor, grad_enabled: bool = True) -> TensorSpec:
        """The spec of a present tensor ``t`` passed as argument ``name``."""
        return cls(name, t.dtype, tuple(t.shape), tuple(t.stride()), t.device, True,
                   bool(t.requires_grad and grad_enabled))

    @classmethod
    def absent(cls, name: str, dtype: torch.dtype) -> TensorSpec:
        """An optional tensor left out; ``dtype`` is the dtype its placeholder has."""
        return cls(name, dtype, (), (), None, False, False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def dense(self) -> bool:
        """Row-major and gapless (strides of size-1 dims don't matter), as ``Tensor.is_contiguous()``."""
        return is_dense(self.shape, self.stride)


def contiguous_strides(shape) -> tuple[int, ...]:
    """The strides torch gives a new contiguous tensor of ``shape`` (a size-0 dim counts as 1)."""
    strides, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(int(shape[i]), 1)
    return tuple(strides)


def is_dense(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether ``shape`` with ``stride`` is row-major and gapless (size-1 dims' strides ignored)."""
    expected = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if size > 1 and st != expected:
            return False
        expected *= size
    return True


@frozen
class CallSpec:
    """Everything a backend may look at to decide whether (and how) it serves one call.

    Built once per new call key, never on the hot path: the op's tensor arguments
    (:class:`TensorSpec`, in the declared order, absent optional ones included), its normalised
    attributes (readable as ``spec.<name>``, e.g. ``spec.dims``, ``spec.eps``) and the result's
    shape and dtype. ``dtype``/``shape``/``stride``/``device`` are the first tensor's.
    """

    op: str = field(validator=kind_of(str))
    tensors: tuple[TensorSpec, ...] = field(converter=tuple, validator=deep_iterable(kind_of(TensorSpec)))
    attributes: tuple[tuple[str, Any], ...] = field(converter=lambda a: tuple(sorted(dict(a).items())))
    out_shape: tuple[int, ...] = field(default=(), converter=tuple)
    out_dtype: torch.dtype | None = field(default=None, validator=optional(kind_of(torch.dtype)))

    def __attrs_post_init__(self) -> None:
        if not self.tensors or not self.tensors[0].present:
            raise ValueError(f"'tensors' must start with a present tensor (got {self.tensors!r})")
        if self.out_dtype is None:
            object.__setattr__(self, "out_dtype", self.tensors[0].dtype)
        hash(self.attributes)  # attributes are part of keys: they must be hashable

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            for key, value in object.__getattribute__(self, "attributes"):
                if key == name:
                    return value
            helper = getattr(type(self), name, None)
            if isinstance(helper, property):  # a helper that read an attribute this op lacks: say which
                try:
                    helper.fget(self)
                except AttributeError as exc:
                    raise AttributeError(f"{type(self).__name__}.{name} of {self.op!r}: {exc}") from None
        raise AttributeError(f"{type(self).__name__} of {self.op!r} has no attribute {name!r}")

    @property
    def attrs(self) -> dict[str, Any]:
        """The op's attributes by name (a copy)."""
        return dict(self.attributes)

    def tensor(self, name: str) -> TensorSpec:
        """The tensor argument called ``name``."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"{self.op} has no tensor argument {name!r} (it has {', '.join(t.name for t in self.tensors)})")

    # -- the first tensor, as most kernels see the call ---------------------------------------------
    @property
    def input(self) -> TensorSpec:
        return self.tensors[0]

    @property
    def device(self) -> torch.device:
        return self.tensors[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self.tensors[0].dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.tensors[0].shape

    @property
    def stride(self) -> tuple[int, ...]:
        return self.tensors[0].stride

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return self.tensors[0].numel

    @property
    def requires_grad(self) -> bool:
        """Whether autograd records the call (some tensor requires grad, grad mode on)."""
        return any(t.requires_grad for t in self.tensors)

    # -- reductions (ops with a ``dims`` attribute) -------------------------------------------------
    @property
    def reduced_size(self) -> int:
        """Length of the reduction (N): the product of the reduced dims' sizes (1 for a 0-d input)."""
        n = 1
        for d in self.dims:
            n *= self.shape[d]
        return n

    @property
    def rows(self) -> int:
        """Number of independent reductions (M)."""
        n = 1
        for i, s in enumerate(self.shape):
            if i not in self.dims:
                n *= s
        return n

    @property
    def last_dim_contiguous(self) -> bool:
        """One reduced dim, the last one, with unit stride (rows may have any stride)."""
        return (self.ndim >= 1 and self.dims == (self.ndim - 1,)
                and (self.stride[-1] == 1 or self.shape[-1] <= 1))

    @property
    def reads_rows(self) -> bool:
        """The reduced dims are the last ones and each row of them is one unit-stride run of
        ``reduced_size`` elements: one dim, the last, unit-stride (:attr:`last_dim_contiguous`), or
        several, dense among themselves (dims 1 and 2 of a contiguous (A, B, C), not empty). A
        kernel of rows serves such a call as ``rows`` rows of ``reduced_size``, :attr:`row_stride`
        apart, the reduced dims read as one."""
        if self.last_dim_contiguous:
            return True
        dims = self.dims  # sorted
        if len(dims) < 2 or dims != tuple(range(self.ndim - len(dims), self.ndim)) or self.numel == 0:
            return False
        expected = 1
        for d in reversed(dims):
            if self.shape[d] != 1 and self.stride[d] != expected:
                return False
            expected *= self.shape[d]
        return True

    @property
    def row_stride(self) -> int | None:
        """For a call that :attr:`reads_rows`: the elements between consecutive rows when the kept
        dims collapse to rows one stride apart without a copy, else None
        (:func:`dispatch.backend.rows_stride` of the view whose reduced dims are one)."""
        from .strided import rows_stride

        kept = self.ndim - len(self.dims)
        return rows_stride(self.shape[:kept] + (self.reduced_size,), self.stride[:kept] + (1,))

    def describe(self) -> str:
        parts = []
        for t in self.tensors:
            if t.present:
                parts.append(f"{'x'.join(map(str, t.shape)) or 'scalar'} {dtype_name(t.dtype)}")
        cast = "" if self.out_dtype == self.dtype else f"->{dtype_name(self.out_dtype)}"
        shown = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in self.attributes
                          if k not in ("out_dtype",))
        return f"{self.op}({', '.join(parts)}{cast}{', ' + shown if shown else ''}, {self.device})"


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


@frozen
class Verdict:
    """A backend's answer to "can you serve this call?": never an exception, always a reason.

    ``card`` (a yes only) names the figures of the backend's card that estimate this call's cost
    where its kernel for it is not the one its other figures describe: ``card="tiles"`` makes
    ``"<device type>:<op>:tiles"`` and ``"<device type>:tiles"`` come first
    (:meth:`BackendInfo.estimate_us`)."""

    ok: bool = field(validator=kind_of(bool))
    reason: str = field(default="", validator=kind_of(str))
    card: str = field(default="", validator=kind_of(str))

    @classmethod
    def yes(cls, reason: str = "serves this call", card: str = "") -> Verdict:
        if card and not card.isidentifier():
            raise ValueError(f"'card' must name a card's figures with an identifier like 'tiles' (got {card!r})")
        return cls(True, reason, card)

    @classmethod
    def no(cls, reason: str) -> Verdict:
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"a refusal must say why: 'reason' must be a non-empty str (got {reason!r})")
        return cls(False, reason)

    def __bool__(self) -> bool:
        return self.ok


LONG_ROW = 16384  # a card's ":long" figures: rows longer than this, not strided (BackendInfo.estimate_us)


@frozen
class BackendInfo:
    """A backend's card: what it is and what it implements.

    ``priority`` maps a device type (``"cuda"``, ``"cpu"``) to the backend's rank in the static
    order on that device (higher first, default 0). ``versions`` lists the versions of what the
    kernels depend on (the DSL, say); they enter every cache key.
    """

    name: str = field(validator=text)
    version: str = field(validator=text)
    ops: frozenset[str] = field(converter=frozen_set, validator=[op_collection, deep_iterable(kind_of(str))])
    priority: Mapping[str, int] = field(factory=dict, converter=frozen_mapping, validator=priorities)
    versions: Mapping[str, str] = field(factory=dict, converter=frozen_mapping, validator=string_mapping)
    description: str = field(default="", validator=text)
    available: Verdict = field(factory=Verdict.yes, validator=kind_of(
        Verdict, "a dispatch.Verdict, like Verdict.yes() or Verdict.no('tilelang is not installed')"))
    reference: bool = field(default=False, validator=exact_bool)
    costs: Mapping[str, tuple[float, ...] | str] = field(factory=dict, converter=frozen_mapping, validator=costs)

    @name.validator
    def _check_name(self, _attribute, value: str) -> None:
        if not value.isidentifier():
            raise ValueError(f"'name' must be an identifier like 'triton' (got {value!r})")

    def estimate_us(self, device_type: str, nbytes: int, launch: bool = True, op: str | None = None,
                    grad: bool = False, strided: bool = False, row_size: int = 0, cast: bool = False,
                    card: str = "") -> float | None:
        """What a call moving ``nbytes`` costs on ``device_type`` by the card's ``costs``: launch us
        (when ``launch``) + bytes / GB/s, or + ``row_size`` x the third figure (ns per element of a
        row) when there is one and that is longer: a kernel that gives each row to one block takes
        at least one row's time, however few the rows. None when the card gives no figures for that
        device type; infinity where its figure is ``"last"``. A ``"<device type>:<op>"`` entry
        (``"cuda:rms_norm"``) overrides the device type's for that op, and for a call autograd
        records (``grad``), a ``"<device type>:<op>:grad"`` entry overrides both: a backend whose
        forward is fast but whose backward is not says so there.
        For a call that does not reduce the last dim of a contiguous input (``strided``), a
        ``"<device type>:<op>:strided"`` or ``"<device type>:strided"`` entry comes first. For other
        calls whose rows are longer than :data:`LONG_ROW` elements, a ``"<device type>:<op>:long"``
        entry comes before the op's, and a ``"<device type>:long"`` one before the device type's:
        where a backend leaves one-block-per-row kernels for rows split over blocks, its launch and
        bandwidth change (a strided call's kernels are another matter: its own figures or the plain ones).
        For a call whose output dtype is not its input's (``cast``: ``softmax(x, -1, dtype=torch.float32)``
        of bf16 ``x``), a ``"<device type>:<op>:cast"`` entry comes after the op's long-row one and before
        the op's, and a ``"<device type>:cast"`` one after ``"<device type>:long"`` and before the device
        type's: a backend whose kernels convert slower than they copy says so there. A verdict's
        ``card`` (the call's kernel family, named by the backend) puts ``"<device type>:<op>:<card>"``
        and ``"<device type>:<card>"`` before all of these but the grad entry."""
        keys = [f"{device_type}:{op}:grad"] if grad and op is not None else []
        if card:
            keys += ([f"{device_type}:{op}:{card}"] if op is not None else []) + [f"{device_type}:{card}"]
        if strided:
            keys += ([f"{device_type}:{op}:strided"] if op is not None else []) + [f"{device_type}:strided"]
        long = row_size > LONG_ROW and not strided
        if op is not None:
            keys += ([f"{device_type}:{op}:long"] if long else []) + ([f"{device_type}:{op}:cast"] if cast else [])
            keys += [f"{device_type}:{op}"]
        keys += ([f"{device_type}:long"] if long else []) + ([f"{device_type}:cast"] if cast else []) + [device_type]
        cost = next((self.costs[k] for k in keys if k in self.costs), None)
        if cost is None:
            return None
        if cost == LAST:
            return math.inf
        launch_us, gbps, *row_ns = cost
        return (launch_us if launch else 0.0) + max(nbytes / (gbps * 1e3), row_size * sum(row_ns) / 1e3)

    def rank(self, device_type: str) -> int:
        return self.priority.get(device_type, 0)

