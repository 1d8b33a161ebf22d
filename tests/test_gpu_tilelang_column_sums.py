"""On a CUDA device: stage two of TileLang's norm backwards (``column_sums``) against a float64 sum of
the same partials: whole tiles and a tail of rows, fewer rows than a tile, a single row, columns
that are not a whole number of 16, one block or both, and the same sums bit for bit run to run;
the partials left as they were."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

pytest.importorskip("tilelang")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from dispatch.tolerance import mismatch, tolerance  # noqa: E402
from dispatch_tilelang import column_sums as CS  # noqa: E402
from dispatch_tilelang.direct import args_call  # noqa: E402

DT = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def sums(parts, dtype, k, first):
    p, n = parts.shape[1:]
    cfg = CS.config(n, p, k, torch.cuda.get_device_properties(parts.device).multi_processor_count)
    out = torch.full((k, n), float("nan"), dtype=dtype, device=parts.device)
    args_call(CS.build(n, DT[dtype], k, first, cfg))(parts, out)
    return out


@pytest.mark.parametrize("p,n", [(1056, 1024), (264, 4096), (130, 4096), (1, 64), (3, 16), (17, 65536),
                                 (1057, 1000), (5, 7), (33, 4104)])
@pytest.mark.parametrize("k,first", [(2, 0), (1, 0), (1, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_sums_are_the_partials_sum(p, n, k, first, dtype):
    g = torch.Generator(device="cuda").manual_seed(p * 7 + n)
    parts = torch.randn((2, p, n), device="cuda", generator=g) * 3 + 1
    before = parts.clone()
    got = sums(parts, dtype, k, first)
    want = parts[first:first + k].double().sum(1)
    scale = float(want.abs().max().clamp_min(1))
    why = mismatch(got.double() / scale, want / scale, tolerance(dtype))
    assert why is None, why
    assert torch.equal(parts, before)


def test_the_same_sums_run_to_run():
    parts = torch.randn((2, 1056, 2048), device="cuda")
    first = sums(parts, torch.float32, 2, 0)
    for _ in range(3):
        assert torch.equal(sums(parts, torch.float32, 2, 0), first)
