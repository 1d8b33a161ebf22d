"""torch.compile support: every declared op is also a ``torch.library`` custom op, which Dynamo sees
in place of the op function (one opaque node per call), while eager calls keep their hot path.

How: for op ``name`` this defines ``dispatch::name(Tensor input, Tensor? mask, ..., str args) ->
Tensor``, whose ``args`` is a JSON text of the call's other arguments (``dim``, ``dtype``, ``backend``...,
each tagged with its type: :mod:`dispatch._compile_args`), and tells Dynamo
(``torch._dynamo.substitute_in_graph``) to trace a small stand-in that calls that custom op instead
of the op function. At run time the custom op calls the op function itself, so a compiled graph
dispatches exactly as eager does: same decision per key, same cache, same explain, the settings and
``use()`` scope in force when it runs. Its fake (meta) implementation runs the op's reference on
fake tensors (shapes, dtypes and strides as torch's, symbolic sizes included). Its backward, and a
training step's forward node of an op that declares ``saved`` buffers, are custom ops of their own in
``dispatch_training`` (:mod:`dispatch._compile_training`), so a compiled training step keeps dispatch's
backward kernels too.

What a compiled graph pays per call on top of the eager call is one trip through torch's
dispatcher into one Python kernel: the op's own autograd kernel (made once per op, from its
declaration) calls the op function straight away when no input needs a gradient and the tensors
are plain, each ``args`` text being decoded once; only fake, functional and subclassed tensors,
dispatch modes and calls that autograd records go on through the dispatcher (``torch.library``'s
``custom_op`` wrappers cost several times more).

Importing ``torch._dynamo`` costs more than a second, so nothing here runs until it is imported:
a post-import hook registers every op then (and any op declared later, at declaration).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Any

import torch

from . import _autocast, _opdecl
from ._compile_args import _concrete, decode, encode
from ._out import with_out

_NAMESPACE = "dispatch"
_registered: dict[str, Any] = {}
_substituted: dict[str, tuple[Any, str]] = {}  # name -> (the op function its stand-in replaces, the op's schema)
_lock = threading.RLock()
_lib: torch.library.Library | None = None
_MAX_ENCODINGS = 1024  # decoded ``args`` texts kept per op


# -- registration ----------------------------------------------------------------------------------

def _schema(decl: _opdecl.OpDecl) -> str:
    tensors = ", ".join(f"Tensor{'?' if t.optional else ''} {t.name}" for t in decl.tensors)
    return f"({tensors}, str args) -> Tensor"


# the ``args`` entry of a node whose half-precision input its kernel reads under autocast, with this
# result dtype (``OpDecl.autocast_in_kernel``; not an identifier: no op parameter has this name)
OUT_DTYPE = "autocast out_dtype"
_FAKE = object()  # (_node_call's backend for the fake: nothing decided)


def _values(decl: _opdecl.OpDecl, tensors: tuple, args: str) -> tuple[dict[str, Any], Any, Any]:
    """The call's values by parameter name, its ``backend``, and the result dtype of a call read in
    the kernel under autocast (else None)."""
    values = decode(args)
    backend = values.pop("backend", None)
    out_dtype = values.pop(OUT_DTYPE, None)
    values.update(zip(decl.tensor_names, tensors))
    return values, backend, out_dtype


def _node_call(decl: _opdecl.OpDecl, values: dict[str, Any], out_dtype, backend: Any = _FAKE) -> tuple[Any, tuple]:
    """``(spec, tensors)`` of a node's call: with an ``out_dtype`` (read in the kernel under
    autocast), the call the eager one makes (:meth:`Dispatcher.in_kernel_spec`), on a float32 copy
    of the first tensor where that is how it is made. The fake (``backend`` left out) decides
    nothing: the copy only where the op's ``output`` rule ignores ``out_dtype``."""
    from ._dispatcher import DISPATCHER

    if out_dtype is None:
        return decl.spec(values, grad_enabled=False), decl.tensors_of(values)
    if backend is _FAKE:
        spec = decl.spec(values, grad_enabled=False, out_dtype=out_dtype)
        copied = spec.out_dtype != out_dtype
    else:
        spec, copied = DISPATCHER.in_kernel_spec(decl, values, backend)
    if copied:
        first = decl.tensor_names[0]
        values = {**values, first: values[first].to(out_dtype)}
        spec = decl.spec(values, grad_enabled=False)
    return spec, decl.tensors_of(values)


def _library() -> torch.library.Library:
    global _lib
    if _lib is None:
        _lib = torch.library.Library(_NAMESPACE, "FRAGMENT")
    return _lib


