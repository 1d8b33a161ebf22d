"""The chunk-in-shared-memory family of TileLang's CUDA row kernels (``smem_rows``, config ``smem: 1``):
which configs it takes and refuses (and why), where it is the default, and its sm_90 build.

The kernels themselves run on a GPU only (``tests/test_gpu_tilelang_smem.py``); the C target has
no shared memory to stage a chunk in and never sees the key.
"""

from __future__ import annotations

import re
import shutil

import pytest

pytest.importorskip("tilelang")

from dispatch_tilelang import build as B, configs as C  # noqa: E402


def smem(tile_n, cluster, threads=256, block_m=1):
    return {"block_m": block_m, "threads": threads, "tile_n": tile_n, "cluster": cluster, "smem": 1}


@pytest.mark.parametrize("n_cols,dtype,cfg,why", [
    (32768, "bfloat16", smem(32768, 1, block_m=2), "block_m must be 1 (got 2)"),
    (32001, "bfloat16", smem(34816, 1), "rows of 32001 are not a whole number of 8-element (16-byte) vectors"),
    (65536, "bfloat16", smem(16384, 2), "cluster x tile_n = 32768 does not cover a row of 65536"),
    (65536, "bfloat16", smem(16384, 8), "leaves its last CTA nothing"),
    (262144, "float32", smem(65536, 4), "exceeds 204800 bytes of shared memory"),
    (32768, "bfloat16", smem(32000, 1), "tile_n=32000 must be a positive multiple of 8 x 256 threads"),
    (32768, "bfloat16", smem(32768, 1, threads=48), "threads must be a multiple of 32"),
    (262144, "bfloat16", smem(8192, 32), "cluster must be in [1, 16] (got 32)"),
    (32768, "bfloat16", {**smem(32768, 1), "smem": 2}, "smem must be 0 or 1 (got 2)"),
])
def test_refused_configs_say_which_value_and_what_would_work(n_cols, dtype, cfg, why):
    assert why in C.validate_config("softmax", n_cols, dtype, cfg, "cuda")


def test_strided_rows_are_refused_and_never_get_the_family():
    cfg = smem(32768, 1)
    assert C.validate_config("softmax", 32768, "bfloat16", cfg, "cuda") is None
    assert "dense rows only (got row_stride=33000)" in C.validate_config("softmax", 32768, "bfloat16", cfg, "cuda",
                                                                         row_stride=33000)
    assert C.default_config("softmax", 64, 32768, "bfloat16", "cuda").get("smem") == 1
    strided = C.default_config("softmax", 64, 32768, "bfloat16", "cuda", row_stride=33000)
    assert not strided.get("smem") and C.validate_config("softmax", 32768, "bfloat16", strided, "cuda", 33000) is None
    assert not any(c.get("smem") for c in C.config_space("softmax", 64, 32768, "bfloat16", "cuda", row_stride=33000))
    with pytest.raises(ValueError, match="dense rows only"):
        B.jit_program("softmax", 32768, "bfloat16", "bfloat16", "cuda", cfg, row_stride=33000)


def test_a_cast_never_gets_the_family():
    """softmax(x, -1, dtype=torch.float32) of bf16 rows: the family writes its input's dtype only."""
    assert C.default_config("softmax", 64, 32768, "bfloat16", "cuda", out_dtype="bfloat16").get("smem") == 1
    cast = C.default_config("softmax", 64, 32768, "bfloat16", "cuda", out_dtype="float32")
    assert not cast.get("smem") and C.validate_config("softmax", 32768, "bfloat16", cast, "cuda") is None
    assert not any(c.get("smem") for c in C.config_space("softmax", 64, 32768, "bfloat16", "cuda", out_dtype="float32"))
    with pytest.raises(ValueError, match=r"writes its input's dtype \(got bfloat16 -> float32\)"):
        B.jit_program("softmax", 32768, "bfloat16", "float32", "cuda", smem(32768, 1))


def test_the_c_target_never_takes_the_key():
    why = C.validate_config("softmax", 32768, "float32", {"block_m": 1, "tile_n": 2048, "smem": 1}, "c")
    assert "unknown config key(s) ['smem']" in why


