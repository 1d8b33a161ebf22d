"""TileLang's tiles in shared memory over a dim that is not the last (``smem_cols``, config ``smem: 1``
of a strided call): which calls they serve by default and which they leave to the column kernels,
the configs they refuse (and why), the card figures their verdict names, and their sm_90 build.

The kernels run on a GPU only (``tests/test_gpu_tilelang_smem_cols.py``).
"""

from __future__ import annotations

import shutil

import attrs
import pytest
import torch

pytest.importorskip("tilelang")

from dispatch.backend import spec_of  # noqa: E402
from dispatch_tilelang import smem_cols, strided  # noqa: E402


def cuda_spec(op, x, dim):
    spec = spec_of(op, x, dim)
    return attrs.evolve(spec, tensors=[attrs.evolve(t, device=torch.device("cuda", 0)) for t in spec.tensors])


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


@pytest.mark.parametrize("x,dim", [
    (meta(32, 1024, 64, 64), 1),          # (B, C, H, W) over C
    (meta(4096, 4096), 0),                # a matrix over its rows: 4096 columns, too few for a column a thread
    (meta(32, 2048, 2048), 1),            # attention scores over the queries
    (meta(8, 512, 56, 56, dtype=torch.float32), 1),
])
def test_a_contiguous_input_over_a_leading_dim_gets_tiles_and_their_card(x, dim):
    for op in ("softmax", "log_softmax", "logsumexp"):
        spec = cuda_spec(op, x, dim)
        verdict = strided.check(spec, "cuda")
        assert verdict.ok and verdict.card == "tiles" and "tiles" in verdict.reason, (op, verdict)
        cfg = strided.default_config(spec, "cuda")
        assert cfg["smem"] == 1 and cfg in strided.config_space(spec, "cuda")
        # the tiles cover R, every CTA holds some of it, and a tile stays within the 64 KB a CTA is offered
        R = x.shape[dim]
        rows = smem_cols.tile_rows(R, str(x.dtype).split(".")[1], cfg["block_i"], cfg["cluster"], cfg["threads"])
        assert cfg["cluster"] * rows >= R > (cfg["cluster"] - 1) * rows
        assert rows * cfg["block_i"] * x.element_size() <= 64 * 1024


@pytest.mark.parametrize("x,dim,why", [
    (meta(32, 1024, 64, 128)[..., ::2], 1, "every other W: not contiguous"),
    (meta(64, 256, 7, 7), 1, "an inner extent of 49 bf16: not a whole number of 32 bytes"),
    (meta(64, 64, 64, 64), 1, "R = 64: shorter than the family was measured on"),
    (meta(65536, 128), 0, "R = 65536: 16 chunks of 64 KB don't hold a column tile"),
])
def test_other_strided_calls_keep_the_column_kernels(x, dim, why):
    spec = cuda_spec("softmax", x, dim)
    assert not strided.default_config(spec, "cuda").get("smem"), why
    assert strided.check(spec, "cuda").card == "", why


def test_a_cast_keeps_the_column_kernels():
    """softmax(x, dim, dtype=torch.float32) of bf16 x: the tiles were measured and tested writing
    their input's dtype only."""
    x = meta(32, 1024, 64, 64)
    spec = attrs.evolve(cuda_spec("softmax", x, 1), out_dtype=torch.float32)
    assert spec.out_dtype == torch.float32
    assert not strided.default_config(spec, "cuda").get("smem")
    assert not any(c.get("smem") for c in strided.config_space(spec, "cuda"))


def test_the_c_target_and_old_gpus_never_get_tiles(monkeypatch):
    x = torch.randn(16, 256, 64)
    assert not any(c.get("smem") for c in strided.config_space(spec_of("softmax", x, 1), "c"))
    from dispatch_tilelang import configs

    monkeypatch.setattr(configs, "cuda_supports_clusters", lambda: False)
    spec = cuda_spec("softmax", meta(32, 1024, 64, 64), 1)
    assert not any(c.get("smem") for c in strided.config_space(spec, "cuda"))
    assert strided.check(spec, "cuda").card == ""


