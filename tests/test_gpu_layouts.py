"""On a CUDA device: the Triton and TileLang backends over dims that are not unit-stride and strided rows, at size."""

from __future__ import annotations

import pytest
import torch

import dispatch
from backends_needed import require_backend
from dispatch.tolerance import mismatch

pytestmark = pytest.mark.gpu

# (name, shape allocated, view of it, dim): the layouts of benchmarks/bench_layouts.py and a few odd sizes
LAYOUTS = [
    ("dim0_4096x4096", (4096, 4096), lambda t: t, 0),
    ("dim1_32x1024x64x64", (32, 1024, 64, 64), lambda t: t, 1),
    ("dim1_8x3x224x224", (8, 3, 224, 224), lambda t: t, 1),
    ("dim1_8x150x128x128", (8, 150, 128, 128), lambda t: t, 1),  # segmentation logits: R of 150 in a tile of 256
    ("transposed_4096x1000", (4096, 1000), lambda t: t.t(), -1),
    ("dim0_slice_1000x3000_of_4096", (1000, 4096), lambda t: t[:, :3000], 0),
    ("rows_4096x4000_of_4096", (4096, 4096), lambda t: t[:, :4000], -1),
    ("permuted_64x77x96", (64, 77, 96), lambda t: t.permute(2, 0, 1), 1),
    ("dim1_of_sliced_16x256x64x96", (16, 256, 64, 96), lambda t: t[:, :, ::2, :], 1),  # kept dims: three groups
]


@pytest.fixture(autouse=True)
def triton_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    require_backend("triton")


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,shape,view,dim", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_layout_at_size_matches_torch_without_touching_the_input(name, shape, view, dim, dtype, op, backend):
    info = dispatch.backends().get(backend)
    if info is None or not info.available:
        pytest.skip(f"{backend} backend unavailable")
    g = torch.Generator(device="cuda").manual_seed(0)
    x = view((torch.randn(shape, device="cuda", generator=g) * 4).to(dtype))
    before = x.clone()
    try:
        got = getattr(dispatch, op)(x, dim, backend=backend)
    except dispatch.BackendRefusedError as exc:
        # Triton serves every layout here; TileLang serves the strided rows (rows_*) too
        assert backend == "tilelang" and not name.startswith("rows_"), exc
        pytest.skip(f"tilelang refuses it: {exc}")
    want = getattr(torch, op)(x.double(), dim).to(dtype)
    assert got.stride() == getattr(torch, op)(x, dim).stride()
    why = mismatch(got, want)
    assert why is None, why
    assert torch.equal(x, before)