@pytest.mark.parametrize("n_cols,dtype,want", [
    (8192, "bfloat16", None),  # whole-row family: held in registers at copy speed
    (16384, "bfloat16", (16384, 1)),
    (16392, "bfloat16", (18432, 1)),
    (32000, "bfloat16", (32768, 1)),  # a 32000-word vocabulary
    (32768, "float16", (32768, 1)),
    (65536, "bfloat16", (8192, 8)),  # softmax: eight chunks of 8K, each keeping its exponentials
    (131072, "bfloat16", (16384, 8)),
    (151936, "bfloat16", (20480, 8)),
    (262144, "bfloat16", (32768, 8)),
    (524288, "bfloat16", None),  # past the family's rule
    (30001, "bfloat16", None),  # odd rows: no 16-byte copies
    (32768, "float32", None),
    (262144, "float32", None),
])
def test_default_takes_the_family_where_it_led(n_cols, dtype, want):
    cfg = C.default_config("softmax", 256, n_cols, dtype, "cuda")
    assert C.validate_config("softmax", n_cols, dtype, cfg, "cuda") is None
    got = (cfg["tile_n"], cfg["cluster"]) if cfg.get("smem") else None
    assert got == want, cfg
    if want:
        assert cfg["tile_n"] * cfg["cluster"] >= n_cols  # one read of the row


@pytest.mark.parametrize("n_cols,logsumexp,log_softmax,softmax", [
    (32768, (32768, 1, 256), (32768, 1, 256), (32768, 1, 256, 0)),
    (40960, (10240, 4, 128), (10240, 4, 128), (10240, 4, 128, 1)),  # not eight chunks of 5K (116.2 us against 100.7)
    (49152, (12288, 4, 128), (12288, 4, 256), (12288, 4, 128, 1)),
    # log_softmax: chunks of 8K (82.9-83.8 us against 90.5-93.3); softmax, kept: 100.9 against 109.3 (H100)
    (65536, (16384, 4, 128), (8192, 8, 128), (8192, 8, 128, 1)),
    (98304, (12288, 8, 128), (12288, 8, 256), (12288, 8, 128, 1)),
    (131072, (16384, 8, 128), (16384, 8, 256), (16384, 8, 256, 1)),  # 256 threads (82.7-83.6 us against 91.0-91.6)
    (262144, (32768, 8, 256), (32768, 8, 256), (32768, 8, 256, 0)),  # kept: 0-6% more at every config
])
def test_softmaxes_take_chunks_of_8k_to_16k_from_32k_to_128k(n_cols, logsumexp, log_softmax, softmax):
    """log_softmax and softmax (which keeps its exponentials in shared memory there) take up to eight
    chunks of at least 8K columns from 32K to 128K; logsumexp the chunks of 16K columns."""
    for op, want in (("logsumexp", logsumexp + (0,)), ("log_softmax", log_softmax + (0,)), ("softmax", softmax)):
        cfg = C.default_config(op, 1024, n_cols, "bfloat16", "cuda")
        assert (cfg["tile_n"], cfg["cluster"], cfg["threads"], cfg.get("keep", 0)) == want, (op, cfg)
        assert C.validate_config(op, n_cols, "bfloat16", cfg, "cuda") is None


def test_keep_is_a_softmax_key_of_the_family_offered_where_it_serves():
    """``keep: 1``: softmax's chunk-in-shared-memory kernels that keep their exponentials, in the space
    next to each config of up to eight chunks of rows longer than 32K; a bad value, another op, or
    another family is refused naming it."""
    space = C.config_space("softmax", 1024, 65536, "bfloat16", "cuda")
    kept = [c for c in space if c.get("keep")]
    plain = {tuple(sorted(c.items())) for c in space if c.get("smem") and not c.get("keep")}
    assert kept and all(c["smem"] == 1 and c["cluster"] <= 8 for c in kept)
    assert {tuple(sorted({k: v for k, v in c.items() if k != "keep"}.items())) for c in kept} <= plain
    fams = C.families(space, "cuda")  # a kept config is its own kernel, next to its twin's
    kept_fams = [dict(k) for k in fams if dict(k)["keep"]]
    assert kept_fams and all(tuple(sorted({**k, "keep": 0}.items())) in fams for k in kept_fams)
    longer = [c for c in C.config_space("softmax", 512, 131072, "bfloat16", "cuda") if c.get("smem")]
    assert any(c["cluster"] == 16 for c in longer) and not any(c["cluster"] == 16 and c.get("keep") for c in longer)
    for op in ("log_softmax", "logsumexp"):
        assert not any(c.get("keep") for c in C.config_space(op, 1024, 65536, "bfloat16", "cuda"))
    assert not any(c.get("keep") for c in C.config_space("softmax", 1024, 32768, "bfloat16", "cuda"))
    assert C.default_config("softmax", 4, 98304, "bfloat16", "cuda")["keep"] == 1  # a few rows' chunks too
    assert "keep" not in C.default_config("softmax", 4, 262144, "bfloat16", "cuda")
    cfg = C.default_config("softmax", 1024, 65536, "bfloat16", "cuda")
    assert "keep must be 0 or 1 (got 2)" in C.validate_config("softmax", 65536, "bfloat16", {**cfg, "keep": 2}, "cuda")
    assert "not log_softmax with smem=1" in C.validate_config("log_softmax", 65536, "bfloat16", cfg, "cuda")
    regs = {"block_m": 1, "threads": 512, "tile_n": 8192, "cluster": 8, "keep": 1}
    assert "not softmax with smem=0" in C.validate_config("softmax", 65536, "bfloat16", regs, "cuda")
    with pytest.raises(ValueError, match="not log_softmax with smem=1"):
        B.jit_program("log_softmax", 65536, "bfloat16", "bfloat16", "cuda", cfg)
    assert "unknown config key(s) ['keep']" in C.validate_config("softmax", 65536, "float32",
                                                                {"block_m": 1, "tile_n": 2048, "keep": 1}, "c")


