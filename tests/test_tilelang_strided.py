"""The TileLang backend over a dim that is not unit-stride (dispatch_tilelang.strided), on its C target.

Each layout read in place against torch, in torch's output layout, the input untouched; special
values over several chunks of R; empty inputs; logsumexp over dims that don't collapse, in steps
(special values through them: tests/test_logsumexp_steps.py); what it refuses, with the reason;
and the card entry that keeps the static order from preferring these kernels on CUDA without a
measurement.
"""

from __future__ import annotations

import pytest
import torch

import dispatch
from backends_needed import require_backend
from dispatch.backend import spec_of

pytest.importorskip("tilelang")

INF, NAN = float("inf"), float("nan")


@pytest.fixture(autouse=True)
def tilelang_backend():
    require_backend("tilelang")


# (name, base shape, view of the base, dim, op, dtype): one of each layout, the ops taking turns
LAYOUTS = [
    ("dim0_2d", (19, 33), lambda t: t, 0, "softmax", torch.float32),
    ("dim1_4d", (2, 6, 3, 5), lambda t: t, 1, "log_softmax", torch.float32),
    ("transposed_last", (6, 40), lambda t: t.t(), -1, "logsumexp", torch.float32),
    ("slice_dim0", (9, 20), lambda t: t[:, :7], 0, "softmax", torch.bfloat16),
    ("permuted", (4, 5, 6), lambda t: t.permute(2, 0, 1), 1, "logsumexp", torch.bfloat16),
    ("rows_sliced", (7, 30), lambda t: t[:, :11], -1, "log_softmax", torch.float32),
    ("expanded_dim0", (1, 9), lambda t: t.expand(6, 9), 0, "log_softmax", torch.bfloat16),
    ("three_groups", (3, 4, 5, 6), lambda t: t.permute(0, 2, 1, 3), 2, "softmax", torch.float32),
]


def _tol(dtype):
    return dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,shape,view,dim,op,dtype", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_each_layout_matches_torch_in_place_and_in_torchs_layout(name, shape, view, dim, op, dtype):
    x = view((torch.randn(shape) * 3).to(dtype))
    before = x.clone()
    got = getattr(dispatch, op)(x, dim, backend="tilelang")
    want = getattr(torch, op)(x.double(), dim).to(dtype)
    torch.testing.assert_close(got, want, **_tol(dtype))
    assert got.stride() == getattr(torch, op)(x, dim).stride()
    assert torch.equal(x, before)
    assert "column of the (outer, R, inner) view" in str(dispatch.explain(op, x, dim, backend="tilelang"))


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_special_values_over_several_chunks_of_r(op):
    x = torch.randn(40, 6)  # R = 40: three chunks of 16
    x[:35, 0] = -INF  # a run of -inf longer than two chunks, then finite values
    x[:, 1] = -INF  # only -inf
    x[20, 2] = NAN
    x[7, 3] = INF
    x[39, 4] = -INF
    got = getattr(dispatch, op)(x, 0, backend="tilelang")
    torch.testing.assert_close(got, getattr(torch, op)(x, 0), equal_nan=True)


@pytest.mark.parametrize("op,shape", [("softmax", (0, 5)), ("logsumexp", (0, 5)), ("logsumexp", (5, 0))])
def test_empty_inputs_over_dim0_get_torchs_answer_without_a_launch(op, shape):
    x, dim = torch.randn(shape), 0
    got = getattr(dispatch, op)(x, dim, backend="tilelang")
    want = getattr(torch, op)(x, dim)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)


