"""rms_norm and layer_norm on each kernel backend, forced, at the edges of their arguments and values,
against torch: eps=None on rows of tiny values, eps=0, NaN rows, rows that share memory (stride 0).

CPU: the Triton interpreter and TileLang's C target; on a GPU the same calls run its kernels.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dispatch
from dispatch.backend import spec_of

from backends_needed import DEVICE, KERNEL_BACKENDS

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _t(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).to(DEVICE)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_rms_norm_with_eps_none_on_rows_of_tiny_values(backend):
    # eps (float32's 1.2e-7) decides the result here: a backend computing it right must be served,
    # not refused by its first call's check
    x = torch.full((2, 8), 1e-3, device=DEVICE)
    torch.testing.assert_close(dispatch.rms_norm(x, [8], backend=backend), F.rms_norm(x, [8]),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_an_eps_beyond_float32_is_served_as_torch_serves_it_or_refused_with_the_reason(backend, op):
    # torch takes eps=1e300 (float32 arithmetic: rstd 0, the output the bias); a backend serves it
    # alike or refuses it up front, naming eps: never a fault after a failed build
    x = _t((3, 16), 0)
    for eps in (1e300, -1e39):
        want = getattr(F, op)(x, [16], eps=eps)
        try:
            got = getattr(dispatch, op)(x, [16], eps=eps, backend=backend)
        except dispatch.BackendRefusedError as exc:
            assert f"eps={eps!r} is beyond float32's range" in str(exc)
        else:
            torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("m,n", [(1, 16), (3, 16), (2, 1024)])
def test_eps_zero_keeps_the_weight_gradient_finite(backend, op, m, n):
    # eps=0 is legal; rows that pad a kernel's tile (past the last row) hold zeros, whose
    # 1/sqrt(0 + 0) is inf: they must add nothing to dweight (a NaN there poisoned every column)
    x = _t((m, n), 0).requires_grad_()
    w = (1 + 0.5 * _t((n,), 1)).requires_grad_()
    extra = (None,) if op == "layer_norm" else ()
    y = getattr(dispatch, op)(x, [n], w, *extra, eps=0.0, backend=backend)
    ref = getattr(F, op)(x.double(), [n], w.double(), *extra, eps=0.0)
    proj = _t((m, n), 2)
    got = torch.autograd.grad((y * proj).sum(), (x, w))
    want = torch.autograd.grad((ref * proj.double()).sum(), (x, w))
    for g, r in zip(got, want):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g.double(), r.double(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nan_and_inf_spread_through_their_rows_as_in_torch(backend, op, dtype):
    x = _t((6, 40), 3, dtype)
    getattr(dispatch, op)(x, [40], backend=backend)  # an ordinary first call of the bucket (checked)
    x[0, 3] = float("nan")
    x[2, 0] = float("inf")
    x[4, 39] = float("-inf")
    got = getattr(dispatch, op)(x, [40], backend=backend)
    # torch's formula (as torch computes it on the CPU); torch's fused CUDA rms_norm makes a row
    # with an inf all NaN, where the formula gives NaN at the inf and 0 elsewhere: either is taken
    # for rows holding an inf (docs/user-guide.md), and nothing else
    want = getattr(F, op)(x.double().cpu(), [40]).to(dtype).to(DEVICE)
    tol = dict(rtol=1.6e-2, atol=1e-2, equal_nan=True)
    inf_row = torch.isinf(x).any(-1)
    assert torch.equal(torch.isnan(got[~inf_row]), torch.isnan(want[~inf_row]))
    torch.testing.assert_close(got[~inf_row], want[~inf_row], **tol)
    for r in inf_row.nonzero().flatten().tolist():
        if not torch.isnan(got[r]).all():
            assert torch.equal(torch.isnan(got[r]), torch.isnan(want[r])), got[r]
            torch.testing.assert_close(got[r], want[r], **tol)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "training"])
def test_rows_that_share_memory(backend, op, grad):
    # an expanded input (every row the same memory, stride 0): served right, or refused with a reason
    base = _t((1, 16), 4).requires_grad_(grad)
    x = base.expand(5, 16)
    for _ in range(2):  # the first call (checked) and the next
        try:
            y = getattr(dispatch, op)(x, [16], backend=backend)
        except dispatch.errors.BackendRefusedError:
            pytest.skip(f"{backend} refuses rows of stride 0")
        torch.testing.assert_close(y, getattr(F, op)(x, [16]), rtol=1e-5, atol=1e-5)
    if grad:
        proj = _t((5, 16), 5)
        got = torch.autograd.grad((y * proj).sum(), base)[0]
        want = torch.autograd.grad((getattr(F, op)(x, [16]) * proj).sum(), base)[0]
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_rows_far_from_zero_are_judged_against_torchs_own_error(backend):
    # fp32 rows at 1000 +- 1: float32 itself can't hold x - mean to better than ~1e-4 of the
    # spread, so torch's own layer_norm is ~4e-5 off the exact result here, past fp32's 1e-5
    # tolerance. A backend as accurate as torch on the call's input must pass its first call
    x = 1000 + _t((8, 512), 6)
    got = dispatch.layer_norm(x, [512], backend=backend)
    exact = F.layer_norm(x.double(), [512])
    torch_err = (F.layer_norm(x, [512]).double() - exact).abs().max().item()
    assert torch_err > 1e-5  # the premise: torch itself misses the dtype's tolerance
    assert (got.double() - exact).abs().max().item() <= 2 * torch_err + 1e-5


def test_a_wrong_kernel_still_fails_where_torch_is_inexact():
    # the allowance is torch's own error on the call's input, not a blanket one: a kernel off by
    # more than that is still refused on its first call
    from dispatch.reference import check_output, expected_output

    x = 1000 + _t((8, 512), 6)
    spec = dispatch.backend.spec_of("layer_norm", x, (512,))
    expected = expected_output(spec, (x, None, None))
    right = F.layer_norm(x, [512])
    assert check_output(spec, right, expected, (x, None, None)) is None
    assert check_output(spec, right, expected) is not None  # without the inputs: the dtype's tolerance
    assert check_output(spec, right + 1e-3, expected, (x, None, None)) is not None


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_a_result_that_is_torchs_own_at_the_calls_precision_is_not_a_fault(backend):
    # fp32 rows whose squares overflow: torch's layer_norm gives NaN there, the float64 oracle a
    # finite row; a kernel that gives torch's NaN is right, not faulty, and one that gives neither
    # (zeros, from a variance of inf) is a fault
    x = torch.tensor([[1e38, 3e38, -3e38, 0.0]], device=DEVICE)
    want = F.layer_norm(x, [4])
    exact = F.layer_norm(x.double(), [4])
    try:
        got = dispatch.layer_norm(x, [4], backend=backend)
    except dispatch.errors.BackendFaultError as exc:  # right only where the kernel's own result is wrong
        own = dispatch.backend.loaded_backends()[backend].kernel("layer_norm", spec_of("layer_norm", x, [4]))(
            x, None, None)
        torchs = torch.isnan(own).any() and torch.equal(torch.isnan(own), torch.isnan(want))
        assert not torchs and not torch.allclose(own.double(), exact, rtol=1e-5, atol=1e-5), (exc, own)
        return
    if torch.isnan(got).any():  # torch's answer at the call's precision
        assert torch.equal(torch.isnan(got), torch.isnan(want))
    else:  # or the exact one (a kernel that scales before squaring)
        torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-5)
