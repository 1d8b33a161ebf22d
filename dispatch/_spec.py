"""The frozen data that crosses the core/backend boundary: a call's spec, a verdict, a backend's card."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from attrs import field, frozen
from attrs.validators import deep_iterable, in_, instance_of

from ._card_checks import exact_bool, frozen_mapping, frozen_set, op_collection, priorities, string_mapping

#: Ops that dispatch knows, in the order the docs list them.
OPS: tuple[str, ...] = ("softmax", "log_softmax", "logsumexp")


@frozen
class CallSpec:
    """Everything a backend may look at to decide whether (and how) it serves one call.

    Built once per new call key, never on the hot path. ``dims`` are the reduced dims,
    normalised to be non-negative; ``out_dtype`` is the dtype of the result.
    """

    op: str = field(validator=in_(OPS))
    device: torch.device = field(validator=instance_of(torch.device))
    dtype: torch.dtype = field(validator=instance_of(torch.dtype))
    shape: tuple[int, ...] = field(converter=tuple)
    stride: tuple[int, ...] = field(converter=tuple)
    dims: tuple[int, ...] = field(converter=tuple, validator=deep_iterable(instance_of(int)))
    out_dtype: torch.dtype = field(validator=instance_of(torch.dtype))
    keepdim: bool = False
    requires_grad: bool = False

    @classmethod
    def of(cls, op: str, x: torch.Tensor, dims: tuple[int, ...], out_dtype: torch.dtype | None,
           keepdim: bool = False) -> CallSpec:
        """The spec of ``op`` on tensor ``x`` reduced over normalised ``dims``."""
        return cls(op=op, device=x.device, dtype=x.dtype, shape=tuple(x.shape), stride=tuple(x.stride()),
                   dims=dims, out_dtype=out_dtype if out_dtype is not None else x.dtype, keepdim=keepdim,
                   requires_grad=bool(x.requires_grad and torch.is_grad_enabled()))

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
    def out_shape(self) -> tuple[int, ...]:
        """Shape of the result: the input's for softmax/log_softmax; for logsumexp the reduced dims
        are dropped (kept as 1 with ``keepdim``)."""
        if self.op != "logsumexp":
            return self.shape
        return tuple(1 if i in self.dims else s for i, s in enumerate(self.shape) if self.keepdim or i not in self.dims)

    @property
    def last_dim_contiguous(self) -> bool:
        """One reduced dim, the last one, with unit stride (rows may have any stride)."""
        return (self.ndim >= 1 and self.dims == (self.ndim - 1,)
                and (self.stride[-1] == 1 or self.shape[-1] <= 1))

    def describe(self) -> str:
        shape = "x".join(map(str, self.shape)) or "scalar"
        cast = "" if self.out_dtype == self.dtype else f"->{dtype_name(self.out_dtype)}"
        return f"{self.op}({shape} {dtype_name(self.dtype)}{cast}, dims={list(self.dims)}, {self.device})"


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


@frozen
class Verdict:
    """A backend's answer to "can you serve this call?": never an exception, always a reason."""

    ok: bool = field(validator=instance_of(bool))
    reason: str = field(default="", validator=instance_of(str))

    @classmethod
    def yes(cls, reason: str = "serves this call") -> Verdict:
        return cls(True, reason)

    @classmethod
    def no(cls, reason: str) -> Verdict:
        if not reason:
            raise ValueError("a refusal must say why: 'reason' must be a non-empty str (got '')")
        return cls(False, reason)

    def __bool__(self) -> bool:
        return self.ok


@frozen
class BackendInfo:
    """A backend's card: what it is and what it implements.

    ``priority`` maps a device type (``"cuda"``, ``"cpu"``) to the backend's rank in the static
    order on that device (higher first, default 0). ``versions`` lists the versions of what the
    kernels depend on (the DSL, say); they enter every cache key.
    """

    name: str = field(validator=instance_of(str))
    version: str = field(validator=instance_of(str))
    ops: frozenset[str] = field(converter=frozen_set, validator=[op_collection, deep_iterable(in_(OPS))])
    priority: Mapping[str, int] = field(factory=dict, converter=frozen_mapping, validator=priorities)
    versions: Mapping[str, str] = field(factory=dict, converter=frozen_mapping, validator=string_mapping)
    description: str = field(default="", validator=instance_of(str))
    available: Verdict = field(factory=Verdict.yes, validator=instance_of(Verdict))
    reference: bool = field(default=False, validator=exact_bool)

    @name.validator
    def _check_name(self, _attribute, value: str) -> None:
        if not value.isidentifier():
            raise ValueError(f"'name' must be an identifier like 'triton' (got {value!r})")

    def rank(self, device_type: str) -> int:
        return self.priority.get(device_type, 0)

