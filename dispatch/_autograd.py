"""Differentiability for every backend: a backend's forward, with its own or the op's reference backward."""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import _opdecl
from ._spec import CallSpec


def reference_backward(spec: CallSpec) -> Callable[..., object]:
    """The op's declared backward for ``spec``, or autograd through its reference implementation.

    Either way: ``backward(grad_output, *tensors, output)`` -> the gradient of each tensor.
    """
    decl = _opdecl.get(spec.op)
    if decl.backward is not None:
        declared = _checked_declared(spec, decl.backward(spec))
        if decl.backward_reads_inputs:
            return declared

        def output_only(grad, *saved):  # (a distinct function: the forward keeps the output alone for it)
            return declared(grad, *saved)
        output_only.output_only = True
        return output_only
    reference = decl.reference(spec)

    def backward(grad, *saved):
        leaves = [t.detach().requires_grad_(t.dtype.is_floating_point) if t is not None else None
                  for t in saved[:-1]]
        return _through(reference, grad, leaves, [t is not None and t.requires_grad for t in leaves])
    backward.reads_output = False  # (autograd through the reference, from the inputs)
    return backward


class _Shape:
    """An input's shape and device, where its tensor was not kept (what a gradient is checked against)."""

    def __init__(self, shape: torch.Size, device: torch.device) -> None:
        self.shape, self.device = shape, device


def _checked_declared(spec: CallSpec, declared: object) -> Callable[..., object]:
    """The op's declared backward function, whose first answer is checked as a backend's backward
    kernel's is (one gradient per wanted input, of its shape and device): a wrong one is the op's
    TypeError naming ``OpDecl.backward``, not a gradient handed on (or None taken for zero)."""
    from .reference import gradients_problem

    if not callable(declared):
        def unusable(grad, *saved):  # (raised where the gradient is asked for: the op's error, not a backend's)
            raise TypeError(f"op {spec.op!r}: OpDecl.backward(spec) must return a function (grad_output, *tensors, "
                            f"output) -> gradients (got {declared!r})")
        return unusable
    n = len(spec.tensors)
    needed = tuple(t.name if t.requires_grad else None for t in spec.tensors)
    checked = False

    def backward(grad, *saved):
        nonlocal checked
        grads = declared(grad, *saved)
        if not checked:  # (an output-only backward gets None for each input: the spec has their shapes)
            shapes = tuple(s if s is not None or not t.present else _Shape(torch.Size(t.shape), grad.device)
                           for s, t in zip(saved[:n], spec.tensors))
            why = gradients_problem(grads, shapes, needed)
            if why is not None:
                raise TypeError(f"op {spec.op!r}: OpDecl.backward {why.removeprefix('its backward kernel ')}")
            checked = True
        return grads
    return backward


def _through(reference: Callable[..., torch.Tensor], grad: torch.Tensor, tensors, needs,
             create_graph: bool = False) -> tuple:
    """The gradients of ``tensors`` where ``needs`` (None elsewhere): autograd through
    ``reference(*tensors)``; with ``create_graph``, differentiable in turn."""
    with torch.enable_grad():
        out = reference(*tensors)
        wanted = [t for t, n in zip(tensors, needs) if n and t is not None]
        grads = iter(torch.autograd.grad(out, wanted, grad, create_graph=create_graph, allow_unused=True))
    return tuple(next(grads) if n and t is not None else None for t, n in zip(tensors, needs))


_is_legacy_batched = getattr(torch._C._functorch, "is_legacy_batchedtensor", lambda t: False)
_is_batched = getattr(torch._C._functorch, "is_batchedtensor", lambda t: False)


def _batched(t: torch.Tensor) -> bool:
    """Whether ``t`` is a batch of tensors wrapped for vmap (no storage of its own for a kernel)."""
    return _is_legacy_batched(t) or _is_batched(t)


class _BackendFunction(torch.autograd.Function):
    """A kernel call that autograd records. Each resolved call gets a subclass of its own
    (:func:`_function_for`) holding its kernel, backward and spec as class attributes, so that
    ``apply`` takes the call's tensors only; ``ctx._forward_cls`` is that subclass."""

    _backward_kernel: Callable[..., object]
    _spec: CallSpec
    _output_only: bool

    @staticmethod
    def backward(ctx, grad):
        call = ctx._forward_cls
        kept = ctx.saved_tensors  # the present inputs, the output (where the backward reads it), the buffers
        out_at = len(kept) - ctx.n_extra - ctx.keeps_output
        saved = iter(kept[:out_at])
        tensors = tuple(None if absent else next(saved) for absent in ctx.absent)
        after = kept[out_at:] if ctx.keeps_output else (None, *kept[out_at:])  # (None: the output, not kept)
        if not call._output_only and (torch.is_grad_enabled() or _batched(grad)):
            # create_graph=True: gradients that can be differentiated again, through the reference on
            # the saved inputs (a kernel's carry no graph; the op's backward of y alone is torch's ops
            # on y, differentiable as it is); a batch of grad_outputs (autograd.grad's
            # is_grads_batched, jacobian(vectorize=True)): a wrapper a kernel can't read, which
            # torch's ops take as a batch
            reference = _opdecl.get(call._spec.op).reference(call._spec)
            return _through(reference, grad, tensors, ctx.needs_input_grad, torch.is_grad_enabled())
        try:
            grads = call._backward_kernel(grad, *tensors, *after)
        except (Exception, KeyboardInterrupt):
            raise
        except BaseException as exc:  # SystemExit in a backend's backward: its fault, not the end of the process
            from .errors import PluginError

            raise PluginError(f"a backward kernel raised {type(exc).__name__}: {exc}; a plugin may not end "
                              "the process") from exc
        if isinstance(grads, torch.Tensor) or grads is None:
            grads = (grads,)
        return tuple(grads) + (None,) * (len(tensors) - len(grads))


