"""Reductions over a dim that is not unit-stride: the ``(outer, R, inner)`` view of a call.

A call can be served without copying its input when its reduced dims collapse to one dim of
length ``R`` and its other dims to at most three groups: ``inner`` (the one of smallest stride)
and one or two outer ones (``outer`` counts their slices), both in the input and in the output.
:func:`strided_plan` says whether they do, with the reason when not. Kernels of any backend index
the input at ``o * x_strides[0] + r * x_strides[1] + i * x_strides[2]`` and the output likewise.

A reduction over the last, unit-stride dim reads rows instead: :func:`rows_stride` says whether
the leading dims collapse to rows one stride apart (a slice ``x[:, :n]`` of wider rows does).

logsumexp over reduced dims that don't collapse (dims 0 and 2 of a contiguous ``(A, B, C)``) can
still be served without a copy, in steps (:func:`logsumexp_steps`): the first reduces one group of
the dims that does collapse, reading the input in place; each later one reduces the previous
step's result (contiguous, fp32). The logsumexp of logsumexps is the logsumexp of the whole. A
step whose plan reads rows (:func:`row_view`) can go to a backend's row kernels.
"""

from __future__ import annotations

from attrs import frozen

from ._spec import contiguous_strides


@frozen
class StridedPlan:
    """The ``(outer, R, inner)`` view of one call: sizes, input strides and output strides.

    Where the kept dims collapse to three groups rather than two, ``outer`` counts the slices of
    the outer two: ``outer1`` of them at the ``outer`` strides, those ``outer // outer1`` times at
    the ``strides2`` (input, output); ``outer1`` 0 when there is one outer group."""

    outer: int
    R: int
    inner: int
    x_strides: tuple[int, int, int]  # (outer, R, inner)
    out_strides: tuple[int, int, int]
    outer1: int = 0
    strides2: tuple[int, int] = (0, 0)


def _prod(sizes) -> int:
    n = 1
    for s in sizes:
        n *= int(s)
    return n


def _collapse(dims, shape, strides_a, strides_b) -> list[tuple[int, int, int]]:
    """``dims`` (outermost first) merged where both stride sets allow: ``[(size, stride_a, stride_b)]``."""
    groups: list[list[int]] = []
    for d in dims:
        size, sa, sb = int(shape[d]), int(strides_a[d]), int(strides_b[d])
        if groups and groups[-1][1] == sa * size and groups[-1][2] == sb * size:
            g = groups[-1]
            g[0], g[1], g[2] = g[0] * size, sa, sb
        else:
            groups.append([size, sa, sb])
    return [tuple(g) for g in groups]


def strided_plan(shape, stride, dims, reduced_output: bool, one_dim: bool = False) -> StridedPlan | str:
    """The plan of a reduction over ``dims`` of an input of ``shape``/``stride``, or why there is none.

    ``reduced_output``: the output has the reduced shape (logsumexp), else the input's (softmax);
    ``one_dim``: the op reduces exactly one dim. The output is contiguous, in torch's layout."""
    shape, stride, dims = tuple(shape), tuple(stride), tuple(sorted(set(dims)))
    if not shape:
        return "0-d input: nothing to reduce over"
    if one_dim and len(dims) != 1:
        return f"reduces one dim (got dims {list(dims)})"
    if 0 in shape:  # nothing to read: only the sizes matter
        kept = [s for i, s in enumerate(shape) if i not in dims]
        return StridedPlan(_prod(kept), _prod(shape[d] for d in dims), 1, (0, 0, 0), (0, 0, 0))
    if reduced_output:
        out_full = tuple(1 if i in dims else s for i, s in enumerate(shape))
        out_stride = list(contiguous_strides(out_full))
        for d in dims:
            out_stride[d] = 0
    else:
        out_stride = list(contiguous_strides(shape))
    reduced = _collapse([d for d in dims if shape[d] != 1], shape, stride, out_stride)
    if len(reduced) > 1:
        return (f"the reduced dims {list(dims)} (sizes {[shape[d] for d in dims]}, strides "
                f"{[stride[d] for d in dims]}) don't collapse to one dim without a copy")
    R, sxr, sor = reduced[0] if reduced else (1, 0, 0)
    others = sorted((d for d in range(len(shape)) if d not in dims and shape[d] != 1),
                    key=lambda d: (-stride[d], d))
    kept = _collapse(others, shape, stride, out_stride)
    if len(kept) > 3:
        return (f"the dims kept (sizes {[shape[d] for d in others]}, strides {[stride[d] for d in others]}) "
                "don't collapse to three groups (outer2, outer, inner) without a copy")
    kept = [(1, 0, 0)] * (3 - len(kept)) + kept
    (outer2, sxo2, soo2), (outer, sxo, soo), (inner, sxi, soi) = kept
    if outer2 == 1:
        return StridedPlan(outer, R, inner, (sxo, sxr, sxi), (soo, sor, soi))
    return StridedPlan(outer2 * outer, R, inner, (sxo, sxr, sxi), (soo, sor, soi), outer, (sxo2, soo2))


