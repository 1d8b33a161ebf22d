"""benchmarks/profile_norm_exchange.py's one-merger backward: a correct alternative to the shipped
exchange (one program a row merges the row's partials, taken about each chunk's own first
element), run in one launch on the GPU when there is one, else under the interpreter in its two
launches, against torch's float64 gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmark_scripts import load

pytest.importorskip("triton")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def profile():
    return load("profile_norm_exchange")


def _reference(op, x, dy, w, b):
    xs, ws = x.double().requires_grad_(), w.double().requires_grad_()
    bs = None if b is None else b.double().requires_grad_()
    n = x.shape[1]
    y = F.layer_norm(xs, (n,), ws, bs, 1e-5) if op == "layer_norm" else F.rms_norm(xs, (n,), ws, 1e-5)
    grads = torch.autograd.grad(y, [xs, ws] + ([bs] if bs is not None else []), dy.double())
    return grads[0], grads[1], grads[2] if bs is not None else None


def _check(profile, op, x, dy, w, b, block_n, tol):
    on = [t.to(DEVICE) for t in (x, dy, w)]
    dx, dw, db = (t if t is None else t.cpu() for t in profile.run_one_merger(op, *on, b is not None, block_n))
    rdx, rdw, rdb = _reference(op, x, dy, w, b)
    assert (dx.double() - rdx).abs().max() <= tol * rdx.abs().max()
    assert (dw.double() - rdw).abs().max() <= tol * rdw.abs().max()
    if b is not None:
        assert (db.double() - rdb).abs().max() <= tol * rdb.abs().max()


@pytest.mark.parametrize("op,bias", [("layer_norm", True), ("layer_norm", False), ("rms_norm", False)])
def test_one_merger_backward_matches_torch(profile, op, bias):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 200, generator=g) + 0.5
    dy, w = torch.randn(5, 200, generator=g), torch.randn(200, generator=g)
    b = torch.randn(200, generator=g) if bias else None
    _check(profile, op, x, dy, w, b, 64, 1e-5)


def test_one_merger_backward_of_rows_far_from_zero_and_massive_elements(profile):
    g = torch.Generator().manual_seed(4)
    wide = 1000 + 0.01 * torch.randn(3, 260, generator=g)  # strided rows far from zero
    x = wide[:, 30:230]
    dy, w = torch.randn(3, 200, generator=g), torch.randn(200, generator=g)
    _check(profile, "layer_norm", x, dy, w, torch.randn(200, generator=g), 64, 1e-4)
    x = torch.randn(4, 300, generator=g)
    x[:, 0] = x[:, 64] = 3e4  # massive elements at two chunks' first elements
    dy, w = torch.randn(4, 300, generator=g), torch.randn(300, generator=g)
    _check(profile, "layer_norm", x, dy, w, torch.randn(300, generator=g), 64, 1e-4)
