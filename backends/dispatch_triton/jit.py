"""The Triton JIT kernel for row softmax, log_softmax and logsumexp, and its paths' device code.

One JIT kernel, ``_softmax_kernel``, holds every path; the path is a tuned constexpr (``PATH``)
so that one Triton autotuner can choose among all of them:

``rows`` / ``onepass`` (PATH 0)
    A ``[ROWS, BLOCK_N]`` tile per program, ``BLOCK_N >= N``: the whole row is held in registers,
    read once, written once. ``ROWS > 1`` packs several short rows per program.
``online`` / ``split_online`` (PATH 1)
    Persistent programs; a row is cut into ``n_split`` segments (``SPLIT`` bounds it, 1 for
    ``online``). Each program streams its segment once to get a per-lane (max, sum) with one
    ``exp`` per element, then re-reads it (in reverse, so the most recent blocks are still in L2)
    to write the output. Works for any N; 3 memory passes unless the re-read hits L2.
``split`` (PATH 2)
    Persistent programs in groups of ``n_split = cdiv(N, BLOCK_N)``; each holds one chunk of a
    row in registers, publishes its partial (max, sum), waits for the other partials of the row,
    merges them and writes its chunk from registers: the row is read once and written once
    whatever its length. The next row's chunk is already in flight while the partials meet.
``split_pipe`` (PATH 3)
    ``split`` pipelined one row ahead: a program publishes the partial of its next row before it
    waits for this row's, so the partials of a row have had a whole iteration to arrive; chunks
    are held raw (input dtype) and the output is recomputed from them, which leaves registers
    for a second chunk in flight.

``chunks`` (PATH 4, logsumexp only; :mod:`dispatch_triton.lse_chunks`)
    Persistent programs walk all chunks of all rows, each chunk held in registers while the next
    one loads, and write per-chunk (max, sum) partials; the last chunk of a row to arrive merges
    them (as ``split`` does for logsumexp). Nothing waits, the row is read once, one launch. Rows
    that are a whole number of chunks (``EVEN``) load without a mask an element. With
    ``num_stages`` > 1 the chunks in flight wait in shared memory, not registers (staged).

The partials of the split paths meet through :mod:`dispatch_triton.exchange` (epoch-tagged words,
tickets that decide a program's group; the host caps ``n_split`` at the SM count, and one program
per SM always fits, so a group's programs are resident together). logsumexp needs no waiting: the
last segment of a row to arrive (an acq_rel counter that it resets) merges and writes, so its
``split`` path takes one program per chunk rather than persistent groups (``chunks``: persistent
programs over chunks). The Triton interpreter
runs programs one after another, so there partials could never meet in one launch: the split
paths then run as two launches (``PHASE`` 1 publishes, ``PHASE`` 2 merges and writes), the same
code minus the wait.

Semantics follow torch exactly: the input is first rounded to ``out_dtype`` (torch's ``dtype=``
casts before the op), everything accumulates in fp32, rows of all -inf give NaN for
softmax/log_softmax and -inf for logsumexp, a +inf gives NaN rows for softmax/log_softmax and
+inf for logsumexp, NaN propagates. logsumexp uses torch's own formula (max replaced by 0 when
infinite).

Op and path names and their codes live in :mod:`dispatch_triton.configs`; the host side that
sizes the grid and launches this kernel in :mod:`dispatch_triton.launch`; the helpers it shares
with the other kernels (loads, rounding, exp, the merge of partials) in :mod:`dispatch_triton.row_math`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .exchange import _publish, _ticket
from .lse_chunks import _ROW_OFF, _lse_chunks, _lse_chunks_staged
from .row_math import (_chunk_exps, _combine, _cvt, _eff, _exp, _finish_load, _finish_scale, _gather, _load_raw,
                       _partial)
from .window import _read_window, _write_window


@triton.jit
def _seg_stats(x_ptr, mask_ptr, xoff, moff, N, lo, hi, HAS_MASK: tl.constexpr, OUT_TY: tl.constexpr,
               BLOCK_N: tl.constexpr, FAST_EXP: tl.constexpr):
    # one pass over blocks [lo, hi) of a row, the next block always in flight: per-lane running
    # (max, sum) with ONE exp per element
    cols0 = tl.arange(0, BLOCK_N)
    m_v = tl.full([BLOCK_N], float("-inf"), tl.float32)
    s_v = tl.zeros([BLOCK_N], tl.float32)
    xn, kn = _load_raw(x_ptr, mask_ptr, xoff, moff, lo * BLOCK_N + cols0, tl.where(lo < hi, N, 0), HAS_MASK,
                       "evict_last")
    for b in range(lo, hi):
        x = _finish_load(xn, kn, HAS_MASK, OUT_TY)
        nb = b + 1
        xn, kn = _load_raw(x_ptr, mask_ptr, xoff, moff, nb * BLOCK_N + cols0, tl.where(nb < hi, N, 0), HAS_MASK,
                           "evict_last")
        d = x - m_v
        e = _exp(-tl.abs(d), FAST_EXP)
        up = d > 0.0
        s_new = tl.where(up, s_v * e + 1.0, s_v + e)
        s_v = tl.where(x == float("-inf"), s_v, s_new)
        m_v = tl.where(up, x, m_v)
    m_c = tl.max(m_v, 0)
    s_c = tl.sum(tl.where(m_v == float("-inf"), s_v * 0.0, s_v * tl.exp(m_v - _eff(m_c))), 0)
    return m_c, s_c


@triton.jit
def _chunk_load(x_ptr, mask_ptr, row, stride_xm, stride_mm, c, cols, M, N, HAS_MASK: tl.constexpr,
                ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # program c's raw chunk of ``row`` (all -inf past the last row) and its keep-mask; with ALIGN
    # its window instead (dispatch_triton.window), and third, the row's straddling groups
    r64 = tl.cast(row, tl.int64)
    lim = tl.where(row < M, N, 0)
    if ALIGN:
        x, xe = _read_window(x_ptr, row, stride_xm, c, lim, BLOCK_N, V)
        keep = x
    else:
        x, keep = _load_raw(x_ptr, mask_ptr, r64 * stride_xm, r64 * stride_mm, cols, lim, HAS_MASK, "evict_first")
        xe = tl.full([2 * V], float("-inf"), x.dtype)  # no edges: a constant, nothing is loaded
    return x, keep, xe


@triton.jit
def _rebuilt(x, big_m, big_e, scale, OP: tl.constexpr, FAST_EXP: tl.constexpr):
    # softmax / log_softmax of raw-chunk values x (fp32) from the row's stats
    if OP == 0:
        y = _exp(x - big_e, FAST_EXP) * scale  # scale is NaN where the row's max is not finite
    else:
        y = (x - big_m) - scale
    return y


@triton.jit
def _window_row(x_ptr, out_ptr, row, N, stride_xm, stride_om, OP: tl.constexpr, OUT_TY, FAST_EXP: tl.constexpr,
                BLOCK_N: tl.constexpr, V: tl.constexpr):
    # PATH 0 with ALIGN (one row a program, off the 16-byte grid): the row through its window, the
    # groups inside it 16 bytes at a time, its straddling first and last groups element by element
    xr, er = _read_window(x_ptr, row, stride_xm, 0, N, BLOCK_N, V)
    x = _finish_load(xr, xr, False, OUT_TY)
    xe = _finish_load(er, er, False, OUT_TY)
    m, m_e, e, ee, s = _chunk_exps(x, xe, True, FAST_EXP)
    if OP == 2:
        tl.store(out_ptr + row, _cvt(tl.log(s) + m_e, OUT_TY))
    else:
        scale = _finish_scale(m, s, OP)
        if OP == 0:
            y = e * scale
            ye = ee * scale
        else:
            y = (x - m) - scale
            ye = (xe - m) - scale
        _write_window(out_ptr, row, stride_om, 0, N, _cvt(y, OUT_TY), _cvt(ye, OUT_TY), BLOCK_N, V)


@triton.jit
def _split_pipe(x_ptr, out_ptr, mask_ptr, slot_ptr, M, N, stride_xm, stride_om, stride_mm, grp, c, n_groups,
                n_split, tag, cols, OP: tl.constexpr, HAS_MASK: tl.constexpr, PHASE: tl.constexpr, OUT_TY,
                FAST_EXP: tl.constexpr, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # PATH 3: the split path, pipelined one row ahead and lean on registers. Per iteration a
    # program publishes the partial of its NEXT row before it waits for THIS row's partials (so
    # the wait is normally over before it starts), then prefetches the row after next (prefetched
    # before that publish, as the norms' one-launch backward does, the family's few and long rows
    # took 0.93-1.10x the time on an H100, longer at 36 of 54 calls), and rebuilds this row's
    # output from the raw (input-dtype) chunk instead of holding fp32 values and exps across the
    # wait: three raw chunks live, and no fp32 tile outlives its use.
    xr, kr, er = _chunk_load(x_ptr, mask_ptr, grp, stride_xm, stride_mm, c, cols, M, N, HAS_MASK, ALIGN, BLOCK_N, V)
    if PHASE != 2:
        if grp < M:
            m_c, s_c = _partial(xr, kr, er, HAS_MASK, OUT_TY, ALIGN, FAST_EXP)
            _publish(slot_ptr, 64 + tl.cast(grp, tl.int64) * n_split * 2 + c * 2, m_c, s_c, tag)
    xr_n, kr_n, er_n = _chunk_load(x_ptr, mask_ptr, grp + n_groups, stride_xm, stride_mm, c, cols, M, N, HAS_MASK,
                                   ALIGN, BLOCK_N, V)
    for row in range(grp, M, n_groups):
        nrow = row + n_groups
        if PHASE != 2:
            if nrow < M:
                m_n, s_n = _partial(xr_n, kr_n, er_n, HAS_MASK, OUT_TY, ALIGN, FAST_EXP)
                _publish(slot_ptr, 64 + tl.cast(nrow, tl.int64) * n_split * 2 + c * 2, m_n, s_n, tag)
        xr_nn, kr_nn, er_nn = _chunk_load(x_ptr, mask_ptr, nrow + n_groups, stride_xm, stride_mm, c, cols, M, N,
                                          HAS_MASK, ALIGN, BLOCK_N, V)
        if PHASE != 1:
            row64 = tl.cast(row, tl.int64)
            big_m, big_e, s = _gather(slot_ptr, 64 + row64 * n_split * 2, n_split, tag)
            scale = _finish_scale(big_m, s, OP)
            y = _rebuilt(_finish_load(xr, kr, HAS_MASK, OUT_TY), big_m, big_e, scale, OP, FAST_EXP)
            if ALIGN:
                ye = _rebuilt(_finish_load(er, er, False, OUT_TY), big_m, big_e, scale, OP, FAST_EXP)
                _write_window(out_ptr, row, stride_om, c, N, _cvt(y, OUT_TY), _cvt(ye, OUT_TY), BLOCK_N, V)
            else:
                tl.store(out_ptr + row64 * stride_om + cols, _cvt(y, OUT_TY), mask=cols < N,
                         eviction_policy="evict_first")
        xr, kr, er = xr_n, kr_n, er_n
        xr_n, kr_n, er_n = xr_nn, kr_nn, er_nn


@triton.jit(do_not_specialize=["N_BUCKET"])
def _softmax_kernel(
    x_ptr, out_ptr, mask_ptr, ws_ptr, sync_ptr, slot_ptr,
    M, N, stride_xm, stride_om, stride_mm,
    N_BUCKET,  # noqa: ARG001 - autotune key only (bucketed row length)
    OP: tl.constexpr, HAS_MASK: tl.constexpr, PHASE: tl.constexpr,
    PATH: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, SPLIT: tl.constexpr,
    NW: tl.constexpr, NS: tl.constexpr,  # mirrors of num_warps/num_stages (the grid; NS: staged chunks)
    FAST_EXP: tl.constexpr = 0,
    ALIGN: tl.constexpr = 0,
    EVEN: tl.constexpr = 0,
):
    OUT_TY = out_ptr.dtype.element_ty
    V: tl.constexpr = 128 // x_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes (ALIGN)
    tl.static_assert(not (ALIGN and HAS_MASK), "ALIGN reads rows without a mask")
    pid = tl.program_id(0)
    if PATH == 4 and NS > 1:
        tl.static_assert(not ALIGN, "staged chunks read rows with plain loads")
        _lse_chunks_staged(x_ptr, out_ptr, ws_ptr, sync_ptr, M, N, stride_xm, BLOCK_N, OUT_TY, FAST_EXP, EVEN, NS)
    elif PATH == 4:
        _lse_chunks(x_ptr, out_ptr, ws_ptr, sync_ptr, M, N, stride_xm, BLOCK_N, OUT_TY, FAST_EXP, ALIGN, EVEN, V)
    elif PATH == 0 and ALIGN:  # one row a program (the launcher's condition), through its window
        _window_row(x_ptr, out_ptr, pid, N, stride_xm, stride_om, OP, OUT_TY, FAST_EXP, BLOCK_N, V)
    elif PATH == 0:
        # ---- whole rows in registers, ROWS rows per program -----------------------------------
        rows = pid * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK_N)
        rmask = rows < M
        valid = rmask[:, None] & (cols < N)[None, :]
        rows64 = rows.to(tl.int64)
        x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=valid, other=float("-inf"),
                    eviction_policy="evict_first")
        x = _cvt(x, OUT_TY).to(tl.float32)
        if HAS_MASK:
            keep = tl.load(mask_ptr + rows64[:, None] * stride_mm + cols[None, :], mask=valid, other=0,
                           eviction_policy="evict_first")
            x = tl.where(keep != 0, x, float("-inf"))
        m = tl.max(x, 1)
        m_e = _eff(m)
        e = _exp(x - m_e[:, None], FAST_EXP)
        s = tl.sum(e, 1)
        if OP == 2:
            tl.store(out_ptr + rows, _cvt(tl.log(s) + m_e, OUT_TY), mask=rmask)
        else:
            optr = out_ptr + rows64[:, None] * stride_om + cols[None, :]
            if OP == 0:
                y = e * _finish_scale(m, s, OP)[:, None]
            else:
                y = (x - m[:, None]) - _finish_scale(m, s, OP)[:, None]
            tl.store(optr, _cvt(y, OUT_TY), mask=valid, eviction_policy="evict_first")
    else:
        # ---- persistent programs, a row cut into n_split segments -----------------------------
        nprog = tl.num_programs(0)
        nblocks = tl.cdiv(N, BLOCK_N)
        if PATH >= 2:
            bps = 1
            n_split = nblocks
        else:
            ns0 = tl.minimum(nblocks, SPLIT)
            bps = tl.cdiv(nblocks, ns0)
            n_split = tl.cdiv(nblocks, bps)
        n_groups = nprog // n_split
        EXCHANGE: tl.constexpr = OP != 2  # softmax/log_softmax: every segment needs the row's stats
        tid = pid
        tag = pid.to(tl.int64) * 0 + 1  # the two-launch (interpreter) split uses tag 1
        if EXCHANGE and PHASE == 0:
            if n_split > 1:
                tid, tag = _ticket(slot_ptr, nprog)
        grp = tid // n_split
        c = tid % n_split
        lo = c * bps
        hi = tl.minimum(lo + bps, nblocks)
        cols = c * BLOCK_N + tl.arange(0, BLOCK_N)  # PATH 2/3: this program's chunk
        if PATH == 3:
            _split_pipe(x_ptr, out_ptr, mask_ptr, slot_ptr, M, N, stride_xm, stride_om, stride_mm, grp, c, n_groups,
                        n_split, tag, cols, OP, HAS_MASK, PHASE, OUT_TY, FAST_EXP, ALIGN, BLOCK_N, V)
        else:
            if PATH == 2:
                # the first row's chunk; each iteration then prefetches the next row's
                x_nxt, k_nxt, xe_nxt = _chunk_load(x_ptr, mask_ptr, grp, stride_xm, stride_mm, c, cols, M, N,
                                                   HAS_MASK, ALIGN, BLOCK_N, V)
            for row in range(grp, M, n_groups):
                row64 = tl.cast(row, tl.int64)
                xoff = row64 * stride_xm
                moff = row64 * stride_mm
                wbase = row * n_split
                sbase = 64 + row64 * n_split * 2  # this row's partials in the slot buffer
                if PATH == 2:
                    x = _finish_load(x_nxt, k_nxt, HAS_MASK, OUT_TY)
                    xe = _finish_load(xe_nxt, xe_nxt, False, OUT_TY)
                    m_c, mc_e, e, ee, s_c = _chunk_exps(x, xe, ALIGN, FAST_EXP)
                else:
                    if PHASE != 2:
                        m_c, s_c = _seg_stats(x_ptr, mask_ptr, xoff, moff, N, lo, hi, HAS_MASK, OUT_TY, BLOCK_N,
                                              FAST_EXP)
                    else:
                        m_c = tl.full([], float("-inf"), tl.float32)
                        s_c = tl.full([], 0.0, tl.float32)
                big_m = m_c
                big_e = _eff(m_c)
                s = s_c
                if EXCHANGE:
                    if n_split > 1:
                        if PHASE != 2:
                            _publish(slot_ptr, sbase + c * 2, m_c, s_c, tag)
                if PATH == 2:
                    # the next row's chunk goes out now, to land while this row's partials meet
                    x_nxt, k_nxt, xe_nxt = _chunk_load(x_ptr, mask_ptr, row + n_groups, stride_xm, stride_mm, c,
                                                       cols, M, N, HAS_MASK, ALIGN, BLOCK_N, V)
                if OP == 2:
                    # logsumexp: no waiting; the last segment to arrive combines and writes
                    if n_split == 1:
                        tl.store(out_ptr + row, _cvt(tl.log(s) + big_e, OUT_TY))
                    else:
                        tl.store(ws_ptr + (wbase + c) * 2, m_c)
                        tl.store(ws_ptr + (wbase + c) * 2 + 1, s_c)
                        tl.debug_barrier()
                        old = tl.atomic_add(sync_ptr + _ROW_OFF + row, 1, sem="acq_rel")
                        if old == n_split - 1:
                            big_m, big_e, s = _combine(ws_ptr, wbase, n_split)
                            tl.store(out_ptr + row, _cvt(tl.log(s) + big_e, OUT_TY))
                            tl.atomic_xchg(sync_ptr + _ROW_OFF + row, 0, sem="relaxed")
                elif PHASE != 1:
                    if n_split > 1:
                        big_m, big_e, s = _gather(slot_ptr, sbase, n_split, tag)
                    scale = _finish_scale(big_m, s, OP)
                    if PATH == 2:
                        if OP == 0:
                            # exp(x - M) / S = exp(x - eff(m_c)) * exp(eff(m_c) - eff(M)) / S
                            f = tl.where(m_c == float("-inf"), 0.0 * scale, tl.exp(mc_e - big_e) * scale)
                            y = e * f
                        else:
                            y = (x - big_m) - scale
                        if ALIGN:
                            if OP == 0:
                                ye = ee * f
                            else:
                                ye = (xe - big_m) - scale
                            _write_window(out_ptr, row, stride_om, c, N, _cvt(y, OUT_TY), _cvt(ye, OUT_TY), BLOCK_N, V)
                        else:
                            tl.store(out_ptr + row64 * stride_om + cols, _cvt(y, OUT_TY), mask=cols < N,
                                     eviction_policy="evict_first")
                    else:
                        # second pass, newest blocks first (the likeliest L2 hits), next block in flight
                        cols0 = tl.arange(0, BLOCK_N)
                        xn, kn = _load_raw(x_ptr, mask_ptr, xoff, moff, (hi - 1) * BLOCK_N + cols0,
                                           tl.where(lo < hi, N, 0), HAS_MASK, "evict_first")
                        for i in range(0, hi - lo):
                            b = hi - 1 - i
                            xb = _finish_load(xn, kn, HAS_MASK, OUT_TY)
                            pb = tl.maximum(b - 1, lo)
                            xn, kn = _load_raw(x_ptr, mask_ptr, xoff, moff, pb * BLOCK_N + cols0,
                                               tl.where(b - 1 >= lo, N, 0), HAS_MASK, "evict_first")
                            if OP == 0:
                                y = _exp(xb - big_m, FAST_EXP) * scale
                            else:
                                y = (xb - big_m) - scale
                            bc = b * BLOCK_N + cols0
                            tl.store(out_ptr + row64 * stride_om + bc, _cvt(y, OUT_TY), mask=bc < N,
                                     eviction_policy="evict_first")