def _function_for(kernel: Callable[..., torch.Tensor], backward: Callable[..., object],
                  spec: CallSpec) -> type[_BackendFunction]:
    """The autograd function of one resolved kernel call: a subclass of ``_BackendFunction`` named
    for the op (``DispatchLayerNorm``, so that a result's ``grad_fn``, ``DispatchLayerNormBackward``,
    and a profile's backward nodes say which op they are), whose forward runs ``kernel`` and saves
    what ``backward`` reads: the present inputs (none where it reads the output alone), the output,
    and the buffers its ``saves`` asks the forward to fill. The output is not kept where the
    backward says it does not read it (``backward.reads_output = False``, a norm's): the caller
    may then change it in place (``F.layer_norm(x).relu_()``) and still differentiate, as with
    torch's op. A kernel's output that is a view of its own buffer is handed on detached (not a
    view to autograd), which may likewise be changed in place."""
    saves = getattr(backward, "saves", None)  # buffers the forward fills for the backward (hookspec)
    output_only = getattr(backward, "output_only", False)  # (the op's backward reads y alone)
    keeps_output = int(output_only or getattr(backward, "reads_output", True))

    def forward(ctx, *tensors):
        extra = tuple(saves(*tensors)) if saves is not None else ()
        y = kernel(*tensors, saved=extra) if extra else kernel(*tensors)
        if y._is_view() and not any(t is not None and (y._base is t or y._base is t._base) for t in tensors):
            y = y.detach()  # (a view of the kernel's own buffer: autograd would forbid changing it in place)
        ctx.absent = absent = tuple(output_only or t is None for t in tensors)
        ctx.n_extra = len(extra)
        ctx.keeps_output = keeps_output
        ctx.save_for_backward(*(t for t, a in zip(tensors, absent) if not a), *((y,) if keeps_output else ()),
                              *extra)
        return y

    name = "Dispatch" + "".join(part[:1].upper() + part[1:] for part in spec.op.split("_"))
    return type(name, (_BackendFunction,), {
        "forward": staticmethod(forward), "_backward_kernel": staticmethod(backward), "_spec": spec,
        "_output_only": output_only, "__module__": __name__})


def own_backward(backend, spec: CallSpec) -> Callable[..., object] | None:
    """``backend``'s own backward kernel for a call of ``spec``, or None (then the op's reference
    backward runs; a reference backend's kernels are torch's, so it has none of its own)."""
    return None if backend.info.reference else backend.backward(spec.op, spec)


def differentiable(kernel: Callable[..., torch.Tensor], backward: Callable[..., object],
                   spec: CallSpec) -> Callable[..., torch.Tensor]:
    """Wrap ``kernel`` (a call of ``spec``) so autograd flows through it, with ``backward`` (a
    backend's own backward kernel or :func:`reference_backward`'s); a backward taken with
    ``create_graph=True`` goes through the reference instead, so that it can be differentiated again."""

    reference = _opdecl.get(spec.op).reference(spec)
    apply = _function_for(kernel, backward, spec).apply
    # (a tensor made under inference_mode: autograd can't save it for a backward; torch's op saves
    # what it needs, or raises its own error, which is the call's, not the kernel's)
    if len(spec.tensors) == 1:
        def run_one(x: torch.Tensor) -> torch.Tensor:
            return torchs_own(reference, x) if x.is_inference() else apply(x)
        return run_one

    def run(*tensors: torch.Tensor) -> torch.Tensor:
        if any(t is not None and t.is_inference() for t in tensors):
            return torchs_own(reference, *tensors)
        return apply(*tensors)

    return run


TORCHS_OWN = "_dispatch_torchs_own"  # marks an error torch's own op raised for a call a kernel handed it


def torchs_own(reference: Callable[..., torch.Tensor], *tensors: torch.Tensor | None) -> torch.Tensor:
    """``reference(*tensors)``; an error it raises is marked (:data:`TORCHS_OWN`) as torch's own for
    the call, which the dispatcher raises as it is rather than fault the backend that handed it on."""
    try:
        return reference(*tensors)
    except Exception as exc:
        try:
            setattr(exc, TORCHS_OWN, True)
        except AttributeError:  # (an exception type that takes no attributes: faulted as any error)
            pass
        raise

