"""The Triton kernels (backends/dispatch_triton: jit, configs, launch, autotune) under the Triton interpreter.

Every path is run on small shapes and compared with torch: multi-row and one-pass tiles, the
streamed (online) path and the split path forced with small blocks so that a row really spans
several chunks and several programs, non-contiguous rows, empty inputs, inf/NaN rows, masks,
and the native autotuner's cache key (mask present or absent, HAS_MASK toggled, and a
wrong-dtype stand-in as the negative control).
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (never on a GPU machine)

triton = pytest.importorskip("triton")

from dispatch.backend import placeholder  # noqa: E402

try:
    from dispatch_triton import autotune as A, buffers as Bf, configs as C, jit as J, launch as L  # noqa: E402
except ImportError:  # pragma: no cover - backends/ not installed
    pytest.skip("dispatch_triton is not importable", allow_module_level=True)

if not torch.cuda.is_available():
    from triton.runtime.interpreter import InterpretedFunction

    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        pytest.skip("no GPU and TRITON_INTERPRET is off", allow_module_level=True)
    if not isinstance(J._softmax_kernel, InterpretedFunction):  # the JIT functions are built on import
        pytest.fail("dispatch_triton.jit was imported before TRITON_INTERPRET was set; tests/conftest.py sets "
                    "it first, so set it before anything imports the Triton kernels", pytrace=False)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy on inf - inf inside the interpreter

DEV = "cuda" if torch.cuda.is_available() else "cpu"
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
INF = float("inf")
NAN = float("nan")

# small-block configs that force each path on small rows
ROWS_CFG = C._cfg("rows", 64, 4, 1, 2)  # N <= 64, 4 rows per program
ONEPASS_CFG = C._cfg("onepass", 1024, 1, 1, 4)  # N <= 1024
ONLINE_CFG = C._cfg("online", 512, 1, 1, 4, 2)  # any N: 512-wide blocks, streamed twice
SPLIT_CFG = C._cfg("split", 512, 1, 1, 4)  # a row over cdiv(N, 512) programs, chunks in registers
SPLIT_ONLINE_CFG = C._cfg("split_online", 256, 1, 3, 2, 2)  # a row over 3 programs, each streaming
LONG_CFGS = [ONLINE_CFG, SPLIT_CFG, SPLIT_ONLINE_CFG]
# on a GPU, each path again with one ex2.approx per exp (inline PTX: the interpreter refuses it)
FAST_CFGS = [] if DEV == "cpu" else [dict(c, FAST_EXP=1) for c in [ROWS_CFG, ONEPASS_CFG] + LONG_CFGS]


def cfg_id(c):
    return c["path"] + ("-fast-exp" if c.get("FAST_EXP") else "")


def tol(dtype):
    return {F32: (2e-5, 1e-5), F16: (2e-3, 1e-3), BF16: (2e-2, 1.6e-2)}[dtype]


def reference(op, x, out_dtype, mask=None):
    x = x.cpu()
    if mask is not None:
        x = x.masked_fill(~mask.cpu().bool(), -INF)
    # torch's dtype= semantics (the input is cast first), computed in fp32 and rounded once
    # (torch's own bf16 CPU kernels round intermediates, a couple of ulps off)
    xf = x.to(out_dtype).float()
    if op == "softmax":
        return torch.softmax(xf, -1).to(out_dtype)
    if op == "log_softmax":
        return torch.log_softmax(xf, -1).to(out_dtype)
    return torch.logsumexp(xf, -1).to(out_dtype)


def check(op, x, out_dtype, config, mask=None):
    y = L.run(op, x, out_dtype, config, mask=mask)
    ref = reference(op, x, out_dtype, mask)
    assert y.dtype == out_dtype and y.shape == ref.shape
    atol, rtol = tol(out_dtype)
    torch.testing.assert_close(y.cpu().float(), ref.float(), atol=atol, rtol=rtol, equal_nan=True)
    return y


def randn(m, n, dtype, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, n, generator=g) * scale).to(dtype).to(DEV)


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("dtype,out_dtypes", [(F32, (F32, BF16)), (F16, (F16, F32, BF16)), (BF16, (BF16, F32, F16))])
def test_short_rows_every_dtype_and_cast(op, dtype, out_dtypes):
    x = randn(7, 50, dtype)  # 2 programs of 4 rows, the last one partly empty
    for od in out_dtypes:
        check(op, x, od, ROWS_CFG)


@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("config", [ONEPASS_CFG] + LONG_CFGS + FAST_CFGS[1:], ids=cfg_id)
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_paths(op, config, dtype):
    n = 1000 if config["path"] == "onepass" else 3000  # 3000 = 5 full blocks of 512 and a ragged one
    x = randn(5, n, dtype, seed=1)  # 5 rows over 2 persistent groups: uneven row loops
    check(op, x, dtype, config)
    if dtype == BF16:
        check(op, x, F32, config)


@pytest.mark.parametrize("op", C.OPS)
def test_long_path_fp16_cast(op):
    x = randn(3, 1500, F16, seed=2)
    check(op, x, F32, SPLIT_CFG)
    check(op, x, BF16, ONLINE_CFG)


def test_long_path_really_spans_chunks():
    # the long configs must split these rows: several blocks, several programs per row
    assert C._n_split(C._PATH_CODE["split"], 3000, 512, 1) == 6
    assert C._n_split(C._PATH_CODE["split_online"], 3000, 256, 3) == 3
    assert C._n_split(C._PATH_CODE["online"], 3000, 512, 1) == 1


@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("config", [ROWS_CFG, ONEPASS_CFG] + LONG_CFGS, ids=lambda c: c["path"])
def test_strided_rows_are_not_copied(op, config):
    n = 40 if config is ROWS_CFG else 700
    wide = randn(6, n + 37, BF16, seed=3)
    x = wide[:, 5:5 + n]
    assert x.stride(0) == n + 37 and x.stride(1) == 1
    check(op, x, BF16, config)
    check(op, x, F32, config)


@pytest.mark.parametrize("op", C.OPS)
def test_empty(op):
    for shape in [(0, 5), (0, 0), (3, 0)]:
        x = torch.empty(shape, dtype=BF16, device=DEV)
        y = L.run(op, x, F32, C.default_config(op, *shape, BF16))
        ref = reference(op, x, F32)
        assert y.shape == ref.shape and y.dtype == F32
        torch.testing.assert_close(y.cpu(), ref)
    assert torch.equal(L.run("logsumexp", torch.empty(2, 0, device=DEV), F32, ROWS_CFG).cpu(),
                       torch.tensor([-INF, -INF]))


def special_rows(n):
    rows = [
        [-INF] * n,  # all -inf
        [1.0] * (n - 1) + [INF],  # one +inf
        [INF] * 2 + [0.0] * (n - 2),  # two +inf
        [0.5] * (n // 2) + [NAN] + [0.25] * (n - n // 2 - 1),  # a NaN
        [-INF] * (n - 1) + [NAN],  # NaN among -inf
        [INF, NAN] + [-INF] * (n - 2),  # +inf and NaN
        [-INF] * (n - 2) + [3.0, -1000.0],  # -inf everywhere but the end
        [-1000.0] + [-INF] * (n - 1),  # very negative max
        [80.0, 60.0] + [-INF] * (n - 2),  # large values (fp32 exp would overflow unshifted)
        [float(i % 7) for i in range(n)],
    ]
    return torch.tensor(rows)


@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("config", [ROWS_CFG, ONEPASS_CFG] + LONG_CFGS + FAST_CFGS, ids=cfg_id)
def test_inf_and_nan_rows_match_torch(op, config):
    n = 64 if config["path"] == "rows" else (1000 if config["path"] == "onepass" else 1100)
    x = special_rows(n).to(DEV)
    check(op, x, F32, config)
    check(op, x.to(BF16), BF16, config)


def test_input_cast_happens_first_like_torch():
    # torch.softmax(x, dtype=fp16) casts x to fp16 first: 70000 becomes inf, the row NaN
    x = torch.tensor([[70000.0, 1.0], [1.0, 2.0]], device=DEV)
    for cfg in (ROWS_CFG, ONLINE_CFG):
        y = check("softmax", x, F16, cfg)
        assert torch.isnan(y[0]).all() and not torch.isnan(y[1]).any()


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("config", [ROWS_CFG, ONEPASS_CFG] + LONG_CFGS + FAST_CFGS, ids=cfg_id)
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int8])
def test_masked(op, config, mask_dtype):
    n = 48 if config["path"] == "rows" else (1000 if config["path"] == "onepass" else 1300)
    x = randn(5, n, BF16, seed=4)
    g = torch.Generator().manual_seed(5)
    keep = torch.rand(5, n, generator=g) > 0.4
    keep[2] = False  # a fully masked row: NaN, like softmax of all -inf
    keep[3, 1:] = False  # a single survivor
    check(op, x, F32, config, mask=keep.to(mask_dtype).to(DEV))


def test_mask_with_row_stride():
    x = randn(4, 600, F32, seed=6)
    wide = torch.rand(4, 700, generator=torch.Generator().manual_seed(7)) > 0.5
    keep = wide[:, 50:650]
    for cfg in (ONEPASS_CFG, SPLIT_CFG):
        check("softmax", x, F32, cfg, mask=keep.to(DEV))


def test_refusals():
    x = randn(2, 8, F32)
    with pytest.raises(TypeError):
        L.run("softmax", x.double(), torch.float64, ROWS_CFG)
    with pytest.raises(TypeError):
        L.run("softmax", x, torch.float64, ROWS_CFG)
    with pytest.raises(ValueError):
        L.run("softmax", randn(8, 4, F32).t(), F32, ROWS_CFG)  # stride(1) != 1
    with pytest.raises(ValueError):
        L.run("softmax", x, F32, ROWS_CFG, mask=torch.ones(2, 9, dtype=torch.bool, device=DEV))
    with pytest.raises(ValueError):
        L.run("softmax", randn(2, 100, F32), F32, ROWS_CFG)  # whole-row tile narrower than the row
    with pytest.raises(ValueError):
        L.run("cumsum", x, F32, ROWS_CFG)


SPLIT_PIPE_CFG = C._cfg("split_pipe", 512, 1, 1, 4)  # a row over cdiv(N, 512) programs, pipelined a row ahead
CHUNKS_CFG = C._cfg("chunks", 512, 1, 1, 4)  # logsumexp: persistent programs over all chunks, the last merges


STAGED_CHUNKS_CFGS = [C._cfg("chunks", 512, 1, 1, 4, s) for s in (2, 3)]  # the next chunks in shared memory


@pytest.mark.parametrize("config", STAGED_CHUNKS_CFGS, ids=lambda c: f"stages{c['num_stages']}")
@pytest.mark.parametrize("dtype,m,n", [(BF16, 7, 2048), (F32, 5, 1500), (BF16, 9, 1099), (F16, 1, 4096),
                                       (BF16, 3, 512)])
def test_staged_chunks_merge_every_row_once(config, dtype, m, n):
    # persistent programs whose runs of chunks start and end inside rows (the interpreter runs two),
    # rows a whole number of chunks or not, odd lengths off the 16-byte grid read plain, one chunk
    # a row; -inf over a whole chunk and into the next, NaN, +inf, a lone max in a row's last element
    x = randn(m, n, dtype, seed=31)
    x[0, :700] = -INF
    x[m // 2, 5] = NAN
    x[m - 1, -1] = 90.0
    if m > 2:
        x[1, n // 2] = INF
    launcher = L.Launcher("logsumexp", m, n, dtype, None, n, x.device, config)
    assert launcher.align == 0
    for _ in range(2):  # the rows' counters are back at zero after a launch
        check("logsumexp", x, dtype, config)


ONEPASS_2K_CFG = C._cfg("onepass", 2048, 1, 1, 4)  # one row of up to 2048 a program
ONEPASS_4K_CFG = C._cfg("onepass", 4096, 1, 1, 4)  # ... of up to 4096: wide enough for windows


@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("config", [SPLIT_CFG, SPLIT_PIPE_CFG, CHUNKS_CFG, ONEPASS_4K_CFG], ids=cfg_id)
@pytest.mark.parametrize("dtype,n", [(BF16, 1099), (BF16, 1027), (F16, 1101)])
def test_rows_off_the_16_byte_grid_go_through_aligned_windows(op, config, dtype, n):
    # 9 rows of an odd length: their starts fall at every place between two 16-byte lines, and the
    # split paths, logsumexp's chunks and one-row-a-program tiles read (and write) them through
    # windows on the grid whose first and last groups straddle the row's ends
    # (dispatch_triton.window); special values sit in those groups
    if op == "logsumexp" and config["path"] == "split_pipe":
        pytest.skip("split_pipe writes whole rows")
    if op != "logsumexp" and config["path"] == "chunks":
        pytest.skip("chunks writes one value a row")
    x = randn(9, n, dtype, seed=21)
    x[1, :3] = NAN
    x[2, -2:] = INF
    x[3, :600] = -INF  # -inf over the whole first window
    x[4, -1] = 90.0  # the row's max in its last element
    x[5, 0] = 90.0  # ... in its first
    launcher = L.Launcher(op, 9, n, dtype, None, n, x.device, config)
    assert launcher.align == 1
    check(op, x, dtype, config)


def test_aligned_windows_are_used_only_where_they_cover_the_row_and_match_the_output(monkeypatch):
    a = L.Launcher
    assert a("softmax", 4, 1536, BF16, None, 1536, DEV, SPLIT_CFG).align == 0  # rows on the grid
    assert a("softmax", 4, 1535, BF16, None, 1535, DEV, SPLIT_CFG).align == 0  # 1 column spare, 7 needed
    assert a("softmax", 4, 1099, BF16, F32, 1099, DEV, SPLIT_CFG).align == 0  # another output dtype
    assert a("softmax", 4, 1099, BF16, None, 1136, DEV, SPLIT_CFG).align == 0  # output rows closer than the input's
    assert a("logsumexp", 4, 1099, BF16, None, 1136, DEV, SPLIT_CFG).align == 1  # one value a row: any stride
    assert a("softmax", 4, 1099, BF16, None, 1099, DEV, ONLINE_CFG).align == 0  # not the streamed paths
    assert a("softmax", 4, 1101, F32, None, 1101, DEV, SPLIT_CFG).align == 0  # 2-byte rows only
    assert a("logsumexp", 4, 1099, BF16, None, 1099, DEV, CHUNKS_CFG).align == 1  # ... and logsumexp's chunks
    assert a("softmax", 4, 1099, BF16, None, 1099, DEV, ONEPASS_4K_CFG).align == 1  # ... and one row a program
    assert a("softmax", 4, 1099, BF16, None, 1099, DEV, ONEPASS_2K_CFG).align == 0  # ... in tiles of 4096 or more
    assert a("softmax", 4, 4093, BF16, None, 4093, DEV, ONEPASS_4K_CFG).align == 0  # 3 columns spare, 7 needed
    assert a("softmax", 8, 61, BF16, None, 61, DEV, ROWS_CFG).align == 0  # several rows a program: not
    for n in (1535, 1099):  # with or without, the same results
        check("softmax", randn(4, n, BF16, seed=22), BF16, SPLIT_CFG)
    wide = randn(5, 1136, BF16, seed=23)
    check("logsumexp", wide[:, 3:1102], BF16, SPLIT_CFG)  # strided rows, each off the grid differently
    monkeypatch.setattr(L, "ALIGN_ROWS", False)  # the benchmarks' A/B switch
    assert a("softmax", 4, 1099, BF16, None, 1099, DEV, SPLIT_CFG).align == 0


def test_split_counters_reset_after_each_launch():
    x = randn(5, 3000, F32, seed=8)
    L.run("logsumexp", x, F32, C._cfg("split_online", 256, 1, 4, 2, 2))  # last-arriver combine
    L.run("softmax", x, F32, SPLIT_CFG)
    for buf in Bf._SYNC.values():
        assert int(buf.abs().sum()) == 0


def test_launcher_counts_every_split_launch_and_prepare_relaunches_in_place():
    x = randn(3, 1100, F32, seed=12)  # split configs: 3 programs per row
    launcher = L.Launcher("softmax", 3, 1100, F32, None, x.stride(0), x.device, SPLIT_CFG)
    assert launcher.out_dtype == F32 and launcher.out_shape == (3, 1100)
    y1 = launcher.run(x)
    entry = Bf._SLOTS[Bf._stream_key(x.device)]
    count = entry[1]
    y2 = launcher.run(x)
    assert entry[1] == count + 1  # the epoch bookkeeping moves on once per launch
    assert y1.data_ptr() != y2.data_ptr()
    torch.testing.assert_close(y2.cpu(), reference("softmax", x, F32), atol=2e-5, rtol=1e-5)
    for cfg, op in ((ONLINE_CFG, "log_softmax"), (SPLIT_CFG, "log_softmax"), (SPLIT_ONLINE_CFG, "logsumexp")):
        out, launch = L.prepare(op, x, F32, cfg)
        ptr = out.data_ptr()
        for _ in range(2):
            out.fill_(NAN)
            launch()
            assert out.data_ptr() == ptr
            torch.testing.assert_close(out.cpu(), reference(op, x, F32), atol=2e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="out_shape"):
        L.Launcher("softmax", 2, 8, F32, F32, 8, DEV, ROWS_CFG, out_shape=(3, 8))
    with pytest.raises(TypeError):
        L.Launcher("softmax", 2, 8, torch.float64, None, 8, DEV, ROWS_CFG)


# ---------------------------------------------------------------------------------------------
# config space


SHAPES = [(1, 1), (4, 7), (4096, 256), (64, 1000), (8, 4096), (8, 16384), (8, 32768), (4, 65536), (2, 262144),
          (1, 1 << 22), (1, 1 << 26)]


@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_config_space_and_default(op, dtype):
    for m, n in SHAPES:
        space = C.config_space(op, m, n, dtype)
        assert space, (op, m, n)
        assert space == C.config_space(op, m, n, dtype)  # deterministic
        keys = [C._cfg_key(c) for c in space]
        assert len(set(keys)) == len(keys)
        for c in space:
            assert set(c) - {"FAST_EXP"} == {"path", "BLOCK_N", "ROWS", "SPLIT", "num_warps", "num_stages"}
            assert c.get("FAST_EXP", 1) == 1 and not (DEV == "cpu" and "FAST_EXP" in c)  # PTX: a GPU only
            assert all(type(v) in (int, str) for v in c.values())
            code, ns = L._validate(c, n, torch.device("cpu"), op)
            if code == 0:
                assert c["BLOCK_N"] >= n
            assert 1 <= c["num_warps"] <= 32
        assert C.default_config(op, m, n, dtype) in space
        # the bucket, not the exact length, decides the candidates (the autotune key is the bucket)
        assert C.config_space(op, m, C._np2(n) // 2 + 1, dtype) == space or n <= 2


def test_config_space_prunes_by_shape():
    paths = lambda n: {c["path"] for c in C.config_space("softmax", 64, n, BF16)}  # noqa: E731
    assert paths(256) == {"rows"}
    assert "split" not in paths(4096) and "online" not in paths(4096)
    assert "split" in paths(262144) and not paths(262144) & {"rows", "onepass"}
    assert "split_online" in paths(1 << 26)  # beyond what split can hold: no hard cap on N
    # logsumexp's long rows: chunks held in registers (split: one program each; chunks: persistent
    # programs), at most MAX_SPLIT a row
    lse_split = [c for c in C.config_space("logsumexp", 64, 262144, BF16) if c["path"] in ("split", "chunks")]
    assert {c["path"] for c in lse_split} == {"split", "chunks"}
    assert all(262144 // c["BLOCK_N"] <= C.MAX_SPLIT for c in lse_split)
    assert "split" not in {c["path"] for c in C.config_space("logsumexp", 64, 16384, BF16)}


def test_logsumexp_long_rows_default_to_chunks_small_enough_to_fill_the_device():
    sms = C._device_sms()
    assert C.default_config("logsumexp", 1024, 65536, F32)["BLOCK_N"] == 8192
    many = C.default_config("logsumexp", 1024, 65536, BF16)  # 2-byte rows: persistent programs over chunks
    assert many["path"] == "chunks" and many["BLOCK_N"] == 4096
    few = C.default_config("logsumexp", 1, 262144, BF16)  # 2048-element chunks: 128 of them, one program each
    assert few["path"] == "split" and few["BLOCK_N"] == 2048 and 262144 // 2048 <= C.MAX_SPLIT
    big = C.LSE_SPLIT_MAX
    for m, n in ((1, 40000), (8, 128256), (2 * sms, 32768), (40, big // 40 + 1), (64, big // 64 + 1), (64, big // 64)):
        for dtype in (F32, BF16):
            c = C.default_config("logsumexp", m, n, dtype)
            # 2-byte rows: persistent programs over chunks only where the input is over 8M elements
            want = "chunks" if dtype == BF16 and m * n > big else "split"
            assert c["path"] == want and c["BLOCK_N"] // c["num_warps"] == 2048, (m, n, dtype, c)  # 64 a thread
            assert m * C._cdiv(n, c["BLOCK_N"]) >= 2 * sms or c["BLOCK_N"] == 2048


def test_long_rows_default_to_the_configs_the_gpu_sweep_chose(monkeypatch):
    # the defaults a GPU gets (FAST_EXP in every candidate) for rows of 32K-256K: each one of the
    # GPU's candidates (a default missing from the space would silently become space[0]), 2-byte
    # rows one 4096-element chunk a program (log_softmax beyond 64K pipelined), those of an odd
    # length up to 64K in 8192-element chunks, fp32 pipelined in 2048-element chunks
    # (benchmarks/results/current/rows_kernels/long_rows_sweep.md, odd_rows/)
    monkeypatch.setattr(C, "_interpreting", lambda: False)
    for m, n in ((2048, 32768), (2097, 32000), (1024, 65536), (256, 262144), (8, 262144), (2048, 30001),
                 (1335, 50257), (64, 100003)):
        for op in ("softmax", "log_softmax"):
            for dtype in (BF16, F16, F32):
                c = C.default_config(op, m, n, dtype)
                assert c in C.config_space(op, m, n, dtype) and c["FAST_EXP"] == 1, (op, m, n, dtype, c)
                if dtype == F32:
                    want = ("split_pipe", 2048)
                elif n % 8 and n <= 65536:
                    want = ("split", 8192)
                else:
                    want = ("split_pipe" if op == "log_softmax" and n > 65536 else "split", 4096)
                assert (c["path"], c["BLOCK_N"]) == want, (op, m, n, dtype, c)


@pytest.mark.parametrize("config", [CHUNKS_CFG] + ([] if DEV == "cpu" else [dict(CHUNKS_CFG, FAST_EXP=1)]),
                         ids=cfg_id)
def test_logsumexp_chunks_path(config):
    for dtype in (F32, BF16):
        x = randn(5, 3000, dtype, seed=1)  # 6 chunks a row, 30 over 2 programs (interpreter): uneven turns
        check("logsumexp", x, dtype, config)
        check("logsumexp", x, F32, config)
    check("logsumexp", special_rows(1100).to(DEV), F32, config)  # -inf, +inf, NaN, in different chunks
    check("logsumexp", special_rows(1100).to(DEV).to(BF16), BF16, config)
    wide = randn(4, 1337, BF16, seed=3)
    check("logsumexp", wide[:, 5:1205], F32, config)  # strided rows, read in place
    out, launch = L.prepare("logsumexp", wide[:, :1200], F32, config)
    for _ in range(2):  # relaunched in place, the workspace reused
        out.fill_(NAN)
        launch()
        torch.testing.assert_close(out.cpu(), reference("logsumexp", wide[:, :1200], F32), atol=2e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="'chunks' writes one value per row"):
        L.run("softmax", randn(2, 3000, F32), F32, config)


@pytest.mark.parametrize("config", [CHUNKS_CFG] + ([] if DEV == "cpu" else [dict(CHUNKS_CFG, FAST_EXP=1)]),
                         ids=cfg_id)
def test_logsumexp_chunks_of_rows_a_whole_number_of_chunks(config):
    # rows of exactly 4 and 2 chunks load without a mask an element: every row's last chunk to
    # arrive (over programs that take several chunks each) still merges the right partials, special
    # values included, and a second launch finds the arrival counters zeroed
    for dtype in (F32, BF16):
        check("logsumexp", randn(9, 2048, dtype, seed=5), dtype, config)
    check("logsumexp", special_rows(1024).to(DEV), F32, config)
    check("logsumexp", special_rows(1024).to(DEV).to(BF16), BF16, config)
    wide = randn(6, 1536, BF16, seed=7)
    out, launch = L.prepare("logsumexp", wide[:, 256:1280], F32, config)  # strided rows of 1024, in place
    assert L.Launcher("logsumexp", 6, 1024, BF16, F32, wide.stride(0), wide.device, config).grid[0] <= 6 * 2
    for _ in range(3):
        out.fill_(NAN)
        launch()
        torch.testing.assert_close(out.cpu(), reference("logsumexp", wide[:, 256:1280], F32), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("config", [CHUNKS_CFG] + ([] if DEV == "cpu" else [dict(CHUNKS_CFG, FAST_EXP=1)]),
                         ids=cfg_id)
def test_logsumexp_chunks_of_rows_far_from_zero(config):
    # each exp is taken about the chunk's max (with FAST_EXP as exp2(x * log2e - max * log2e), one
    # fused multiply-add): rows around +-1e4 and 3e4, whole chunks and a ragged last one, keep the
    # fp32 result within its tolerance of torch's in float64
    for n in (2048, 3000):
        for offset in (1e4, -1e4, 3e4):
            x = randn(6, n, F32, seed=int(offset) % 97 + n) + offset
            got = L.run("logsumexp", x, F32, config)
            want = torch.logsumexp(x.cpu().double(), -1)
            torch.testing.assert_close(got.cpu().double(), want, atol=2e-5, rtol=1e-5)


def test_logsumexp_chunks_take_one_program_each():
    # nothing in logsumexp's split path waits, so it takes one program per chunk of every row
    # (7 rows of 6 chunks: 42 programs) rather than persistent groups
    x = randn(7, 3000, F32, seed=13)
    launcher = L.Launcher("logsumexp", 7, 3000, F32, None, x.stride(0), x.device, SPLIT_CFG)
    assert launcher.grid == (7 * 6,)
    torch.testing.assert_close(launcher.run(x).cpu(), reference("logsumexp", x, F32), atol=2e-5, rtol=1e-5)
    if DEV == "cpu":  # softmax's chunks wait for their row's others: persistent groups (one in the interpreter)
        assert L.Launcher("softmax", 7, 3000, F32, None, x.stride(0), x.device, SPLIT_CFG).grid[0] < 7 * 6


@pytest.mark.skipif(DEV != "cpu", reason="the interpreter's refusal")
def test_fast_exp_is_refused_by_name_under_the_interpreter():
    x = randn(2, 3000, F32)
    with pytest.raises(ValueError, match="FAST_EXP.*interpreter"):
        L.run("logsumexp", x, F32, dict(SPLIT_CFG, FAST_EXP=1))
    with pytest.raises(ValueError, match="FAST_EXP.*0 or 1"):
        L.run("logsumexp", x, F32, dict(SPLIT_CFG, FAST_EXP=2))


# ---------------------------------------------------------------------------------------------
# Triton's native autotuner and its cache key


def cpu_do_bench(fn, quantiles=None, **_):
    import time

    times = []
    for _ in range(2):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return [times[0]] * len(quantiles) if quantiles else times[0]


@pytest.fixture
def tuner():
    kernel = A.autotuned("softmax", do_bench=cpu_do_bench)
    kernel.cache.clear()
    yield kernel
    kernel.cache.clear()


def test_autotuner_key_is_the_bucket_only():
    kernel = A.autotuned("softmax", do_bench=cpu_do_bench)
    assert kernel.keys == ["N_BUCKET"]
    assert A.autotuned("softmax", do_bench=cpu_do_bench) is kernel  # cached per op
    assert A.autotuned("log_softmax", do_bench=cpu_do_bench) is not kernel
    assert len(kernel.configs) > 1


def _launch(kernel, x, mask_arg, has_mask):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return A.launch_autotuned(kernel, "softmax", x, out, mask_arg, has_mask)


def test_autotune_cache_mask_present_vs_absent(tuner):
    x = randn(4, 40, F32)
    keep = (torch.rand(4, 40, generator=torch.Generator().manual_seed(0)) > 0.3).to(torch.int8).to(DEV)
    _launch(tuner, x, keep, True)
    _launch(tuner, x, placeholder(x, torch.int8), False)
    assert len(tuner.cache) == 1


def test_autotune_cache_has_mask_toggle(tuner):
    x = randn(4, 40, F32)
    keep = torch.ones(4, 40, dtype=torch.int8, device=DEV)
    _launch(tuner, x, keep, False)
    _launch(tuner, x, keep, True)
    assert len(tuner.cache) == 1


def test_autotune_cache_wrong_dtype_standin_is_a_second_entry(tuner):
    # negative control: the input itself as the absent mask's stand-in changes the key
    x = randn(4, 40, F32)
    _launch(tuner, x, placeholder(x, torch.int8), False)
    _launch(tuner, x, x, False)
    assert len(tuner.cache) == 2


def test_autotune_same_bucket_same_entry(tuner):
    _launch(tuner, randn(4, 40, F32), placeholder(randn(1, 1, F32), torch.int8), False)
    _launch(tuner, randn(3, 60, F32), placeholder(randn(1, 1, F32), torch.int8), False)  # 40, 60 -> 64
    assert len(tuner.cache) == 1


def test_autotuned_result_is_correct(tuner):
    x = randn(6, 40, BF16, seed=9)
    keep = torch.rand(6, 40, generator=torch.Generator().manual_seed(1)) > 0.2
    y = A.run_autotuned("softmax", x, F32, do_bench=cpu_do_bench)
    torch.testing.assert_close(y.cpu(), reference("softmax", x, F32), atol=2e-5, rtol=1e-5)
    y = A.run_autotuned("softmax", x, BF16, mask=keep.to(DEV), do_bench=cpu_do_bench)
    torch.testing.assert_close(y.cpu().float(), reference("softmax", x, BF16, keep).float(), atol=2e-2, rtol=1.6e-2)
    assert len(tuner.cache) == 2  # out dtype fp32, then bf16: Triton keys on every tensor's dtype
    best = A.config_from_triton(tuner.cache[next(iter(tuner.cache))])
    assert best in C.config_space("softmax", 6, 40, BF16)


@pytest.mark.parametrize("op", ["log_softmax", "logsumexp"])
def test_autotuned_long_rows(op):
    x = randn(3, 20000, F32, seed=10)  # bucket 32768: onepass and split candidates
    kernel = A.autotuned(op, do_bench=cpu_do_bench)
    kernel.cache.clear()
    y = A.run_autotuned(op, x, F32, do_bench=cpu_do_bench)
    torch.testing.assert_close(y.cpu(), reference(op, x, F32), atol=2e-5, rtol=1e-5)
    kernel.cache.clear()


def test_tuned_symbol_at_call_time_is_an_error(tuner):
    x = randn(4, 40, F32)
    out = torch.empty_like(x)
    args = (x, out, placeholder(x, torch.int8), placeholder(x, F32), Bf._sync_buffer(x.device, 0),
            Bf._slot_buffer(x.device, 4), 4, 40, x.stride(0), 40, 0, 64)
    with pytest.raises(Exception, match="Conflicting meta-parameters|BLOCK_N"):
        tuner[(1,)](*args, OP=0, HAS_MASK=False, PHASE=0, BLOCK_N=64)


def test_split_pipe_is_refused_for_logsumexp():
    # it writes whole rows: run as logsumexp it would write M*N values into an M-long output
    x = torch.randn(3, 600, device=DEV)
    with pytest.raises(ValueError, match="'split_pipe' writes whole rows.*for logsumexp use"):
        L.run("logsumexp", x, torch.float32, C._cfg("split_pipe", 256, 1, 1, 2))


class _Compiled:
    """What the occupancy probe reads from a compiled kernel: its registers and shared memory."""

    def __init__(self, regs, smem):
        self.n_regs, self.metadata = regs, type("Meta", (), {"shared": smem})()

    def _init_handles(self):
        pass


def test_the_grid_is_sized_by_the_kernel_the_launch_runs(monkeypatch):
    """The occupancy that sizes a persistent grid is read from a compile with every constexpr and
    compile option of the launch: a staged chunk kernel whose rows are a whole number of chunks
    (EVEN) keeps 80 registers a thread on sm_90 where the ragged one keeps 96 (12 programs an SM
    against 10), and a register cap (maxnreg) changes how many programs an SM holds."""
    compiles = []

    class Kernel:
        @staticmethod
        def warmup(*args, **kwargs):
            compiles.append(kwargs)
            regs = kwargs.get("maxnreg") or (80 if kwargs.get("EVEN") else 96)
            return _Compiled(regs, 2 * 4096 * 2 + 8)

    monkeypatch.setattr(L, "_softmax_kernel", Kernel)
    monkeypatch.setattr(L, "_device_sms", lambda device=None: 132)
    monkeypatch.setattr(L, "_OCC", {})
    cuda, m, n, bn = torch.device("cuda"), 1024, 65536, 4096
    args = (torch.empty(0, dtype=BF16), torch.empty(0, dtype=BF16), *[torch.empty(0)] * 4, m, n, n, 1, 0, n)
    meta = dict(OP=2, HAS_MASK=False, PATH=4, BLOCK_N=bn, ROWS=1, SPLIT=1, NW=2, NS=3, FAST_EXP=1, ALIGN=0, EVEN=1)
    options = {"num_warps": 2, "num_stages": 3}
    assert L._grid_size(cuda, m, n, args, meta, options) == 132 * 12
    assert compiles[-1]["EVEN"] == 1 and compiles[-1]["NS"] == 3 and compiles[-1]["num_stages"] == 3
    assert L._grid_size(cuda, m, n, args, dict(meta, EVEN=0), options) == 132 * 10  # compiled again, not reused
    # at 64 registers 16 programs fit an SM's registers, 13 its shared memory (17 KB of stages a program)
    assert L._grid_size(cuda, m, n, args, meta, dict(options, maxnreg=64)) == 132 * 13
    assert compiles[-1]["maxnreg"] == 64
    assert len(compiles) == 3
    assert L._grid_size(cuda, m, n, args, meta, options) == 132 * 12 and len(compiles) == 3  # measured once


@pytest.mark.parametrize("reg", [16, 256, 64.0, True, "64"])
def test_a_register_cap_out_of_range_is_refused_naming_it(reg):
    config = dict(SPLIT_CFG, maxnreg=reg)
    with pytest.raises(ValueError, match=rf"maxnreg must be an int from 24 to 255.*got {reg!r}"):
        L.run("softmax", randn(3, 1500, F32), F32, config)


@pytest.mark.parametrize("op", C.OPS)
def test_a_register_cap_is_a_config_of_its_own_and_leaves_results_alone(op):
    base = C._cfg("chunks", 512, 1, 1, 2) if op == "logsumexp" else SPLIT_CFG
    capped = dict(base, maxnreg=64)
    assert C._cfg_key(capped) != C._cfg_key(base)
    check(op, randn(5, 3000, BF16, seed=3), BF16, capped)
