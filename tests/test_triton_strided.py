"""The Triton backend over a dim that is not unit-stride (dispatch_triton.strided) under the interpreter.

Every layout the strided kernel takes (dim 0 of 2-D, dim 1 of 4-D, transposed and permuted views,
strided slices) against torch, for the three ops in fp32 and bf16, read in place; -inf runs longer
than a chunk of R, special values, empty inputs, and the layouts it refuses, with a reason.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

pytest.importorskip("triton")

import dispatch  # noqa: E402
from backends_needed import require_backend  # noqa: E402

try:
    from dispatch_triton import strided as S  # noqa: E402
except ImportError:  # pragma: no cover - backends/ not installed
    pytest.skip("dispatch_triton is not importable", allow_module_level=True)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy on inf - inf inside the interpreter

DEV = "cuda" if torch.cuda.is_available() else "cpu"
OPS = ("softmax", "log_softmax", "logsumexp")
INF, NAN = float("inf"), float("nan")


@pytest.fixture(autouse=True)
def triton_backend():
    info = require_backend("triton")
    if DEV == "cpu" and info.versions.get("interpreter") != "1":
        pytest.skip("CPU tensors need the Triton interpreter")


def _tol(dtype):
    return dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)


# (name, base shape, view of the base, dim): one of each layout the strided kernel serves, tiny
LAYOUTS = [
    ("dim0_2d", (19, 33), lambda t: t, 0),
    ("dim1_4d", (2, 6, 3, 5), lambda t: t, 1),
    ("transposed_last", (6, 40), lambda t: t.t(), -1),
    ("transposed_first", (6, 40), lambda t: t.t(), 0),
    ("slice_dim0", (9, 20), lambda t: t[:, :7], 0),
    ("permuted", (4, 5, 6), lambda t: t.permute(2, 0, 1), 1),
    ("every_other_last", (5, 24), lambda t: t[:, ::2], -1),
    ("one_d_strided", (30,), lambda t: t[::3], 0),
    ("expanded_dim0", (1, 9), lambda t: t.expand(6, 9), 0),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name,shape,view,dim", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_each_layout_matches_torch_in_place_and_in_torchs_layout(name, shape, view, dim, dtype):
    g = torch.Generator().manual_seed(0)
    x = view(torch.randn(*shape, generator=g).to(DEV, dtype))
    before = x.clone()
    for op in OPS:
        spec = dispatch.explain(op, x, dim, backend="triton").decision.spec
        assert not spec.last_dim_contiguous  # the strided kernel, not the row kernel, serves it
        got = getattr(dispatch, op)(x, dim, backend="triton")
        want = getattr(torch, op)(x, dim)
        assert got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype, op
        torch.testing.assert_close(got.float(), want.float(), **_tol(dtype))
    assert torch.equal(x, before)  # read in place, never written


def _run(op, x, dim, config):
    p = S.plan(op, x.shape, x.stride(), (dim % x.dim(),))
    want = getattr(torch, op)(x, dim)
    return S.StridedLauncher(op, p, x.dtype, want.shape, x.device, config).run(x), want


def _special_columns(cols: int) -> torch.Tensor:
    """40 rows (R) of ``cols`` columns: -inf runs of 20 and 39 rows, an all -inf column, NaN and +inf
    late, a column offset by -1000 (columns 0-5); the others random."""
    x = torch.randn(40, cols)
    x[:20, 0] = -INF
    x[:39, 1] = -INF
    x[:, 2] = -INF
    x[33, 3] = NAN
    x[35, 4] = INF
    x[:, 5] -= 1000.0
    return x


@pytest.mark.parametrize("split", [1, 3], ids=["one_program", "r_split_over_3"])
@pytest.mark.parametrize("op", OPS)
def test_special_columns_over_several_chunks_of_r(op, split):
    # R = 40 in chunks of 8: -inf runs of 20 and 39 rows, an all -inf column, NaN and +inf late
    x = _special_columns(6).to(DEV)
    got, want = _run(op, x, 0, S._cfg(16, 8, 2, split))
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("split", [1, 2], ids=["one_program", "r_split_over_2"])
@pytest.mark.parametrize("op", OPS)
def test_several_column_blocks_and_outer_slices(op, split):
    x = torch.randn(3, 20, 37).to(DEV)  # inner 37 over three 16-wide blocks, outer 3, R over 3 chunks
    got, want = _run(op, x, 1, S._cfg(16, 8, 2, split))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape,dim", [((0, 5), 0), ((5, 0), 0), ((2, 0, 3), 1), ((2, 3, 0), 1)])
@pytest.mark.parametrize("op", OPS)
def test_empty_r_and_empty_outer(op, shape, dim):
    x = torch.randn(*shape).to(DEV)
    got = getattr(dispatch, op)(x, dim, backend="triton")
    want = getattr(torch, op)(x, dim)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_dtype_casts_over_dim0(op):
    x = torch.randn(21, 10).to(DEV, torch.bfloat16)
    got = getattr(dispatch, op)(x, 0, dtype=torch.float32, backend="triton")
    want = getattr(torch, op)(x, 0, dtype=torch.float32)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_logsumexp_over_dims_that_collapse_and_keepdim():
    x = torch.randn(3, 5, 7).to(DEV)
    for dims, keepdim in (((0, 1), False), ((0, 1), True), ((1,), True)):
        got = dispatch.logsumexp(x, dims, keepdim=keepdim, backend="triton")
        torch.testing.assert_close(got, torch.logsumexp(x, dims, keepdim=keepdim), atol=1e-5, rtol=1e-5)


def test_refuses_layouts_that_do_not_collapse_with_a_reason():
    x = torch.randn(6, 6, 5, 6, 8, device=DEV)[::2, ::3, :, ::2, ::2]  # kept dims 0, 1, 3, 4: four groups
    with pytest.raises(dispatch.BackendRefusedError, match="don't collapse to three groups"):
        dispatch.softmax(x, 2, backend="triton")
    # reduced dims 0 and 3; reducing either first leaves four groups of kept dims (1, 2, 4 and 5 at
    # strides 1152, 96, 8 and 1): no step reads in place
    y = torch.randn(6, 4, 6, 4, 6, 4, device=DEV)[:, ::2, :, ::2, ::2, :]
    with pytest.raises(dispatch.BackendRefusedError, match="no group of them can be reduced first without a copy"):
        dispatch.logsumexp(y, (0, 3), backend="triton")


# (base shape, view of it, dims): logsumexp over reduced dims that don't collapse to one dim
STEP_CASES = [
    ("dims_0_2_of_3d", (6, 5, 7), lambda t: t, (0, 2)),
    ("dims_0_2_of_4d", (4, 3, 5, 6), lambda t: t, (0, 2)),
    ("dims_1_3_of_4d", (4, 3, 5, 6), lambda t: t, (1, 3)),
    ("dims_0_1_3_of_4d", (3, 4, 5, 6), lambda t: t, (0, 1, 3)),
    ("dims_0_2_4_of_5d", (2, 3, 4, 5, 6), lambda t: t, (0, 2, 4)),
    ("dims_0_2_of_permuted", (6, 5, 7), lambda t: t.permute(2, 0, 1), (0, 2)),
    ("dims_0_1_of_sliced", (4, 7, 5), lambda t: t[:, :3, :], (0, 1)),  # strides 35 and 5
    ("dims_0_2_rows_first", (80, 3, 70), lambda t: t, (0, 2)),  # rows of 70 before dim 0's 80: the row kernel
    ("dims_0_3_rows_first_sliced", (100, 3, 2, 90), lambda t: t[..., :70], (0, 3)),  # rows of 70, 90 apart
]


# (base shape, view of it, dim): kept dims that collapse to three groups, not two
TWO_OUTER_CASES = [
    ("dim1_of_sliced_4d", (4, 3, 10, 6), lambda t: t[:, :, ::2, :], 1),
    ("dim2_of_sliced_4d", (6, 6, 10, 6), lambda t: t[::2, ::2, :, :], 2),
    ("dim1_of_permuted_4d", (5, 4, 3, 8), lambda t: t.permute(2, 0, 3, 1), 1),  # the output's groups differ
    ("dim2_of_twice_sliced_5d", (3, 4, 5, 6, 7), lambda t: t[:, ::2, :, ::2, :], 2),
]


@pytest.mark.parametrize("split", [1, 2], ids=["one_program", "r_split_over_2"])
@pytest.mark.parametrize("name,shape,view,dim", TWO_OUTER_CASES, ids=[c[0] for c in TWO_OUTER_CASES])
def test_kept_dims_in_three_groups_read_in_place(name, shape, view, dim, split):
    x = view(torch.randn(*shape, device=DEV))
    before = x.clone()
    p = S.plan("softmax", x.shape, x.stride(), (dim,))
    assert isinstance(p, S.StridedPlan) and p.outer1 > 0  # two outer groups
    for op in OPS:
        got, want = _run(op, x, dim, S._cfg(16, 2, 2, split))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(getattr(dispatch, op)(x, dim, backend="triton"), want, atol=1e-5, rtol=1e-5)
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name,shape,view,dims", STEP_CASES, ids=[c[0] for c in STEP_CASES])
def test_logsumexp_over_dims_that_do_not_collapse_runs_in_steps(name, shape, view, dims, dtype):
    from dispatch_triton.strided_steps import StepPlan, step_plan

    x = view(torch.randn(*shape).to(DEV, dtype))
    before = x.clone()
    sp = step_plan(x.shape, x.stride(), dims)
    assert isinstance(sp, StepPlan) and len(sp.steps) >= 2
    assert sp.steps[0].stride == tuple(x.stride())  # the first step reads the input itself
    rows = sp.first_rows is not None  # a first step that reads rows runs the row kernel
    if "rows_first" in name:  # rows long enough to go first, though the other reduced dim is longer
        assert rows and sp.steps[0].dims == (len(shape) - 1,)
    said = str(dispatch.explain("logsumexp", x, dims, backend="triton"))  # the verdict says which kernels
    assert f"logsumexp in {len(sp.steps)} steps" in said
    assert ("step 1: the row kernel" if rows else "step 1: the strided kernel") in said
    assert ("path=" in said) == rows  # the first step's config: a row kernel config where it reads rows
    for keepdim in (False, True):
        got = dispatch.logsumexp(x, dims, keepdim=keepdim, backend="triton")
        want = torch.logsumexp(x, dims, keepdim=keepdim)
        assert (got.shape, got.dtype, got.stride()) == (want.shape, want.dtype, want.stride())
        torch.testing.assert_close(got.float(), want.float(), **_tol(dtype))
    assert torch.equal(x, before)


def test_strided_rows_of_the_last_dim_take_the_row_kernel():
    x = torch.randn(6, 64, device=DEV)[:, :37]  # rows 64 apart, unit stride along a row
    spec = dispatch.explain("softmax", x, -1, backend="triton").decision.spec
    assert spec.last_dim_contiguous
    for op in OPS:
        torch.testing.assert_close(getattr(dispatch, op)(x, -1, backend="triton"), getattr(torch, op)(x, -1),
                                   atol=1e-5, rtol=1e-5)


def test_config_space_default_and_every_candidate_is_correct():
    x = torch.randn(260, 20).to(DEV)  # R long enough that the candidates share it over programs
    p = S.plan("softmax", x.shape, x.stride(), (0,))
    space = S.config_space(p)
    assert S.default_config(p) in space and len(space) >= 4
    for outer, inner in ((1, 1), (4, 33), (1, 4096), (4, 4096), (32, 4096), (7, 1000)):
        other = S.StridedPlan(outer, 100, inner, (0, 0, 0), (0, 0, 0))
        assert S.default_config(other) in S.config_space(other), (outer, inner)
    assert len({tuple(sorted(c.items())) for c in space}) == len(space)
    assert any(c["SPLIT_R"] > 1 for c in space)
    want = torch.softmax(x, 0)
    for cfg in space:
        got = S.StridedLauncher("softmax", p, x.dtype, want.shape, x.device, cfg).run(x)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=lambda m, c=cfg: f"{c}: {m}")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", ["short R, wide inner", "transposed", "long R"])
def test_the_default_of_each_layout_family_matches_torch(op, case):
    # the three kinds of default: all of a short R in one tile when column blocks are plenty
    # (4224 columns: 264 blocks of 16, two per SM of a 132-SM device), all of R in one tile when
    # the output runs along R, else tiles over R with a running max and sum per element
    x = {"short R, wide inner": lambda: torch.randn(6, 4224),
         "transposed": lambda: torch.randn(40, 24).t(),
         "long R": lambda: torch.randn(300, 40)}[case]().to(DEV)
    dim = 1 if case == "transposed" else 0
    x[1:4, :3] = -INF  # a run of -inf inside some columns
    fn = getattr(torch, op)
    want = fn(x, dim) if op != "logsumexp" else fn(x, (dim,))
    got = getattr(dispatch, op)(x, dim, backend="triton")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert got.stride() == want.stride()


def test_a_bad_config_is_an_error_naming_it():
    p = S.plan("softmax", (8, 8), (8, 1), (0,))
    with pytest.raises(ValueError, match="'BLOCK_R' must be a power of two \\(got 12\\)"):
        S.StridedLauncher("softmax", p, torch.float32, (8, 8), DEV, S._cfg(16, 12, 2))
    with pytest.raises(ValueError, match="'SPLIT_R' must be 1 to 256 \\(got 0\\)"):
        S.StridedLauncher("softmax", p, torch.float32, (8, 8), DEV, S._cfg(16, 8, 2, 0))


# -- kernel variants (dispatch_triton.strided_configs.VARIANTS): each against torch -------------------------

# (name, config over the base config, the base config's BLOCK_R: None for all of R in one tile)
VARIANT_CONFIGS = [
    ("acc_2d", dict(ACC_2D=1)),
    ("even", dict(EVEN=1)),
    ("even_acc_2d", dict(EVEN=1, ACC_2D=1)),
    ("stages_2", dict(num_stages=2)),
    ("stages_4_acc_2d", dict(num_stages=4, ACC_2D=1)),
    ("prefetch", dict(PREFETCH=1)),
    ("prefetch_even", dict(PREFETCH=1, EVEN=1)),
    ("prefetch_even_acc_2d", dict(PREFETCH=1, EVEN=1, ACC_2D=1)),
    ("tma", dict(TMA=1, num_stages=2)),
    ("tma_even", dict(TMA=1, EVEN=1)),
    ("one_pass", dict(ONE_PASS=1)),
    ("one_pass_even", dict(ONE_PASS=1, EVEN=1)),
    ("reverse", dict(REVERSE=1)),
    ("even_acc_2d_reverse", dict(EVEN=1, ACC_2D=1, PREFETCH=1, REVERSE=1)),
    ("fast_exp", dict(FAST_EXP=1)),  # inline PTX: on a GPU only
    ("fast_exp_even_acc_2d", dict(FAST_EXP=1, EVEN=1, ACC_2D=1, PREFETCH=1)),
    ("fast_exp_one_pass", dict(FAST_EXP=1, ONE_PASS=1)),
    # R in two tiles (TAIL=1 here: the tiles of dispatch_triton.strided_configs.head_tail(R)): R = 48 and 40
    # fill both, R = 19 masks 1 of the tail's 4 rows; R of 16 and 32 take one tile
    ("one_pass_tail", dict(ONE_PASS=1, TAIL=1)),
    ("one_pass_tail_even", dict(ONE_PASS=1, EVEN=1, TAIL=1)),
    ("fast_exp_one_pass_tail", dict(FAST_EXP=1, ONE_PASS=1, EVEN=1, TAIL=1)),
    # offsets within a slab in 32 bits
    ("one_pass_i32", dict(ONE_PASS=1, I32=1)),
    ("one_pass_tail_even_i32", dict(ONE_PASS=1, EVEN=1, TAIL=1, I32=1)),
    ("keep_x", dict(KEEP_X=1)),
    ("keep_x_even_acc_2d", dict(KEEP_X=1, EVEN=1, ACC_2D=1, PREFETCH=1)),
    # R in tiles held by programs that exchange their partials in one launch (softmax, log_softmax)
    ("coop", dict(COOP=1)),
    ("coop_even_i32", dict(COOP=1, EVEN=1, I32=1)),
    ("fast_exp_coop", dict(FAST_EXP=1, COOP=1, EVEN=1)),
]


def _runs_here(extra: dict) -> None:
    if extra.get("FAST_EXP") and DEV != "cuda":
        pytest.skip("FAST_EXP is inline PTX: a GPU only")
# (name, base shape, view, dim): R a multiple of 8 and inner of 16 (EVEN engages) but the last;
# strides of 16 bytes (TMA's alignment)
VARIANT_LAYOUTS = [
    ("dim0_2d", (32, 48), lambda t: t, 0),
    ("dim1_4d", (2, 16, 4, 4), lambda t: t, 1),
    ("transposed", (48, 32), lambda t: t.t(), -1),
    ("sliced_rows_dim0", (40, 64), lambda t: t[:, :32], 0),
    ("uneven_dim0", (19, 40), lambda t: t, 0),
]


def _variant(extra: dict, R: int, split: int = 1) -> dict:
    if extra.get("COOP"):  # tiles of 8 rows (split 1) or 16: R = 40 in 5 tiles or 3, R = 19 in 3 or 2
        br = 8 if split == 1 else 16
        return dict(S._cfg(16, br, 2, -(-R // br)), **extra)
    if extra.get("TAIL"):
        head, tail = S.head_tail(R)
        return dict(S._cfg(16, head, 2), **dict(extra, TAIL=tail))
    if extra.get("ONE_PASS"):
        return dict(S._cfg(16, S._np2(R), 2), **extra)
    return dict(S._cfg(16, 8, 2, split), **extra)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name,shape,view,dim", VARIANT_LAYOUTS, ids=[c[0] for c in VARIANT_LAYOUTS])
@pytest.mark.parametrize("vname,extra", VARIANT_CONFIGS, ids=[c[0] for c in VARIANT_CONFIGS])
def test_each_variant_matches_torch_on_each_layout(vname, extra, name, shape, view, dim, dtype):
    _runs_here(extra)
    g = torch.Generator().manual_seed(1)
    x = view(torch.randn(*shape, generator=g).to(DEV, dtype))
    d = dim % x.dim()
    splits = (1,) if extra.get("ONE_PASS") else (1, 2)
    for op in OPS if not extra.get("COOP") else OPS[:2]:  # COOP: softmax and log_softmax
        for split in splits:
            got, want = _run(op, x, d, _variant(extra, x.shape[d], split))
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got.float(), want.float(), **_tol(dtype), msg=lambda m: f"{op} {split}: {m}")


@pytest.mark.parametrize("split", [1, 3], ids=["one_program", "r_split_over_3"])
@pytest.mark.parametrize("vname,extra", VARIANT_CONFIGS, ids=[c[0] for c in VARIANT_CONFIGS])
@pytest.mark.parametrize("op", OPS)
def test_each_variant_on_special_columns(op, vname, extra, split):
    # R = 40 in chunks of 8 (EVEN engages: 16 columns): -inf runs of 20 and 39 rows, all -inf,
    # NaN and +inf late, NaN next to +inf, a column offset by -1000, a column of +inf twice
    if split > 1 and extra.get("ONE_PASS"):
        pytest.skip("ONE_PASS reads R in one program")
    if extra.get("COOP") and op == "logsumexp":
        pytest.skip("COOP writes softmax and log_softmax")
    _runs_here(extra)
    x = _special_columns(16)
    x[3, 6], x[30, 6] = INF, NAN
    x[2, 7], x[37, 7] = INF, INF
    x[39, 8] = -INF
    x[0, 9] = NAN
    x = x.to(DEV)
    got, want = _run(op, x, 0, _variant(extra, 40, split))
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("extra", [dict(EVEN=1, PREFETCH=1), dict(EVEN=1, PREFETCH=1, ACC_2D=1), {}],
                         ids=["even_prefetch", "acc_2d", "masked"])
def test_wide_column_blocks_merge_their_partials_in_steps(extra):
    # 1024 columns by 16 splits: more partials than one step of the merge holds (8 a step), so the
    # merge rescales across steps; -inf over the first step's rows, NaN and +inf in the last's
    x = torch.randn(64 * 16, 1024 + 24)[:, 12:1036]  # strided rows too: 1024 of 1048
    x[:600, 3] = -INF
    x[:, 4] = -INF
    x[1000, 5] = NAN
    x[1001, 6] = INF
    x[0, 7], x[1020, 7] = -1e4, 80.0
    x = x.to(DEV)
    cfg = dict(S._cfg(1024, 4, 4, 16), **extra)
    p = S.plan("softmax", x.shape, x.stride(), (0,))
    launcher = S.StridedLauncher("softmax", p, x.dtype, x.shape, DEV, cfg)
    assert launcher.grid == (1, 16)
    assert launcher.direct[1].tail["MERGE_S"] == 8
    before = x.clone()
    for op in OPS:
        got, want = _run(op, x, 0, cfg)
        torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5, msg=lambda m: f"{op}: {m}")
    assert torch.equal(x.nan_to_num(), before.nan_to_num())


@pytest.mark.parametrize("cols", [1024, 1000], ids=["even", "ragged"])
def test_logsumexp_finish_merges_in_narrower_blocks_than_the_partials(cols):
    # two blocks of 512 columns by 8 splits: the finish, which only merges, takes blocks of 16
    # columns (64 programs here; two per SM is the aim) instead of two programs; a ragged last block
    x = torch.randn(64, cols)
    x[:40, 3] = -INF
    x[:, 4] = -INF
    x[50, 5] = NAN
    x[60, 6] = INF
    x[0, cols - 1], x[63, cols - 1] = -1e4, 80.0
    x = x.to(DEV)
    cfg = dict(S._cfg(512, 8, 4, 8), EVEN=1, PREFETCH=1)
    p = S.plan("logsumexp", x.shape, x.stride(), (0,))
    launcher = S.StridedLauncher("logsumexp", p, x.dtype, (cols,), DEV, cfg)
    partials, finish = launcher.direct
    assert partials.grid[:2] == (2, 8) and partials.tail["BLOCK_I"] == 512
    assert finish.tail["BLOCK_I"] == 16 and finish.grid[:2] == (-(-cols // 16), 1)
    assert finish.tail["EVEN"] == (cols % 512 == 0)
    got, want = _run("logsumexp", x, 0, cfg)
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5)
    # softmax's finish writes its split of R: it keeps the partials' blocks
    p = S.plan("softmax", x.shape, x.stride(), (0,))
    finish = S.StridedLauncher("softmax", p, x.dtype, x.shape, DEV, cfg).direct[1]
    assert finish.tail["BLOCK_I"] == 512 and finish.grid[:2] == (2, 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_short_r_default_reads_r_once_in_the_tuned_space(dtype):
    # softmax over dim 1 of (B, R, H, W) with R of 1024 or less: the default holds all of R in one
    # tile at 64 elements a thread, and the tuned space holds the default (its first candidate)
    size = torch.tensor([], dtype=dtype).element_size()
    for b, r, inner in ((8, 19, 131072), (256, 64, 4096), (128, 96, 3136), (64, 256, 3136), (32, 1024, 4096)):
        p = S.plan("softmax", (b, r, inner), (r * inner, inner, 1), (1,))
        cfg = S.default_config(p, torch.device("cpu"), size)
        rows = cfg["BLOCK_R"] + cfg.get("TAIL", 0)
        assert cfg.get("ONE_PASS") and rows >= r and cfg["BLOCK_I"] >= 16, (b, r, inner, cfg)
        if cfg.get("TAIL"):  # 2-byte types, R not a power of two: two tiles, up to 96 elements a thread
            assert size == 2 and r & (r - 1) and rows < S._np2(r), (b, r, inner, cfg)
            assert cfg["BLOCK_I"] * rows <= 96 * 32 * cfg["num_warps"], (b, r, inner, cfg)
        else:
            assert cfg["BLOCK_I"] * cfg["BLOCK_R"] == 64 * 32 * cfg["num_warps"], (b, r, inner, cfg)
        assert S.config_space(p, torch.device("cpu"), size)[0] == cfg
    # the default for a 132-SM device, run: R = 96 (a tile of 128 rows, masked) and 40 columns, a
    # block of 32 and a partial one (90 x 3 blocks of 16: two programs per SM)
    x = torch.randn(90, 96, 40)
    x[0, :, 5] = -INF
    x[1, 7, 6] = NAN
    x = x.to(DEV, dtype)
    p = S.plan("softmax", x.shape, x.stride(), (1,))
    cfg = S.default_config(p, torch.device("cpu"), size)
    assert cfg.get("ONE_PASS"), cfg
    for op in ("softmax", "log_softmax"):
        got, want = _run(op, x, 1, cfg)
        torch.testing.assert_close(got.float(), want.float(), equal_nan=True, **_tol(dtype))


def test_two_tile_default_pads_r_less_in_2_byte_types():
    # bf16 softmax over R = 150 (an ADE20K class dim): rows of 128 + 32, one warp, 16 columns;
    # not in fp32, nor where two tiles pad as much as one (R = 200: 128 + 128) or nearly (R = 384)
    cpu = torch.device("cpu")

    def default(op, r, size, inner=16384, b=8):
        return S.default_config(S.plan(op, (b, r, inner), (r * inner, inner, 1), (1,)), cpu, size)

    cfg = default("softmax", 150, 2)
    assert (cfg["BLOCK_R"], cfg.get("TAIL"), cfg["num_warps"], cfg["BLOCK_I"]) == (128, 32, 1, 16), cfg
    assert cfg in S.config_space(S.plan("softmax", (8, 150, 16384), (150 * 16384, 16384, 1), (1,)), cpu, 2)
    assert default("softmax", 640, 2, b=16)["TAIL"] == 128
    for r, size in ((150, 4), (200, 2), (384, 2), (768, 2), (256, 2), (12, 2)):
        assert not default("softmax", r, size).get("TAIL"), (r, size)
    # logsumexp: two tiles up to R = 128 (past it, wide column blocks); fp32 holds R of up to 256 in one tile
    assert default("logsumexp", 96, 2).get("TAIL") == 32
    assert not default("logsumexp", 150, 2).get("ONE_PASS")
    assert default("logsumexp", 150, 4).get("ONE_PASS") and default("logsumexp", 150, 4)["BLOCK_R"] == 256
    # run: R = 150 by 40 columns (a full block of 16, a partial one), -inf, NaN, +inf columns
    x = torch.randn(3, 150, 40)
    x[0, :, 5] = -INF
    x[1, 149, 6] = NAN
    x[2, 140, 7] = INF
    x[0, 0, 8], x[0, 149, 8] = -3e4, 60.0
    x = x.to(DEV, torch.bfloat16)
    cfg = dict(S._cfg(16, 128, 1), ONE_PASS=1, EVEN=1, TAIL=32)
    for op in OPS:
        got, want = _run(op, x, 1, cfg)
        torch.testing.assert_close(got.float(), want.float(), equal_nan=True, **_tol(torch.bfloat16),
                                   msg=lambda m: f"{op}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_logsumexp_over_many_columns_takes_wide_blocks_by_default(dtype):
    # dim 1 of (17, 300, 256): 17 blocks of 256 columns, R shared by 8 programs each (136 programs
    # for a 132-SM device), so the default reads 256 columns a program, 8 rows a chunk, each warp
    # on its own columns (R too long to hold in one tile or two: over 128 in bf16, over 256 in fp32)
    x = torch.randn(17, 300, 256)
    x[0, :150, 3] = -INF  # a run of -inf longer than any chunk, then finite values
    x[1, :, 4] = -INF
    x[2, 290, 5] = NAN
    x[3, 9, 6] = INF
    x[4, 0, 7], x[4, 299, 7] = -3e4, 60.0
    x = x.to(DEV, dtype)
    p = S.plan("logsumexp", x.shape, x.stride(), (1,))
    cfg = S.default_config(p, x.device, x.element_size())
    assert cfg["BLOCK_I"] == 256 and cfg["BLOCK_R"] == 8 and cfg["SPLIT_R"] == 8
    assert cfg["num_warps"] == {2: 1, 4: 2}[x.element_size()] and not cfg.get("ACC_2D")
    got = dispatch.logsumexp(x, 1, backend="triton")
    torch.testing.assert_close(got.float(), torch.logsumexp(x.float(), 1), equal_nan=True, **_tol(dtype))
    # the same columns for softmax: not wide
    assert S.default_config(S.plan("softmax", x.shape, x.stride(), (1,)), x.device, 2)["BLOCK_I"] != 256


@pytest.mark.skipif(DEV != "cuda", reason="KEEP_X is a GPU default")
def test_softmax_keeps_x_in_l2_by_default_where_it_fits():
    # x read twice (R split): keep its lines in L2 for the second read where x fits in it; not
    # where it doesn't, nor where R is read once, nor for logsumexp (one read)
    def cfg(op, rows, cols):
        p = S.plan(op, (rows, cols), (cols, 1), (0,))
        return S.default_config(p, torch.device("cuda"), 2)

    assert not cfg("softmax", 16384, 8192).get("KEEP_X")  # 256 MB
    assert cfg("softmax", 256, 8192).get("ONE_PASS") and not cfg("softmax", 256, 8192).get("KEEP_X")
    assert not cfg("logsumexp", 4096, 4096).get("KEEP_X")
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)  # 8 MB
    c = cfg("softmax", 4096, 1024)
    assert c.get("KEEP_X") and c["SPLIT_R"] > 1
    for op in ("softmax", "log_softmax"):
        got, want = _run(op, x, 0, c)
        torch.testing.assert_close(got.float(), want.float(), **_tol(torch.bfloat16))


def test_logsumexp_over_dim0_takes_wide_blocks_where_r_fills_the_device():
    # dim 0 of 4096 x 4096: 16 blocks of 256, R shared by 128 (2048 one-warp programs); of 100 x
    # 4096, R too short to share among a program per SM: the tiles
    def cfg(rows):
        p = S.plan("logsumexp", (rows, 4096), (4096, 1), (0,))
        return S.default_config(p, torch.device("cpu"), 2)

    assert (cfg(4096)["BLOCK_I"], cfg(4096)["SPLIT_R"], cfg(4096)["num_warps"]) == (256, 128, 1)
    assert cfg(100)["BLOCK_I"] != 256
    x = torch.randn(512, 512)
    x[:300, 3] = -INF
    x[:, 4] = -INF
    x[400, 5] = NAN
    x = x.to(DEV)
    p = S.plan("logsumexp", x.shape, x.stride(), (0,))
    wide = S._wide_config(p, 4, 8)  # as on an 8-SM device: 2 blocks, R shared by 16 (4 chunks each)
    assert wide is not None and wide["SPLIT_R"] == 16
    got, want = _run("logsumexp", x, 0, wide)
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5)


def test_a_small_logsumexp_whose_r_would_be_shared_is_one_launch_by_default():
    # dim 0 of (512, 64) and (4096, 64): R long enough that the tiles would share it among programs
    # (partials, then a launch to merge them); small enough to read all of R in one tile a program:
    # one launch. The second step of logsumexp over dims 0 and 2 of (512, 64, C) is the first.
    def cfg(rows, cols, itemsize=4):
        return S.default_config(S.plan("logsumexp", (rows, cols), (cols, 1), (0,)), torch.device("cpu"), itemsize)

    for rows, cols, block_i in ((512, 64, 16), (4096, 64, 8)):
        c = cfg(rows, cols)
        assert c.get("ONE_PASS") and c["SPLIT_R"] == 1 and c["BLOCK_R"] == rows and c["BLOCK_I"] == block_i
    assert cfg(4096, 128)["SPLIT_R"] > 1  # 512K elements: past the bound, R shared
    assert cfg(8192, 32)["SPLIT_R"] > 1  # R too long for a tile of 8 columns
    sm = S.plan("softmax", (512, 64), (64, 1), (0,))  # softmax writes along R: not this default
    assert not S.default_config(sm, torch.device("cpu"), 4).get("ONE_PASS")
    x = torch.randn(512, 64)
    x[:300, 3] = -INF  # a run of -inf longer than most of R, then finite values
    x[:, 4] = -INF
    x[400, 5] = NAN
    x[7, 6] = INF
    x = x.to(DEV)
    got, want = _run("logsumexp", x, 0, cfg(512, 64))
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5)
    y = torch.randn(512, 8, 64, device=DEV, dtype=torch.bfloat16)  # dims 0 and 2: rows of 64, then (512, 8) over 0
    assert cfg(512, 8).get("ONE_PASS")
    torch.testing.assert_close(dispatch.logsumexp(y, (0, 2), backend="triton").float(),
                               torch.logsumexp(y.float(), (0, 2)), **_tol(torch.bfloat16))


@pytest.mark.parametrize("extra", [{}, dict(EVEN=1, PREFETCH=1)], ids=["masked", "even_prefetch"])
def test_r_split_over_more_programs_than_the_default_space_gives(extra):
    x = torch.randn(1024, 16)  # 128 splits of 8 rows: a merge of 128 partials per column
    x[:700, 3] = -INF
    x[900, 5] = NAN
    x = x.to(DEV)
    cfg = dict(S._cfg(16, 8, 2, 128), **extra)
    p = S.plan("softmax", x.shape, x.stride(), (0,))
    assert S.StridedLauncher("softmax", p, x.dtype, x.shape, DEV, cfg).grid == (1, 128)
    for op in OPS:
        got, want = _run(op, x, 0, cfg)
        torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5)


def test_even_engages_only_where_every_chunk_is_full():
    def flags(shape, cfg):
        p = S.plan("softmax", shape, (shape[1], 1), (0,))
        return [k.tail["EVEN"] for k in S.StridedLauncher("softmax", p, torch.float32, shape, DEV, cfg).direct]

    assert flags((32, 48), dict(S._cfg(16, 8, 2), EVEN=1)) == [True]
    assert flags((32, 48), dict(S._cfg(16, 8, 2, 2), EVEN=1)) == [True, True]
    assert flags((36, 48), dict(S._cfg(16, 8, 2), EVEN=1)) == [False]  # R % BLOCK_R
    assert flags((32, 40), dict(S._cfg(16, 8, 2), EVEN=1)) == [False]  # INNER % BLOCK_I
    assert flags((32, 48), S._cfg(16, 8, 2)) == [False]  # off unless asked for


def test_fast_exp_is_refused_by_name_under_the_interpreter():
    if DEV == "cuda":
        pytest.skip("the interpreter's refusal: on a GPU FAST_EXP runs")
    p = S.plan("softmax", (32, 16), (16, 1), (0,))
    with pytest.raises(ValueError, match="'FAST_EXP' is inline PTX"):
        S.StridedLauncher("softmax", p, torch.float32, (32, 16), DEV, dict(S._cfg(16, 8, 2), FAST_EXP=1))


def test_tma_refuses_what_its_descriptor_cannot_read():
    x = torch.randn(19, 33).to(DEV)  # rows of 33 floats: 132 bytes, not a multiple of 16
    p = S.plan("softmax", x.shape, x.stride(), (0,))
    launcher = S.StridedLauncher("softmax", p, x.dtype, x.shape, DEV, dict(S._cfg(16, 8, 2), TMA=1))
    with pytest.raises(ValueError, match="'TMA' needs a 16-byte aligned input"):
        launcher.run(x)
    y = torch.randn(8, 32).to(DEV).t()  # dim 0 of a transposed view: the inner dim is not unit-stride
    q = S.plan("softmax", y.shape, y.stride(), (0,))
    with pytest.raises(ValueError, match="'TMA' reads \\(R, inner\\) tiles"):
        S.StridedLauncher("softmax", q, y.dtype, y.shape, DEV, dict(S._cfg(16, 8, 2), TMA=1))


def test_bad_variant_configs_are_errors_naming_them():
    p = S.plan("softmax", (32, 8), (8, 1), (0,))
    with pytest.raises(ValueError, match="'ONE_PASS' needs 'BLOCK_R' >= R \\(got BLOCK_R 16, R 32\\)"):
        S.StridedLauncher("softmax", p, torch.float32, (32, 8), DEV, dict(S._cfg(16, 16, 2), ONE_PASS=1))
    with pytest.raises(ValueError, match="'SPLIT_R' must be 1"):
        S.StridedLauncher("softmax", p, torch.float32, (32, 8), DEV, dict(S._cfg(16, 32, 2, 2), ONE_PASS=1))
    with pytest.raises(ValueError, match="'ACC_2D' must be 0 or 1 \\(got 2\\)"):
        S.StridedLauncher("softmax", p, torch.float32, (32, 8), DEV, dict(S._cfg(16, 8, 2), ACC_2D=2))
    with pytest.raises(ValueError, match="'num_stages' must be 1 to 8 \\(got 0\\)"):
        S.StridedLauncher("softmax", p, torch.float32, (32, 8), DEV, dict(S._cfg(16, 8, 2), num_stages=0))
    with pytest.raises(ValueError, match="'TAIL' is the rows of a second tile of 'ONE_PASS'"):
        S.StridedLauncher("softmax", p, torch.float32, (32, 8), DEV, dict(S._cfg(16, 16, 2), TAIL=16))
    with pytest.raises(ValueError, match="a power of two, with ONE_PASS=1 \\(got TAIL 12, ONE_PASS 1\\)"):
        S.StridedLauncher("softmax", p, torch.float32, (32, 8), DEV, dict(S._cfg(16, 16, 2), ONE_PASS=1, TAIL=12))
    # the head must be shorter than R and the two tiles hold all of it; the error names the pair that does
    q = S.plan("softmax", (150, 8), (8, 1), (0,))
    with pytest.raises(ValueError, match="BLOCK_R < R <= BLOCK_R \\+ TAIL \\(got BLOCK_R 128, TAIL 16, R 150\\); "
                                         "for R = 150: BLOCK_R 128, TAIL 32"):
        S.StridedLauncher("softmax", q, torch.float32, (150, 8), DEV, dict(S._cfg(16, 128, 2), ONE_PASS=1, TAIL=16))
    with pytest.raises(ValueError, match="R = 32 fits one tile: BLOCK_R 32 without TAIL"):
        S.StridedLauncher("softmax", p, torch.float32, (32, 8), DEV, dict(S._cfg(16, 32, 2), ONE_PASS=1, TAIL=16))


def test_i32_offsets_only_where_every_offset_of_a_tile_fits():
    # I32 asks for a tile's offsets in 32 bits; the launcher keeps 64 where a row or column offset
    # of the tile (padded rows and columns included) would pass 2**31, in the input or the output
    cfg = dict(S._cfg(16, 16, 2), ONE_PASS=1, I32=1)

    def i32(x_strides, out_strides, R=16, inner=40):
        p = S.StridedPlan(2, R, inner, x_strides, out_strides)
        return S.StridedLauncher("softmax", p, torch.float32, (2, R, inner), DEV, cfg).direct[0].tail["I32"]

    assert i32((16 * 40, 40, 1), (16 * 40, 40, 1))
    assert not i32((2**32, 2**28, 1), (16 * 40, 40, 1))  # 15 rows of 2**28 elements: past 2**31
    assert not i32((16 * 40, 40, 1), (2**32, 2**28, 1))
    assert i32((2**33, 2**27 - 8, 1), (16 * 40, 40, 1))  # the outer stride is added in 64 bits
    assert not S.StridedLauncher("softmax", S.StridedPlan(2, 16, 40, (640, 40, 1), (640, 40, 1)), torch.float32,
                                 (2, 16, 40), DEV, dict(S._cfg(16, 8, 2), I32=1)).direct[0].tail["I32"]  # R walked


def test_variant_space_candidates_are_valid_and_correct():
    x = torch.randn(64, 32).to(DEV)
    p = S.plan("logsumexp", x.shape, x.stride(), (0,))
    space = S.variant_space(p, tile_max=2048, stages=(2,), warps=(4,))
    assert len({tuple(sorted(c.items())) for c in space}) == len(space)
    for key in ("ACC_2D", "EVEN", "ONE_PASS", "PREFETCH", "num_stages"):
        assert any(key in c for c in space), key
    assert S.default_config(p) not in space  # beyond the tuned space
    want = torch.logsumexp(x, 0)
    for cfg in space:
        got = S.StridedLauncher("logsumexp", p, x.dtype, want.shape, x.device, cfg).run(x)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=lambda m, c=cfg: f"{c}: {m}")
    big = S.StridedPlan(1, 4096, 4096, (0, 4096, 1), (0, 4096, 1))
    for cfg in S.variant_space(big):
        S.validate(cfg)
        assert cfg["BLOCK_I"] * cfg["BLOCK_R"] <= 16384


def test_coop_tiles_meet_in_every_call_and_never_read_an_earlier_calls_partials():
    # the same launcher on new inputs: each call's groups merge their own partials (words of the
    # call before, left in the slot buffer, must not count); 5 tiles of 8 rows, 3 column blocks
    p = S.plan("softmax", (40, 48), (48, 1), (0,))
    cfg = dict(S._cfg(16, 8, 2, 5), COOP=1, EVEN=1)
    launcher = S.StridedLauncher("softmax", p, torch.float32, (40, 48), DEV, cfg)
    assert launcher.grid == (3 * 5,)
    for seed in range(3):
        x = torch.randn(40, 48, generator=torch.Generator().manual_seed(seed)).to(DEV) * (seed + 1)
        torch.testing.assert_close(launcher.run(x), torch.softmax(x, 0), atol=1e-5, rtol=1e-5)


def test_coop_configs_that_cannot_run_are_errors_naming_them():
    p = S.plan("softmax", (40, 16), (16, 1), (0,))
    with pytest.raises(ValueError, match="'COOP' holds a program's share of R in one tile: 'BLOCK_R' >= cdiv"
                                         "\\(R, SPLIT_R\\) \\(got BLOCK_R 8, SPLIT_R 4, R 40: 10 rows a program\\)"):
        S.StridedLauncher("softmax", p, torch.float32, (40, 16), DEV, dict(S._cfg(16, 8, 2, 4), COOP=1))
    q = S.plan("logsumexp", (40, 16), (16, 1), (0,))
    with pytest.raises(ValueError, match="'COOP' writes softmax and log_softmax"):
        S.StridedLauncher("logsumexp", q, torch.float32, (16,), DEV, dict(S._cfg(16, 8, 2, 5), COOP=1))
    with pytest.raises(ValueError, match="'COOP' .* not ONE_PASS, ACC_2D"):
        S.StridedLauncher("softmax", p, torch.float32, (40, 16), DEV,
                          dict(S._cfg(16, 8, 2, 5), COOP=1, ONE_PASS=1, ACC_2D=1))
    with pytest.raises(ValueError, match="'COOP' must be 0 or 1 \\(got 2\\)"):
        S.StridedLauncher("softmax", p, torch.float32, (40, 16), DEV, dict(S._cfg(16, 8, 2, 5), COOP=2))
