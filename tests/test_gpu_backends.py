"""On a CUDA device: every backend correct against the reference, and the native tuners' results."""

from __future__ import annotations


import pytest
import torch

import dispatch
from dispatch.tolerance import mismatch

pytestmark = pytest.mark.gpu

SHAPES = [(1, 4096), (32, 4096), (4096, 256), (64, 16384), (4, 262144), (3, 5, 777)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def gpu_backends():
    if not torch.cuda.is_available():
        return ["triton", "tilelang"]
    return [n for n, info in dispatch.backends().items() if info.available and not info.reference]


@pytest.fixture(params=gpu_backends())
def backend(request):
    info = dispatch.backends().get(request.param)
    if info is None or not info.available:
        pytest.skip(f"backend {request.param} not available: {info.available.reason if info else 'not loaded'}")
    return request.param


def _x(shape, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    return (torch.randn(shape, device="cuda", generator=g) * 4).to(dtype)


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_backend_matches_reference_on_cuda(backend, op, dtype, shape):
    x = _x(shape, dtype)
    got = getattr(dispatch, op)(x, -1, backend=backend)
    want = getattr(torch, op)(x, -1)
    assert mismatch(got, want) is None


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n_rows", [1, 3, 8])
def test_few_short_rows_on_cuda(backend, op, dtype, n_rows):
    # rows of a few lanes each in a CTA of fewer rows than it could hold (the default config's edge)
    for n_cols in (16, 64, 128):
        x = _x((n_rows, n_cols), dtype)
        got = getattr(dispatch, op)(x, -1, backend=backend)
        assert mismatch(got, getattr(torch, op)(x, -1)) is None, (n_rows, n_cols)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_cast_and_strided_rows_on_cuda(backend, op):
    base = _x((64, 3000), torch.bfloat16)
    x = base[:, 100:2148]  # row stride 3000, unit stride in the row
    verdict = {c.name: c.verdict for c in dispatch.explain(op, x, -1, dtype=torch.float32).decision.candidates}[backend]
    if not verdict.ok:  # a backend may refuse strided rows, but then says so, and a forced call fails loudly
        assert "stride" in verdict.reason
        with pytest.raises(Exception, match="stride"):
            getattr(dispatch, op)(x, -1, dtype=torch.float32, backend=backend)
        x = x.contiguous()
    got = getattr(dispatch, op)(x, -1, dtype=torch.float32, backend=backend)
    assert mismatch(got, getattr(torch, op)(x, -1, dtype=torch.float32)) is None


def test_nan_inf_rows_on_cuda(backend):
    x = _x((4, 2048), torch.float32)
    x[0, 5] = float("nan")
    x[1] = float("-inf")
    x[2, 7] = float("inf")
    for op in ("softmax", "log_softmax", "logsumexp"):
        got = getattr(dispatch, op)(x, -1, backend=backend)
        assert mismatch(got, getattr(torch, op)(x, -1)) is None, op


@pytest.mark.parametrize("shape", [(4096, 1024), (256, 65536)], ids=str)
def test_tuning_on_cuda_yields_a_config_and_a_latency(backend, shape):
    dispatch.configure(autotune=True)
    x = _x(shape, torch.bfloat16)
    out = dispatch.softmax(x, -1, backend=backend)
    assert mismatch(out, torch.softmax(x, -1)) is None
    decision = dispatch.explain("softmax", x, -1, backend=backend).decision
    assert decision.config and decision.tune is not None and decision.tune.latency_us > 0


@pytest.mark.parametrize("op", ["softmax", "logsumexp"])
def test_a_negated_view_gets_its_sign_beside_calls_on_plain_tensors(backend, op):
    """GPU kernels read raw memory: a lazily negated view (what ``z.conj().imag`` gives) of the
    same shape, strides and dtype as a plain tensor called before it is keyed apart and resolved."""
    y = _x((32, 4096), torch.bfloat16)
    x = torch._neg_view(y.clone())
    fn = getattr(dispatch, op)
    for _ in range(2):
        assert mismatch(fn(y, -1, backend=backend), getattr(torch, op)(y, -1)) is None
        assert mismatch(fn(x, -1, backend=backend), getattr(torch, op)(-y, -1)) is None
    assert x.is_neg() and torch.equal(torch._neg_view(x), y)