def _plain_keys() -> tuple[int, int] | None:
    """``(mask, dense)``: a call's dispatch keys below ADInplaceOrView, masked to their functionality
    bits, are ``dense`` exactly when its tensors are plain (one backend's Dense functionality, no
    subclass, mode, functionalization, lazy negation or conjugation). None where this torch lays
    its key sets out otherwise: then every call goes on through the dispatcher."""
    C = torch._C
    try:
        def raw(*keys):
            found = C.DispatchKeySet(keys[0])
            for k in keys[1:]:
                found = found.add(k)
            return found.raw_repr()

        dense = raw(C.DispatchKey.CPU) & raw(C.DispatchKey.CUDA)
        mask = C._after_ADInplaceOrView_keyset.raw_repr() & ~(dense - 1)
        K = C.DispatchKey
        plain = [raw(K.CPU, K.ADInplaceOrView, K.AutogradCPU), raw(K.CUDA, K.AutogradCUDA), raw(K.Meta)]
        other = [raw(K.CPU, K.Python), raw(K.CPU, K.Functionalize), raw(K.CUDA, K.Conjugate),
                 raw(K.SparseCPU), raw(K.CPU, K.Python, K.PythonTLSSnapshot, K.AutogradCPU)]
    except (AttributeError, RuntimeError, TypeError):
        return None
    if dense and all(r & mask == dense for r in plain) and not any(r & mask == dense for r in other):
        return mask, dense
    return None


_PLAIN = _plain_keys()

_KERNELS = '''
def impl({tensors}, _d_args):
    try:
        {attributes}backend, _d_od = _d_attributes[_d_args]
    except KeyError:
        {attributes}backend, _d_od = _d_remember(_d_args)
    {run}
    if {aliases}:
        return _d_out.clone()
    return _d_out

def autograd(_d_keyset, {tensors}, _d_args):
    if {requires_grad} and _d_grad_enabled():
        return _d_Function.apply(_d_keyset, {tensors}, _d_args)[0]
    if {plain}:
        return impl({tensors}, _d_args)
    with _d_below_autograd():
        return _d_op.redispatch(_d_keyset & _d_after_autograd, {tensors}, _d_args)
'''
_RUN = "_d_out = _d_function(_d_name).function({call})"
# a custom op's call is left as it is by torch's autocast: the op function must not recast it
_AUTOCAST_RUN = """if _d_any_autocast() and _d_autocast_on({first}):
        with _d_leave_as_is({first}):
            _d_out = _d_function(_d_name).function({call})
    else:
        _d_out = _d_function(_d_name).function({call})"""


# a node whose half-precision input the kernel reads (traced under autocast: its args say the result's dtype)
_IN_KERNEL_RUN = """if _d_od is not None:
        _d_values = {values}
        _d_decl = _d_get(_d_name)
        _d_out = _d_in_kernel(_d_decl, _d_in_key(_d_decl, _d_values, backend), _d_values, backend)
    else:
        """ + _AUTOCAST_RUN.replace("\n", "\n    ")