@pytest.mark.parametrize("n_rows,n_cols,op,want", [
    # the configs that led the H100 sweep of few long rows (benchmarks/results/current/rows_kernels/few_rows/)
    (1, 32000, "softmax", (8192, 4, 128)),  # 8.0 us; one CTA of 32768 (the many-row rule) took 10.3
    (1, 32000, "logsumexp", (8192, 4, 128)),  # 7.1 against 8.1
    (8, 128256, "softmax", (16384, 8, 256)),  # 11.1 against 11.7 at 128 threads
    (8, 128256, "logsumexp", (16384, 8, 256)),  # 9.4 against 10.5
    (1, 262144, "softmax", (32768, 8, 256)),  # the many-row rule's own, no faster config of eight chunks
    (9, 32000, "softmax", (32768, 1, 256)),  # past FEW_ROWS: the many-row rule
])
def test_few_rows_are_cut_into_more_chunks(n_rows, n_cols, op, want):
    cfg = C.default_config(op, n_rows, n_cols, "bfloat16", "cuda")
    assert (cfg["tile_n"], cfg["cluster"], cfg["threads"]) == want, cfg


def test_every_few_row_default_launches_and_covers_its_row():
    for n_cols in range(C.SMEM_MIN_COLS, C.SMEM_MAX_COLS + 1, 8 * 997):
        for op in ("softmax", "log_softmax", "logsumexp"):
            few, many = (C.default_config(op, m, n_cols, "bfloat16", "cuda") for m in (1, 4096))
            assert C.validate_config(op, n_cols, "bfloat16", few, "cuda") is None, (n_cols, few)
            assert few.get("smem") == 1 and few["cluster"] * few["tile_n"] >= n_cols, (n_cols, few)
            assert few["cluster"] >= many["cluster"] or not many.get("smem"), (n_cols, few, many)


