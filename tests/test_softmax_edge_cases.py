"""softmax, log_softmax and logsumexp on each kernel backend, forced, on layouts and casts at the edges,
against torch: expanded (stride 0) inputs, and ``dtype=`` casts that narrow (the input rounded to
the output dtype first, as torch does).

CPU: the Triton interpreter and TileLang's C target; on a GPU the same calls run its kernels.
"""

from __future__ import annotations

import pytest
import torch

import dispatch
from dispatch.errors import BackendRefusedError

from backends_needed import DEVICE, KERNEL_BACKENDS

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _t(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(shape, generator=g)).to(dtype).to(DEVICE)


def _served(fn, *args, **kwargs):
    """The call's result, or None where the backend refuses it (with its reason: not a failure here)."""
    try:
        return fn(*args, **kwargs)
    except BackendRefusedError:
        return None


EXPANDED = [("4x1 to 4x5, dim 0", (4, 1), (4, 5), 0), ("4x1 to 4x5, dim 1", (4, 1), (4, 5), 1),
            ("1x5 to 4x5, dim 0", (1, 5), (4, 5), 0), ("2x1x3 to 2x3x3, dim -1", (2, 1, 3), (2, 3, 3), -1)]


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("name,shape,expand,dim", EXPANDED, ids=[c[0] for c in EXPANDED])
def test_expanded_inputs_are_served_on_their_first_call(backend, op, name, shape, expand, dim):
    # an expanded view's elements overlap: the first call's check must run the kernel on a copy of
    # the same layout (it ran on a dense one, and the kernel built for the view failed the check)
    x = _t(shape, 0).expand(expand)
    got = _served(getattr(dispatch, op), x, dim, backend=backend)
    if got is None:
        pytest.skip(f"{backend} refuses {name}")
    want = getattr(torch, op)(x.double(), dim).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


CASTS = [(torch.float32, torch.float16), (torch.float32, torch.bfloat16), (torch.float16, torch.bfloat16),
         (torch.bfloat16, torch.float16)]


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{a}-{b}".replace("torch.", "") for a, b in CASTS])
@pytest.mark.parametrize("dim", [0, 1])
def test_a_narrowing_cast_rounds_the_input_first(backend, op, src, dst, dim):
    # torch casts the input to dtype= first: 10.03 and 10.0 are one value in bf16 (softmax 0.5 each)
    # and 1000.3 and 1000.0 one in fp16. A kernel that reads the input at full precision differs by
    # far more than the output's rounding; it must round it first, or refuse the call
    x = torch.tensor([[10.03, 10.0, 1000.3, 1000.0]] * 4).to(src).to(DEVICE)
    x = x.t().contiguous() if dim == 0 else x
    fn = getattr(dispatch, op)
    # a first call on data where rounding first makes no difference: it passes the first-call check
    if _served(fn, torch.zeros_like(x), dim, dtype=dst, backend=backend) is None:
        pytest.skip(f"{backend} refuses this cast")
    got = fn(x, dim, dtype=dst, backend=backend)
    want = getattr(torch, op)(x.to(dst).double(), dim).to(dst)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-3)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("shape", [(1,), (1, 1), (1, 1, 1), (2, 1)])
def test_a_row_of_one_element_far_from_zero(backend, op, shape):
    # a row of one element must subtract its own max: exp(100) overflows float32 (TileLang's C build
    # of a one-row, one-column tile read the max from before its reduction and returned nan and inf)
    fn = getattr(dispatch, op)
    if _served(fn, torch.full(shape, 0.5, device=DEVICE), -1, backend=backend) is None:
        pytest.skip(f"{backend} refuses {shape}")
    for value in (100.0, -200.0, 1e4):  # the same call key: served by the kernel resolved above
        x = torch.full(shape, value, device=DEVICE)
        torch.testing.assert_close(fn(x, -1, backend=backend), getattr(torch, op)(x, -1))