@pytest.mark.parametrize("key,cfg,why", [
    ((32, 1024, 4096), dict(block_i=60, cluster=2, threads=128), "block_i=60 must be a multiple of 8"),
    ((32, 1024, 4096), dict(block_i=64, cluster=32, threads=128), "cluster must be in [1, 16] (got 32)"),
    ((32, 1024, 4096), dict(block_i=512, cluster=1, threads=96), "threads=96 must be a multiple of block_i / 8 = 64"),
    ((32, 1000, 96), dict(block_i=64, cluster=1, threads=128), "block_i=64 must be a multiple of 8 that divides the 96"),
    ((4, 65536, 4096), dict(block_i=64, cluster=2, threads=128), "exceeds 204800 bytes of shared memory"),
    ((32, 1024, 4100), dict(block_i=64, cluster=2, threads=128), "not a whole number of 8-element (16-byte) vectors"),
    ((32, 1024, 4096), dict(block_i=64, threads=128), "must give block_i, cluster and threads as ints"),
])
def test_refused_tiles_say_which_value_and_what_would_work(key, cfg, why):
    assert why in smem_cols.check_config(key, "bfloat16", cfg)


def test_a_long_r_over_few_column_tiles_takes_128_byte_rows():
    """128-byte tile rows where the grid has 256 column tiles at that width, or 1024 CTAs at tiles
    of 64 KB: dim 1 of 8x4096x1024 (128 column tiles, 8 chunks of R) and dim 0 of a 4096x4096 fp32
    matrix (128 and 8) take them; dim 0 of a bf16 4096x4096 (64 and 8: 512 CTAs) and a short R
    over few column tiles keep 64-byte rows."""
    def config(bi, cluster):
        return {"block_i": bi, "cluster": cluster, "threads": 128}

    assert smem_cols.default_config((8, 4096, 1024), "bfloat16") == config(64, 8)
    assert smem_cols.default_config((1, 4096, 4096), "float32") == config(32, 8)
    assert smem_cols.default_config((1, 4096, 4096), "bfloat16") == config(32, 8)
    assert smem_cols.default_config((2, 256, 4096), "bfloat16") == config(32, 1)
    assert smem_cols.default_config((32, 1024, 4096), "bfloat16") == config(64, 2)  # 2048 column tiles


