"""Stage two of TileLang's norm backwards (``column_sums``), on the CPU: its launch configs keep
their rules, and its sm_90 build copies whole tiles ahead only where rows are 16-byte aligned
(the sums run in tests/test_gpu_tilelang_column_sums.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("tilelang")

from dispatch_tilelang import column_sums as CS  # noqa: E402


@pytest.mark.parametrize("n,p,k", [(n, p, k) for n in (7, 16, 1000, 1024, 4096, 65536, 262144)
                                   for p in (1, 3, 17, 264, 1056) for k in (1, 2)])
def test_column_sums_configs(n, p, k):
    """Stage two's launch: 16-byte rows in whole CTAs of columns copied ahead, other rows guarded;
    a tile of rows a power of two, no more than the partials' rows but for two values a thread."""
    cfg = CS.config(n, p, k, 132)
    assert cfg["aligned"] == (n % 16 == 0)
    if cfg["aligned"]:
        assert n % cfg["block_n"] == 0 and cfg["stages"] > 1
    bp = cfg["block_p"]
    assert bp & (bp - 1) == 0 and (bp <= p or bp * cfg["block_n"] == 64)
    assert 32 <= cfg["threads"] <= 128 and bp * cfg["block_n"] >= 2 * cfg["threads"]


@pytest.mark.parametrize("n,p", [(1024, 1056), (1000, 1056), (16, 1)])
def test_column_sums_sm90_build(n, p):
    cfg = CS.config(n, p, 2, 132)
    src = CS.program(n, "bfloat16", 2, 0, cfg["aligned"], arch="sm_90")(
        **{name: cfg[name] for name in ("block_p", "block_n", "threads", "stages")}).get_kernel_source()
    assert ("cp_async" in src) == cfg["aligned"]  # whole tiles copied ahead; guarded loads elsewhere
