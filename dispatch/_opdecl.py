"""Op declarations: the one place an op is described, and the registry of declared ops.

An :class:`OpDecl` holds the op's torch-compatible signature and argument checks (``parse``), its
tensor arguments (required or optional, with the dtype an absent one stands for), its reference
(torch) implementation and backward, its output rule, shape bucket, bytes moved, tolerance and
example inputs. Everything else (the op function and its hot-path key, the dispatcher, cache keys,
explain, A/B, the CLI and the conformance kit) is derived from it.
"""

from __future__ import annotations

import enum
import inspect
import keyword
import numbers
import pkgutil
import sys
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import torch
from attrs import field, frozen
from attrs.validators import deep_iterable, is_callable
from attrs.validators import optional as maybe

from ._autocast import AUTOCAST_DEVICE_TYPES, AUTOCAST_POLICIES
from ._card_checks import kind_of
from ._spec import CallSpec, TensorSpec
from .tolerance import tolerance as dtype_tolerance

#: ``kernel(*tensors) -> output``: what a backend's ``dispatch_kernel`` and a reference return.
Kernel = Callable[..., torch.Tensor]


@frozen
class TensorArg:
    """A tensor parameter of an op.

    ``optional`` ones may be None. ``absent_dtype`` is the dtype an absent one stands for (the
    dtype of its cached placeholder, so that dtype-keyed kernels see one key with and without
    it); None means the first tensor's dtype. ``differentiable`` says whether autograd flows to it.
    """

    name: str = field(validator=kind_of(str))
    optional: bool = field(default=False, validator=kind_of(bool))
    absent_dtype: torch.dtype | None = field(default=None, validator=maybe(kind_of(torch.dtype)))
    differentiable: bool = field(default=True, validator=kind_of(bool))


def _default_bucket(spec: CallSpec) -> str:
    return "shape=" + "x".join(str(_next_pow2(s)) for s in spec.shape)


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _next_pow4(n: int) -> int:
    p = 1
    while p < n:
        p *= 4
    return p


def rows_bucket(n_rows: int) -> tuple[int, int]:
    """``(fewest, most)`` rows of the bucket ``n_rows`` falls in: the built-in ops key their
    decisions and tunes by rows up to the next power of 4 (``"M<=most"``), so every input of a
    bucket shares one decision; a backend that shapes its tune space by rows uses the bucket's."""
    most = _next_pow4(max(int(n_rows), 1))
    return (most // 4 + 1 if most > 1 else 1), most


def _default_bytes(spec: CallSpec) -> int:
    read = sum(t.numel * t.dtype.itemsize for t in spec.tensors if t.present)
    out = 1
    for s in spec.out_shape:
        out *= s
    return read + out * spec.out_dtype.itemsize


def default_examples(spec: CallSpec, seed: int = 0) -> tuple[torch.Tensor | None, ...]:
    """Deterministic inputs with ``spec``'s shapes, dtypes, device and (where possible) strides:
    N(0, 4^2) for floating tensors (so softmax-like ops have tails), 0/1 for the others."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out: list[torch.Tensor | None] = []
    for t in spec.tensors:
        if not t.present:
            out.append(None)
            continue
        if t.dtype.is_floating_point:
            values = (torch.randn(t.shape, generator=gen, dtype=torch.float32) * 4).to(t.dtype)
        elif t.dtype == torch.bool:
            values = torch.randint(0, 2, t.shape, generator=gen).bool()
        else:
            values = torch.randint(0, 2, t.shape, generator=gen).to(t.dtype)
        out.append(with_strides(values.to(t.device), t.stride))
    return tuple(out)


def with_strides(values: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """A new tensor holding ``values`` laid out with ``stride``, so a kernel sees the layout of the
    call (a negated or conjugated view comes out resolved).

    Where the strides overlap (an expanded view: several indices, one element), the new tensor is
    a view alike of new memory: for ``values`` already laid out so, a copy of the memory it spans
    (so its values are the same); otherwise that memory holds ``values``' elements in order (a
    sample with the layout: where indices share an element, one of their values)."""
    try:
        x = torch.empty_strided(values.shape, stride, dtype=values.dtype, device=values.device)
        x.copy_(values)
        return x
    except RuntimeError:  # overlapping strides: such a tensor can't be written, only viewed
        pass
    span = 1 + sum((n - 1) * s for n, s in zip(values.shape, stride))
    if tuple(values.stride()) == tuple(stride):
        memory = values.as_strided((span,), (1,), values.storage_offset()).clone()
    else:
        flat = values.reshape(-1).clone()
        memory = flat.repeat(-(-span // flat.numel()))[:span]
    return memory.as_strided(values.shape, stride)


def default_sample(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int = 0,
                   **options: Any) -> tuple[tuple, dict[str, Any]]:
    """A call's arguments from a shape and dtype: the first tensor N(0, 4^2), ``options`` as keywords."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.randn(shape, generator=gen, dtype=torch.float32) * 4).to(dtype).to(device)
    return (x,), dict(options)


