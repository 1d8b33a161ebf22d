"""logsumexp's chunks path (PATH 4 of :func:`dispatch_triton.jit._softmax_kernel`): persistent
programs walk all chunks of all rows, each chunk held in registers while the next one loads, and
write per-chunk (max, sum) partials; the last chunk of a row to arrive merges them. Nothing
waits, the row is read once, one launch.

With ``num_stages`` S > 1 (``_lse_chunks_staged``) no chunk waits in registers: Triton's software
pipeliner copies the next S - 1 chunks into shared memory (``cp.async``) while one is reduced, so the
bytes an SM has in flight are bounded by its shared memory, not its registers (sm_90, Triton 3.6,
bf16 at 4096 x 2: 80 registers a thread at any S against 121; at S = 3 an SM holds 192 KB of chunks
in flight where the register-held form holds 64 KB). Its rows are read with plain loads, never
through aligned windows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .row_math import _INTERPRETED, _combine, _cvt, _eff, _exp2_fast, _finish_load, _load_raw, _partial
from .window import _read_window

_ROW_OFF = tl.constexpr(64)  # logsumexp's per-row arrival counters in the int32 sync buffer


@triton.jit
def _lse_chunk_load(x_ptr, t64, n_split, end, N, stride_xm, ALIGN: tl.constexpr, EVEN: tl.constexpr,
                    BLOCK_N: tl.constexpr, V: tl.constexpr):
    # chunk t64 of all rows' chunks (all -inf from chunk ``end`` on): its raw values and, with ALIGN,
    # its window and the row's straddling groups (as _chunk_load). EVEN (every chunk whole): no mask
    # an element, one predicate for the chunk (nothing loads from ``end`` on; those values are never
    # used)
    row = t64 // n_split
    c = t64 % n_split
    if EVEN:
        cols = tl.arange(0, BLOCK_N)
        if _INTERPRETED:  # its loads take no mask made from a scalar's
            whole = cols < tl.where(t64 < end, BLOCK_N, 0)
        else:
            whole = tl.broadcast_to(t64 < end, [BLOCK_N])
        x = tl.load(x_ptr + row * stride_xm + c * BLOCK_N + cols, mask=whole, eviction_policy="evict_first")
        xe = tl.full([2 * V], float("-inf"), x.dtype)
        return x, xe
    lim = tl.where(t64 < end, N, 0)
    if ALIGN:
        x, xe = _read_window(x_ptr, row, stride_xm, c, lim, BLOCK_N, V)
    else:
        x, _ = _load_raw(x_ptr, x_ptr, row * stride_xm, 0, c * BLOCK_N + tl.arange(0, BLOCK_N), lim, False,
                         "evict_first")
        xe = tl.full([2 * V], float("-inf"), x.dtype)  # no edges: a constant, nothing is loaded
    return x, xe


@triton.jit
def _lse_partial(xr, er, OUT_TY, ALIGN: tl.constexpr, FAST_EXP: tl.constexpr):
    # a chunk's (max, sum of exp about it) from its raw values; with FAST_EXP each exp is one fused
    # multiply-add and one ex2.approx (exp2(x * log2e - max * log2e))
    if FAST_EXP:
        x = _finish_load(xr, xr, False, OUT_TY)
        m = tl.max(x, 0)
        if ALIGN:
            xe = _finish_load(er, er, False, OUT_TY)
            m = tl.maximum(m, tl.max(xe, 0))
        ml = _eff(m) * 1.4426950408889634
        s = tl.sum(_exp2_fast(x * 1.4426950408889634 - ml), 0)
        if ALIGN:
            s += tl.sum(_exp2_fast(xe * 1.4426950408889634 - ml), 0)
    else:
        m, s = _partial(xr, xr, er, False, OUT_TY, ALIGN, FAST_EXP)
    return m, s


@triton.jit
def _chunk_run(M, N, BLOCK_N: tl.constexpr):
    # (n_split, lo, hi): this program's run of consecutive chunks, [lo, hi) of the M * n_split
    # chunks of all rows (program p: [p * T // P, (p + 1) * T // P))
    n_split = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0)
    total = tl.cast(M, tl.int64) * n_split  # M is a constant 1 where the call has one row
    return n_split, pid * total // nprog, (pid + 1) * total // nprog


@triton.jit
def _arrive(out_ptr, ws_ptr, sync_ptr, row, taken, n_split, OUT_TY):
    # ``taken`` of ``row``'s chunks have their partials in the workspace: added to the row's acq_rel
    # counter; the program that completes the count merges the row, writes it and resets the counter
    old = tl.atomic_add(sync_ptr + _ROW_OFF + row, taken, sem="acq_rel")
    if old + taken == n_split:
        big_m, big_e, s = _combine(ws_ptr, row * n_split, n_split)
        tl.store(out_ptr + row, _cvt(tl.log(s) + big_e, OUT_TY))
        tl.atomic_xchg(sync_ptr + _ROW_OFF + row, 0, sem="relaxed")


@triton.jit
def _lse_chunks(x_ptr, out_ptr, ws_ptr, sync_ptr, M, N, stride_xm, BLOCK_N: tl.constexpr, OUT_TY,
                FAST_EXP: tl.constexpr, ALIGN: tl.constexpr, EVEN: tl.constexpr, V: tl.constexpr):
    # PATH 4, logsumexp only, one launch: persistent programs each take a run of consecutive chunks
    # (program p: chunks [p * T // P, (p + 1) * T // P) of the T = M * n_split chunks of all rows),
    # each chunk held in registers while the next one is already loading, and write every chunk's
    # (max, sum) to the workspace. Where a program leaves a row it adds the chunks it took of it to
    # the row's acq_rel counter (one atomic, and the fence before it, per row a program touches, not
    # per chunk: the fence waits for the chunk in flight); the program that completes the count
    # merges the row's partials, writes it and resets the counter. No program ever waits on another.
    n_split, lo, hi = _chunk_run(M, N, BLOCK_N)
    xr, er = _lse_chunk_load(x_ptr, lo, n_split, hi, N, stride_xm, ALIGN, EVEN, BLOCK_N, V)
    taken = 0
    for t in range(lo, hi):
        xr_n, er_n = _lse_chunk_load(x_ptr, t + 1, n_split, hi, N, stride_xm, ALIGN, EVEN, BLOCK_N, V)
        m_c, s_c = _lse_partial(xr, er, OUT_TY, ALIGN, FAST_EXP)
        tl.store(ws_ptr + t * 2, m_c)
        tl.store(ws_ptr + t * 2 + 1, s_c)
        taken += 1
        if (t % n_split == n_split - 1) | (t == hi - 1):  # this program's last chunk of the row
            tl.debug_barrier()
            _arrive(out_ptr, ws_ptr, sync_ptr, t // n_split, taken, n_split, OUT_TY)
            taken = 0
        xr, er = xr_n, er_n


@triton.jit
def _lse_chunks_staged(x_ptr, out_ptr, ws_ptr, sync_ptr, M, N, stride_xm, BLOCK_N: tl.constexpr, OUT_TY,
                       FAST_EXP: tl.constexpr, EVEN: tl.constexpr, STAGES: tl.constexpr):
    # PATH 4 with num_stages > 1: the chunks of _lse_chunks, each program's run of them walked by a
    # loop that Triton pipelines (the next STAGES - 1 chunks in shared memory). The loop holds no
    # branch, barrier or atomic (any of them keeps the pipeliner out); the rows a program touched
    # are counted after it, by how many of its chunks fall in each (one atomic a row, as in _lse_chunks)
    n_split, lo, hi = _chunk_run(M, N, BLOCK_N)
    cols = tl.arange(0, BLOCK_N)
    for t in tl.range(lo, hi, num_stages=STAGES):
        start = (t % n_split) * BLOCK_N
        ptr = x_ptr + (t // n_split) * stride_xm + start + cols
        if EVEN:
            xr = tl.load(ptr, eviction_policy="evict_first")
        else:
            xr = tl.load(ptr, mask=start + cols < N, other=float("-inf"), eviction_policy="evict_first")
        m_c, s_c = _lse_partial(xr, xr, OUT_TY, 0, FAST_EXP)
        tl.store(ws_ptr + t * 2, m_c)
        tl.store(ws_ptr + t * 2 + 1, s_c)
    tl.debug_barrier()
    for row in range(lo // n_split, tl.cdiv(hi, n_split)):
        taken = tl.minimum(hi, (row + 1) * n_split) - tl.maximum(lo, row * n_split)
        if taken > 0:
            _arrive(out_ptr, ws_ptr, sync_ptr, row, taken.to(tl.int32), n_split, OUT_TY)
