"""The TileLang kernels (backends/dispatch_tilelang: availability, configs, build), compiled for real on the C target.

Every op on every dtype runs through both kernel families -- the whole row in one tile
(``tile_n=0``) and the tiled online path (``tile_n=16`` on 37-column rows: three tiles, the last
one partial) -- against torch, on rows that hold torch's edge cases (all -inf, +inf, NaN, an
all -inf first tile, huge and tiny values) and a row count that is not a multiple of ``block_m``.
The kernels are compiled once per module, two at a time, and shared by the tests.

Also here: the pure-Python config spaces of both targets, verdicts, the build cache, empty
inputs, CUDA cross-compilation when nvcc is installed (no GPU needed), and TileLang's on-disk
cache seen from a second process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import dispatch

pytest.importorskip("tilelang")
from dispatch_tilelang import availability as A, build as B, configs as C  # noqa: E402

_ok, _why = A.available("c")
if not _ok:
    pytest.skip(f"TileLang C target unavailable: {_why}", allow_module_level=True)

INF, NAN = float("inf"), float("nan")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
N = 37
FAMILIES = {"one_tile": {"block_m": 4, "tile_n": 0}, "tiled": {"block_m": 4, "tile_n": 16}}


def tol(dtype: torch.dtype) -> dict:
    return {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=1e-3),
            torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}[dtype]


def reference(op: str, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    xf = x.float()
    if op == "logsumexp":
        return torch.logsumexp(xf, -1).to(out_dtype)
    return getattr(torch, op)(xf, -1).to(out_dtype)


def edge_rows(dtype: torch.dtype, m: int = 11, n: int = N, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g) * 4
    x[0] = -INF                      # all -inf: softmax NaN, logsumexp -inf
    x[1, 3] = INF                    # a +inf: softmax NaN, logsumexp +inf
    x[2, 30] = NAN                   # a NaN: NaN everywhere
    x[3, :20] = -INF                 # first tile (and a bit) all -inf, then finite
    x[4, 17:] = -INF                 # finite first tile, -inf tail
    x[5] = -INF
    x[5, 36] = -3.0                  # one finite value, in the partial last tile
    x[6] *= 30                       # large magnitudes
    x[7, 10] = INF
    x[7, 11] = -INF                  # +inf and -inf together
    return x.to(dtype)


def _build(args):
    return args, B.build(*args)


@pytest.fixture(scope="module")
def built():
    """Every (op, dtype, family) kernel plus a widening one, compiled two at a time."""
    jobs = [(op, 11, N, dt, dt, cfg, "c") for op in A.OPS for dt in DTYPES for cfg in FAMILIES.values()]
    jobs.append(("softmax", 11, N, "bfloat16", "float32", FAMILIES["tiled"], "c"))
    with ThreadPoolExecutor(max_workers=2) as pool:  # build() serialises tracing; this checks it is thread-safe
        return {tuple(map(str, a)): k for a, k in pool.map(_build, jobs)}


def kernel(built, op, in_dt, out_dt, family):
    return built[tuple(map(str, (op, 11, N, in_dt, out_dt, FAMILIES[family], "c")))]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", A.OPS)
def test_matches_torch_with_edge_rows(built, op, dtype, family):
    k = kernel(built, op, dtype, dtype, family)
    tdt = DTYPES[dtype]
    x = edge_rows(tdt)
    y = k(x)
    want = reference(op, x, tdt)
    assert y.dtype == tdt and y.shape == want.shape
    torch.testing.assert_close(y, want, equal_nan=True, **tol(tdt))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("op", A.OPS)
def test_nan_and_inf_positions_exactly_as_torch(built, op, family):
    x = edge_rows(torch.float32)
    y, want = kernel(built, op, "float32", "float32", family)(x), reference(op, x, torch.float32)
    assert torch.equal(torch.isnan(y), torch.isnan(want))
    assert torch.equal(torch.isinf(y) & (y > 0), torch.isinf(want) & (want > 0))
    assert torch.equal(torch.isinf(y) & (y < 0), torch.isinf(want) & (want < 0))


@pytest.mark.parametrize("family", FAMILIES)
def test_rows_are_dynamic(built, family):
    k = kernel(built, "log_softmax", "float32", "float32", family)
    for m in (1, 3, 4, 5, 64):  # one compile serves every row count, multiple of block_m or not
        x = torch.randn(m, N)
        torch.testing.assert_close(k(x), torch.log_softmax(x, -1), rtol=1e-5, atol=1e-5)


def test_widening_output_dtype_matches_torch_dtype_argument(built):
    k = kernel(built, "softmax", "bfloat16", "float32", "tiled")
    x = edge_rows(torch.bfloat16)
    torch.testing.assert_close(k(x), torch.softmax(x, -1, dtype=torch.float32), equal_nan=True, rtol=1e-5, atol=1e-6)


def test_empty_inputs_launch_nothing(built):
    k = kernel(built, "logsumexp", "float32", "float32", "one_tile")
    assert k(torch.empty(0, N)).shape == (0,)
    for op in A.OPS:
        no_cols = B.build(op, 3, 0, "float32", "float32", C.default_config(op, 3, 0, "float32", "c"), "c")
        assert no_cols.kernel is None
        want = reference(op, torch.empty(3, 0), torch.float32)
        torch.testing.assert_close(no_cols(torch.empty(3, 0)), want)


def test_call_checks_shape_dtype_layout(built):
    k = kernel(built, "softmax", "float32", "float32", "one_tile")
    for bad in (torch.randn(4, N + 1), torch.randn(4, N).double(), torch.randn(N, 4).t(), torch.randn(4)):
        with pytest.raises(ValueError, match="contiguous"):
            k(bad)


def test_build_is_cached_in_process(built):
    args = ("softmax", 11, N, "float32", "float32", FAMILIES["one_tile"], "c")
    assert B.build(*args) is B.build(*args) is kernel(built, "softmax", "float32", "float32", "one_tile")
    # n_rows is not part of the key: M is dynamic
    assert B.build("softmax", 10_000, *args[2:]) is B.build(*args)


def test_build_rejects_bad_configs_with_reasons():
    with pytest.raises(ValueError, match="tile_n must be"):
        B.build("softmax", 4, N, "float32", "float32", {"block_m": 1, "tile_n": -2}, "c")
    with pytest.raises(ValueError, match="unknown config key"):
        B.build("softmax", 4, N, "float32", "float32", {"block_m": 1, "threads": 128}, "c")
    with pytest.raises(ValueError, match="stack tile"):
        B.build("softmax", 4, 100_000, "float32", "float32", {"block_m": 1, "tile_n": 0}, "c")
    with pytest.raises(ValueError, match="float64"):
        B.build("softmax", 4, N, "float64", "float64", {"block_m": 1, "tile_n": 0}, "c")


def test_verdicts_never_raise_and_say_why():
    assert A.supports("softmax", torch.bfloat16, "c") == (True, "")
    assert A.supports("log_softmax", "float16", "cuda") == (True, "")
    ok, why = A.supports("softmax", torch.float64, "c")
    assert not ok and "float64" in why
    ok, why = A.supports("rms_norm", torch.float32, "c")
    assert not ok and "rms_norm" in why
    assert A.available("metal")[0] is False
    ok, why = A.available("c")
    assert ok and "tilelang" in why
    if not torch.cuda.is_available():
        assert A.available("cuda") == (False, "no CUDA device visible to torch")


@pytest.mark.parametrize("target", A.TARGETS)
@pytest.mark.parametrize("n_cols", [1, 37, 100, 1000, 1024, 4096, 16384, 32768, 65536, 262144, 1 << 20])
@pytest.mark.parametrize("dtype", DTYPES)
def test_config_spaces_are_valid_deterministic_default_first(target, n_cols, dtype):
    n_rows = max(1, (64 << 20) // n_cols)
    space = C.config_space("softmax", n_rows, n_cols, dtype, target)
    assert space == C.config_space("softmax", n_rows, n_cols, dtype, target)
    assert space[0] == C.default_config("softmax", n_rows, n_cols, dtype, target)
    assert len({tuple(sorted(c.items())) for c in space}) == len(space)
    for cfg in space:
        assert C.validate_config("softmax", n_cols, dtype, cfg, target) is None, cfg
        # every key, but ``smem`` and ``keep``, present only where a config sets them
        assert set(C.JIT_PARAMS[target] + C.BUILD_KEYS[target]) - set(cfg) <= {"smem", "keep"}
        assert set(cfg) <= set(C.JIT_PARAMS[target] + C.BUILD_KEYS[target])
    if target == "cuda":
        for cfg in space:
            if cfg.get("smem"):  # the chunk sits in shared memory, 8 values a thread at a time
                assert cfg["tile_n"] * C.DTYPE_BYTES[dtype] <= C.SMEM_MAX_BYTES, cfg
                continue
            if cfg["tile_n"] == 0:
                per_thread = C.cuda_kernels.tile_width(n_cols, dtype, 0, cfg["block_m"], cfg["threads"]) * cfg["block_m"] // cfg["threads"]
            else:
                per_thread = cfg["tile_n"] // (cfg["threads"] // cfg["block_m"])
            assert per_thread <= C.MAX_ELEMS_PER_THREAD, cfg
        families = {c["tile_n"] == 0 for c in space}
        assert families == ({True} if n_cols < 8192 else {False} if n_cols > C.ROW_FAMILY_MAX_COLS else {True, False})
        if 8192 < n_cols <= 131072 and C.cuda_supports_clusters():
            # up to 128K columns the default reads the row once (cluster x tile covers it); beyond,
            # the looped cluster measured faster on the H200
            d = space[0]
            assert d["tile_n"] == 0 or d["cluster"] * d["tile_n"] >= n_cols


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("n_cols", [64, 128, 256])
def test_cuda_default_holds_short_rows_unpadded_at_two_vectors_a_thread(n_cols, dtype):
    # a warp a row padded rows shorter than its 32 lanes x 2 vectors (bf16 N = 64: a quarter of the
    # tile), which ran at a third of the bandwidth of the unpadded configs on the H200
    cfg = C.cuda_default_config("softmax", (64 << 20) // n_cols, n_cols, dtype)
    vec = C.cuda_kernels.vector_width(n_cols, dtype)
    tpr = cfg["threads"] // cfg["block_m"]
    assert C.cuda_kernels.tile_width(n_cols, dtype, 0, cfg["block_m"], cfg["threads"]) == n_cols, cfg
    assert n_cols // tpr >= 2 * vec and cfg["threads"] >= 128, cfg
    assert C.validate_config("softmax", n_cols, dtype, cfg, "cuda") is None


@pytest.mark.parametrize("n_rows", [1, 2, 3, 5, 8, 31, 33, 4096])
def test_cuda_default_is_a_valid_launch_for_few_rows(n_rows):
    # rows of a few lanes each, but too few rows for a warp: the CTA still holds one (threads >= 32)
    for n_cols in (1, 3, 16, 37, 64, 100, 128, 256, 1000, 4096):
        for dtype in ("bfloat16", "float32", "float16"):
            cfg = C.cuda_default_config("softmax", n_rows, n_cols, dtype)
            assert C.validate_config("softmax", n_cols, dtype, cfg, "cuda") is None, (n_rows, n_cols, dtype, cfg)
            assert cfg["block_m"] <= max(1, 1 << (n_rows - 1).bit_length()), cfg


def test_cuda_default_never_holds_more_rows_than_the_tuned_space():
    for n_cols in (1, 3, 16, 37, 64):
        for dtype in ("bfloat16", "float32"):
            cfg = C.cuda_default_config("softmax", 1 << 20, n_cols, dtype)
            assert cfg["block_m"] <= C.MAX_BLOCK_M and cfg["threads"] >= 128, (n_cols, dtype, cfg)
            assert C.validate_config("softmax", n_cols, dtype, cfg, "cuda") is None


def test_config_space_prunes_rows_and_groups_into_families():
    assert all(c["block_m"] <= 2 for c in C.config_space("softmax", 2, 64, "float32", "c"))
    cuda = C.config_space("softmax", 1 << 16, 16384, "bfloat16", "cuda")
    fams = C.families(cuda, "cuda")
    assert len(fams) > 1 and sum(map(len, fams.values())) == len(cuda)
    for key, group in fams.items():
        assert all(C.split_config(c, "cuda")[1] == dict(key) for c in group)
    assert C.split_config({"block_m": 2, "threads": 256, "tile_n": 0, "cluster": 1}, "cuda") == (
        {"block_m": 2, "threads": 256}, {"tile_n": 0, "cluster": 1, "smem": 0, "keep": 0})


def test_jit_program_has_required_tunables_only():
    import inspect

    for target in A.TARGETS:
        sig = B.jit_program("softmax", 64, "float32", "float32", target, {"tile_n": 0}).signature
        assert tuple(sig.parameters) == C.JIT_PARAMS[target]
        assert all(p.default is inspect.Parameter.empty for p in sig.parameters.values())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_kernels_cross_compile_for_sm90(monkeypatch):
    """Both CUDA families compile for sm_90 without a GPU: 128-bit accesses, warp-only or cluster reductions."""
    monkeypatch.setenv("DISPATCH_TILELANG_CUDA_ARCH", "sm_90")
    jobs = [("softmax", 1024, "bfloat16", {"block_m": 8, "threads": 256, "tile_n": 0, "cluster": 1}),
            ("log_softmax", 65536, "float32", {"block_m": 1, "threads": 512, "tile_n": 8192, "cluster": 8})]

    def compile_one(job):
        op, n, dt, cfg = job
        jit, build = C.split_config(cfg, "cuda")
        return B.jit_program(op, n, dt, dt, "cuda", build)(**jit).get_kernel_source()

    row_src, split_src = map(compile_one, jobs)  # one at a time: see build._TRACE_LOCK
    assert "uint4" in row_src and "AllReduce<tl::MaxOp, 32," in row_src  # one warp per row
    assert "cluster_sync" in split_src and "map_shared_rank" in split_src and "float4" in split_src


def test_second_process_compiles_nothing(tmp_path):
    """TileLang's disk cache: a warm process loads the kernel instead of compiling it."""
    script = textwrap.dedent(
        """
        import time, torch
        from dispatch_tilelang import build as B
        t0 = time.perf_counter()  # the build alone: importing TileLang takes seconds either way
        k = B.build("logsumexp", 8, 53, "float32", "float32", {"block_m": 2, "tile_n": 16}, "c")
        t1 = time.perf_counter()
        x = torch.randn(5, 53)
        assert torch.allclose(k(x), torch.logsumexp(x, -1), atol=1e-5)
        print(f"BUILD_SECONDS {t1 - t0:.3f}")
        """
    )
    env = {**os.environ, "TILELANG_CACHE_DIR": str(tmp_path / "tl-cache")}
    runs = []
    for _ in range(2):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append((time.perf_counter() - start, proc.stdout + proc.stderr))
    (_, cold_log), (_, warm_log) = runs
    assert "begins to compile kernel" in cold_log
    assert "begins to compile kernel" not in warm_log, warm_log[-2000:]
    cold = float(cold_log.split("BUILD_SECONDS")[1].split()[0])
    warm = float(warm_log.split("BUILD_SECONDS")[1].split()[0])
    assert warm < cold