# (name, base shape, view of the base, reduced dims): logsumexp over dims that don't collapse
STEP_CASES = [  # a step that reads rows (the reduced dim unit-stride, rows dense) runs the row kernels
    ("dims_0_2_of_3d", (6, 5, 7), lambda t: t, (0, 2)),
    ("dims_1_3_of_4d", (4, 3, 5, 6), lambda t: t, (1, 3)),
    ("dims_0_2_4_of_5d", (2, 3, 4, 5, 6), lambda t: t, (0, 2, 4)),
    ("dims_0_2_of_permuted", (4, 5, 6), lambda t: t.permute(2, 0, 1), (0, 2)),
    ("dims_0_1_of_sliced", (4, 7, 5), lambda t: t[:, :3, :], (0, 1)),  # strides 35 and 5
    ("dims_0_2_of_sliced_rows", (8, 6, 10), lambda t: t[:, :, :7], (0, 2)),  # rows 10 apart: columns on C
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name,shape,view,dims", STEP_CASES, ids=[c[0] for c in STEP_CASES])
def test_logsumexp_over_dims_that_do_not_collapse_runs_in_steps(name, shape, view, dims, dtype):
    from dispatch.backend import logsumexp_steps

    x = view((torch.randn(shape) * 3).to(dtype))
    before = x.clone()
    steps = logsumexp_steps(x.shape, x.stride(), dims)
    assert isinstance(steps, tuple) and len(steps) >= 2
    assert steps[0].stride == tuple(x.stride())  # the first step reads the input itself
    assert "logsumexp in" in str(dispatch.explain("logsumexp", x, dims, backend="tilelang"))
    for keepdim in (False, True):
        got = dispatch.logsumexp(x, dims, keepdim=keepdim, backend="tilelang")
        want = torch.logsumexp(x, dims, keepdim=keepdim)
        assert (got.shape, got.dtype, got.stride()) == (want.shape, want.dtype, want.stride())
        torch.testing.assert_close(got.float(), torch.logsumexp(x.double(), dims, keepdim=keepdim).float(),
                                   **_tol(dtype))
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_step_that_reads_rows_runs_the_row_kernels(dtype):
    # dims 0 and 2 of a permuted, dense input: step 1 reduces its unit-stride dim, rows 6 apart in
    # memory whatever the order of the view's dims; step 2 the last dim of the contiguous result
    x = (torch.randn(4, 5, 6) * 3).to(dtype).permute(2, 0, 1)
    reason = str(dispatch.explain("logsumexp", x, (0, 2), backend="tilelang"))
    assert "step 1: the row kernels" in reason and "step 2: the row kernels" in reason, reason
    got = dispatch.logsumexp(x, (0, 2), backend="tilelang")
    torch.testing.assert_close(got.float(), torch.logsumexp(x.double(), (0, 2)).float(), **_tol(dtype))
    # the row kernels run at their default: the column kernels' configs would all time the same
    from dispatch_tilelang import strided

    assert len(strided.config_space(spec_of("logsumexp", x, (0, 2)), "c")) == 1
    assert len(strided.config_space(spec_of("logsumexp", torch.empty(6, 40, 7).permute(1, 0, 2), (0, 1)), "c")) > 1


def test_logsumexp_in_steps_over_an_empty_input_gets_torchs_answer():
    for shape in ((0, 5, 7), (6, 5, 0), (6, 0, 7)):
        x = torch.randn(shape)
        got = dispatch.logsumexp(x, (0, 2), backend="tilelang")
        want = torch.logsumexp(x, (0, 2))
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)


def test_on_cuda_each_step_must_be_one_the_column_or_the_row_kernels_serve():
    from dispatch_tilelang import strided

    # dims 0 and 2 of 512x64x512: dim 0 first (32768 columns), then the last dim of the 64x512 result: rows
    rows = strided.check(spec_of("logsumexp", torch.empty(512, 64, 512), (0, 2)), "cuda")
    assert rows.ok and "step 1: a column" in rows.reason and "step 2: the row kernels" in rows.reason, rows.reason
    wide = torch.empty(8, 16, 4, 16384)  # dims 0 and 2 of a wide inner dim: both steps read columns
    assert strided.check(spec_of("logsumexp", wide, (0, 2)), "cuda").ok
    # the unit-stride dim first, but its rows are not one stride apart (dims 0 and 1 swapped)
    permuted = torch.empty(4, 16, 8, 16384).permute(1, 0, 2, 3)
    verdict = strided.check(spec_of("logsumexp", permuted, (0, 3)), "cuda")
    assert not verdict.ok and "step 1" in verdict.reason and "a thread per row" in verdict.reason
    big = torch.empty(64, 8, 16384)  # dim 2 first (rows), then dim 0 of the 64x8 result: 8 columns
    verdict = strided.check(spec_of("logsumexp", big, (0, 2)), "cuda")
    assert not verdict.ok and "step 2" in verdict.reason and "16384 columns or more" in verdict.reason
    for x, dims in ((big, (0, 2)), (permuted, (0, 3))):
        assert strided.check(spec_of("logsumexp", x, dims), "c").ok  # the C target serves every step


