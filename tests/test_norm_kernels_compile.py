"""The norm kernels build for a real GPU target even where there is none: the Triton kernels compile
for sm_90 (the interpreter accepts programs the compiler rejects) and the TileLang CUDA programs
lower to CUDA source. Each runs in a subprocess without TRITON_INTERPRET."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from sm90_build import BUILD

_TRITON = BUILD + textwrap.dedent("""
    import itertools
    from dispatch_triton.norm_backward_coop import _norm_bwd_coop
    from dispatch_triton.norm_backward_kernels import _column_sum, _norm_bwd, _norm_bwd_split, _norm_bwd_sums
    from dispatch_triton.norm_kernels import _norm_fwd

    fwd = {p: "*bf16" for p in ("x_ptr", "w_ptr", "b_ptr", "y_ptr")} | {"ws_ptr": "*fp32", "st_ptr": "*fp32"}
    # every path, with and without the rows' statistics saved for the backward (STATS)
    for rms, affine, (onep, phase, persist), stats in itertools.product(
            [True, False], [True, False], [(True, 0, 0), (True, 0, 1), (False, 0, 0), (False, 1, 0), (False, 2, 0)],
            [0, 1]):
        build(_norm_fwd, fwd, dict(IS_RMS=rms, HAS_WEIGHT=affine, HAS_BIAS=affine, PHASE=phase, ONE_PASS=onep,
                                   BLOCK_N=1024 if onep else 4096, ROWS=2 if onep else 1, SPLIT=4 if phase else 1,
                                   PERSIST=persist, PREFETCH=0, HINTS=0, COOP=0, STATS=stats))
    for rms, (onep, phase, persist) in itertools.product(  # the PREFETCH and HINTS options
            [True, False], [(True, 0, 0), (True, 0, 1), (False, 0, 0), (False, 1, 0), (False, 2, 0)]):
        build(_norm_fwd, fwd, dict(IS_RMS=rms, HAS_WEIGHT=True, HAS_BIAS=not rms, PHASE=phase, ONE_PASS=onep,
                                   BLOCK_N=1024 if onep else 4096, ROWS=2 if onep else 1, SPLIT=4 if phase else 1,
                                   PERSIST=persist, PREFETCH=int(not onep), HINTS=1, COOP=0))
    # layer_norm's chunked path and the split path's first half, the statistics by lanes (LANES)
    for (phase, split), prefetch in itertools.product(((0, 1), (1, 4)), (0, 1)):
        build(_norm_fwd, fwd, dict(IS_RMS=False, HAS_WEIGHT=True, HAS_BIAS=True, PHASE=phase, ONE_PASS=False,
                                   BLOCK_N=8192, ROWS=1, SPLIT=split, PERSIST=0, PREFETCH=prefetch, HINTS=1, COOP=0,
                                   STATS=1, LANES=1), warps=16)
    for rms in (True, False):  # a persistent grid's tile loop pipelined by Triton
        build(_norm_fwd, fwd, dict(IS_RMS=rms, HAS_WEIGHT=True, HAS_BIAS=not rms, PHASE=0, ONE_PASS=True, BLOCK_N=4096,
                                   ROWS=1, SPLIT=1, PERSIST=2, STAGES=3), warps=8)
    # the cooperative forward (its ws_ptr is the int64 slot buffer): the one launch of a GPU, and
    # the interpreter's two halves; bf16 and fp32 rows
    for dt in ("bf16", "fp32"):
        io = {p: "*" + dt for p in ("x_ptr", "w_ptr", "b_ptr", "y_ptr")} | {"ws_ptr": "*i64", "st_ptr": "*fp32"}
        for rms, affine, phase, hints, stats in ((True, True, 0, 1, 0), (False, True, 0, 1, 0), (False, False, 0, 0, 0),
                                                 (True, False, 1, 0, 0), (False, True, 2, 1, 0), (True, True, 0, 1, 1),
                                                 (False, True, 0, 1, 1)):
            build(_norm_fwd, io, dict(IS_RMS=rms, HAS_WEIGHT=affine, HAS_BIAS=affine and not rms, PHASE=phase,
                                      ONE_PASS=False, BLOCK_N=4096, ROWS=1, SPLIT=1, PERSIST=0, PREFETCH=0,
                                      HINTS=hints, COOP=1, CHUNKS_P2=32, STATS=stats))
        for rms in (True, False):  # the weight and bias loaded for each row (WB_EACH)
            build(_norm_fwd, io, dict(IS_RMS=rms, HAS_WEIGHT=True, HAS_BIAS=not rms, PHASE=0, ONE_PASS=False,
                                      BLOCK_N=2048, ROWS=1, SPLIT=1, PERSIST=0, PREFETCH=0, HINTS=1, COOP=1,
                                      CHUNKS_P2=128, STATS=1, WB_EACH=1))
    bwd = {p: "*bf16" for p in ("x_ptr", "w_ptr", "dy_ptr", "dx_ptr", "o0_ptr", "o1_ptr")} | {
        "p_ptr": "*fp32", "ws_ptr": "*fp32", "st_ptr": "*fp32", "slot_ptr": "*i64"}
    for rms, affine in itertools.product([True, False], [True, False]):
        flags = dict(IS_RMS=rms, HAS_WEIGHT=affine)
        for evict, prefetch in ((True, False), (False, False), (True, True)):
            build(_norm_bwd, bwd, dict(flags, WANT_DW=affine, WANT_DB=affine and not rms, BLOCK_N=1024, ROWS=2,
                                       EVICT=evict, PREFETCH=prefetch))
        # the tile loop pipelined by Triton, and the column sums finished in the launch
        build(_norm_bwd, bwd, dict(flags, WANT_DW=True, WANT_DB=not rms, BLOCK_N=4096, ROWS=1, PREFETCH=False,
                                   STAGES=3), warps=8)
        build(_norm_bwd, bwd, dict(flags, WANT_DW=True, WANT_DB=not rms, BLOCK_N=4096, ROWS=1, FINISH=64,
                                   FINISH_BG=64), warps=8)
        for (hints, prefetch), saved in itertools.product(((False, False), (True, True)), (False, True)):
            build(_norm_bwd_sums, bwd, dict(flags, BLOCK_N=2048, CHUNKS_P2=8, EV=2 if hints else 0, PREFETCH=prefetch,
                                            SAVED=saved))
            build(_norm_bwd_split, bwd, dict(flags, WANT_DW=affine, WANT_DB=affine and not rms, BLOCK_N=2048,
                                             CHUNKS_P2=8, EV=1 if hints else 0, PREFETCH=prefetch, SAVED=saved))
        # the one-launch exchange of long rows (it runs only on a GPU: here it must at least build),
        # recomputing the rows' statistics or given them (SAVED)
        # and with the column sums finished in the launch (FINISH)
        for saved, finish in ((False, 0), (True, 0), (True, 128)):
            build(_norm_bwd_coop, bwd | {"slot_ptr": "*i64"}, dict(flags, WANT_DW=affine, WANT_DB=affine and not rms,
                                                                 BLOCK_N=2048, CHUNKS_P2=32, SLOT_OFF=64, SAVED=saved,
                                                                 FINISH=finish, FINISH_CW=128, FINISH_BG=32),
                  warps=8)
    build(_column_sum, {"p_ptr": "*fp32", "out0_ptr": "*bf16", "out1_ptr": "*bf16"}, dict(BLOCK_G=128, BLOCK_N=32))
    # Triton passes an int argument equal to 1 as the constant 1 (N = 1, unit strides...): each kernel
    # with every int it specializes at 1
    lane = dict(IS_RMS=False, HAS_WEIGHT=True, HAS_BIAS=True, PHASE=0, ONE_PASS=False, BLOCK_N=4096, ROWS=1, SPLIT=1,
                PERSIST=0, PREFETCH=1, HINTS=1, COOP=0, STATS=1)
    wants = dict(IS_RMS=False, HAS_WEIGHT=True, WANT_DW=True, WANT_DB=True)
    for fn, ptrs, consts, warps in (
            (_norm_fwd, fwd, dict(lane, ONE_PASS=True, BLOCK_N=1024, ROWS=2), 4), (_norm_fwd, fwd, lane, 4),
            (_norm_bwd, bwd, dict(wants, BLOCK_N=1024, ROWS=2), 4),
            (_norm_bwd_sums, bwd, dict(IS_RMS=False, HAS_WEIGHT=True, BLOCK_N=2048, CHUNKS_P2=8), 4),
            (_norm_bwd_split, bwd, dict(wants, BLOCK_N=2048, CHUNKS_P2=8), 4),
            (_norm_bwd_coop, bwd, dict(wants, BLOCK_N=2048, CHUNKS_P2=32, SLOT_OFF=64, SAVED=True), 8),
            (_column_sum, {"p_ptr": "*fp32", "out0_ptr": "*bf16", "out1_ptr": "*bf16"}, dict(BLOCK_G=128, BLOCK_N=32),
             4)):
        ones = {p.name: 1 for p in fn.params if not p.is_constexpr and not p.do_not_specialize
                and not p.name.endswith("_ptr") and p.name != "eps"}
        build(fn, ptrs, consts | ones, warps)
    print("compiled")