def _alias_pairs(value: Mapping[str, str] | tuple) -> tuple[tuple[str, str], ...]:
    """``OpDecl.aliases`` as (alias, parameter) pairs."""
    pairs = tuple(value.items() if isinstance(value, Mapping) else value)
    if not all(isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(n, str) for n in pair) for pair in pairs):
        raise TypeError(f"'aliases' must map other keyword names to parameters of 'parse', like "
                        f"{{'axis': 'dim'}} (got {value!r})")
    return pairs


class _Absent(enum.Enum):
    """Defaults in an op function's signature that stand for an argument not given: ``REQUIRED``,
    a required parameter that an alias may stand for; ``UNSET``, an alias (members of an enum, which
    torch.compile reads as constants)."""

    REQUIRED = "required"
    UNSET = "unset"


REQUIRED, UNSET = _Absent.REQUIRED, _Absent.UNSET


def _autocast_pairs(value: Mapping[str, str] | tuple) -> tuple[tuple[str, str], ...]:
    """``OpDecl.autocast`` as sorted (device type, policy) pairs, each checked."""
    pairs = tuple(sorted((value.items() if isinstance(value, Mapping) else value)))
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise TypeError(f"'autocast' must map device types to policies, like {{'cuda': 'fp32'}} (got {value!r})")
        device_type, policy = pair
        if device_type not in AUTOCAST_DEVICE_TYPES:
            raise ValueError(f"'autocast': device type {device_type!r} is not one of "
                             f"{', '.join(map(repr, AUTOCAST_DEVICE_TYPES))}")
        if policy not in AUTOCAST_POLICIES:
            raise ValueError(f"'autocast': policy {policy!r} for {device_type!r} is not one of "
                             f"{', '.join(map(repr, AUTOCAST_POLICIES))}")
    return pairs


def _tensor_args(value: Any) -> tuple:
    """``OpDecl.tensors`` as a tuple; one TensorArg, a name or a non-collection is a TypeError saying how."""
    if isinstance(value, (str, TensorArg)) or not isinstance(value, (tuple, list)):
        raise TypeError(f"'tensors' must be a tuple of TensorArg, like (TensorArg('input'), TensorArg('weight', "
                        f"optional=True)) (got {value!r})")
    return tuple(value)