def test_space_offers_the_family_next_to_the_register_ones():
    space = C.config_space("softmax", 1024, 65536, "bfloat16", "cuda")
    fams = C.families(space, "cuda")
    assert any(k for k in fams if dict(k)["smem"] == 1) and any(k for k in fams if dict(k)["smem"] == 0)
    for cfg in space:
        assert C.validate_config("softmax", 65536, "bfloat16", cfg, "cuda") is None, cfg


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_builds_for_sm90_with_async_copies_and_a_cluster_exchange(monkeypatch):
    """One CTA: the chunk copied with cp.async, no cluster. Eight: each chunk's (max, sum) copied
    into every peer, completing on the peer's mbarrier, and a cluster barrier before leaving. Each
    launch bound asks for the CTAs an SM holds by their chunks (228 KB an SM, 2 KB more a CTA),
    never so many that a thread has fewer than 40 registers."""
    monkeypatch.setenv("DISPATCH_TILELANG_CUDA_ARCH", "sm_90")
    jobs = [("softmax", 32768, "bfloat16", smem(32768, 1)), ("log_softmax", 262144, "bfloat16", smem(32768, 8)),
            ("logsumexp", 151936, "float16", smem(20480, 8)), ("softmax", 131072, "bfloat16", smem(8192, 16)),
            ("log_softmax", 65536, "bfloat16", smem(8192, 8, threads=128))]
    srcs = []
    for op, n, dt, cfg in jobs:  # one at a time: see build._TRACE_LOCK
        jit, build = C.split_config(cfg, "cuda")
        srcs.append(B.jit_program(op, n, dt, dt, "cuda", build)(**jit).get_kernel_source())
    one, eight, padded, sixteen, narrow = srcs
    # chunks of 64 KB: 3 an SM; 40 KB: 5; 16 KB at 256 threads: 12 by shared memory, 8 by threads,
    # 6 by 40 registers (8 left 32, and ptxas spilled); at 128 threads: 12
    for src, ctas in ((one, "256, 3"), (eight, "256, 3"), (padded, "256, 5"), (sixteen, "256, 6"),
                      (narrow, "128, 12")):
        assert f"__launch_bounds__({ctas})" in src
    assert "cp_async_gs<16>" in one and "cluster" not in one
    for src in (eight, padded):
        assert "tma_store_cluster" in src and ".wait(0)" in src and "cluster_wait" in src
    assert "cp_async_gs_conditional<16>" in padded  # the last chunk's columns past N are not read


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_staged_twin_waits_for_each_part_of_its_chunk_in_turn():
    """``staged=True``: the chunk is copied in parts that divide its walk, each part its own cp.async
    group of 16-byte copies (the last chunk's past N not read), and the max walk waits for one more
    group at each part; the shipped build waits once for the whole chunk."""
    from dispatch_tilelang import smem_rows

    def source(n, tile, cluster, dtype, threads, **twin):
        return smem_rows.program("softmax", n, dtype, dtype, tile, cluster, "sm_90", **twin)(
            block_m=1, threads=threads).get_kernel_source()

    # 16384 bf16 at 256 threads: 8 walk steps, 8 parts; 20480 fp16: 10 steps, 5 parts of 2
    for n, tile, cluster, dtype, parts in ((65536, 16384, 4, "bfloat16", 8), (151936, 20480, 8, "float16", 5)):
        staged = source(n, tile, cluster, dtype, 256, staged=True)
        assert staged.count("cp_async_commit()") == parts
        waits = [int(w) for w in re.findall(r"cp_async_wait<(\d+)>", staged)]
        assert waits == list(range(parts - 1, -1, -1))
        assert "cp_async_gs<4>" not in staged and "cp_async_gs_conditional<4>" not in staged
    assert "cp_async_gs_conditional<16>" in staged
    plain = source(65536, 16384, 4, "bfloat16", 256)
    assert plain.count("cp_async_commit()") == 1 and "cp_async_wait<0>" in plain and "cp_async_wait<1>" not in plain


def test_gpus_older_than_sm90_keep_the_register_families(monkeypatch):
    """Measured on an H200 only: an sm_80 GPU is neither offered the family nor defaulted to it,
    and a config that names it is refused with the reason."""
    monkeypatch.setattr(C, "cuda_supports_clusters", lambda: False)
    cfg = C.default_config("softmax", 64, 32768, "bfloat16", "cuda")
    assert not cfg.get("smem") and C.validate_config("softmax", 32768, "bfloat16", cfg, "cuda") is None
    assert not any(c.get("smem") for c in C.config_space("softmax", 64, 32768, "bfloat16", "cuda"))
    assert "runs on sm_90+ GPUs" in C.validate_config("softmax", 32768, "bfloat16", smem(32768, 1), "cuda")


