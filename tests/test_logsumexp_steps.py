"""The framework's plan of logsumexp in steps (dispatch.backend.logsumexp_steps), which both built-in
backends run: the steps' dims, shapes and strides compose to the whole reduction, the first step
reads the input as it is, every step has an (outer, R, inner) view, and what has no steps is
refused with the reason; and special values through the steps of each backend."""

from __future__ import annotations

import pytest
import torch

import dispatch
from backends_needed import require_backend
from dispatch.backend import (ROWS_FIRST_MIN, StridedPlan, contiguous_strides, logsumexp_steps, row_view,
                              strided_plan)

CASES = [  # (base shape, view of it, reduced dims)
    ((6, 5, 7), lambda t: t, (0, 2)),
    ((4, 3, 5, 6), lambda t: t, (1, 3)),
    ((2, 3, 4, 5, 6), lambda t: t, (0, 2, 4)),
    ((4, 5, 6), lambda t: t.permute(2, 0, 1), (0, 2)),
    ((4, 7, 5), lambda t: t[:, :3, :], (0, 1)),
    ((3, 4, 5, 6), lambda t: t, (0, 1, 3)),
    ((5, 3, 70), lambda t: t, (0, 2)),  # rows of 70: rows_first reads them first
    ((2, 3, 4, 130), lambda t: t[:, :, :, :100], (1, 3)),  # rows of 100, 130 apart
    ((4, 3, 80), lambda t: t.permute(1, 0, 2), (1, 2)),  # rows of 80 in two kept groups: never rows
]


@pytest.mark.parametrize("rows_first", [False, True], ids=["columns", "rows_first"])
@pytest.mark.parametrize("shape,view,dims", CASES)
def test_the_steps_compose_to_the_whole_reduction(shape, view, dims, rows_first):
    x = view(torch.randn(shape, dtype=torch.float64))
    steps = logsumexp_steps(x.shape, x.stride(), dims, rows_first=rows_first)
    assert isinstance(steps, tuple) and len(steps) >= 2
    assert (steps[0].shape, steps[0].stride) == (tuple(x.shape), tuple(x.stride()))  # the input, read in place
    y = x
    for i, st in enumerate(steps):
        assert st.shape == tuple(y.shape)
        if i:
            assert st.stride == contiguous_strides(st.shape)  # a later step reads the previous result
        assert isinstance(st.plan, StridedPlan)
        assert st.plan == strided_plan(st.shape, st.stride, st.dims, reduced_output=True)
        assert st.plan.outer * st.plan.R * st.plan.inner == y.numel()
        y = torch.logsumexp(y, st.dims).contiguous()
    torch.testing.assert_close(y, torch.logsumexp(x, dims))


def test_rows_first_reads_rows_of_the_input_first_where_they_are_long():
    # dims 0 and 2 of (512, 64, 512): the strided view of dim 0 first by default (columns of
    # 32768), with rows_first the 32768 rows of 512 first, in place, then a column a kept element
    x = torch.empty(512, 64, 512, device="meta")
    cols = logsumexp_steps(x.shape, x.stride(), (0, 2))
    rows = logsumexp_steps(x.shape, x.stride(), (0, 2), rows_first=True)
    assert [st.dims for st in cols] == [(0,), (1,)] and row_view(cols[0].plan) is None
    assert [st.dims for st in rows] == [(2,), (0,)]
    assert row_view(rows[0].plan) == (512 * 64, 512, 512)  # rows, row length, row stride
    assert rows[1].shape == (512, 64) and row_view(rows[1].plan) is None
    short = torch.empty(512, 64, ROWS_FIRST_MIN // 2, device="meta")  # rows too short to go first
    assert [st.dims for st in logsumexp_steps(short.shape, short.stride(), (0, 2), rows_first=True)] == [(0,), (1,)]


def test_a_row_view_needs_rows_one_stride_apart_written_in_order():
    x = torch.empty(4, 3, 130)[:, :, :100]
    assert row_view(strided_plan(x.shape, x.stride(), (2,), reduced_output=True)) == (12, 100, 130)
    t = torch.empty(4, 3, 80).permute(1, 0, 2)  # kept dims in memory order (4, 3), the output's (3, 4)
    assert row_view(strided_plan(t.shape, t.stride(), (2,), reduced_output=True)) is None
    c = torch.empty(6, 5)  # a column: not a row
    assert row_view(strided_plan(c.shape, c.stride(), (0,), reduced_output=True)) is None


def test_dims_that_collapse_are_one_step():
    x = torch.randn(4, 5, 6)
    steps = logsumexp_steps(x.shape, x.stride(), (1, 2))
    assert len(steps) == 1 and steps[0].dims == (1, 2) and steps[0].plan.R == 30


def test_no_steps_without_a_copy_is_a_reason():
    x = torch.randn(2, 3, 4, 5, 6, 7).permute(0, 1, 3, 2, 5, 4)
    why = logsumexp_steps(x.shape, x.stride(), (0, 3))
    assert isinstance(why, str) and "no group of them can be reduced first without a copy" in why


@pytest.mark.parametrize("n", [7, 70], ids=["columns_first", "rows_first"])
@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_special_values_carry_through_each_backends_steps(backend, n):
    require_backend(backend)
    inf, nan = float("inf"), float("nan")
    x = torch.randn(6, 5, n)
    x[:, 0, :] = -inf  # a whole output element of -inf
    x[2, 1, 3] = nan
    x[4, 2, 6] = inf
    x[:5, 3, :] = -inf  # -inf but one row
    if backend == "triton" and torch.cuda.is_available():
        x = x.cuda()
    assert "steps" in str(dispatch.explain("logsumexp", x, (0, 2), backend=backend))
    got = dispatch.logsumexp(x, (0, 2), backend=backend)
    torch.testing.assert_close(got, torch.logsumexp(x, (0, 2)), equal_nan=True, atol=1e-5, rtol=1e-5)