@frozen(cache_hash=True)  # (a key of the compiled nodes' tables, hashed each call)
class OpDecl:
    """An op, declared once.

    * ``parse``: a function with exactly the op's Python signature (without ``backend=``). It
      checks the arguments as torch does (bad ones raise torch's own exception) and returns the
      op's normalised attributes as a dict (e.g. ``{"dims": (1,), "keepdim": False}``); the key
      ``"out_dtype"``, when present, is the result's dtype (a ``dtype=`` argument).
    * ``tensors``: the parameters of ``parse`` that are tensors, in order (the first is required).
    * ``reference(spec) -> kernel``: torch's implementation for calls matching ``spec``, taking
      the tensors positionally (None for absent ones).
    * ``output(spec) -> (shape, dtype)``: the result's shape and dtype (``spec.out_shape`` is not
      set yet when it is called).
    * ``backward(spec) -> fn`` (optional): ``fn(grad_output, *tensors, output)`` returns the
      gradient of each tensor (a tuple, None where there is none; a tensor for one-tensor ops).
      None means autograd through the reference. ``backward_reads_inputs=False``: it reads the
      output only (softmax's), so a call served with it keeps no input for its backward (it gets
      None for each): less memory, and the input may change after the call.
    * ``saved(spec) -> ((shape, dtype), ...)`` (optional): the buffers a backend's forward may fill
      for its own backward (a norm's per-row statistics; the backward's ``saves``, see
      :func:`dispatch.hookspec.dispatch_backward`), as shapes and dtypes known before any backend
      is chosen. A ``torch.compile``d training step needs them so: its forward node hands them to
      its backward node, which gets them only where the same backend filled them (else the backward
      runs without them). None: a compiled step keeps no such buffers.
    * ``bucket(spec) -> str``: the shape bucket (decisions are cached per bucket).
    * ``bytes_moved(spec) -> int`` (and ``flops``): for GB/s, % of copy and roofline.
    * ``row_size(spec) -> int`` (optional): how many elements one result row reduces over (N of a
      norm, the reduced size of a softmax); a card's third figure charges it (see
      ``BackendInfo.estimate_us``).
    * ``tolerance(dtype) -> (rtol, atol)``; ``examples(spec, seed) -> tensors`` (what tuning and
      races run on); ``sample(shape, dtype, device, seed, **options) -> (args, kwargs)``: a whole
      call from a shape and a dtype (A/B runs and the CLI; ``options`` are the user's arguments,
      e.g. ``dim=0``).
    * ``out``: whether the op takes torch's keyword-only ``out=`` (the result is copied into it,
      with torch's checks and resizing rule).
    * ``autocast``: what ``torch.autocast`` does to the op's calls, by device type (``"cuda"``,
      ``"cpu"``), as torch's own policy for the op: ``"fp32"`` (its half-precision floating tensors
      are cast to float32) or ``"fp32_set_opt_dtype"`` (``dtype=torch.float32`` unless a ``dtype``
      is given). A call made under autocast is then served as that call; a device type without a
      policy takes the call as it is (as torch does for a custom op). See :mod:`dispatch._autocast`.
    * ``aliases``: other keyword names that torch's function also takes for a parameter (not a
      tensor's), e.g. numpy's ``{"axis": "dim", "keepdims": "keepdim"}``, which ``torch.softmax`` and
      ``torch.logsumexp`` accept. A call gives one name or the other; an alias given with its
      parameter's name is a TypeError, as with a positional argument of a required parameter (a
      positional argument equal to the parameter's default can't be told from its absence).
    * ``autocast_in_kernel``: under an ``"fp32"`` policy, the first tensor is handed to the kernel
      in its half precision, with the result's dtype (``spec.out_dtype``) float32, rather than as a
      float32 copy: a kernel that reads it and computes in float32 gives the copy's result (the cast
      is exact) without moving the copy's bytes. The op's ``output`` and ``reference`` honour
      ``spec.out_dtype`` (the reference casts); a backend serves such calls where it says yes to
      them, and where no kernel backend would (or ``output`` ignores ``out_dtype``) the call is
      made on the float32 copy. The other half-precision tensors (a weight) are still cast.
    """

    name: str = field(validator=kind_of(str))
    parse: Callable[..., dict[str, Any]] = field(validator=is_callable())
    tensors: tuple[TensorArg, ...] = field(converter=_tensor_args, validator=deep_iterable(kind_of(TensorArg)))
    reference: Callable[[CallSpec], Kernel] = field(validator=is_callable())
    output: Callable[[CallSpec], tuple[tuple[int, ...], torch.dtype]] = field(validator=is_callable())
    backward: Callable[[CallSpec], Callable[..., Any]] | None = field(default=None, validator=maybe(is_callable()))
    backward_reads_inputs: bool = field(default=True, validator=kind_of(bool))
    saved: Callable[[CallSpec], tuple[tuple[tuple[int, ...], torch.dtype], ...]] | None = field(
        default=None, validator=maybe(is_callable()))
    bucket: Callable[[CallSpec], str] = field(default=_default_bucket, validator=is_callable())
    bytes_moved: Callable[[CallSpec], int] = field(default=_default_bytes, validator=is_callable())
    flops: Callable[[CallSpec], int] | None = field(default=None, validator=maybe(is_callable()))
    row_size: Callable[[CallSpec], int] | None = field(default=None, validator=maybe(is_callable()))
    tolerance: Callable[[torch.dtype], tuple[float, float]] = field(default=dtype_tolerance, validator=is_callable())
    examples: Callable[..., tuple[torch.Tensor | None, ...]] = field(default=default_examples,
                                                                     validator=is_callable())
    sample: Callable[..., tuple[tuple, dict[str, Any]]] = field(default=default_sample, validator=is_callable())
    out: bool = field(default=False, validator=kind_of(bool))
    autocast: tuple[tuple[str, str], ...] = field(default=(), converter=_autocast_pairs)
    autocast_in_kernel: bool = field(default=False, validator=kind_of(bool))
    aliases: tuple[tuple[str, str], ...] = field(default=(), converter=_alias_pairs)
    doc: str = field(default="", validator=kind_of(str))

    @name.validator
    def _check_name(self, _attribute, value: str) -> None:
        if not value.isidentifier() or value.startswith("_") or keyword.iskeyword(value):
            raise ValueError(f"'name' must be a public identifier like 'rms_norm', not a Python keyword "
                             f"(got {value!r})")
        if value.endswith("_backward"):  # torch.compile's node for op X's backward is dispatch::X_backward
            raise ValueError(f"'name' must not end in '_backward' (got {value!r}): such names are kept for "
                             "each op's compiled backward (dispatch::<op>_backward); an op's backward is its "
                             "OpDecl's backward, not an op of its own")

    def __attrs_post_init__(self) -> None:
        params = self.parameters
        names = [p.name for p in params]
        if not self.tensors:
            raise ValueError(f"op {self.name!r}: 'tensors' must name at least one tensor parameter (got none)")
        twice = next((t.name for t in self.tensors if self.tensor_names.count(t.name) > 1), None)
        if twice is not None:
            raise ValueError(f"op {self.name!r}: 'tensors' names {twice!r} more than once")
        if self.out and "out" in names:
            raise ValueError(f"op {self.name!r}: 'parse' has a parameter 'out', and out=True adds torch's "
                             "keyword-only out= itself; leave 'out' out of parse")
        for t in self.tensors:
            if t.name not in names:
                raise ValueError(f"op {self.name!r}: tensor {t.name!r} is not a parameter of 'parse' "
                                 f"({', '.join(names)})")
        if self.tensors[0].optional:
            raise ValueError(f"op {self.name!r}: the first tensor ({self.tensors[0].name!r}) must be required")
        if "backend" in names:
            raise ValueError(f"op {self.name!r}: 'backend' is dispatch's own keyword; rename that parameter")
        if any(policy == "fp32_set_opt_dtype" for _, policy in self.autocast) and "dtype" not in names:
            raise ValueError(f"op {self.name!r}: the autocast policy 'fp32_set_opt_dtype' sets the op's 'dtype' "
                             f"argument, and 'parse' has none ({', '.join(names)}); use 'fp32'")
        if self.autocast_in_kernel and self.autocast and not any(policy == "fp32" for _, policy in self.autocast):
            raise ValueError(f"op {self.name!r}: 'autocast_in_kernel' applies to the autocast policy 'fp32', "
                             f"and the op declares none (autocast={dict(self.autocast)})")
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ValueError(f"op {self.name!r}: 'parse' must have named parameters only (got {p})")
        for alias, name in self.aliases:
            if not alias.isidentifier() or keyword.iskeyword(alias) or alias in (*names, "backend", "out"):
                raise ValueError(f"op {self.name!r}: alias {alias!r} must be an identifier that is not a Python "
                                 f"keyword, a parameter of 'parse' ({', '.join(names)}), 'backend' or 'out'")
            if name not in self.attribute_names:
                raise ValueError(f"op {self.name!r}: alias {alias!r} must stand for a parameter of 'parse' that is "
                                 f"not a tensor, one of {', '.join(self.attribute_names)} (got {name!r})")
        if len({alias for alias, _ in self.aliases}) != len(self.aliases):
            raise ValueError(f"op {self.name!r}: 'aliases' gives a name twice ({self.aliases})")

    @property
    def parameters(self) -> tuple[inspect.Parameter, ...]:
        return tuple(inspect.signature(self.parse).parameters.values())

    @property
    def tensor_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors)

    def sample_call(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, seed: int = 0,
                    **options: Any) -> tuple[tuple, dict[str, Any]]:
        """A whole call from a shape and a dtype (``sample``), for A/B runs, the CLI and the kit."""
        required = [t.name for t in self.tensors if not t.optional]
        if self.sample is default_sample and len(required) > 1:
            raise TypeError(f"{self.name}: the default 'sample' makes the first tensor only, and the op takes "
                            f"{len(required)} ({', '.join(required)}); give its OpDecl a sample(shape, dtype, device, "
                            "seed, **options) returning a whole call (args, kwargs), see docs/writing-an-op.md")
        return self.sample(shape, dtype, device, seed, **options)

    @property
    def attribute_names(self) -> tuple[str, ...]:
        """The parameters that are not tensors (dims, keepdim, dtype=, eps, ...)."""
        tensors = set(self.tensor_names)
        return tuple(p.name for p in self.parameters if p.name not in tensors)

    def canonical(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``kwargs`` with each alias (``aliases``) under its parameter's name; a TypeError where
        both are given."""
        kwargs = dict(kwargs)
        for alias, name in self.aliases:
            if alias in kwargs:
                if name in kwargs:
                    raise TypeError(f"{self.name}(): got both {name!r} and its alias {alias!r}")
                kwargs[name] = kwargs.pop(alias)
        return kwargs

    def bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The arguments of one call by parameter name, defaults applied (torch's TypeError if they don't bind)."""
        try:
            bound = inspect.signature(self.parse).bind(*args, **self.canonical(kwargs))
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def unalias(self, values: dict[str, Any], given: Mapping[str, Any]) -> tuple:
        """The parameters' values in order, each alias in ``given`` (``UNSET`` where not given) put
        under its parameter's name: what an op function called with an alias runs with. ``values``
        holds ``REQUIRED`` for a required parameter the call left out."""
        defaults = {p.name: p.default for p in self.parameters}
        explicit = {n: v for n, v in values.items() if v is not REQUIRED and v is not defaults[n]}
        values.update(self.canonical({**explicit, **{a: v for a, v in given.items() if v is not UNSET}}))
        missing = [name for name, value in values.items() if value is REQUIRED]
        if missing:
            raise TypeError(f"{self.name}() missing required argument {missing[0]!r}")
        return tuple(values.values())

    def spec(self, values: Mapping[str, Any], grad_enabled: bool | None = None,
             out_dtype: torch.dtype | None = None) -> CallSpec:
        """The :class:`CallSpec` of a call with ``values`` by parameter name (checked as torch would);
        ``out_dtype``: the result's dtype where it is not the call's own (``autocast_in_kernel``)."""
        attributes = self.parse(**values)
        if not isinstance(attributes, Mapping):
            raise TypeError(f"op {self.name!r}: OpDecl.parse must return a dict of the op's attributes, like "
                            f"{{'dims': (1,)}} or {{}} (got {attributes!r})")
        if grad_enabled is None:
            grad_enabled = torch.is_grad_enabled()
        first = values[self.tensors[0].name]
        tensors = []
        for arg in self.tensors:
            t = values[arg.name]
            if (t is not None or not arg.optional) and not isinstance(t, torch.Tensor):  # (parse let it through)
                raise TypeError(f"{self.name}(): argument '{arg.name}' must be Tensor, not {type(t).__name__}")
            if t is None:
                tensors.append(TensorSpec.absent(arg.name, arg.absent_dtype or first.dtype))
            else:
                tensors.append(TensorSpec.of(arg.name, t, grad_enabled and arg.differentiable))
        attributes = dict(attributes)
        parsed = attributes.pop("out_dtype", None)
        out_dtype = parsed if out_dtype is None else out_dtype
        base = CallSpec(self.name, tensors, attributes, (), out_dtype)
        result = self.output(base)
        try:
            shape, dtype = result
            shape = tuple(shape)
            ok = isinstance(dtype, torch.dtype)  # (the sizes may be symbolic, or tensors under a tracer)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise TypeError(f"op {self.name!r}: OpDecl.output must return the result's (shape, dtype), like "
                            f"((4, 8), torch.float32) (got {result!r})")
        return CallSpec(self.name, tensors, attributes, shape, dtype)

    def tolerance_of(self, dtype: torch.dtype) -> tuple[float, float]:
        """``tolerance(dtype)``, checked: two numbers >= 0, else a TypeError naming this field."""
        tol = self.tolerance(dtype)
        try:
            rtol, atol = tol
            ok = all(isinstance(v, numbers.Real) and not isinstance(v, bool) and v >= 0 for v in (rtol, atol))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise TypeError(f"op {self.name!r}: OpDecl.tolerance must return (rtol, atol), two numbers >= 0 "
                            f"(got {tol!r} for {dtype})")
        return float(rtol), float(atol)

    def bytes_of(self, spec: CallSpec) -> int:
        """``bytes_moved(spec)``, checked: an int >= 0, else a TypeError naming this field."""
        n = self.bytes_moved(spec)
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise TypeError(f"op {self.name!r}: OpDecl.bytes_moved must return the bytes a call moves, an int >= 0 "
                            f"(got {n!r})")
        return int(n)

    def tensors_of(self, values: Mapping[str, Any]) -> tuple[torch.Tensor | None, ...]:
        return tuple(values[name] for name in self.tensor_names)


