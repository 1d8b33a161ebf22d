"""logsumexp over trailing dims that are dense among themselves reads rows: the call spec says so
(``CallSpec.reads_rows``, ``row_stride``), and each built-in backend serves it with its row kernels,
the reduced dims read as one, matching torch, the input untouched."""

from __future__ import annotations

import pytest
import torch

import dispatch
from backends_needed import require_backend
from dispatch.backend import spec_of

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")

CASES = [  # (base shape, view of it, reduced dims, rows one stride apart: the stride, else None)
    ((4, 8, 16), lambda t: t, (1, 2), 128),
    ((4, 8, 16), lambda t: t, (2, 1), 128),  # dims in any order
    ((2, 3, 4, 5), lambda t: t, (1, 2, 3), 60),
    ((6, 5), lambda t: t, (0, 1), 30),  # every dim: one row
    ((4, 12, 16), lambda t: t[:, :8, :], (1, 2), 192),  # rows of a wider buffer
    ((3, 1, 4, 5), lambda t: t, (1, 2, 3), 20),  # a size-1 reduced dim
]
NOT_ROWS = [  # reduced dims that are not one unit-stride run, or not the last ones
    ((4, 8, 16), lambda t: t[:, :, :8], (1, 2)),
    ((3, 4, 5), lambda t: t.transpose(1, 2), (1, 2)),
    ((4, 8, 16), lambda t: t, (0, 1)),
    ((4, 0, 16), lambda t: t, (1, 2)),
]


@pytest.mark.parametrize("shape,view,dims,stride", CASES)
def test_trailing_dense_dims_read_as_rows(shape, view, dims, stride):
    x = view(torch.randn(shape))
    spec = spec_of("logsumexp", x, dims)
    assert spec.reads_rows and not spec.last_dim_contiguous
    assert spec.row_stride == stride and spec.reduced_size * spec.rows == x.numel()


@pytest.mark.parametrize("shape,view,dims", NOT_ROWS)
def test_other_reduced_dims_do_not(shape, view, dims):
    x = view(torch.randn(shape))
    assert not spec_of("logsumexp", x, dims).reads_rows


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_rows_whose_kept_dims_do_not_collapse_go_to_the_column_kernels(backend):
    require_backend(backend)
    x = torch.randn(6, 5, 4, 3, device=DEV).permute(1, 0, 2, 3)  # kept dims (5, 6) in the wrong order
    spec = spec_of("logsumexp", x, (2, 3))
    assert spec.reads_rows and spec.row_stride is None
    if backend == "tilelang" and DEV.type == "cuda":  # a CUDA thread per row of 12 would read it alone: refused
        with pytest.raises(dispatch.BackendRefusedError, match="not one stride apart"):
            dispatch.explain("logsumexp", x, (2, 3), backend=backend)
        backend = None
    else:
        decision = dispatch.explain("logsumexp", x, (2, 3), backend=backend).decision
        verdict = next(c.verdict for c in decision.candidates if c.name == backend)
        assert verdict.ok and "read as rows of" not in verdict.reason, verdict.reason
    torch.testing.assert_close(dispatch.logsumexp(x, (2, 3), backend=backend), torch.logsumexp(x, (2, 3)),
                               rtol=1e-5, atol=1e-5)


def test_one_dim_reads_rows_exactly_when_it_is_the_last_unit_stride_one():
    x = torch.randn(6, 64)
    assert spec_of("logsumexp", x[:, :37], -1).reads_rows and spec_of("logsumexp", x[:, :37], -1).row_stride == 64
    assert not spec_of("logsumexp", x.t(), -1).reads_rows
    assert not spec_of("logsumexp", x, 0).reads_rows


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape,view,dims,stride", CASES)
def test_each_backend_serves_them_with_its_row_kernels(backend, keepdim, shape, view, dims, stride):
    require_backend(backend)
    g = torch.Generator().manual_seed(0)
    x = view(torch.randn(shape, generator=g).to(DEV))
    x[0] = float("-inf")  # a row of -inf: -inf, as torch
    before = x.clone()
    decision = dispatch.explain("logsumexp", x, dims, keepdim, backend=backend).decision
    verdict = next(c.verdict for c in decision.candidates if c.name == backend)
    if backend == "triton" or x.is_contiguous() or DEV.type == "cuda":  # TileLang's C kernels: dense rows only
        assert "read as rows of" in verdict.reason, verdict.reason
    got = dispatch.logsumexp(x, dims, keepdim, backend=backend)
    want = torch.logsumexp(x, dims, keepdim)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(x, before)
