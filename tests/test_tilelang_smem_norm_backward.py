"""TileLang's norm backward with a row's chunks in shared memory (``smem_norm_backward``), on the CPU:
its configs cover every row they claim and leave no CTA without columns, its refusals say why,
and its sm_90 build has the exchange it needs (the kernels run in tests/test_gpu_tilelang_smem_norm_backward.py)."""

from __future__ import annotations

import inspect
import random

import pytest

pytest.importorskip("tilelang")

from dispatch_tilelang import configs as TC  # noqa: E402
from dispatch_tilelang import smem_norm_backward as SB  # noqa: E402
from dispatch_tilelang.cuda_kernels import DTYPE_BYTES  # noqa: E402


def lengths(dtype):
    vec = 16 // DTYPE_BYTES[dtype]
    rng = random.Random(7)
    return sorted({vec, 1024, 4096, 16392, 24584, 32768, 65536, 131072, 262144}
                  | {vec * rng.randrange(1, 262144 // vec) for _ in range(60)})


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
def test_every_config_covers_its_row_and_leaves_no_cta_empty(dtype):
    for n in lengths(dtype):
        found = SB.configs(n, dtype)
        for cfg in found:
            tile, c, threads = cfg["tile_n"], cfg["cluster"], cfg["threads"]
            assert c * tile >= n > (c - 1) * tile, (n, cfg)
            assert tile // threads <= SB.MAX_ACC_PER_THREAD, (n, cfg)
            chunks = 5 if cfg["ahead"] else 3
            assert chunks * tile * DTYPE_BYTES[dtype] <= SB.SMEM_BYTES, (n, cfg)
            assert SB.check_backward(n, dtype, tile, c, 1, threads, bool(cfg["ahead"])) is None
        default = SB.default_config(n, dtype)
        assert (default is None) == (not found) and (default is None or default in found), (n, default)


def test_the_default_follows_the_measured_shapes():
    """The fastest configs of the H200 sweeps: rows of up to 32K in the fewest chunks, longer ones in
    chunks of 8192 at 256 threads, 262144 in 16 chunks of 16384, the next row's copy in flight;
    rows of up to 4 KB whole in 128 threads, eight or four CTAs an SM."""
    pick = {n: SB.default_config(n, "bfloat16") for n in (4096, 16384, 32768, 65536, 131072, 262144)}
    assert [(pick[n]["cluster"], pick[n]["threads"]) for n in sorted(pick)] == \
        [(1, 256), (1, 512), (2, 512), (8, 256), (16, 256), (16, 512)]
    assert all(cfg["ahead"] for cfg in pick.values())
    assert [pick[n]["per_sm"] for n in sorted(pick)] == [2, 1, 1, 2, 2, 2]  # 512 threads, < 16 chunks: one CTA an SM
    assert not SB.default_config(262144, "float32")["ahead"]  # five 64 KB chunks do not fit
    short = {n: SB.default_config(n, "bfloat16") for n in (1024, 2048)}  # whole rows, many small CTAs an SM
    assert [(short[n]["cluster"], short[n]["threads"], short[n]["per_sm"]) for n in (1024, 2048)] == \
        [(1, 128, 8), (1, 128, 4)]


def test_refusals_name_what_would_work(monkeypatch):
    assert "accumulators a thread" in SB.check_backward(65536, "bfloat16", 65536, 1, 1, 256)
    assert "larger cluster" in SB.check_backward(262144, "float32", 16384, 16, 1, 512, True)
    assert "whole number" in SB.refusal(4099, "bfloat16")
    assert "holds rows of 1048576" in SB.refusal(1 << 20, "bfloat16")
    monkeypatch.setattr(TC, "cuda_supports_clusters", lambda: False)
    assert "sm_90" in SB.refusal(65536, "bfloat16")


@pytest.mark.parametrize("op,n,dtype,weight,bias,ahead", [
    ("layer_norm", 65536, "bfloat16", True, True, True),
    ("rms_norm", 16384, "float32", False, False, False),
])
def test_the_sm90_build(op, n, dtype, weight, bias, ahead):
    cfg = SB.default_config(n, dtype)
    src = SB.program(op, n, dtype, weight, bias, 1e-5, cfg["tile_n"], cfg["cluster"], ahead, arch="sm_90")(
        block_m=1, threads=cfg["threads"]).get_kernel_source()
    clustered = cfg["cluster"] > 1
    assert ("tma_store_cluster" in src) == clustered and ("cluster_wait" in src) == clustered
    assert ("& 1))" in src) == clustered  # the exchange's barrier waits on the row's parity
    assert ("cp_async_wait<2>" in src) == ahead  # this row landed, the next one's copies in flight
    assert ("&(w[" in src) == weight and ("pb + " in src) == bias  # an absent tensor is neither read nor written


def _program(name):
    from dispatch_tilelang import smem_cols, smem_norms, smem_rows

    return {
        "smem_rows": lambda: smem_rows.program("softmax", 65536, "bfloat16", "bfloat16", 8192, 8, arch="sm_90"),
        "smem_norms": lambda: smem_norms.program("layer_norm", 65536, "bfloat16", True, True, 1e-5, 8192, 8,
                                                 arch="sm_90"),
        "smem_norm_backward": lambda: SB.program("layer_norm", 65536, "bfloat16", True, True, 1e-5, 8192, 8, True,
                                                 arch="sm_90"),
        "smem_cols": lambda: smem_cols.program("softmax", (4, 1024, 64), "bfloat16", "bfloat16", 64, 128, 8,
                                               arch="sm_90"),
    }[name]()


@pytest.mark.parametrize("name", ["smem_rows", "smem_norms", "smem_norm_backward", "smem_cols"])
def test_tilelangs_autotuner_can_key_every_shared_memory_program(name):
    """TileLang's autotuner keys a tune by the JIT function's free variables and refuses any that is
    not an int, float, str, bool or None: a macro made outside the function (the cluster exchange)
    failed every native tune of these families with "Cell contents Macro(...) is not serializable"."""
    fn = _program(name).func
    params = set(inspect.signature(fn).parameters)
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    bad = {k: type(c.cell_contents).__name__ for k, c in cells.items()
           if k not in params and not isinstance(c.cell_contents, (int, float, str, bool, type(None)))}
    assert not bad, f"{name}: free variables TileLang's autotuner cannot key: {bad}"