def overriders(args) -> tuple:
    """The objects among ``args`` that override torch's functions (``__torch_function__``) and are
    not tensors: torch's override protocol hands them the call (a Tensor subclass is served by
    torch's own op instead, which honours its override)."""
    return tuple(v for v in args if v is not None and not isinstance(v, torch.Tensor)
                 and hasattr(type(v), "__torch_function__"))


# -- the registry of declared ops ----------------------------------------------------------------------

_ops: dict[str, OpDecl] = {}
find: Callable[[str], OpDecl | None] = _ops.get  # the declaration of an op, or None (no view made)
_origins: dict[str, str] = {}
_lock = threading.Lock()
_listeners: list[Callable[[OpDecl], None]] = []


def declare(decl: OpDecl, origin: str = "dispatch") -> OpDecl:
    """Add ``decl`` to the declared ops. Declaring another op under a taken name is an error."""
    if not isinstance(decl, OpDecl):
        raise TypeError(f"'decl' must be a dispatch.backend.OpDecl (got {type(decl).__name__})")
    shadowed = shadowed_by_dispatch(decl.name)
    if shadowed:
        raise ValueError(f"op {decl.name!r} from {origin}: {shadowed}")
    with _lock:
        known = _ops.get(decl.name)
        if known is not None and known is not decl:
            raise ValueError(f"op {decl.name!r} from {origin} is already declared by {_origins[decl.name]}; "
                             "op names must be unique")
        _ops[decl.name] = decl
        _origins[decl.name] = origin
    for listener in _listeners:
        listener(decl)
    return decl


