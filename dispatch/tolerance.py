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
    # compared where both live (a GPU compares 64M elements in milliseconds; a copy to the host
    # and a CPU comparison take seconds, paid by every first call and every tuned candidate)
    where = expected.device if actual.device == expected.device else torch.device("cpu")
    a = actual.detach().to(device=where, dtype=torch.float64)
    e = expected.detach().to(device=where, dtype=torch.float64)
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return _nan_sides(torch.isnan(a), torch.isnan(e))
    if not torch.equal(torch.isinf(a) & (a > 0), torch.isinf(e) & (e > 0)) or not torch.equal(
            torch.isinf(a) & (a < 0), torch.isinf(e) & (e < 0)):
        return "infinities differ from the reference"
    rtol, atol = tol if tol is not None else tolerance(expected.dtype)
    finite = torch.isfinite(e)
    bad = ((a - e).abs() > atol + rtol * e.abs()) & finite
    if bool(bad.any()):
        abs_err, rel_err = max_errors(actual, expected)
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
