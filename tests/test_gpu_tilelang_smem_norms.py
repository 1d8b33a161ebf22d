"""On a CUDA device (sm_90+): TileLang's norms with each row's chunks in shared memory (``smem_norms``)
against torch in float64: every config of the space, rows cut unevenly, rows far from zero with
a massive element, with and without weight and bias, every dtype, through dispatch, and replayed
from a CUDA graph; the input left as it was."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

pytest.importorskip("tilelang")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
    pytest.skip("needs an sm_90+ GPU", allow_module_level=True)

import dispatch  # noqa: E402
from dispatch.tolerance import tolerance  # noqa: E402
from dispatch_tilelang import norms as NM  # noqa: E402

DT = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
EPS = 1e-5


def rows(m, n, dtype, hard=False):
    x = torch.randn(m, n) * 2
    if hard:  # far from zero, one massive element a row, one row constant
        x = x + 1000
        x[:, n // 3] = 3e4
        x[-1] = 7.0
    return x.to(dtype).cuda()


def params(n, dtype, weight, bias):
    w = (torch.rand(n) + 0.5).to(dtype).cuda() if weight else None
    b = torch.randn(n).to(dtype).cuda() if bias else None
    return w, b


def want(op, x, w, b):
    n = x.shape[-1]
    wd = None if w is None else w.double()
    if op == "rms_norm":
        return F.rms_norm(x.double(), (n,), wd, EPS).to(x.dtype)
    return F.layer_norm(x.double(), (n,), wd, None if b is None else b.double(), EPS).to(x.dtype)


def check(y, op, x, w, b):
    rtol, atol = tolerance(x.dtype)
    torch.testing.assert_close(y, want(op, x, w, b), rtol=rtol, atol=atol)


def run_config(op, x, w, b, cfg):
    n = x.shape[-1]
    k = NM.build(op, n, DT[x.dtype], w is not None, b is not None, EPS, "cuda", 0, cfg)
    ph = torch.zeros(n, dtype=x.dtype, device="cuda")
    return k(x, ph if w is None else w, ph if b is None else b)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("n", [4096, 24584, 65536, 151936])
def test_every_config_of_the_space_matches_torch(op, n):
    configs = [c for c in NM.config_space(5, n, "cuda", "bfloat16") if c.get("smem")]
    assert configs
    w, b = params(n, torch.bfloat16, True, op == "layer_norm")
    for hard in (False, True):
        x = rows(5, n, torch.bfloat16, hard)
        before = x.clone()
        for cfg in configs:
            check(run_config(op, x, w, b, cfg), op, x, w, b)
        assert torch.equal(x, before)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("weight,bias", [(False, False), (True, False), (True, True), (False, True)])
def test_each_dtype_with_and_without_weight_and_bias(op, dtype, weight, bias):
    if op == "rms_norm" and bias:
        pytest.skip("rms_norm has no bias")
    n = 40000
    cfg = NM.smem_config(n, DT[dtype], 4, 128)
    assert NM.smem_refusal(n, DT[dtype], 0, cfg) is None
    w, b = params(n, dtype, weight, bias)
    x = rows(6, n, dtype, hard=True)
    check(run_config(op, x, w, b, cfg), op, x, w, b)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_through_dispatch_with_leading_dims_and_a_graph_replay(op):
    n = 65536
    x = torch.randn(2, 3, n, device="cuda", dtype=torch.bfloat16)
    w, b = params(n, torch.bfloat16, True, True)
    args = (w,) if op == "rms_norm" else (w, b)
    fn = getattr(dispatch, op)
    d = dispatch.explain(op, x, (n,), *args, EPS, backend="tilelang").decision
    assert d.config.as_dict().get("smem") == 1, d
    check(fn(x, (n,), *args, EPS, backend="tilelang").reshape(-1, n), op, x.reshape(-1, n), w,
          None if op == "rms_norm" else b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fn(x, (n,), *args, EPS, backend="tilelang")
    for _ in range(2):
        x.copy_(torch.randn_like(x) * 4 + 3)
        graph.replay()
        check(y.reshape(-1, n), op, x.reshape(-1, n), w, None if op == "rms_norm" else b)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_a_config_from_the_top_of_a_bucket_at_its_bottom(op):
    """The default of rows of 65536 (8 chunks, 128 threads) on rows of 32776: refit, the cluster
    halves (8 chunks of 5120 would leave the last CTA past the row)."""
    from dispatch.backend import Config, spec_of

    n = 32776
    cfg = NM.default_config(64, 65536, "cuda", "bfloat16")
    assert NM.fit(n, "bfloat16", cfg)["cluster"] == cfg["cluster"] // 2
    x = rows(7, n, torch.bfloat16, hard=True)
    w, b = params(n, torch.bfloat16, True, op == "layer_norm")
    args = ((n,), w) + ((b,) if b is not None else ())
    run = NM.kernel(spec_of(op, x, *args), Config.of(cfg), "cuda")
    check(run(x, w, b), op, x, w, b)


@pytest.mark.parametrize("n", [4096, 24584, 65536, 151936])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_in_two_walks_matches_torch(n, dtype):
    # walks=2 (smem_norms.program's option): the sum and the squares about a shift (the mean of a
    # chunk's first 16 elements) in one walk. The massive element at column 0 moves chunk 0's
    # shift off its mean, so that chunk walks its squares again; the one at n // 3 does not
    from dispatch_tilelang import smem_norms

    w, b = params(n, dtype, True, True)
    for hard in (False, True):
        x = rows(5, n, dtype, hard)
        if hard:
            x[:4, 0] = 3e4
        before = x.clone()
        for cfg in [c for c in NM.config_space(5, n, "cuda", DT[dtype]) if c.get("smem")]:
            k = smem_norms.program("layer_norm", n, DT[dtype], True, True, EPS, cfg["tile_n"], cfg["cluster"],
                                   walks=2)(block_m=1, threads=cfg["threads"])
            check(k(x, w, b), "layer_norm", x, w, b)
        assert torch.equal(x, before)
