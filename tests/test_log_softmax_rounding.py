"""log_softmax of fp32 values in the hundreds, on every backend, at dispatch's fp32 tolerance.

``x - (max + log(sum))`` rounds ``max + log(sum)`` before the subtraction: up to half an ulp of the
max, 3e-5 where a row reaches 400, three times the tolerance near the row's max, where the result
is about 0. torch computes ``(x - max) - log(sum)``; so must a kernel that claims parity with it.
Rows and leading dims, each kernel family a backend runs on this machine (Triton interpreted,
TileLang's C target: the same formulas as their CUDA kernels); on a GPU, their CUDA kernels.
"""

from __future__ import annotations

import pytest
import torch

import dispatch
from backends_needed import require_backend
from dispatch.tolerance import tolerance


@pytest.mark.parametrize("backend", ["torch", "triton", "tilelang"])
@pytest.mark.parametrize("shape,dim", [((24, 1000), -1), ((1000, 24), 0), ((4, 500, 6), 1), ((3, 2000), -1)])
def test_log_softmax_of_large_values_rounds_as_torch(backend, shape, dim):
    require_backend(backend)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen) * 120  # maxima of about 400 in every row
    if torch.cuda.is_available():
        x = x.cuda()
    want = torch.log_softmax(x.double(), dim).float()
    assert (x.abs().amax() > 300).item()
    try:
        y = dispatch.log_softmax(x, dim, backend=backend)
    except dispatch.BackendRefusedError as refused:  # on a GPU: a layout the backend's CUDA kernels leave
        pytest.skip(str(refused))
    rtol, atol = tolerance(torch.float32)
    torch.testing.assert_close(y, want, rtol=rtol, atol=atol)
