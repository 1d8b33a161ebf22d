"""On a CUDA device (sm_90+): TileLang's norm backward with each row's chunks in shared memory
(``smem_norm_backward``) against torch's float64 gradients: every config of the family at a
length, rows cut unevenly, fewer rows than clusters and rows that do not divide among them, rows
far from zero with a massive element, with and without weight and bias, every dtype; the inputs
left as they were, and the partials' reduction the same run to run."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

pytest.importorskip("tilelang")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
    pytest.skip("needs an sm_90+ GPU", allow_module_level=True)

from dispatch.tolerance import mismatch, tolerance  # noqa: E402
from dispatch_tilelang import smem_norm_backward as SB  # noqa: E402

DT = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
EPS = 1e-5


def inputs(m, n, dtype, weight, bias, hard=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g) * 2
    if hard:  # far from zero, one massive element a row
        x = x + 1000
        x[:, n // 3] = 3e4
    dy = torch.randn(m, n, generator=g)
    w = (torch.rand(n, generator=g) + 0.5).to(dtype).cuda() if weight else None
    b = torch.randn(n, generator=g).to(dtype).cuda() if bias else None
    return x.to(dtype).cuda(), dy.to(dtype).cuda(), w, b


def want(op, x, dy, w, b):
    """torch's gradients in float64 of the op on the same (rounded) inputs: dx, dw, db."""
    leaves = [t.double().requires_grad_() if t is not None else None for t in (x, w, b)]
    n = x.shape[-1]
    if op == "rms_norm":
        y = F.rms_norm(leaves[0], (n,), leaves[1], EPS)
    else:
        y = F.layer_norm(leaves[0], (n,), leaves[1], leaves[2], EPS)
    wanted = [t for t in leaves if t is not None]
    return torch.autograd.grad(y, wanted, dy.double())


def check(got, ref, dtype):
    for name, a, e in zip(("dx", "dweight", "dbias"), got, ref):
        scale = float(e.abs().max().clamp_min(1))
        why = mismatch(a.double() / scale, e.double() / scale, tolerance(dtype))
        assert why is None, f"{name}: {why}"


def run(op, x, dy, w, b, config=None):
    m, n = x.shape
    bwd = SB.make(op, m, n, x.dtype, w is not None, b is not None, EPS, config)
    extra = () if op == "rms_norm" else (b,)
    out = bwd(dy, x, w, *extra, None)
    return [t for t in out if t is not None]


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_every_config_at_a_length(op, dtype):
    n = 32768
    x, dy, w, b = inputs(300, n, dtype, True, op == "layer_norm")
    ref = want(op, x, dy, w, b)
    for cfg in SB.configs(n, DT[dtype]):
        for ahead in (0, 1):
            if SB.check_backward(n, DT[dtype], cfg["tile_n"], cfg["cluster"], 1, cfg["threads"], bool(ahead)):
                continue
            for per_sm in (1, 4):
                check(run(op, x, dy, w, b, {**cfg, "ahead": ahead, "per_sm": per_sm}), ref, dtype)


@pytest.mark.parametrize("op,m,n,dtype,weight,bias", [
    ("layer_norm", 7, 24584, torch.bfloat16, True, True),  # the last chunk short of the others
    ("layer_norm", 129, 65536, torch.float16, False, True),
    ("layer_norm", 3, 262144, torch.bfloat16, True, False),
    ("rms_norm", 64, 262144, torch.bfloat16, True, False),
    ("rms_norm", 1, 131072, torch.float32, False, False),
    ("rms_norm", 500, 16392, torch.bfloat16, True, False),
])
def test_rows_cut_unevenly_and_few_rows(op, m, n, dtype, weight, bias):
    x, dy, w, b = inputs(m, n, dtype, weight, bias)
    saved = [t.clone() for t in (x, dy, w, b) if t is not None]
    for ahead in (0, 1):
        cfg = SB.default_config(n, DT[dtype])
        if SB.check_backward(n, DT[dtype], cfg["tile_n"], cfg["cluster"], 1, cfg["threads"], bool(ahead)):
            continue
        check(run(op, x, dy, w, b, {**cfg, "ahead": ahead}), want(op, x, dy, w, b), dtype)
    for before, after in zip(saved, [t for t in (x, dy, w, b) if t is not None]):
        assert torch.equal(before, after)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_rows_far_from_zero(op):
    x, dy, w, b = inputs(40, 65536, torch.bfloat16, True, op == "layer_norm", hard=True)
    check(run(op, x, dy, w, b), want(op, x, dy, w, b), torch.bfloat16)


def test_the_weight_gradient_is_the_same_run_to_run():
    x, dy, w, b = inputs(1000, 32768, torch.bfloat16, True, True)
    first = run("layer_norm", x, dy, w, b)
    for _ in range(3):
        again = run("layer_norm", x, dy, w, b)
        assert all(torch.equal(a, c) for a, c in zip(first, again))


def test_a_row_no_config_holds_is_refused_with_the_reason():
    assert SB.default_config(151936, "bfloat16") is None  # 16 chunks leave one empty, 8 need 38 values a thread
    assert "holds rows of 151936" in SB.refusal(151936, "bfloat16")


@pytest.mark.parametrize("op,shape", [("layer_norm", (2, 3, 65536)), ("rms_norm", (5, 32768))])
def test_dispatch_with_tilelang_forced_trains_through_it(op, shape, monkeypatch):
    """Autograd through dispatch with TileLang forced runs this backward, and its gradients are torch's."""
    import dispatch

    made = []
    real = SB.make
    monkeypatch.setattr(SB, "make", lambda *a, **k: made.append(a[:3]) or real(*a, **k))
    n = shape[-1]
    x, dy, w, b = inputs(int(torch.tensor(shape[:-1]).prod()), n, torch.bfloat16, True, op == "layer_norm")
    x, dy = x.view(shape).requires_grad_(), dy.view(shape)
    w.requires_grad_()
    args = (w,) if op == "rms_norm" else (w, b.requires_grad_())
    y = getattr(dispatch, op)(x, (n,), *args, 1e-5, backend="tilelang")
    got = torch.autograd.grad(y, (x, *args), dy)
    ref = want(op, x.detach().view(-1, n), dy.view(-1, n), w.detach(), None if b is None else b.detach())
    check([g.reshape(r.shape) for g, r in zip(got, ref)], ref, torch.bfloat16)
    assert made and made[0][2] == n, made


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_a_multi_dim_normalized_shape_gets_gradients_of_its_shape(op):
    """Weight and bias of shape (4, 1024): the gradients come back in that shape, torch's values."""
    import dispatch

    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn((6, 4, 1024), device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    dy = torch.randn((6, 4, 1024), device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.rand((4, 1024), device="cuda", generator=g) + 0.5).to(torch.bfloat16).requires_grad_()
    b = torch.randn((4, 1024), device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    params = (w,) if op == "rms_norm" else (w, b)
    y = getattr(dispatch, op)(x, (4, 1024), *params, 1e-5, backend="tilelang")
    got = torch.autograd.grad(y, (x, *params), dy)
    ref = want(op, x.detach().view(6, 4096), dy.view(6, 4096), w.detach().view(4096),
               None if op == "rms_norm" else b.detach().view(4096))
    assert [t.shape for t in got] == [t.shape for t in (x, *params)]
    check([t.reshape(r.shape) for t, r in zip(got, ref)], ref, torch.bfloat16)