def shadowed_by_dispatch(name: str) -> str | None:
    """Why an op can't be named ``name``, or None: ``dispatch.<name>`` is the package's own (an
    attribute or a submodule), so the op could not be called by that name."""
    package = sys.modules.get(__package__)
    if package is None or name.startswith("_"):
        return None
    if name in vars(package) or name in {m.name for m in pkgutil.iter_modules(package.__path__)}:
        return (f"dispatch.{name} is dispatch's own, so the op could not be called as dispatch.{name}; "
                "op names must not be names of the dispatch package")
    return None


def undeclare(name: str) -> None:
    """Remove the op ``name`` (an op package that is unregistered)."""
    with _lock:
        _ops.pop(name, None)
        _origins.pop(name, None)


def declared() -> Mapping[str, OpDecl]:
    """A read-only view of the declared ops, by name, in declaration order."""
    return MappingProxyType(_ops)


def origin(name: str) -> str:
    """Who declared op ``name``: ``"dispatch"`` or the plugin (its entry point and distribution)."""
    return _origins.get(name, "dispatch")


def get(name: str) -> OpDecl:
    """The declaration of op ``name``; a ValueError listing the declared ops if there is none."""
    decl = _ops.get(name)
    if decl is None:
        raise ValueError(f"'op' must be a declared op, one of {', '.join(_ops) or 'none'} (got {name!r}); "
                         "ops come from dispatch and from plugins (`python -m dispatch backends`)")
    return decl


def spec_of(op: str, *args: Any, **kwargs: Any) -> CallSpec:
    """The :class:`CallSpec` of ``dispatch.<op>(*args, **kwargs)`` (what a backend's hooks see)."""
    if op not in _ops:  # an op of a package: declared once the plugins load
        from . import _plugins

        _plugins.registry()
    decl = get(op)
    return decl.spec(decl.bind(*args, **kwargs))


def on_declare(listener: Callable[[OpDecl], None]) -> None:
    _listeners.append(listener)