def _kernels(decl: _opdecl.OpDecl, op, function) -> tuple[Any, Any]:
    """The op's run-time kernels, made once: ``impl(*tensors, args)`` calls the op function (its
    resolved table, as eager calls do) with the arguments ``args`` encodes (each text decoded once);
    ``autograd(keyset, *tensors, args)`` records the op for autograd when an input needs a
    gradient, calls ``impl`` itself for plain tensors, and otherwise passes the call on below
    autograd (fake, functional and subclassed tensors, dispatch modes) as torch does."""
    from ._dispatcher import DISPATCHER

    params = decl.parameters
    names = decl.attribute_names
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    attributes: dict[str, tuple] = {}

    def remember(args: str) -> tuple:
        values = decode(args)
        found = (*(values.get(n, defaults.get(n)) for n in names), values.get("backend"), values.get(OUT_DTYPE))
        if len(attributes) >= _MAX_ENCODINGS:
            attributes.clear()
        attributes[args] = found
        return found

    tensors = decl.tensor_names
    values = "{" + ", ".join(f"{p.name!r}: {p.name}" for p in params) + "}"
    call = ", ".join([p.name if p.kind != p.KEYWORD_ONLY else f"{p.name}={p.name}" for p in params]
                     + ["backend=backend"])
    source = _KERNELS.format(
        plain="_d_keyset.raw_repr() & _d_MASK == _d_DENSE" if _PLAIN else "False",
        tensors=", ".join(tensors), attributes="".join(f"{n}, " for n in names), call=call,
        aliases=" or ".join(f"_d_out is {t}" for t in tensors),
        run=(_IN_KERNEL_RUN.format(values=values, first=tensors[0], call=call) if decl.autocast_in_kernel
             else _AUTOCAST_RUN.format(first=tensors[0], call=call) if decl.autocast else _RUN.format(call=call)),
        requires_grad="(" + " or ".join(f"{t}.requires_grad" if not a.optional else
                                        f"({t} is not None and {t}.requires_grad)"
                                        for t, a in zip(tensors, decl.tensors)) + ")")
    namespace = {
        "_d_attributes": attributes, "_d_remember": remember, "_d_function": DISPATCHER.function,
        "_d_name": decl.name, "_d_grad_enabled": torch.is_grad_enabled, "_d_Function": function,
        "_d_MASK": _PLAIN and _PLAIN[0], "_d_DENSE": _PLAIN and _PLAIN[1], "_d_op": op,
        "_d_below_autograd": torch._C._AutoDispatchBelowAutograd,
        "_d_after_autograd": torch._C._after_autograd_keyset, "_d_autocast_on": _autocast.on_for,
        "_d_any_autocast": torch._C._is_any_autocast_enabled,
        "_d_leave_as_is": _autocast.leave_as_is, "_d_in_kernel": DISPATCHER.in_kernel,
        "_d_in_key": DISPATCHER.in_kernel_key, "_d_get": _opdecl.get}
    exec(compile(source, f"<dispatch custom op {decl.name}>", "exec"), namespace)  # noqa: S102 - our own template
    return _never_traced(namespace["impl"]), _never_traced(namespace["autograd"])