# (name, shape allocated, view of it): rows one stride apart, reduced over the last dim; TileLang's
# row kernels read them in place on CUDA (16-byte vectors narrowed to divide the stride, a view
# that starts mid-vector copied into aligned rows of the same stride first)
STRIDED_ROWS = [
    ("rows_16384x4000_of_4096", (16384, 4096), lambda t: t[:, :4000]),
    ("rows_4096x1000_of_1024", (4096, 1024), lambda t: t[:, :1000]),
    ("rows_3d_8x512x1000_of_1024", (8, 512, 1024), lambda t: t[:, :, :1000]),
    ("rows_misaligned_4096x4095_of_4096", (4096, 4096), lambda t: t[:, 1:]),
    ("rows_misaligned_4096x4000_of_4096", (4096, 4096), lambda t: t[:, 2:4002]),
    ("rows_4096x1000_of_1002", (4096, 1002), lambda t: t[:, :1000]),  # bf16: 2-element vectors
    ("rows_64x65536_of_65600", (64, 65600), lambda t: t[:, :65536]),  # the cluster-split family
]


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,shape,view", STRIDED_ROWS, ids=[c[0] for c in STRIDED_ROWS])
def test_tilelang_row_kernels_read_strided_rows_in_place(name, shape, view, dtype, op):
    require_backend("tilelang")
    g = torch.Generator(device="cuda").manual_seed(0)
    x = view((torch.randn(shape, device="cuda", generator=g) * 4).to(dtype))
    before = x.clone()
    assert "read in place by the row kernels" in str(dispatch.explain(op, x, -1, backend="tilelang"))
    want = getattr(torch, op)(x.double(), -1).to(dtype)
    for _ in range(3):  # the adapter's call first, then the tvm-ffi executable's once checked
        got = getattr(dispatch, op)(x, -1, backend="tilelang")
        assert got.stride() == getattr(torch, op)(x, -1).stride()
        why = mismatch(got, want)
        assert why is None, why
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_logsumexp_over_dims_that_do_not_collapse_at_size(dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(512, 64, 512, device="cuda", generator=g) * 4).to(dtype)
    before = x.clone()
    got = dispatch.logsumexp(x, (0, 2), backend="triton")  # in two steps
    why = mismatch(got, torch.logsumexp(x.double(), (0, 2)).to(dtype))
    assert why is None, why
    assert torch.equal(x, before)


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_inf_runs_longer_than_any_chunk_at_size(op, backend):
    x = torch.randn(3000, 512 if backend == "triton" else 16384, device="cuda")  # TileLang: columns to fill the GPU
    x[:2500, :100] = float("-inf")  # runs longer than any BLOCK_R of the space
    x[:, 100:110] = float("-inf")
    x[2999, 200] = float("nan")
    x[1234, 300] = float("inf")
    got = getattr(dispatch, op)(x, 0, backend=backend)
    why = mismatch(got, getattr(torch, op)(x, 0))
    assert why is None, why


# COOP (R in tiles held by a group of programs that exchange their partials in one launch): at size,
# with special columns, and replayed from a CUDA graph (whose captured launch takes a slot buffer
# of its own, zeroed with every replay)
COOP_CASES = [  # (shape, view, dim, config)
    ((8, 1024, 64, 64), lambda t: t, 1, dict(BLOCK_I=32, BLOCK_R=512, SPLIT_R=2, num_warps=8)),
    ((4096, 4096), lambda t: t, 0, dict(BLOCK_I=32, BLOCK_R=256, SPLIT_R=16, num_warps=4)),
    ((16384, 4096), lambda t: t.t(), 0, dict(BLOCK_I=32, BLOCK_R=256, SPLIT_R=16, num_warps=4)),
    ((3000, 512), lambda t: t, 0, dict(BLOCK_I=64, BLOCK_R=256, SPLIT_R=12, num_warps=8)),  # R = 3000: a ragged tile
]


def _coop(op, x, dim, config):
    from dispatch_triton import strided as S

    p = S.plan(op, x.shape, x.stride(), (dim,))
    want = getattr(torch, op)(x, dim)
    return S.StridedLauncher(op, p, want.dtype, want.shape, x.device, dict(config, COOP=1, FAST_EXP=1)), want


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", range(len(COOP_CASES)))
def test_coop_at_size_eagerly_and_replayed_from_a_cuda_graph(case, dtype, op):
    shape, view, dim, config = COOP_CASES[case]
    x = view(torch.randn(*shape, device="cuda", dtype=dtype))
    if case == 3:  # -inf over most of a column (longer than a tile), NaN and +inf late in others
        x[:2500, :100] = float("-inf")
        x[2999, 200], x[1234, 300] = float("nan"), float("inf")
    launcher, want = _coop(op, x, dim, config)
    before = x.clone()
    why = mismatch(launcher.run(x), want)
    assert why is None, why
    torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True)  # the input untouched
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launcher.run(x)  # warm-up on the capturing stream
        with torch.cuda.graph(graph, stream=stream):
            out = launcher.run(x)
    torch.cuda.current_stream().wait_stream(stream)
    for seed in range(3):  # new inputs into the captured one; every replay merges its own partials
        g = torch.Generator("cuda").manual_seed(seed)
        x.copy_(view(torch.randn(*shape, device="cuda", dtype=dtype, generator=g)))
        graph.replay()
        torch.cuda.synchronize()
        why = mismatch(out, getattr(torch, op)(x, dim))
        assert why is None, f"replay {seed}: {why}"