def test_refuses_dims_that_no_step_can_reduce_in_place_and_says_why():
    x = torch.randn(2, 3, 4, 5, 6, 7).permute(0, 1, 3, 2, 5, 4)  # kept dims in four groups whichever goes first
    with pytest.raises(dispatch.BackendRefusedError, match="no group of them can be reduced first without a copy"):
        dispatch.logsumexp(x, (0, 3), backend="tilelang")


def test_on_cuda_a_unit_stride_reduced_dim_of_a_non_contiguous_input_is_refused_with_the_reason():
    from dispatch_tilelang import strided

    sliced = torch.empty(8, 64)[:, :48]
    verdict = strided.check(spec_of("softmax", sliced, -1), "cuda")
    assert not verdict.ok and "a thread per row would read a whole row alone" in verdict.reason
    assert strided.check(spec_of("softmax", sliced, -1), "c").ok  # the C target serves it
    assert strided.check(spec_of("softmax", torch.empty(64, 16384), 0), "cuda").ok
    # rows of 4100 fp32 are not a whole number of 32 bytes: no tiles in shared memory, and too few columns
    few = strided.check(spec_of("softmax", torch.empty(4096, 4100), 0), "cuda")
    assert not few.ok and "4100 columns of 4096" in few.reason and "16384 columns or more" in few.reason
    assert strided.check(spec_of("softmax", torch.empty(0, 8), 0), "cuda").ok  # empty: torch's answer, no launch


def test_the_cards_rank_strided_calls_by_their_own_figures_on_cuda():
    from dispatch._select import by_estimated_cost

    tilelang = dispatch.backends()["tilelang"]
    strided = tilelang.estimate_us("cuda", 1 << 26, op="softmax", strided=True)
    assert strided > tilelang.estimate_us("cuda", 1 << 26, op="softmax")  # not the row kernels' bandwidth
    from dispatch import _plugins

    servers = [b for b in _plugins.registry().backends.values() if b.name in ("triton", "tilelang")]
    if len(servers) < 2:
        pytest.skip("needs both GPU backends loaded")
    x = torch.empty(32, 256, 64, 64, device="meta")
    # the column kernels' figures (no card named: what a call the tiles in shared memory don't take
    # gets), as measured over dim 1 on an H200: Triton's strided kernel ahead for the three ops
    # (logsumexp: its wide column blocks and two tiles; TileLang's column kernel 5% ahead on the
    # sliced case only); the tiles' figures: tests/test_tilelang_smem_cols.py
    for op, first in (("softmax", "triton"), ("logsumexp", "triton")):
        ordered, _ = by_estimated_cost(servers, _cuda_spec(op, x, 1))
        assert ordered[0].name == first, op


def test_without_triton_the_cards_send_large_strided_calls_to_tilelang_not_torch():
    # torch over a dim that is not unit-stride: 16-595 GB/s on an H200 where TileLang's column
    # kernels run 1674-2650; a small softmax stays with torch, whose launch is cheaper (torch's
    # logsumexp runs several kernels: 80 us a call or more)
    from dispatch import _plugins
    from dispatch._select import by_estimated_cost

    servers = [b for b in _plugins.registry().backends.values() if b.name in ("torch", "tilelang")]
    for op in ("softmax", "log_softmax", "logsumexp"):
        ordered, _ = by_estimated_cost(servers, _cuda_spec(op, torch.empty(32, 256, 64, 64, device="meta"), 1))
        assert ordered[0].name == "tilelang", op
        ordered, _ = by_estimated_cost(servers, _cuda_spec(op, torch.empty(2, 8, 4, 4, device="meta"), 1))
        assert ordered[0].name == ("tilelang" if op == "logsumexp" else "torch"), op


def _cuda_spec(op, x, dim):
    """The call spec of ``op`` over ``dim`` of ``x`` as if ``x`` were on a CUDA device."""
    import attrs

    spec = spec_of(op, x, dim)
    return attrs.evolve(spec, tensors=[attrs.evolve(t, device=torch.device("cuda", 0)) for t in spec.tensors])