""")

_TILELANG = textwrap.dedent("""
    from dispatch_tilelang import norm_backward, norm_kernels
    for op, affine, n, threads in (("layer_norm", True, 4096, 512), ("rms_norm", False, 40, 128)):
        assert norm_kernels.cuda_program(op, n, "bfloat16", affine, affine, 1e-5, "sm_90").get_kernel_source(
            block_m=1, threads=threads)
        assert norm_backward.cuda_program(op, n, "bfloat16", affine, 1e-5, "sm_90").get_kernel_source(
            block_m=1, threads=threads)
    # rows of a wider buffer, and rows past the registers walked in chunks (odd N, strided too)
    assert norm_kernels.cuda_program("layer_norm", 4096, "bfloat16", True, True, 1e-5, "sm_90", 4160
                                     ).get_kernel_source(block_m=1, threads=512)
    for op, n, stride in (("rms_norm", 262144, 0), ("layer_norm", 50257, 0), ("layer_norm", 65536, 65600)):
        assert norm_kernels.cuda_chunked_program(op, n, "bfloat16", True, op == "layer_norm", 1e-5, 8192, "sm_90",
                                                 stride).get_kernel_source(block_m=1, threads=512)
    print("lowered")
""")


def _run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)


def test_triton_norm_kernels_compile_for_sm90():
    pytest.importorskip("triton")
    try:
        import triton.backends.nvidia  # noqa: F401
    except ImportError:
        pytest.skip("triton has no NVIDIA backend here")
    done = _run(_TRITON)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]


def test_tilelang_norm_programs_lower_to_cuda():
    pytest.importorskip("tilelang")
    if shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"):
        pytest.skip("no CUDA toolkit to lower TileLang CUDA programs with")
    done = _run(_TILELANG)
    assert done.returncode == 0 and "lowered" in done.stdout, done.stderr[-3000:]