def test_a_call_through_dispatch_keeps_tilelangs_compile_logs_out_of_the_users_output(tmp_path):
    """TileLang sets its logger to INFO when first imported; a call that compiles a kernel through
    dispatch (the import happens inside it) prints no line a compile, only warnings and above."""
    script = textwrap.dedent(
        """
        import sys, torch, dispatch
        assert "tilelang" not in sys.modules  # imported by the call below, as in a user's first call
        x = torch.randn(5, 53)
        y = dispatch.softmax(x, -1, backend="tilelang")
        assert torch.allclose(y, torch.softmax(x, -1), atol=1e-5)
        print("CALLED", dispatch.explain("softmax", x, -1, backend="tilelang").decision.backend)
        """
    )
    env = {**os.environ, "TILELANG_CACHE_DIR": str(tmp_path / "tl-cache"), "DISPATCH_CACHE_DIR": str(tmp_path / "dc")}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CALLED tilelang" in proc.stdout
    assert "begins to compile kernel" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]


def test_a_tune_on_the_c_target_compiles_ahead_and_says_how_long_that_took(tmp_path, monkeypatch):
    """A tune's line and explain split a candidate's tune into compile and timing: TileLang's C-target
    configs are built ahead, on a pool, and the race only times them."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "tl-cache"))  # cold caches: real compiles
    monkeypatch.setattr(B, "_BUILT", {})
    from dispatch.tune import tune_call

    lines: list[str] = []
    x = torch.randn(6, 45)
    explanation = tune_call("log_softmax", x, -1, backends="tilelang,torch", lines=lines.append)
    tilelang = next(c for c in explanation.decision.candidates if c.name == "tilelang")
    assert tilelang.compile_s is not None and tilelang.compile_s > 0.2  # compiling a C kernel takes ~1 s
    assert tilelang.timing_s is not None and tilelang.timing_s < tilelang.compile_s
    built = C.config_space("log_softmax", 6, 45, torch.float32, "c")
    assert any(f"({len(built)} built, 0 failed)" in line for line in lines), lines
    with dispatch.use(backend="tilelang"):
        assert torch.allclose(dispatch.log_softmax(x, -1), torch.log_softmax(x, -1), atol=1e-5)
