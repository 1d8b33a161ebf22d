"""The correctness oracle, in one place: the float64 reference, example inputs, tolerances and safety checks.

Every check of a backend's output (the first call of a bucket, races, the conformance kit, A/B)
goes through :func:`expected_output` and :func:`check_output`; every input made for tuning and
races comes from :func:`example_inputs`.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from . import _opdecl
from ._spec import CallSpec
from .tolerance import max_errors, mismatch


def reference_kernel(spec: CallSpec):
    """torch's implementation of ``spec.op`` for calls matching ``spec``: ``kernel(*tensors)``."""
    return _opdecl.get(spec.op).reference(spec)


def _widened(spec: CallSpec) -> CallSpec:
    tensors = [attrs.evolve(t, dtype=torch.float64) if t.present and t.dtype.is_floating_point else t
               for t in spec.tensors]
    return attrs.evolve(spec, tensors=tensors, out_dtype=torch.float64)


def exact_output(spec: CallSpec, tensors: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """The reference computed in float64 from the same inputs (the first one cast to the output
    dtype first, as ``dtype=`` does); for non-floating results, the reference itself."""
    with torch.no_grad():
        if not spec.dtype.is_floating_point or not spec.out_dtype.is_floating_point:
            return reference_kernel(spec)(*tensors)
        wide = []
        for i, t in enumerate(tensors):
            if t is not None and t.dtype.is_floating_point:
                t = (t.to(spec.out_dtype) if i == 0 else t).to(torch.float64)
            wide.append(t)
        return reference_kernel(_widened(spec))(*wide)


def expected_output(spec: CallSpec, tensors: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """What a correct backend returns: :func:`exact_output` rounded once to the output dtype
    (torch's own low-precision CPU kernels may round twice)."""
    exact = exact_output(spec, tensors)
    return exact.to(spec.out_dtype) if exact.dtype != spec.out_dtype else exact


def example_inputs(spec: CallSpec, seed: int = 0) -> tuple[torch.Tensor | None, ...]:
    """Deterministic inputs for ``spec`` (the op's example factory): what races and tuning run on."""
    return _opdecl.get(spec.op).examples(spec, seed)


def tolerance_of(spec: CallSpec) -> tuple[float, float]:
    """``(rtol, atol)`` for the op's result in its output dtype."""
    return _opdecl.get(spec.op).tolerance_of(spec.out_dtype)


def input_safety(tensors: Sequence[torch.Tensor | None], before: Sequence[torch.Tensor | None],
                 out: object) -> str | None:
    """Why a kernel's run broke the user's-data rules, or None: it wrote into an input (compared
    with ``before``, copies taken before the run) or returned a tensor sharing an input's memory."""
    for t, b in zip(tensors, before):
        if t is None or b is None:
            continue
        if not _same(t.detach(), b):
            return "wrote into its input"
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for o in outs:
        if not isinstance(o, torch.Tensor) or o.numel() == 0 or o.layout != torch.strided:
            continue  # (not a result: check_output says why)
        for t in tensors:
            if t is not None and t.numel() > 0 and _overlaps(o, t):
                return "returned a tensor that shares memory with its input (an alias, not a new result)"
    return None


def check_declared_output(spec: CallSpec, result: object, dtype: bool = True) -> None:
    """Raise a TypeError naming ``OpDecl.output`` where the op's reference returned ``result`` of
    another shape (or, with ``dtype``, another dtype) than the op's ``output`` rule gives for
    ``spec``: that rule is what ``torch.compile`` traces with and what every backend's result is
    held to, so the two must agree."""
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"op {spec.op!r}: OpDecl.reference returned {type(result).__name__}, not a tensor, "
                        f"on {spec.describe()}")
    if tuple(result.shape) != tuple(spec.out_shape) or (dtype and result.dtype != spec.out_dtype):
        got = f"{tuple(result.shape)} {result.dtype}" if dtype else f"shape {tuple(result.shape)}"
        said = f"{tuple(spec.out_shape)} {spec.out_dtype}" if dtype else f"shape {tuple(spec.out_shape)}"
        raise TypeError(f"op {spec.op!r}: OpDecl.output says {said} on {spec.describe()}, but OpDecl.reference "
                        f"returned {got}; make the output rule give what the reference returns")


def result_problem(out: object) -> str | None:
    """Why a kernel's result, run under ``torch.no_grad``, is not a plain result dispatch can hand
    back (whatever its values), or None."""
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    if out.requires_grad:  # (under no_grad: the kernel made it so)
        return ("returned a tensor that requires grad (a Parameter, or one it marked so); a kernel returns a "
                "plain result, which autograd records through dispatch")
    if out.layout != torch.strided:
        return f"returned a tensor of layout {out.layout}, not a strided one"
    return None


def gradients_problem(grads, tensors: tuple, needed: tuple[str | None, ...]) -> str | None:
    """Why ``grads`` (a backward kernel's answer: a tensor, or one entry per input) are not
    gradients of ``tensors``, or None. ``needed``: per input, its name where the call wants its
    gradient, else None (a None there would pass for a zero gradient)."""
    if isinstance(grads, torch.Tensor) or grads is None:
        grads = (grads,)
    if not isinstance(grads, (tuple, list)):
        return f"its backward kernel returned {type(grads).__name__}, not gradients"
    if len(grads) > len(tensors):
        return f"its backward kernel returned {len(grads)} gradients for {len(tensors)} inputs"
    grads = (*grads, *(None,) * (len(tensors) - len(grads)))
    for g, t, name in zip(grads, tensors, needed):
        if g is None:
            if name is not None and t is not None:
                return f"its backward kernel gave no gradient for {name!r}, which the call wants"
            continue
        if not isinstance(g, torch.Tensor):
            return f"its backward kernel returned a {type(g).__name__} as a gradient"
        if t is None or g.shape != t.shape or g.device != t.device:
            want = "no gradient (the input is absent)" if t is None else f"{tuple(t.shape)} on {t.device}"
            return f"its backward kernel returned a gradient of {tuple(g.shape)} on {g.device} for {want}"
    return None


def check_output(spec: CallSpec, out: object, expected: torch.Tensor,
                 tensors: Sequence[torch.Tensor | None] | None = None) -> str | None:
    """Why ``out`` is not a correct result for ``spec``, or None.

    ``tensors``: the inputs ``expected`` was computed from. Given them, a result outside the
    dtype's tolerance is judged once more against torch's own result at the call's precision:
    where the input is ill-conditioned (fp32 rows far from zero for layer_norm) torch itself
    misses the tolerance, and a result within it widened by twice torch's own largest error is
    as accurate as torch's (the reference backend) and is correct."""
    why = result_problem(out)
    if why is not None:
        return why
    if out.device != expected.device:
        return f"returned a tensor on {out.device}, not on the input's device {expected.device}"
    rtol, atol = tolerance_of(spec)
    why = mismatch(out, expected, (rtol, atol))
    if why is None or tensors is None or not expected.dtype.is_floating_point:
        return why
    with torch.no_grad():
        own = reference_kernel(spec)(*tensors)
    if (isinstance(own, torch.Tensor) and own.shape == out.shape and own.dtype == out.dtype
            and mismatch(out, own, (rtol, atol)) is None):
        return None  # torch's own result at the call's precision (NaN where x*x overflows, say)
    floor = torch_error(spec, tensors, expected)
    if floor is None:
        return why
    torch_err = floor[0]
    if torch_err <= atol or mismatch(out, expected, (rtol, atol + 2 * torch_err)) is not None:
        return why + (f"; torch's own result is {torch_err:.3g} off at most" if torch_err > atol else "")
    return None


def torch_error(spec: CallSpec, tensors: Sequence[torch.Tensor | None],
                exact: torch.Tensor) -> tuple[float, float] | None:
    """How far torch's own op at the call's precision is from ``exact`` on these inputs: its max
    abs and max rel errors (the floor the reference itself meets), or None where its result is not
    comparable."""
    with torch.no_grad():
        own = reference_kernel(spec)(*tensors)
    if not isinstance(own, torch.Tensor) or own.shape != exact.shape:
        return None
    return max_errors(own, exact)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    if sa.device != sb.device:
        return False
    a0, b0 = sa.data_ptr(), sb.data_ptr()
    return a0 < b0 + sb.nbytes() and b0 < a0 + sa.nbytes()
