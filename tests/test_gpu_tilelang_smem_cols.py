"""On a CUDA device (sm_90+): TileLang's tiles in shared memory over a dim that is not the last
(``smem_cols``) against torch: every op and dtype, columns of -inf, +inf and NaN, R cut unevenly,
clusters of 1 to 16, a view that starts mid-vector, through dispatch's default, and replayed
from a CUDA graph; the input left as it was."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

pytest.importorskip("tilelang")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
    pytest.skip("needs an sm_90+ GPU", allow_module_level=True)

import dispatch  # noqa: E402
from dispatch.backend import spec_of  # noqa: E402
from dispatch_tilelang import smem_cols, strided  # noqa: E402

OPS = ("softmax", "log_softmax", "logsumexp")
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}
SHAPES = [((4, 300, 2, 64), 1), ((2048, 512), 0), ((3, 1000, 96), 1), ((2, 4096, 256), 1)]


def edge_input(shape, dim, dtype, seed=0):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3  # (the same values in any run)
    v = x.movedim(dim, -1).reshape(-1, shape[dim])  # one row per column of the call
    inf = float("inf")
    v[0] = -inf
    v[1, shape[dim] // 3] = inf
    v[2, shape[dim] // 2] = float("nan")
    v[3, : shape[dim] - 1] = -inf  # -inf for longer than a tile, then one value
    v[4] *= 40
    x = v.reshape(*[s for i, s in enumerate(shape) if i != dim], shape[dim]).movedim(-1, dim).contiguous()
    return x.to(dtype).cuda()


def reference(op, x, dim, out_dtype=None):
    xf = x.float()
    y = torch.logsumexp(xf, dim) if op == "logsumexp" else getattr(torch, op)(xf, dim)
    return y.to(out_dtype or x.dtype)


def check(y, want):
    tol = TOL[want.dtype]
    assert y.shape == want.shape and y.stride() == want.stride()
    torch.testing.assert_close(y, want, rtol=tol[0], atol=tol[1], equal_nan=True)
    assert torch.equal(torch.isnan(y), torch.isnan(want))


@pytest.mark.parametrize("shape,dim", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("op", OPS)
def test_default_tiles_match_torch_and_leave_the_input(op, dtype, shape, dim):
    x = edge_input(shape, dim, dtype)
    assert strided.default_config(spec_of(op, x, dim), "cuda").get("smem") == 1
    before = x.clone()
    y = getattr(dispatch, op)(x, dim, backend="tilelang")
    check(y, reference(op, x, dim))
    assert torch.equal(x.view(torch.uint8), before.view(torch.uint8))  # bit for bit: x holds NaNs


@pytest.mark.parametrize("op", OPS)
def test_every_config_of_the_space_matches_torch(op):
    shape, dim = (2, 4096, 256), 1
    x = edge_input(shape, dim, torch.bfloat16)
    spec = spec_of(op, x, dim)
    space = [c for c in strided.config_space(spec, "cuda") if c.get("smem")]
    assert {c["cluster"] for c in space} >= {4, 8, 16}
    for cfg in space:
        run = strided.kernel(spec, dispatch.backend.Config.of(cfg), "cuda")
        check(run(x), reference(op, x, dim))


def test_a_view_that_starts_mid_vector():
    shape, dim = (4, 512, 128), 1
    want = edge_input(shape, dim, torch.bfloat16)
    base = torch.empty(want.numel() + 1, device="cuda", dtype=torch.bfloat16)
    base[1:] = want.flatten()
    x = base[1:].view(shape)  # 2 bytes past a 16-byte boundary: copied first, never read misaligned
    assert x.data_ptr() % 16 and strided.default_config(spec_of("softmax", x, dim), "cuda").get("smem") == 1
    for op in OPS:
        check(getattr(dispatch, op)(x, dim, backend="tilelang"), reference(op, x, dim))


def test_replayed_from_a_cuda_graph_with_new_inputs():
    shape, dim = (8, 1024, 512), 1
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    dispatch.softmax(x, dim, backend="tilelang")  # built and armed before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = dispatch.softmax(x, dim, backend="tilelang")
    for _ in range(2):
        x.copy_(torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 5)
        graph.replay()
        check(y, reference("softmax", x, dim))


def test_dispatch_picks_the_tiles_for_softmax_over_a_leading_dim():
    x = torch.randn(16, 1024, 64, 64, device="cuda", dtype=torch.bfloat16)
    d = dispatch.explain("softmax", x, 1).decision
    if {"triton", "tilelang"} <= set(dispatch.backends()) and d.backend != "tilelang" and "estimated" in d.reason:
        pytest.fail(f"the cards should send this call to TileLang's tiles: {d.reason}")
    check(dispatch.softmax(x, 1), reference("softmax", x, 1))


def test_the_launch_check_holds_on_the_device():
    assert smem_cols.check_launch((2, 4096, 256), "bfloat16", 64, 256, 16, 128) is None


@pytest.mark.parametrize("op", OPS)
def test_a_config_from_a_longer_R_leaves_its_last_ctas_empty_and_right(op):
    """16 CTAs of 160 rows (a config of R = 4096) over R = 2049: the last three hold no row of R;
    they load nothing, write nothing, and add (-inf, 0) to each column's merge."""
    shape, dim = (2049, 4096), 0
    cfg = {"smem": 1, "block_i": 64, "cluster": 16, "threads": 128}
    assert smem_cols.tile_rows(2049, "bfloat16", 64, 16, 128) * 15 >= 2049
    x = edge_input(shape, dim, torch.bfloat16)
    spec = spec_of(op, x, dim)
    run = strided.kernel(spec, dispatch.backend.Config.of(cfg), "cuda")
    check(run(x), reference(op, x, dim))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_matches_torch_on_edge_columns_and_columns_far_from_zero(op, dtype):
    """Each exponent a fused multiply-add against the shift's rounded product (softmax: one exp an
    element, kept in shared memory): that rounding, up to 2e-3 at columns about 3e4, must cancel
    (softmax) or be taken off (log_softmax, logsumexp), at every cluster of the call's configs."""
    shape, dim = (2, 4096, 256), 1
    far = torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 3
    far[0] += 1000
    far[1] = far[1] / 8 - (20000 if dtype == torch.bfloat16 else 30000)
    key, name = (2, 4096, 256), str(dtype).removeprefix("torch.")
    for x in (edge_input(shape, dim, dtype), far.to(dtype).cuda()):
        spec = spec_of(op, x, dim)
        for cfg in {c["cluster"]: c for c in smem_cols.configs(key, name)}.values():
            before = x.clone()
            run = strided.kernel(spec, dispatch.backend.Config.of(dict(cfg, smem=1)), "cuda")
            check(run(x), reference(op, x, dim))
            assert torch.equal(x.view(torch.uint8), before.view(torch.uint8))