def test_a_config_tuned_on_one_r_serves_every_r_of_its_bucket():
    """Decisions are kept per bucket (R up to the next power of two): the tile's rows are derived
    from R, not tuned, so the config tuned at the top of a bucket runs at its bottom too (the last
    CTAs of a cluster then hold nothing of R, which the kernel allows)."""
    for key, dtype in (((1, 4096, 4096), "bfloat16"), ((32, 1024, 4096), "float32"), ((8, 150, 16384), "bfloat16")):
        top = smem_cols.default_config(key, dtype)
        for R in range(key[1] // 2 + 1, key[1] + 1):
            assert smem_cols.check_config((key[0], R, key[2]), dtype, top) is None, (key, R, top)
    # the space itself offers no config that leaves a CTA empty
    for cfg in smem_cols.configs((1, 2049, 4096), "bfloat16"):
        rows = smem_cols.tile_rows(2049, "bfloat16", cfg["block_i"], cfg["cluster"], cfg["threads"])
        assert (cfg["cluster"] - 1) * rows < 2049, cfg


def test_a_tiles_config_on_a_call_they_cannot_read_is_refused_by_name():
    x = torch.randn(8, 256, 64)[..., ::2]  # not contiguous
    spec = spec_of("softmax", x, 1)
    p = strided.plan_of(spec)
    cfg = {"smem": 1, "block_i": 32, "cluster": 1, "threads": 128}
    with pytest.raises(ValueError, match="smem=0 configs serve it"):
        strided._tiles_run("softmax", p, x.dtype, x.dtype, tuple(x.shape), "cuda", cfg)


def test_the_cards_send_tiled_softmax_to_tilelang_and_logsumexp_to_triton():
    """As measured on an H200 (bf16, default configs): the tiles ahead of Triton's strided kernel for
    softmax and log_softmax (147-163 against 194-295 us where the tiles were tried), level or
    behind it for logsumexp; calls the tiles don't take keep Triton."""
    from dispatch import _plugins
    from dispatch._select import by_estimated_cost

    servers = [b for b in _plugins.registry().backends.values() if b.name in ("triton", "tilelang", "torch")]
    if len(servers) < 3:
        pytest.skip("needs torch, Triton and TileLang loaded")
    for x, dim, want in ((meta(32, 1024, 64, 64), 1, {"softmax": "tilelang", "log_softmax": "tilelang",
                                                      "logsumexp": "triton"}),
                         (meta(32, 1024, 64, 128)[..., ::2], 1, {"softmax": "triton", "logsumexp": "triton"})):
        for op, first in want.items():
            spec = cuda_spec(op, x, dim)
            cards = {"tilelang": strided.check(spec, "cuda").card}  # what its verdict says on a GPU
            ordered, _ = by_estimated_cost(servers, spec, cards=cards)
            assert ordered[0].name == first, (op, cards)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_builds_for_sm90_with_async_copies_and_a_cluster_exchange():
    """One CTA a column tile: the tile copied with cp.async, no cluster. Four: each CTA's column
    (max, sum) pairs copied into every peer, completing on the peer's mbarrier; R cut unevenly:
    the copies past R not made. The shipped kernel has no launch bound; its twin built with
    ``bound=True`` asks for the CTAs an SM that its tile and threads allow, a thread left 40
    registers at least."""
    one = smem_cols.program("softmax", (64, 256, 3136), "bfloat16", "bfloat16", 64, 256, 1,
                            arch="sm_90")(threads=128).get_kernel_source()
    four = smem_cols.program("logsumexp", (8, 1000, 1024), "bfloat16", "float32", 64, 256, 4,
                             arch="sm_90")(threads=128).get_kernel_source()
    assert "cp_async_gs<16>" in one and "cluster" not in one
    assert "tma_store_cluster" in four and ".wait(0)" in four and "cluster_wait" in four
    assert "cp_async_gs_conditional<16>" in four
    assert "__launch_bounds__(128, 1)" in one and "__launch_bounds__(128, 1)" in four
    # 32 KB tiles: 6 an SM (228 KB, 1 KB reserved a CTA); 8 KB tiles in a cluster of 4: 16 by their
    # shared memory and threads, 12 by 40 registers
    wide = smem_cols.program("softmax", (64, 256, 3136), "bfloat16", "bfloat16", 64, 256, 1, arch="sm_90",
                             bound=True)(threads=128).get_kernel_source()
    short = smem_cols.program("logsumexp", (8, 256, 1024), "bfloat16", "float32", 64, 64, 4, arch="sm_90",
                              bound=True)(threads=128).get_kernel_source()
    assert "__launch_bounds__(128, 6)" in wide and "__launch_bounds__(128, 12)" in short




def test_the_cards_keep_strided_rows_where_they_were_measured(monkeypatch):
    """Rows one stride apart (a slice of wider rows) no longer share a bucket, nor so a shipped
    decision, with dense rows: the cards decide them. As measured at 16384 rows of 4000 in rows
    of 4096 (bf16): softmax TileLang's (68.6 against 73.2 us), logsumexp Triton's (36.7 against
    45.7); rows longer than 16K, where TileLang's register families trail, Triton's."""
    from dispatch import _plugins
    from dispatch._select import by_estimated_cost

    import dispatch_tilelang
    from dispatch_tilelang import availability

    monkeypatch.setattr(availability, "available", lambda target: (True, ""))  # the verdict a GPU gets
    servers = [b for b in _plugins.registry().backends.values() if b.name in ("triton", "tilelang", "torch")]
    if len(servers) < 3:
        pytest.skip("needs torch, Triton and TileLang loaded")
    for x, want in ((meta(16384, 4096)[:, :4000], {"softmax": "tilelang", "log_softmax": "tilelang",
                                                   "logsumexp": "triton"}),
                    (meta(64, 32768)[:, :30000], {"softmax": "triton", "logsumexp": "triton"})):
        for op, first in want.items():
            spec = cuda_spec(op, x, -1)
            verdict = dispatch_tilelang.dispatch_check(op, spec)
            assert verdict.ok, verdict
            ordered, _ = by_estimated_cost(servers, spec, cards={"tilelang": verdict.card})
            assert ordered[0].name == first, (op, x.shape, verdict)
