"""Op functions made from declarations: the hot-path key builder and the miss path, once for every op.

For an op declared as ``softmax(input, dim=-1, dtype=None)`` this generates::

    def softmax(input, dim=-1, dtype=None, *, backend=None):
        try:
            fn = _table[(<key of the call>)]
        except (KeyError, AttributeError, TypeError):
            fn = None
        if fn is None:
            return _miss(...)          # resolve the call once; raise torch's errors
        return fn(input)

An op that declares aliases (``OpDecl.aliases``: ``axis`` for ``dim``) takes them as keyword-only
parameters too; a call giving one has its arguments rebound first (:func:`alias_prelude`).

The key holds each tensor's class, dtype, device, shape and strides (None for an absent optional
one; the class keeps tensor subclasses, and the fake tensors of tracing, off keys resolved for plain
tensors; read in C++ by one call where the native key is built, :mod:`dispatch._native`),
each attribute tagged with its type (``1``, ``1.0`` and ``True`` are equal in a dict, but torch
accepts only the first as a dim; list and tuple attributes are frozen element by element), the
``backend=`` argument, the innermost ``use()`` scope, whether autograd records the call and, for
an op with an autocast policy, whether ``torch.autocast`` is on (:mod:`dispatch._autocast`). The
same key expression is compiled into :func:`OpFunction.key`, which explain and tests use, so the
two can never drift apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from . import _native
from ._opdecl import REQUIRED, UNSET, OpDecl
from ._out import with_out
from ._settings import current_scope

_SEQUENCES = frozenset((list, tuple))


def freeze(value: Any) -> tuple:
    """A hashable, type-tagged stand-in for a list or tuple attribute (``[0, 1]`` -> ``(list, (0, 1), (int, int))``:
    the elements' types apart, so that it takes no Python loop)."""
    return value.__class__, tuple(value), tuple(map(type, value))


def key_expression(decl: OpDecl, inline: bool = False, native: bool = False) -> str:
    """The Python expression of a call's key, over the op's parameter names and ``backend``.

    With ``native``, each tensor's part is ``_tensor_key(t)`` (:mod:`dispatch._native`: the same
    facts, autograd's included, read in C++); otherwise five attribute reads and ``requires_grad``.

    The canonical key (``inline=False``, what resolved calls are stored under) freezes list and
    tuple arguments element by element. The inline expression of the op function skips that
    check for parameters whose default is a scalar (``dim=-1``, ``dtype=None``): for any value
    that is not a list or tuple both expressions give the same key, and a list or tuple there
    never matches a stored key on the inline path (a list raises TypeError, a tuple is keyed
    unfrozen), so such calls take the miss path, which looks up the canonical key first.
    """
    parts: list[str] = []
    tensors = {t.name: t for t in decl.tensors}
    grads: list[str] = []
    for p in decl.parameters:
        n = p.name
        arg = tensors.get(n)
        if arg is None:
            scalar_default = p.default is not p.empty and not isinstance(p.default, (list, tuple))
            if inline and scalar_default:
                parts.append(f"{n}.__class__, {n}")
            else:
                parts.append(f"{n}.__class__, ({n} if {n}.__class__ not in _SEQUENCES else _freeze({n}))")
        elif native:
            parts.append(f"(None if {n} is None else _tensor_key({n}))" if arg.optional else f"_tensor_key({n})")
        elif arg.optional:
            parts.append(f"(None if {n} is None else ({n}.__class__, {n}.dtype, {n}.device, {n}.shape, {n}.stride()))")
            grads.append(f"({n} is not None and {n}.requires_grad)")
        else:
            parts.append(f"{n}.__class__, {n}.dtype, {n}.device, {n}.shape, {n}.stride()")
            grads.append(f"{n}.requires_grad")
    if len(grads) == 1:  # none with the native key, which holds autograd's part
        parts.append(f"{grads[0]} and _grad_enabled()")
    elif grads:  # False unless autograd records the call (the common inference call reads no more)
        parts.append(f"({' or '.join(grads)}) and _grad_enabled() and ({', '.join(grads)},)")
    if decl.autocast and not native:  # (the native key holds autocast's state for the tensor's device)
        parts += [f"_autocast_enabled({device_type!r})" for device_type, _ in decl.autocast]
    parts.append("backend, _current_scope()")
    return ", ".join(parts)


def _required_aliased(decl: OpDecl) -> list[str]:
    """The required parameters that take ``REQUIRED`` as their default in the op function: from the
    first one an alias stands for on (a call may give that one by its alias)."""
    aliased = {name for _, name in decl.aliases}
    required = [p.name for p in decl.parameters if p.default is p.empty]
    first = next((i for i, name in enumerate(required) if name in aliased), len(required))
    return required[first:]


def signature_source(decl: OpDecl) -> tuple[str, dict[str, Any]]:
    """The parameter list of ``dispatch.<op>`` as source (the op's own parameters, then keyword-only
    ``backend=None``, for ops that take it ``out=None``, and the aliases), with the namespace its
    defaults need."""
    parts: list[str] = []
    keyword_only = False
    stand_ins = _required_aliased(decl)
    for p in decl.parameters:
        if p.kind == p.KEYWORD_ONLY and not keyword_only:
            parts.append("*")
            keyword_only = True
        if p.name in stand_ins:
            parts.append(f"{p.name}=_REQUIRED")
        else:
            parts.append(p.name if p.default is p.empty else f"{p.name}=_default_{p.name}")
    parts += ["backend=None"] if keyword_only else ["*", "backend=None"]
    if decl.out:
        parts.append("out=None")
    parts += [f"{alias}=_UNSET" for alias, _ in decl.aliases]
    defaults = {f"_default_{p.name}": p.default for p in decl.parameters if p.default is not p.empty}
    if decl.aliases:
        defaults.update(_REQUIRED=REQUIRED, _UNSET=UNSET, _unalias=decl.unalias)
    return ", ".join(parts), defaults


def alias_prelude(decl: OpDecl) -> str:
    """Source of the first lines of an op function that takes aliases: a call giving one (or
    leaving out a required parameter an alias may stand for) has its parameters rebound by
    ``OpDecl.unalias``; any other call reads two or three names more."""
    if not decl.aliases:
        return ""
    names = [p.name for p in decl.parameters]
    test = " or ".join([f"{alias} is not _UNSET" for alias, _ in decl.aliases]
                       + [f"{name} is _REQUIRED" for name in _required_aliased(decl)])
    values = "{" + ", ".join(f"{n!r}: {n}" for n in names) + "}"
    given = "{" + ", ".join(f"{a!r}: {a}" for a, _ in decl.aliases) + "}"
    return f"\n    if {test}:\n        {', '.join(names)}, = _unalias({values}, {given})"


_TEMPLATE = '''
def key({params}, backend=None):
    return ({key})

def {name}({signature}):{prelude}{out_check}
    try:
        fn = _table[({inline_key})]
    except (KeyError, AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse tensor has no strides
        fn = None
    if fn is None:  # outside the handler, so torch's own errors don't chain a KeyError
        return _miss(key, backend, {values})
    return fn({tensors})
'''


class OpFunction:
    """The callable ``dispatch.<op>``: torch's signature plus a keyword-only ``backend=``."""

    def __init__(self, decl: OpDecl, table: dict, miss: Callable[..., Any]) -> None:
        self.decl = decl
        params = decl.parameters
        signature, defaults = signature_source(decl)
        names = [p.name for p in params]
        tensor_key = _native.tensor_key()
        self.native = tensor_key is not None
        source = _TEMPLATE.format(
            name=decl.name, params=", ".join(names), key=key_expression(decl, native=self.native),
            inline_key=key_expression(decl, inline=True, native=self.native),
            out_check="" if not decl.out else (
                f"\n    if out is not None:\n        return _with_out({decl.name!r}, {decl.name}, "
                "{" + ", ".join(f"{n!r}: {n}" for n in names) + "}, out, backend)"),
            signature=signature, prelude=alias_prelude(decl),
            values="{" + ", ".join(f"{n!r}: {n}" for n in names) + "}", tensors=", ".join(decl.tensor_names))
        namespace: dict[str, Any] = {
            "_table": table, "_miss": lambda key, backend, values: miss(decl, key, backend, values),
            "_SEQUENCES": _SEQUENCES, "_freeze": freeze, "_grad_enabled": torch.is_grad_enabled,
            "_autocast_enabled": torch.is_autocast_enabled,
            "_current_scope": current_scope, "_with_out": with_out, "_tensor_key": tensor_key, **defaults}
        exec(compile(source, f"<dispatch op {decl.name}>", "exec"), namespace)  # noqa: S102 - our own template
        self.function: Callable[..., torch.Tensor] = namespace[decl.name]
        self.key: Callable[..., tuple] = namespace["key"]
        self.key.views_keyed = self.native  # the native key keys negated and conjugated views apart
        self.function.__doc__ = decl.doc or f"``{decl.name}``, served by the best backend for the call."
        self.function.__qualname__ = decl.name
        self.function.__module__ = "dispatch"
        self.function.__signature__ = inspect.Signature(
            [*params, inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY, default=None),
             *([inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None)] if decl.out else [])])
        self.function.__dispatch_op__ = decl

    def call_key(self, values: dict[str, Any], backend: str | None) -> tuple | None:
        """The hot-path key of a call (None when one of its arguments is not hashable)."""
        try:
            key = self.key(**values, backend=backend)
            hash(key)
        except (AttributeError, TypeError, RuntimeError):
            return None
        return key