def rows_stride(shape, stride) -> int | None:
    """The elements between consecutive rows of an input read as rows of its last dim, or None.

    The leading dims (all but the last) must collapse to one dim without a copy: each of size
    other than 1 is its successor's stride times its successor's size, size-1 dims skipped (their
    strides address nothing). The rows are then the last such dim's stride apart, which a kernel
    of rows takes as its row stride. With no row or one row any stride serves: the one given is
    the last leading dim's (the row's length for a 1-D input)."""
    shape, stride = tuple(shape), tuple(stride)
    if len(shape) < 2:
        return int(shape[0]) if shape else 1
    if 0 in shape[:-1]:
        return int(stride[-2])
    leading = [(int(size), int(st)) for size, st in zip(shape[:-1], stride[:-1]) if size != 1]
    for (_, outer), (size, inner) in zip(leading, leading[1:]):
        if outer != inner * size:
            return None
    return leading[-1][1] if leading else int(stride[-2])


@frozen
class StridedStep:
    """One step of logsumexp in steps: over ``dims`` of a tensor of ``shape``/``stride``, by ``plan``."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dims: tuple[int, ...]
    plan: StridedPlan


def _runs(dims, shape, stride) -> list[list[int]]:
    """The reduced dims (of more than one element, in order) in runs that collapse in memory."""
    runs: list[list[int]] = []
    for d in dims:
        if shape[d] == 1:
            continue
        if runs and stride[runs[-1][-1]] == stride[d] * shape[d]:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


ROWS_FIRST_MIN = 64  # reduced elements a row needs for rows_first to take it first


def row_view(p: StridedPlan) -> tuple[int, int, int] | None:
    """``(rows, row length, row stride)`` where ``p`` reads rows, as a kernel of rows takes them: the
    reduced dim unit-stride (2 elements or more) and the kept dims one group (outer or inner), its
    rows one stride apart, not overlapping, and written in order; else None."""
    if p.outer1 or (p.outer > 1 and p.inner > 1) or p.R < 2 or p.x_strides[1] != 1 or p.outer * p.inner == 0:
        return None
    m = p.outer * p.inner
    k = 0 if p.inner == 1 else 2
    stride = p.x_strides[k] if m > 1 else p.R
    if stride < p.R or (m > 1 and p.out_strides[k] != 1):
        return None
    return m, p.R, stride


def logsumexp_steps(shape, stride, dims, rows_first: bool = False) -> tuple[StridedStep, ...] | str:
    """The steps of logsumexp over ``dims`` of an input of ``shape``/``stride`` (one step when the
    dims collapse), or why there are none. Each step reduces the group of dims that leaves the
    most columns to read along (an inner dim of more than one element), the longest of those
    first; every step after the first reads a contiguous tensor of the kept dims.

    ``rows_first``: for a backend whose row kernels serve steps that read rows (:func:`row_view`),
    a group read as rows of at least ``ROWS_FIRST_MIN`` elements goes before the others, the
    longest rows first: rows are read whole and in order, and what the later steps read is the
    input over the row length, in fp32."""
    shape, stride, dims = tuple(int(s) for s in shape), tuple(int(s) for s in stride), tuple(sorted(set(dims)))
    steps: list[StridedStep] = []
    while True:
        whole = strided_plan(shape, stride, dims, reduced_output=True)
        if isinstance(whole, StridedPlan):
            return tuple(steps) + (StridedStep(shape, stride, dims, whole),)
        best = None
        for run in _runs(dims, shape, stride):
            q = strided_plan(shape, stride, run, reduced_output=True)
            if isinstance(q, StridedPlan) and (best is None or _rank(q, rows_first) < _rank(best[1], rows_first)):
                best = (tuple(run), q)
        if best is None:
            return f"{whole}, and no group of them can be reduced first without a copy"
        run, q = best
        steps.append(StridedStep(shape, stride, run, q))
        kept = [i for i in range(len(shape)) if i not in run]
        shape = tuple(shape[i] for i in kept)
        stride = contiguous_strides(shape)
        dims = tuple(kept.index(d) for d in dims if d not in run)


def _rank(q: StridedPlan, rows_first: bool) -> tuple:
    """How early logsumexp_steps takes a group of plan ``q`` (lowest first)."""
    rows = rows_first and q.R >= ROWS_FIRST_MIN and row_view(q) is not None
    return (not rows, q.inner == 1, -q.R)
