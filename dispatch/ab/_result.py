"""What an A/B run produces: frozen results per backend and input, and the arithmetic behind GB/s."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from attrs import Factory, field, frozen
from attrs.validators import ge, in_, instance_of, optional

from .._spec import dtype_name
from ..autotune.space import Config

#: pass: measured and within the dtype's tolerance of the fp64 reference; fail: measured (or at
#: least run) but outside it; error: raised; refused: the backend said it cannot serve the case.
STATUSES = ("pass", "fail", "error", "refused")

#: How the backend was run: through the public op (what users get), or, for a backend that
#: dispatch would not serve because it failed validation, through its kernel directly.
VIAS = ("op", "kernel", "")


def as_dtype(value: torch.dtype | str) -> torch.dtype:
    """``torch.bfloat16`` or ``"bfloat16"`` -> ``torch.bfloat16``."""
    if isinstance(value, torch.dtype):
        return value
    dtype = getattr(torch, str(value).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"'dtype' must be a torch dtype or its name like 'bfloat16' (got {value!r})")
    return dtype


def as_shape(value: tuple[int, ...] | list[int] | str) -> tuple[int, ...]:
    """``(64, 256)``, ``[64, 256]`` or ``"64x256"`` -> ``(64, 256)``."""
    if isinstance(value, str):
        try:
            shape = tuple(int(s) for s in value.lower().split("x")) if value not in ("", "scalar") else ()
        except ValueError:
            raise ValueError(f"'shape' must look like '64x256' (got {value!r})") from None
    else:
        try:
            shape = tuple(value)
        except TypeError:
            raise TypeError(f"'shape' must be a shape like (64, 256) or '64x256' (got {value!r})") from None
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"'shape' must be whole sizes >= 0, like (64, 256) or '64x256' (got {value!r})")
    return shape


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _as_config(value: Config | Mapping | None) -> Config | None:
    return None if value is None else Config.of(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def bytes_moved(op: str, shape: tuple[int, ...], dtype: torch.dtype, dim: int = -1,
                out_dtype: torch.dtype | None = None, keepdim: bool = False, **options: Any) -> int:
    """Bytes an ideal kernel moves for ``op`` on an input of ``shape`` (the op's declared rule; for
    the built-in ops the input read once and the output written once, a norm's weight and bias
    read once too). ``dim``, ``out_dtype`` and ``keepdim`` count for the ops that take them;
    ``options`` are the op's other arguments as an A/B case takes them (``normalized_shape=``,
    ``weight=False``...)."""
    from .. import _opdecl

    from ._run import make_call

    decl = _opdecl.get(op)
    given = {"dim": dim, "dtype": out_dtype, "keepdim": keepdim}
    options = {**{k: v for k, v in given.items() if k in decl.attribute_names}, **options}
    args, kwargs = make_call(op, tuple(shape), dtype, torch.device("meta"), 0, **options)
    return decl.bytes_of(decl.spec(decl.bind(*args, **kwargs), grad_enabled=False))


def gbps(nbytes: int, median_us: float | None) -> float | None:
    """``nbytes`` moved in ``median_us`` microseconds, in GB/s (1e9 bytes a second)."""
    if median_us is None or median_us <= 0:
        return None
    return nbytes / (median_us * 1e-6) / 1e9


@frozen
class CopyBandwidth:
    """The device's copy bandwidth, measured in the same run: ``dst.copy_(src)`` of a large buffer.

    ``gbps`` counts bytes read plus bytes written (2 x ``nbytes``), as the op's GB/s does.
    """

    device: str
    nbytes: int = field(validator=ge(0))
    median_us: float = field(converter=float, validator=ge(0.0))
    spread_us: float = field(default=0.0, converter=float)
    reps: int = 0

    @property
    def gbps(self) -> float | None:
        return gbps(2 * self.nbytes, self.median_us)


@frozen
class BackendResult:
    """One backend on one input: how it ran, how fast, how right.

    ``median_us``/``spread_us`` are the median and inter-quartile range of the timed calls;
    ``gbps`` is ``bytes_moved / median``; ``pct_of_copy`` is ``gbps`` against the copy bandwidth
    of the same run; ``speedup`` is the baseline's median over this one's (>1: faster).
    Errors are against an fp64 reference; ``rtol``/``atol`` are the output dtype's tolerance.
    """

    op: str = field(validator=instance_of(str))
    shape: tuple[int, ...] = field(converter=as_shape)
    dtype: torch.dtype = field(converter=as_dtype)
    backend: str = field(validator=instance_of(str))
    status: str = field(validator=in_(STATUSES))
    reason: str = ""
    dim: int = -1
    out_dtype: torch.dtype = field(default=Factory(lambda self: self.dtype, takes_self=True), converter=as_dtype)
    via: str = field(default="", validator=in_(VIAS))
    config: Config | None = field(default=None, converter=_as_config)
    config_source: str = ""
    median_us: float | None = field(default=None, converter=_opt_float)
    spread_us: float | None = field(default=None, converter=_opt_float)
    reps: int = 0
    bytes_moved: int = 0
    gbps: float | None = field(default=None, converter=_opt_float)
    pct_of_copy: float | None = field(default=None, converter=_opt_float)
    speedup: float | None = field(default=None, converter=_opt_float)
    max_abs_err: float | None = field(default=None, converter=_opt_float)
    max_rel_err: float | None = field(default=None, converter=_opt_float)
    rtol: float | None = field(default=None, converter=_opt_float)
    atol: float | None = field(default=None, converter=_opt_float)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def measured(self) -> bool:
        return self.median_us is not None

    row_length: int = field(default=Factory(lambda self: self.shape[self.dim] if self.shape else 1, takes_self=True),
                            converter=int)  # N: what one result row reduces over (the op's row_size; else dim's size)

    @property
    def rows(self) -> int:
        """Independent reductions (M): the elements over ``row_length``."""
        n = 1
        for s in self.shape:
            n *= s
        return n // self.row_length if self.row_length else n

    @property
    def case(self) -> tuple[str, tuple[int, ...], torch.dtype]:
        return (self.op, self.shape, self.dtype)

    def describe(self) -> str:
        return f"{self.op}({shape_text(self.shape)} {dtype_name(self.dtype)}) on {self.backend}"

    def as_row(self) -> dict[str, Any]:
        """A flat, JSON-ready dict (shape as ``"64x256"``, dtypes by name, config as a dict)."""
        return {
            "op": self.op, "shape": shape_text(self.shape), "rows": self.rows, "row_length": self.row_length,
            "dtype": dtype_name(self.dtype), "out_dtype": dtype_name(self.out_dtype), "dim": self.dim,
            "backend": self.backend, "status": self.status, "via": self.via,
            "config": None if self.config is None else self.config.as_dict(), "config_source": self.config_source,
            "median_us": self.median_us, "spread_us": self.spread_us, "reps": self.reps,
            "bytes_moved": self.bytes_moved, "gbps": self.gbps, "pct_of_copy": self.pct_of_copy,
            "speedup": self.speedup, "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
            "rtol": self.rtol, "atol": self.atol, "reason": self.reason,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> BackendResult:
        names = {a.name for a in cls.__attrs_attrs__}
        return cls(**{k: v for k, v in row.items() if k in names})


def _results(value) -> tuple[BackendResult, ...]:
    return tuple(value)


def _frozen_mapping(value: Mapping) -> Mapping:
    return MappingProxyType(dict(value))


SCHEMA = 1


@frozen
class Comparison:
    """An A/B run: every backend on every (op, shape, dtype), with the run's copy bandwidth.

    Read it as ``results`` (one :class:`BackendResult` per backend and input), render it with
    :meth:`table`, :meth:`to_markdown`, write it with :meth:`to_json`, :meth:`to_csv`, draw it
    with :meth:`plot`; :func:`dispatch.ab.load` reads a JSON file back.
    """

    ops: tuple[str, ...] = field(converter=tuple)
    device: str
    device_name: str
    copy: CopyBandwidth = field(validator=instance_of(CopyBandwidth))
    results: tuple[BackendResult, ...] = field(converter=_results)
    baseline: str | None = field(default=None, validator=optional(instance_of(str)))
    warmup: int = 25
    rep: int = 50
    tuned: bool = False
    flush_l2: bool = True
    versions: Mapping[str, str] = field(factory=dict, converter=_frozen_mapping)
    options: Mapping[str, Any] = field(factory=dict, converter=_frozen_mapping)  # the ops' other arguments

    # -- reading ---------------------------------------------------------------------------------

    @property
    def ok(self) -> bool:
        """No backend failed or raised (refusals are fine: another backend serves those calls)."""
        return all(r.status in ("pass", "refused") for r in self.results)

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.backend for r in self.results))

    @property
    def cases(self) -> tuple[tuple[str, tuple[int, ...], torch.dtype], ...]:
        return tuple(dict.fromkeys(r.case for r in self.results))

    def result(self, backend: str, shape: tuple[int, ...] | str, dtype: torch.dtype | str,
               op: str | None = None) -> BackendResult:
        """The result of ``backend`` on ``shape``/``dtype`` (and ``op``, when the run has several)."""
        shape, dtype = as_shape(shape), as_dtype(dtype)
        for r in self.results:
            if r.backend == backend and r.shape == shape and r.dtype == dtype and (op is None or r.op == op):
                return r
        raise KeyError(f"no result for {backend} on {shape_text(shape)} {dtype_name(dtype)}"
                       + (f" ({op})" if op else "") + f"; backends: {', '.join(self.backends)}")

    def rows(self) -> list[dict[str, Any]]:
        """Every result as a flat dict, with the device and the copy bandwidth on each row."""
        extra = {"device": self.device, "device_name": self.device_name, "copy_gbps": self.copy.gbps,
                 "options": dict(self.options)}
        return [{**r.as_row(), **extra} for r in self.results]

    # -- writing (see _report and _plot) ---------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "ops": list(self.ops), "device": self.device, "device_name": self.device_name,
            "baseline": self.baseline, "warmup": self.warmup, "rep": self.rep, "tuned": self.tuned,
            "flush_l2": self.flush_l2, "versions": dict(self.versions), "options": dict(self.options),
            "copy": {"device": self.copy.device, "nbytes": self.copy.nbytes, "median_us": self.copy.median_us,
                     "spread_us": self.copy.spread_us, "reps": self.copy.reps, "gbps": self.copy.gbps},
            "results": [r.as_row() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a dispatch A/B result of schema {SCHEMA} "
                             f"(got schema {data.get('schema') if isinstance(data, Mapping) else data!r})")
        copy = {k: v for k, v in data["copy"].items() if k != "gbps"}
        return cls(ops=data["ops"], device=data["device"], device_name=data["device_name"],
                   copy=CopyBandwidth(**copy), results=[BackendResult.from_row(r) for r in data["results"]],
                   baseline=data.get("baseline"), warmup=data.get("warmup", 25), rep=data.get("rep", 50),
                   tuned=data.get("tuned", False), flush_l2=data.get("flush_l2", True),
                   versions=data.get("versions", {}), options=data.get("options", {}))

    def to_json(self, path: str | Path | None = None) -> str:
        """The run as JSON text (schema 1); written to ``path`` when given."""
        from ._report import write_json

        return write_json(self, path)

    def to_csv(self, path: str | Path | None = None) -> str:
        """One CSV row per backend and input; written to ``path`` when given."""
        from ._report import write_csv

        return write_csv(self, path)

    def to_markdown(self, path: str | Path | None = None) -> str:
        """A markdown table with a header line naming the device and copy bandwidth."""
        from ._report import write_markdown

        return write_markdown(self, path)

    def table(self):
        """A :class:`rich.table.Table` of the run (print it with a rich console)."""
        from ._report import rich_table

        return rich_table(self)

    def plot(self, path: str | Path) -> Path:
        """Draw GB/s against row length per backend, one subplot per (op, dtype), with the copy
        bandwidth as the ceiling; write a PNG (or any format matplotlib knows by suffix)."""
        from ._plot import plot_comparison

        return plot_comparison(self, path)
