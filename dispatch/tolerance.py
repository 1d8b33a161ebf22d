"""Per-dtype tolerances: when two outputs of the same op count as equal."""

from __future__ import annotations

import torch

# (rtol, atol) per output dtype: fp32 results may differ in summation order, so a little looser
# than torch.testing's defaults; low-precision outputs by their rounding step.
_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 1e-4),
    torch.bfloat16: (1.6e-2, 1e-3),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """Return ``(rtol, atol)`` for comparing outputs of ``dtype``."""
    return _TOLERANCES.get(dtype, (0.0, 0.0))


def max_errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """Max absolute and relative error of ``actual`` against ``expected`` over finite entries."""
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    finite = torch.isfinite(e) & torch.isfinite(a)
    if not bool(finite.any()):
        return 0.0, 0.0
    diff = (a - e).abs()[finite]
    rel = diff / e.abs()[finite].clamp_min(torch.finfo(torch.float64).tiny)
    return float(diff.max()), float(rel.max())


def mismatch(actual: torch.Tensor, expected: torch.Tensor, tol: tuple[float, float] | None = None) -> str | None:
    """Why ``actual`` is not ``expected`` within ``tol`` = ``(rtol, atol)`` (default: the tolerance of
    ``expected.dtype``); None if it is.

    Shapes, dtypes, and the positions of NaN and +-inf must agree exactly.
    """
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != expected {expected.dtype}"
    if actual.numel() == 0:
        return None
    rtol, atol = tol if tol is not None else tolerance(expected.dtype)
    # compared where both live (a GPU compares 64M elements in milliseconds; a copy to the host
    # and a CPU comparison take seconds, paid by every first call and every tuned candidate), in
    # slices of _SLICE elements, so that the float64 copies stay small next to the tensors
    where = expected.device if actual.device == expected.device else torch.device("cpu")
    flat_a, flat_e = actual.detach().reshape(-1), expected.detach().reshape(-1)
    for start in range(0, flat_a.numel(), _SLICE):
        why = _mismatch_slice(flat_a[start:start + _SLICE], flat_e[start:start + _SLICE], where, rtol, atol)
        if why is not None:  # the report counts over the whole tensors
            return _mismatch_slice(flat_a, flat_e, torch.device("cpu"), rtol, atol, actual, expected)
    return None


_SLICE = 1 << 24  # elements compared at once (128 MB per float64 copy)


def _mismatch_slice(actual: torch.Tensor, expected: torch.Tensor, where: torch.device, rtol: float, atol: float,
                    whole_actual: torch.Tensor | None = None, whole_expected: torch.Tensor | None = None) -> str | None:
    a = actual.to(device=where, dtype=torch.float64)
    e = expected.to(device=where, dtype=torch.float64)
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return _nan_sides(torch.isnan(a), torch.isnan(e))
    if not torch.equal(torch.isinf(a) & (a > 0), torch.isinf(e) & (e > 0)) or not torch.equal(
            torch.isinf(a) & (a < 0), torch.isinf(e) & (e < 0)):
        return "infinities differ from the reference"
    finite = torch.isfinite(e)
    bad = ((a - e).abs() > atol + rtol * e.abs()) & finite
    if bool(bad.any()):
        abs_err, rel_err = max_errors(whole_actual if whole_actual is not None else actual,
                                      whole_expected if whole_expected is not None else expected)
        return (f"{int(bad.sum())} of {a.numel()} values outside rtol={rtol}, atol={atol} "
                f"(max abs err {abs_err:.3g}, max rel err {rel_err:.3g})")
    return None


def _nan_sides(result_nan: torch.Tensor, reference_nan: torch.Tensor) -> str:
    """Which side has NaN where the other has none, and at how many positions."""
    parts = []
    for side, other, nan, other_nan in (("result", "reference", result_nan, reference_nan),
                                        ("reference", "result", reference_nan, result_nan)):
        n = int((nan & ~other_nan).sum())
        if n:
            parts.append(f"the {side} has NaN at {n} position{'s' if n != 1 else ''} where the {other} has none")
    return "; ".join(parts)
