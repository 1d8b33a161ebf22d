"""On a CUDA device (sm_90+): TileLang's chunk-in-shared-memory row kernels (``smem_rows``) against
torch, on rows of -inf, +inf and NaN, a chunk of -inf, padded last chunks, clusters of 1 to 16,
eagerly, through dispatch, and replayed from a CUDA graph."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

pytest.importorskip("tilelang")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
    pytest.skip("needs an sm_90+ GPU", allow_module_level=True)

import dispatch  # noqa: E402
from dispatch_tilelang import build as B, configs as C  # noqa: E402

OPS = ("softmax", "log_softmax", "logsumexp")
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}


def smem(tile_n, cluster, threads=256):
    return {"block_m": 1, "threads": threads, "tile_n": tile_n, "cluster": cluster, "smem": 1}


CASES = [  # (n_cols, dtypes, config)
    (32768, (torch.bfloat16, torch.float16), smem(32768, 1)),
    (16392, (torch.bfloat16,), smem(18432, 1)),  # one CTA, its chunk padded
    (32768, (torch.float32,), smem(16384, 2, threads=128)),
    (65536, (torch.bfloat16,), smem(16384, 4)),
    (65536, (torch.bfloat16,), smem(8192, 8, threads=128)),  # log_softmax's default
    (131072, (torch.bfloat16,), smem(16384, 8)),  # log_softmax's default
    (151936, (torch.bfloat16, torch.float16), smem(20480, 8)),  # a vocabulary's rows, the last chunk padded
    (262144, (torch.bfloat16,), smem(32768, 8)),
    (262144, (torch.bfloat16,), smem(16384, 16, threads=128)),  # a non-portable cluster
]


def edge_rows(m, n, dtype, seg):
    x = torch.randn(m, n) * 3
    inf = float("inf")
    x[0] = -inf
    x[1, n // 3] = inf
    x[2, n // 2] = float("nan")
    x[3, : min(n - 1, seg + 7)] = -inf  # the first chunk all -inf
    x[4, n // 2:] = -inf
    x[5] *= 40
    x[6] = -inf
    x[6, n - 1] = 1.0
    return x.to(dtype).cuda()


def reference(op, x):
    xf = x.float()
    y = torch.logsumexp(xf, -1) if op == "logsumexp" else getattr(torch, op)(xf, -1)
    return y.to(x.dtype)


def check(op, y, x):
    want = reference(op, x)
    torch.testing.assert_close(y, want, rtol=TOL[x.dtype][0], atol=TOL[x.dtype][1], equal_nan=True)
    assert torch.equal(torch.isnan(y), torch.isnan(want))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n_cols,dtypes,cfg", CASES, ids=lambda v: str(v) if isinstance(v, int) else None)
def test_matches_torch_on_edge_rows(op, n_cols, dtypes, cfg):
    for dtype in dtypes:
        assert C.validate_config(op, n_cols, dtype, cfg, "cuda") is None
        k = B.build(op, 7, n_cols, dtype, dtype, cfg, "cuda")
        for m in (7, 1, 33):
            x = edge_rows(max(m, 7), n_cols, dtype, cfg["tile_n"])[:m].contiguous()
            before = x.clone()
            check(op, k(x), x)
            assert torch.equal(x.nan_to_num(), before.nan_to_num())  # the input untouched


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n_cols", [32000, 40960, 65536])  # a 32000-word vocabulary; log_softmax: four and eight chunks
def test_dispatch_default_runs_it_and_matches_torch(op, n_cols):
    x = torch.randn(64, n_cols, device="cuda", dtype=torch.bfloat16)
    assert C.default_config(op, 64, n_cols, torch.bfloat16, "cuda").get("smem") == 1
    check(op, getattr(dispatch, op)(x, -1, backend="tilelang"), x)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n_rows,n_cols", [(1, 16384), (1, 17000), (1, 32000), (8, 32000), (4, 65536),
                                           (8, 128256), (1, 262144)])
def test_few_rows_default_matches_torch_on_edge_rows(op, n_rows, n_cols):
    cfg = C.default_config(op, n_rows, n_cols, torch.bfloat16, "cuda")
    assert cfg.get("smem") == 1, cfg
    x = edge_rows(7, n_cols, torch.bfloat16, cfg["tile_n"])[:n_rows].contiguous()
    before = x.clone()
    check(op, getattr(dispatch, op)(x, -1, backend="tilelang"), x)
    check(op, B.build(op, n_rows, n_cols, torch.bfloat16, torch.bfloat16, cfg, "cuda")(x), x)
    assert torch.equal(x.nan_to_num(), before.nan_to_num())


def test_replays_from_a_cuda_graph_with_new_inputs():
    cfg = smem(32768, 8)
    k = B.build("softmax", 4, 262144, torch.bfloat16, torch.bfloat16, cfg, "cuda")
    x = torch.randn(4, 262144, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        k(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = k(x)
    for _ in range(3):
        x.copy_(torch.randn_like(x) * 4)
        graph.replay()
        torch.cuda.synchronize()
        check("softmax", out, x)


@pytest.mark.parametrize("op", OPS)
def test_a_config_from_the_top_of_a_bucket_at_its_bottom(op):
    """Four chunks of 8192 (a config of rows of 32768) on rows of 16392: refit, the cluster halves
    (four chunks of 6144 would leave the last CTA past the row)."""
    cfg = smem(8192, 4)
    fitted = C.fit_config(16392, torch.bfloat16, cfg)
    assert fitted["cluster"] == 2, fitted
    k = B.build(op, 9, 16392, torch.bfloat16, torch.bfloat16, cfg, "cuda")
    x = edge_rows(9, 16392, torch.bfloat16, fitted["tile_n"])
    check(op, k(x), x)


def far_rows(m, n, dtype):
    """Rows far from zero, where the rounding of a shift times log2 e is large: spread about +1000,
    about -20000, and (fp16's range) about +30000."""
    x = torch.randn(m, n) * 3
    x[0::3] += 1000
    x[1::3] = x[1::3] / 8 - 20000
    x[2::3] = x[2::3] / 8 + 30000
    return x.to(dtype).cuda()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n_cols,dtypes,cfg", CASES, ids=lambda v: str(v) if isinstance(v, int) else None)
def test_matches_torch_on_rows_far_from_zero(op, n_cols, dtypes, cfg):
    """Each exponent a fused multiply-add against the shift's rounded product: that rounding, up to
    2e-3 at rows about 3e4, must cancel (softmax) or be taken off (log_softmax, logsumexp)."""
    for dtype in dtypes:
        k = B.build(op, 6, n_cols, dtype, dtype, cfg, "cuda")
        x = far_rows(6, n_cols, dtype)
        before = x.clone()
        check(op, k(x), x)
        assert torch.equal(x, before)


KEEP_CASES = [  # softmax keeping its exponentials in shared memory (config key keep: 1)
    (65536, (torch.bfloat16, torch.float16), {**smem(8192, 8, threads=128), "keep": 1}),  # the default
    (40960, (torch.bfloat16,), {**smem(10240, 4, threads=128), "keep": 1}),
    (151936, (torch.bfloat16,), {**smem(20480, 8), "keep": 1}),  # the last chunk padded
    (65536, (torch.float32,), {**smem(16384, 4, threads=128), "keep": 1}),
    (32768, (torch.bfloat16,), {**smem(32768, 1), "keep": 1}),  # one CTA a row: no exchange
]


@pytest.mark.parametrize("n_cols,dtypes,cfg", KEEP_CASES, ids=lambda v: str(v) if isinstance(v, int) else None)
def test_kept_exponentials_match_torch_on_edge_rows_and_rows_far_from_zero(n_cols, dtypes, cfg):
    """Each chunk's exponentials, taken at its own max and kept in the input's dtype, are carried to
    the row's max on the way out: rows of -inf, +inf and NaN, a chunk of -inf in a finite row (its
    factor 0, not 0 x inf), rows far from zero; the input untouched."""
    for dtype in dtypes:
        assert C.validate_config("softmax", n_cols, dtype, cfg, "cuda") is None
        k = B.build("softmax", 7, n_cols, dtype, dtype, cfg, "cuda")
        for x in (edge_rows(7, n_cols, dtype, cfg["tile_n"]), far_rows(6, n_cols, dtype)):
            before = x.clone()
            check("softmax", k(x), x)
            assert torch.equal(x.nan_to_num(), before.nan_to_num())


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n_cols,cfg,keep", [(65536, smem(8192, 8, threads=128), True),
                                             (65536, smem(16384, 4, threads=128), False),
                                             (151936, smem(20480, 8), False),
                                             (262144, smem(16384, 16, threads=128), False)],
                         ids=["65536-c8-kept", "65536-c4", "151936-c8", "262144-c16"])
def test_the_synced_twin_matches_torch_on_edge_rows(op, n_cols, cfg, keep):
    """``early=False`` (the cluster synced before each CTA copies its chunk; the shipped kernels,
    which copy first, are checked above): edge rows, rows of 1 and 33 (grids of one cluster and
    more than an SM holds at once), the input untouched."""
    from dispatch_tilelang import smem_rows

    dt = "bfloat16"
    k = B.compile_program(lambda: smem_rows.program(op, n_cols, dt, dt, cfg["tile_n"], cfg["cluster"], B.cuda_arch(),
                                                    early=False, keep=keep), {"block_m": 1, "threads": cfg["threads"]})
    for m in (7, 1, 33):
        x = edge_rows(max(m, 7), n_cols, torch.bfloat16, cfg["tile_n"])[:m].contiguous()
        before = x.clone()
        check(op, k(x), x)
        assert torch.equal(x.nan_to_num(), before.nan_to_num())
