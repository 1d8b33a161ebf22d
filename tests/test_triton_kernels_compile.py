"""The Triton softmax-family kernels build for a real GPU target even where there is none (the
interpreter accepts programs the compiler rejects, and cannot run the inline PTX of ``FAST_EXP`` at
all): every path of the row kernel ``_softmax_kernel`` (rows, online, split, split_pipe, chunks) for
each op it serves, with and without ``FAST_EXP`` (onepass, the split paths and chunks also with ``ALIGN``; chunks
also ``EVEN``), and every
variant (plain, EVEN, ONE_PASS with and without TAIL and I32, ACC_2D, PREFETCH, TMA, FAST_EXP, REVERSE, KEEP_X) of
the three strided kernels compile for sm_90; the row kernel also for a call of one row (``M`` the constant 1,
as Triton passes it) and of one-element rows. Each runs in a subprocess without TRITON_INTERPRET."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from sm90_build import BUILD

_ROWS = BUILD + textwrap.dedent("""
    from dispatch_triton.jit import _softmax_kernel as fn

    ptrs = {"x_ptr": "*bf16", "out_ptr": "*bf16", "mask_ptr": "*i8", "ws_ptr": "*fp32", "sync_ptr": "*i32",
            "slot_ptr": "*i64"}

    # (PATH, BLOCK_N, ROWS, SPLIT, warps, ops)
    paths = ((0, 1024, 1, 1, 4, (0, 1, 2)), (1, 1024, 1, 4, 4, (0, 1, 2)), (2, 4096, 1, 1, 4, (0, 1, 2)),
             (3, 4096, 1, 1, 4, (0, 1)), (4, 8192, 1, 1, 4, (2,)))
    for path, bn, rows, split, warps, ops in paths:
        shape = dict(HAS_MASK=False, PATH=path, BLOCK_N=bn, ROWS=rows, SPLIT=split, NW=warps, NS=1)
        for op in ops:
            # (FAST_EXP, PHASE, ALIGN, EVEN)
            for fast, phase, align, even in ((0, 0, 0, 0), (1, 0, 0, 0)) + (
                    ((1, 2, 0, 0), (1, 0, 0, 1)) if path == 4 else ()) + (
                    ((1, 0, 1, 0),) if path in (0, 2, 3, 4) else ()):
                build(fn, ptrs, dict(shape, OP=op, PHASE=phase, FAST_EXP=fast, ALIGN=align, EVEN=even), warps)
            # a call of one row: Triton passes an int argument equal to 1 as the constant 1 (no
            # tensor methods), so each path must build with M = 1 too; one-element rows (N = 1, unit
            # strides) take the rows path
            for one in [dict(M=1)] + ([dict(N=1, stride_xm=1, stride_om=1)] if path == 0 else []):
                build(fn, ptrs, dict(shape, OP=op, PHASE=0, FAST_EXP=1, **one), warps)
    print("compiled")
""")


_STRIDED = BUILD + textwrap.dedent("""
    import itertools
    from dispatch_triton.strided_jit import _strided_finish, _strided_kernel, _strided_partials

    io = {"x_ptr": "*bf16", "out_ptr": "*bf16", "ws_ptr": "*fp32"}
    flags = [dict(EVEN=e, ACC_2D=a, PREFETCH=p, TMA=t, FAST_EXP=f, KEEP_X=k)
             for e, a, p, t, f, k in ((0, 0, 0, 0, 0, 0), (1, 1, 1, 0, 0, 0), (0, 1, 0, 0, 1, 1), (1, 0, 0, 1, 0, 0),
                                      (1, 1, 1, 0, 1, 1))]
    for op, f in itertools.product((0, 1, 2), flags):
        build(_strided_kernel, io, dict(OP=op, BLOCK_R=64, BLOCK_I=16, ONE_PASS=0, STAGES=3, **f))
        for reverse in (0, 1):
            build(_strided_finish, io, dict(OP=op, BLOCK_R=64, BLOCK_I=16, BLOCK_S=8, STAGES=3, REVERSE=reverse,
                                            MERGE_S=8, **{k: v for k, v in f.items() if k != "ACC_2D"}))
    for op in (0, 1, 2):  # wide column blocks: the partials merged a few at a time
        build(_strided_finish, io, dict(OP=op, BLOCK_R=8, BLOCK_I=1024, BLOCK_S=16, STAGES=3, REVERSE=0, MERGE_S=8,
                                        EVEN=1, PREFETCH=1, TMA=0, FAST_EXP=1, KEEP_X=0))
    for f in flags:
        build(_strided_partials, io, dict(BLOCK_R=64, BLOCK_I=16, STAGES=3, **f))
    # all of R in one tile, or in two (TAIL); 64- or 32-bit offsets (I32)
    for op, tail, even, i32 in itertools.product((0, 1, 2), (0, 32), (0, 1), (0, 1)):
        build(_strided_kernel, io, dict(OP=op, BLOCK_R=128 if tail else 1024, BLOCK_I=16, ONE_PASS=1, EVEN=even,
                                        ACC_2D=0, PREFETCH=0, TMA=0, STAGES=1, FAST_EXP=1, KEEP_X=0, TAIL=tail,
                                        I32=i32), warps=8)
    # Triton passes an int argument equal to 1 as the constant 1: each kernel with every int at 1
    for fn, consts in ((_strided_kernel, dict(OP=1, BLOCK_R=64, BLOCK_I=16, ONE_PASS=0, STAGES=3, **flags[1])),
                       (_strided_finish, dict(OP=2, BLOCK_R=64, BLOCK_I=16, BLOCK_S=8, STAGES=3, REVERSE=0, MERGE_S=8,
                                              **{k: v for k, v in flags[1].items() if k != "ACC_2D"})),
                       (_strided_partials, dict(BLOCK_R=64, BLOCK_I=16, STAGES=3, **flags[1]))):
        ones = {p.name: 1 for p in fn.params if not p.is_constexpr and not p.name.endswith("_ptr")}
        build(fn, io, {**consts, **ones})
    print("compiled")
""")



def _compiles_for_sm90(code: str) -> None:
    pytest.importorskip("triton")
    pytest.importorskip("dispatch_triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0 and "GPUTarget" in proc.stderr and "ImportError" in proc.stderr:
        pytest.skip("this Triton has no offline compile target API")
    assert proc.returncode == 0 and "compiled" in proc.stdout, proc.stderr[-3000:]


def test_every_row_path_compiles_for_sm90_with_and_without_fast_exp():
    _compiles_for_sm90(_ROWS)


def test_every_strided_variant_compiles_for_sm90():
    _compiles_for_sm90(_STRIDED)