def test_a_shipped_decision_serves_every_row_length_of_its_bucket():
    """A decision is kept per bucket (N up to the next power of two): the shipped chunk-in-shared-memory
    configs, raced in their buckets (at the top, or at a vocabulary such as 151936), run on every N
    of the bucket, each chunk refit to the row (a Qwen vocabulary of 151936 under the decision raced
    at 262144 once left three of eight CTAs nothing, and was refused), and are exactly the raced
    config at the length their chunks cover."""
    import json
    from pathlib import Path

    import dispatch

    tables = Path(dispatch.__file__).parent / "tables"
    shipped = [e for f in sorted(tables.glob("*.json")) for e in json.loads(f.read_text())["entries"]
               if e["value"]["backend"] == "tilelang" and e["value"]["config"].get("smem")]
    assert shipped, "the shipped tables hold chunk-in-shared-memory decisions"
    for entry in shipped:
        key, cfg = entry["key"], entry["value"]["config"]
        top = int(key["bucket"].split("N<=")[1].split(",")[0])
        covered = min(top, cfg["cluster"] * cfg["tile_n"])
        assert top // 2 < covered and C.fit_config(covered, key["dtype"], cfg) == cfg, (key["bucket"], cfg)
        for n in (top // 2 + 8, 151936, 3 * top // 4, top - 8):
            if top // 2 < n <= top:
                fitted = C.fit_config(n, key["dtype"], cfg)
                assert C.validate_config(key["op"], n, key["dtype"], fitted, "cuda") is None, (key["bucket"], n)
                # the cluster halves only where its share would leave a CTA nothing or hold less than
                # 16 KB (log_softmax's eight chunks of 8K on rows just past 32K: four of 9216)
                assert fitted["threads"] == cfg["threads"] and fitted["cluster"] <= cfg["cluster"]
                assert (fitted["cluster"] - 1) * fitted["tile_n"] < n <= fitted["cluster"] * fitted["tile_n"]
                assert fitted["cluster"] == 1 or fitted["tile_n"] * 2 >= 16 << 10


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("top", [32768, 262144])
def test_any_config_of_the_space_tuned_at_the_top_of_a_bucket_serves_its_bottom(dtype, top):
    """A tuned config is kept for its bucket too: refit to a row just past the bucket's half, four
    chunks of 8192 (tuned at 32768) became chunks of 6144, and the last of 4 CTAs started past a
    row of 16392 (refused, so the call faulted); the cluster is now halved until every CTA has
    columns."""
    vec = 16 // (4 if dtype == "float32" else 2)
    for cfg in [c for c in C.config_space("softmax", 256, top, dtype, "cuda") if c.get("smem")]:
        assert C.fit_config(top, dtype, cfg) == cfg
        for n in range(top // 2 + vec, top + 1, vec * 211):
            fitted = C.fit_config(n, dtype, cfg)
            assert C.validate_config("softmax", n, dtype, fitted, "cuda") is None, (cfg, n, fitted)
            assert fitted["threads"] == cfg["threads"] and fitted["cluster"] <= cfg["cluster"]


def test_a_refit_never_cuts_chunks_below_16_kb():
    """A decision raced at the top of a bucket (log_softmax's eight chunks of 8K at 65536) on a
    shorter row of it: the cluster halves until a chunk holds 16 KB (rows of 40960: four chunks of
    10240, where eight of 5120 ran 15% slower); eight chunks of 2 KB on rows of 16384 become two of 16 KB."""
    cfg = {**smem(8192, 8, threads=128)}
    assert C.fit_config(65536, "bfloat16", cfg) == cfg
    for n, cluster in ((40960, 4), (49152, 4), (57344, 4), (65528, 8)):
        fitted = C.fit_config(n, "bfloat16", cfg)
        assert fitted["cluster"] == cluster and fitted["tile_n"] * 2 >= 16 << 10, (n, fitted)
        assert C.validate_config("log_softmax", n, "bfloat16", fitted, "cuda") is None
    small = C.fit_config(16384, "bfloat16", smem(2048, 8, threads=256))
    assert (small["tile_n"], small["cluster"]) == (8192, 2)


def test_the_16_kb_floor_is_the_row_family_s_own():
    """The norm families share ``fit_chunk`` and keep their small chunks (measured with them): the
    backward's space at 16384 still holds eight chunks of 2048, a norm refit keeps its cluster."""
    from dispatch_tilelang import norm_configs, smem_norm_backward, smem_rows

    assert smem_rows.fit_chunk(16384, "bfloat16", 8, 128) == (2048, 8)
    assert smem_rows.fit_chunk(16384, "bfloat16", 8, 128, smem_rows.MIN_CHUNK_BYTES) == (8192, 2)
    assert (8, 2048) in {(c["cluster"], c["tile_n"]) for c in smem_norm_backward.configs(16384, "bfloat16")}
    assert norm_configs.fit(16384, "bfloat16", smem(4096, 8, threads=128))["cluster"] == 8


def test_the_poly_twin_takes_a_softmax_outputs_exponent_without_ex2_and_stores_whole_vectors(monkeypatch):
    """``poly=True``: the output pass of a softmax whose chunks cover its row takes each exponent by the
    polynomial (no ``exp2f`` there: the sum's pass keeps its own), and still reads and writes 16 bytes
    a thread a step; log_softmax, whose output pass takes no exponent, and a row its chunks overrun
    (the last CTA's tail masked) are built as without it."""
    from dispatch_tilelang import smem_rows

    monkeypatch.setenv("DISPATCH_TILELANG_CUDA_ARCH", "sm_90")

    def source(op, n, tile, cluster, **twin):
        return smem_rows.program(op, n, "bfloat16", "bfloat16", tile, cluster, "sm_90", **twin)(
            block_m=1, threads=256).get_kernel_source()

    plain, poly = source("softmax", 262144, 32768, 8), source("softmax", 262144, 32768, 8, poly=True)
    assert plain.count("exp2f") - poly.count("exp2f") == 4  # the output pass's, four a float4
    assert "<< 23" in poly and "__fsub_rn" in poly and "<< 23" not in plain
    assert poly.count("*(uint4*)(y + ") == plain.count("*(uint4*)(y + ") > 0
    assert source("log_softmax", 262144, 32768, 8, poly=True) == source("log_softmax", 262144, 32768, 8)
    assert source("softmax", 151936, 20480, 8, poly=True) == source("softmax", 151936, 20480, 8)


def test_the_keep_twin_takes_a_softmaxs_exponentials_once_and_writes_them_over_the_chunk(monkeypatch):
    """``keep=True``: the sum's pass writes each exponential back over its element in shared memory
    (whole 16-byte vectors) and the output's pass only scales it, so a softmax takes one ``exp2f`` a
    value, not two; log_softmax is built as without it, and asking for the polynomial too is refused."""
    from dispatch_tilelang import smem_rows

    monkeypatch.setenv("DISPATCH_TILELANG_CUDA_ARCH", "sm_90")

    def source(op, n, tile, cluster, **twin):
        return smem_rows.program(op, n, "bfloat16", "bfloat16", tile, cluster, "sm_90", **twin)(
            block_m=1, threads=256).get_kernel_source()

    for n, tile, cluster in ((262144, 32768, 8), (151936, 20480, 8)):  # chunks that cover the row, and overrun it
        plain, keep = source("softmax", n, tile, cluster), source("softmax", n, tile, cluster, keep=True)
        # the output pass's four a float4 gone; one more a CTA, the factor that carries its chunk's shift
        assert plain.count("exp2f") - keep.count("exp2f") == 3
        store = re.compile(r"^\s*\*\(uint4\*\)\(\(\(bfloat16_t\*\)xs\) \+ [^=]*\) = ", re.M)  # a store into the chunk
        assert store.search(keep) and not store.search(plain)
    assert source("log_softmax", 262144, 32768, 8, keep=True) == source("log_softmax", 262144, 32768, 8)
    with pytest.raises(ValueError, match="ask for one"):
        smem_rows.program("softmax", 262144, "bfloat16", "bfloat16", 32768, 8, "sm_90", poly=True, keep=True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_a_cluster_copies_its_chunk_before_it_waits_for_its_peers():
    """Rows, norms, and the column tiles' ``early`` twin: the CTA arrives at the cluster barrier and
    issues its chunk's copy before any wait on it, and waits once before its trade (so no peer
    copies into a barrier not yet initialized) and once before leaving; ``early=False`` syncs the
    cluster before the copy."""
    from dispatch_tilelang import smem_cols, smem_norms, smem_rows

    def rows(op, **twin):
        return smem_rows.program(op, 65536, "bfloat16", "bfloat16", 16384, 4, "sm_90", **twin)(
            block_m=1, threads=128).get_kernel_source()

    def norms(**twin):
        return smem_norms.program("layer_norm", 262144, "bfloat16", True, True, 1e-5, 16384, 16, "sm_90", **twin)(
            block_m=1, threads=256).get_kernel_source()

    def cols(early):
        return smem_cols.program("softmax", (1, 4096, 4096), "bfloat16", "bfloat16", 64, 512, 8, "sm_90",
                                 early=early)(threads=128).get_kernel_source()

    pairs = [(rows(op), rows(op, early=False)) for op in ("softmax", "logsumexp")]
    pairs += [(norms(), norms(early=False)), (cols(True), cols(False))]
    for early, synced in pairs:
        assert "cluster_sync" not in early and early.count("cluster_wait()") == 2
        copy, trade = early.index("cp_async_gs<16>"), early.index("tma_store_cluster")
        assert early.index("cluster_arrive_relaxed()") < copy < early.index("cluster_wait()") < trade
        assert synced.index("cluster_sync()") < synced.index("cp_async_gs<16>")