def _never_traced(kernel):
    """``kernel`` (a custom op's Python kernel), which Dynamo then runs as it is, with everything it
    calls, whenever it would trace it as a frame of its own: a graph break in a compiled function
    (a call torch refuses, say) has the custom op run for real from a frame Dynamo compiled, and
    a traced kernel would send its op function's call back into the custom op, endlessly. Where
    this torch has no per-code frame strategy, nothing changes."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:
        return kernel
    set_code_exec_strategy(kernel.__code__, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))
    return kernel


def register(decl: _opdecl.OpDecl) -> None:
    """Make op ``decl.name`` a custom op (once per name) and its function a Dynamo-substituted call of
    it: again for the function of an op declared anew under its name (after ``unregister`` or
    ``refresh``) with the same tensors, whose custom op it shares."""
    with _lock:
        from torch._dynamo import substitute_in_graph

        from ._compile_training import _backward_op, _training_op
        from ._dispatcher import DISPATCHER

        name = decl.name
        if name in _registered:
            function = DISPATCHER.function(name).function
            replaced, schema = _substituted[name]
            if function is not replaced and schema == _schema(decl):
                substitute_in_graph(function, skip_signature_check=True)(_stand_in(decl, _registered[name]))
                _substituted[name] = (function, schema)
            return
        lib = _library()
        lib.define(name + _schema(decl), tags=(torch.Tag.pt2_compliant_tag,))
        op = getattr(getattr(torch.ops, _NAMESPACE), name).default

        def fake(*tensors_and_args):
            *tensors, args = tensors_and_args
            current = _opdecl.get(name)
            values, _backend, out_dtype = _values(current, tuple(tensors), args)
            spec, tensors = _node_call(current, values, out_dtype)
            return current.reference(spec)(*tensors)

        def forward(keyset, *tensors_and_args):
            # (output, *buffers): the op's declared ``saved`` buffers from its training node, which
            # its backward node reads where the backend that filled them runs the backward
            *tensors, args = tensors_and_args
            with torch._C._AutoDispatchBelowAutograd():
                keys = keyset & torch._C._after_autograd_keyset
                if _opdecl.get(name).saved is None:
                    return (op.redispatch(keys, *tensors, args),)
                needs = [t is not None and t.requires_grad for t in tensors]
                out, buffers = training_op.redispatch(keys, *tensors, args, needs)
                return (out, *buffers)

        def setup_context(ctx, inputs, output):  # (apart from forward: what torch.func transforms need)
            _keyset, *tensors, args = inputs
            out, *buffers = output
            ctx.args = args
            ctx.absent = tuple(t is None for t in tensors)
            ctx.n_buffers = len(buffers)
            ctx.save_for_backward(*(t for t in tensors if t is not None), out, *buffers)
            if buffers:
                ctx.mark_non_differentiable(*buffers)

        def backward(ctx, grad, *_buffers_grads):
            kept = ctx.saved_tensors
            at = len(kept) - ctx.n_buffers - 1  # the output's place; the buffers follow it
            saved = iter(kept[:at])
            tensors = tuple(None if absent else next(saved) for absent in ctx.absent)
            needs = [bool(n) and t is not None for n, t in zip(ctx.needs_input_grad[1:], tensors)]
            found = iter(backward_op(grad, kept[at], *tensors, list(kept[at + 1:]), ctx.args, needs))
            return (None, *(next(found) if n else None for n in needs), None)

        backward_op = _backward_op(decl, lib)
        function = type(f"DispatchBackward_{name}", (torch.autograd.Function,),
                        {"forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
                         "backward": staticmethod(backward)})
        impl, autograd = _kernels(decl, op, function)
        training_op = _training_op(decl, impl)
        lib.impl(name, impl, "CompositeExplicitAutograd")
        lib.impl(name, autograd, "Autograd", with_keyset=True)
        torch.library.register_fake(f"{_NAMESPACE}::{name}", fake, lib=lib)
        function = DISPATCHER.function(name).function
        substitute_in_graph(function, skip_signature_check=True)(_stand_in(decl, op))
        _substituted[name] = (function, _schema(decl))
        _registered[name] = op


def _stand_in(decl: _opdecl.OpDecl, op) -> Any:
    """What Dynamo traces in place of the op function: the custom op, with the same signature."""
    from ._opfunc import alias_prelude, signature_source

    signature, defaults = signature_source(decl)
    others = [*decl.attribute_names, "backend"]
    # an op read in the kernel under autocast: the result's dtype, where the traced recast set one
    carried = (", **({_OUT_DTYPE: _ac_out_dtype} if _ac_out_dtype is not None else {})"
               if decl.autocast_in_kernel else "")
    call = (f"_op({', '.join(decl.tensor_names)}, "
            f"_encode(_concrete({{{', '.join(f'{n!r}: {n}' for n in others)}{carried}}})))")
    # out=: the custom op returns a new tensor, which is then written into out as eager's out= does
    # (torch's checks, resizing), in the traced graph (an input mutation, which torch.compile keeps)
    names = [*decl.tensor_names, *decl.attribute_names]
    out_check = "" if not decl.out else (
        "    if out is not None:\n"
        f"        return _with_out({decl.name!r}, lambda backend, {', '.join(names)}: {call}, "
        "{" + ", ".join(f"{n!r}: {n}" for n in names) + "}, out, backend)\n")
    # under torch.autocast, the call torch would make (traced: the casts are nodes of the graph)
    recast, recast_names = _autocast.traced_recast(decl) if decl.autocast else ("", {})
    first = "    _ac_out_dtype = None\n" if decl.autocast_in_kernel else ""
    prelude = alias_prelude(decl)[1:] + "\n" if decl.aliases else ""  # (a call giving an alias: traced too)
    source = f"def {decl.name}({signature}):\n{prelude}{first}{out_check}{recast}    return {call}\n"
    namespace = {"_op": op, "_encode": _constant_encode(), "_concrete": _concrete, "_with_out": with_out,
                 "_OUT_DTYPE": OUT_DTYPE,
                 **recast_names, **defaults}
    exec(compile(source, f"<dispatch compiled op {decl.name}>", "exec"), namespace)  # noqa: S102 - our own template
    return namespace[decl.name]


def _constant_encode():
    import torch._dynamo

    return torch._dynamo.assume_constant_result(encode)


def call(decl: _opdecl.OpDecl, values: dict[str, Any], backend: str | None) -> torch.Tensor:
    """The op as its custom op (for calls made while torch.export or a tracer runs the op function)."""
    register(decl)
    tensors = [values[n] for n in decl.tensor_names]
    others = {k: v for k, v in values.items() if k not in decl.tensor_names}
    return _registered[decl.name](*tensors, encode({**others, "backend": backend}))


def register_all() -> None:
    for decl in list(_opdecl.declared().values()):
        register(decl)


# -- the post-import hook --------------------------------------------------------------------------

class _DynamoWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself; when ``torch._dynamo`` is imported, registers every op after it loads."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _opdecl.on_declare(_register_if_ready)
            register_all()

        loader.exec_module = exec_then_register
        return spec


def _register_if_ready(decl: _opdecl.OpDecl) -> None:
    if "torch._dynamo" in sys.modules:
        register(decl)


def install() -> None:
    """Register now if Dynamo is loaded, else when it is."""
    if "torch._dynamo" in sys.modules:
        _opdecl.on_declare(_register_if_ready)
        register_all()
    elif not any(isinstance(f, _DynamoWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _DynamoWatcher())
