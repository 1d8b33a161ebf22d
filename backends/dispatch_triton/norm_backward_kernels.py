"""The Triton JIT kernels of the rms_norm and layer_norm backward (host side in
:mod:`dispatch_triton.norm_backward`).

``_norm_bwd`` (backward of rows held in registers): a persistent grid of G programs (as many as
are resident at once), each over tiles ``pid, pid + G, ...`` of ``ROWS`` rows; ``w`` is loaded
once per program. Per row it recomputes the statistics from the ``x`` in registers (no extra
read) and writes ``dx``; it accumulates its rows' ``dy * xhat`` (dweight) and ``dy`` (dbias) in
fp32 registers and writes them once, into its row of an fp32 partials buffer ``[G, N]`` (dbias's
``p_off_b`` further on), which ``_column_sum`` then reduces over G in a fixed order:
deterministic, run to run.

``_norm_bwd_sums`` then ``_norm_bwd_split`` (backward of long rows): two launches over a grid
(row groups, chunks of ``BLOCK_N`` columns). Phase 1: per row and chunk, four partials into a
workspace (``_bwd_partial``: ``sum d``, ``sum g`` and, about the chunk's own mean of d, ``M2`` and
``sum g * (d - mean)``, with ``d = x - shift``, ``g = dy * w``; merged by Chan et al.'s rule in
``_merge4``, so that no difference of large sums cancels). Phase 2 (programs, rows and
chunks in the mirror order, so its first reads hit L2): per row, the chunks' sums combined into
the statistics and the two projections ``dx`` needs, ``dx`` written, and the chunk's dweight and
dbias accumulated over the group's rows in registers, written once per program.

The one-launch variant of long rows (GPU only), which takes its per-chunk arithmetic and its
dweight/dbias partials from here: :mod:`dispatch_triton.norm_backward_coop`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .exchange import _INTERPRETED, _epoch_tag, _ticket
from .row_math import _cvt, _ld
from .norm_kernels import _tile_ptrs
from .norm_stats import _centred, _ill_placed, _part_counts, _row_shift, _stats, _sum2, _sum4


@triton.jit
def _rows_bwd(x, dy, w, mask, N, eps, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr):
    # a tile of whole rows (fp32, zeros where masked off): (dx, xhat), the statistics recomputed;
    # xhat is 0 where masked off
    if IS_RMS:
        xc = x
    else:
        xc = tl.where(mask, x - (tl.sum(x, 1) / N)[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / N + eps)
    xhat = tl.where(mask, xc * rstd[:, None], 0.0)  # rows past M: 0 * inf with eps=0 (NaN in dweight)
    if HAS_WEIGHT:
        g = dy * w.to(tl.float32)[None, :]
    else:
        g = dy
    c1 = tl.sum(g * xhat, 1) / N
    if IS_RMS:
        dx = rstd[:, None] * (g - xhat * c1[:, None])
    else:
        c2 = tl.sum(g, 1) / N
        dx = rstd[:, None] * (g - c2[:, None] - xhat * c1[:, None])
    return dx, xhat


@triton.jit
def _store_partials(p_ptr, p_off_b, row, N, cols, cmask, acc_w, acc_b, WANT_DW: tl.constexpr,
                    WANT_DB: tl.constexpr):
    # a program's dweight/dbias partials into its row of the fp32 partials buffer (dbias's p_off_b
    # further on), which _column_sum reduces
    poff = tl.cast(row, tl.int64) * N
    if WANT_DW:
        tl.store(p_ptr + poff + cols, acc_w, mask=cmask)
    if WANT_DB:
        tl.store(p_ptr + p_off_b + poff + cols, acc_b, mask=cmask)


_FENCE = tl.constexpr("fence.acq_rel.gpu;\nmov.u32 $0, $1;")  # this thread's stores ordered GPU-wide


@triton.jit
def _fence():
    # every thread's earlier stores ordered before its later accesses, GPU-wide (the interpreter
    # runs programs one after another: nothing to order)
    if not _INTERPRETED:
        tl.inline_asm_elementwise(_FENCE, "=r,r", [tl.full([], 0, tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _finish_columns(p_ptr, p_off_b, o0_ptr, o1_ptr, ticket_ptr, NPROG, G, N, WANT_DW: tl.constexpr,
                    WANT_DB: tl.constexpr, FINISH: tl.constexpr, CW: tl.constexpr, BG: tl.constexpr):
    # The second stage in the same launch: each of the NPROG programs, its partials written, takes a
    # ticket (exchange._ticket on the word at ticket_ptr: the last one moves its epoch on); the
    # FINISH programs holding the last tickets wait for the epoch to move (every row written), then
    # each sums slices j, j + FINISH, ... of CW columns over the G rows of partials, BG rows a step,
    # in a fixed order (the same bits every call) and writes dweight/dbias in their dtype. Only
    # the programs holding the last FINISH tickets wait, and only for tickets not yet taken; every
    # other program exits, so the programs still to come find room once FINISH programs fit on
    # the device at once (the rows' launch: FINISH <= G resident; the exchange: all resident).
    _fence()
    tl.debug_barrier()
    tid, tag = _ticket(ticket_ptr, NPROG, True)
    j = tid - (NPROG - FINISH)
    if j >= 0:
        cur = tl.atomic_add(ticket_ptr, 0, sem="acquire")
        while _epoch_tag(cur) == tag:
            cur = tl.atomic_add(ticket_ptr, 0, sem="acquire")
        tl.debug_barrier()
        for sl in range(j, tl.cdiv(N, CW), FINISH):
            if WANT_DW:
                _sum_rows(p_ptr, o0_ptr, G, N, sl, CW, BG)
            if WANT_DB:  # dbias alone: o1 is o0 and p_off_b 0 (the host passes the wanted ones)
                _sum_rows(p_ptr + p_off_b, o1_ptr, G, N, sl, CW, BG)


@triton.jit
def _sum_rows(p_ptr, out_ptr, G, N, j, CW: tl.constexpr, BG: tl.constexpr, CG: tl.constexpr = True):
    # out[cols] = the sum over the G rows of the fp32 partials p[g, cols] (cols: the j-th slice of
    # CW), BG rows a step, in a fixed order, in out's dtype; CG: read from L2 (.cg: other programs
    # of the launch wrote them)
    if CG:
        cache: tl.constexpr = ".cg"
    else:
        cache: tl.constexpr = ""
    cols = j * CW + tl.arange(0, CW)
    cmask = cols < N
    acc = tl.zeros([BG, CW], tl.float32)
    for g0 in range(0, G, BG):
        g = g0 + tl.arange(0, BG)
        acc += tl.load(p_ptr + g.to(tl.int64)[:, None] * N + cols[None, :], mask=(g < G)[:, None] & cmask[None, :],
                       other=0.0, cache_modifier=cache)
    tl.store(out_ptr + cols, _cvt(tl.sum(acc, 0), out_ptr.dtype.element_ty), mask=cmask)


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, o0_ptr, o1_ptr, slot_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, EVICT: tl.constexpr = True, PREFETCH: tl.constexpr = False,
    STAGES: tl.constexpr = 1, FINISH: tl.constexpr = 0, FINISH_BG: tl.constexpr = 1,
):
    # rows held in registers; dweight partials at p_ptr[pid, :], dbias partials p_off_b further on;
    # EVICT: x and dy loaded evict_first (read once); PREFETCH: the program's next tile is loaded
    # before the current one is worked on (two tiles in flight, in registers); else the tile loop
    # is a tl.range of STAGES stages, which Triton pipelines (with STAGES > 1 the loads of the
    # next STAGES - 1 tiles go to shared memory asynchronously, not to registers). FINISH > 0: the
    # partials' column sums in this launch by the FINISH programs that finish last
    # (_finish_columns; o0/o1: the wanted ones of dweight and dbias, slot_ptr: the ticket word),
    # else by _column_sum after it
    DX_TY = dx_ptr.dtype.element_ty
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    w = 0.0
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=cmask, other=0.0)
    acc_w = tl.zeros([BLOCK_N], tl.float32)
    acc_b = tl.zeros([BLOCK_N], tl.float32)
    if PREFETCH:  # a tile past the last one loads nothing (its rows are masked off)
        xp, mask = _tile_ptrs(x_ptr, pid, ROWS, cols, cmask, M, stride_xm)
        dyp, mask = _tile_ptrs(dy_ptr, pid, ROWS, cols, cmask, M, stride_dym)
        x_next = _ld(xp, mask, 1 if EVICT else 0)
        dy_next = _ld(dyp, mask, 1 if EVICT else 0)
    for t in tl.range(pid, tl.cdiv(M, ROWS), G, num_stages=STAGES):  # STAGES 1 with PREFETCH (the host checks)
        if PREFETCH:
            x = x_next.to(tl.float32)
            dy = dy_next.to(tl.float32)
            xp, mask = _tile_ptrs(x_ptr, t + G, ROWS, cols, cmask, M, stride_xm)
            dyp, mask = _tile_ptrs(dy_ptr, t + G, ROWS, cols, cmask, M, stride_dym)
            x_next = _ld(xp, mask, 1 if EVICT else 0)
            dy_next = _ld(dyp, mask, 1 if EVICT else 0)
        else:
            xp, mask = _tile_ptrs(x_ptr, t, ROWS, cols, cmask, M, stride_xm)
            dyp, mask = _tile_ptrs(dy_ptr, t, ROWS, cols, cmask, M, stride_dym)
            x = _ld(xp, mask, 1 if EVICT else 0).to(tl.float32)
            dy = _ld(dyp, mask, 1 if EVICT else 0).to(tl.float32)
        dxp, mask = _tile_ptrs(dx_ptr, t, ROWS, cols, cmask, M, stride_dxm)
        dx, xhat = _rows_bwd(x, dy, w, mask, N, eps, IS_RMS, HAS_WEIGHT)
        tl.store(dxp, _cvt(dx, DX_TY), mask=mask)
        if WANT_DW:
            acc_w += tl.sum(dy * xhat, 0)
        if WANT_DB:
            acc_b += tl.sum(dy, 0)
    _store_partials(p_ptr, p_off_b, pid, N, cols, cmask, acc_w, acc_b, WANT_DW, WANT_DB)
    if FINISH > 0:
        _finish_columns(p_ptr, p_off_b, o0_ptr, o1_ptr, slot_ptr, G, G, N, WANT_DW, WANT_DB, FINISH,
                        BLOCK_N // FINISH, FINISH_BG)


@triton.jit
def _column_sum(p_ptr, out0_ptr, out1_ptr, G, N, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    # out_k[n] = sum over g of p[k, g, n], in a fixed order (the second stage of dweight/dbias):
    # k = program_id(1), 0 or 1 (the wanted ones of dweight and dbias, in that order)
    k = tl.program_id(1)
    base = p_ptr + tl.cast(k, tl.int64) * G * N
    if k == 0:
        _sum_rows(base, out0_ptr, G, N, tl.program_id(0), BLOCK_N, BLOCK_G, False)
    else:
        _sum_rows(base, out1_ptr, G, N, tl.program_id(0), BLOCK_N, BLOCK_G, False)


@triton.jit
def _chunk_start(w_ptr, c, N, HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr):
    # chunk c of a long row: its columns and mask, its weight (fp32; 1 without one) and two zeroed
    # accumulators (dweight, dbias)
    cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    else:
        w = tl.full([BLOCK_N], 1.0, tl.float32)
    return cols, cmask, w, tl.zeros([BLOCK_N], tl.float32), tl.zeros([BLOCK_N], tl.float32)


@triton.jit
def _bwd_partial(x, g, cmask, shift, nc, IS_RMS: tl.constexpr):
    # a chunk's four partials over its nc elements (fp32 x and g = dy * w, zeros where masked off):
    # layer_norm, with d = x - shift and m the chunk's mean of d, (sum d, sum (d - m)^2,
    # sum g (d - m), sum g): one reduction, a second about m where the shift is ill placed (see
    # norm_stats._ill_placed); rms_norm (0, sum x^2, sum g x, sum g)
    if IS_RMS:
        m2, sgd = _sum2(x * x, g * x)
        return tl.full([], 0.0, tl.float32), m2, sgd, tl.sum(g, 0)
    d = tl.where(cmask, x - shift, 0.0)
    s, q, sgd, sg = _sum4(d, d * d, g * d, g)
    m = s / nc
    m2 = _centred(s, q, nc)
    sgm = sgd - m * sg
    if _ill_placed(s, q, nc):  # assigned, not returned, in the branch (see norm_stats._chunk_partial)
        e = tl.where(cmask, d - m, 0.0)
        m2, sgm = _sum2(e * e, g * e)
    return s, m2, sgm, sg


@triton.jit
def _merge4(s, m2, sgd, sg, n, N, IS_RMS: tl.constexpr):
    # a row's (sum d, M2, sum g (x - mean), sum g) from its chunks' partials (vectors, zeros past
    # the last chunk; n: the chunks' element counts, N in all): Chan et al.'s rule, and
    # sum g (d - m_c) carried to the row's mean by (m_c - mean) sum_c g, in two reductions (the
    # row's sums first, then the deviations' terms); rms_norm: plain sums
    if IS_RMS:
        m2t, sgdt = _sum2(m2, sgd)
        return tl.sum(s, 0), m2t, sgdt, tl.sum(sg, 0)
    total, sgt = _sum2(s, sg)
    dev = tl.where(n > 0, s / tl.maximum(n, 1.0) - total / tl.maximum(N, 1).to(tl.float32), 0.0)
    m2t, sgdt = _sum2(m2 + n * dev * dev, sgd + dev * sg)
    return total, m2t, sgdt, sgt


@triton.jit
def _chunk_dx(x, g, cmask, s1, m2, sgd, sg, shift, N, eps, IS_RMS: tl.constexpr):
    # (dx, xhat) of a chunk from the row's merged partials (sum d, M2, sum g (x - mean), sum g)
    mean, rstd = _stats(s1, m2, shift, N, eps, IS_RMS)
    c1 = rstd * sgd / N  # sum g * xhat / N
    xhat = tl.where(cmask, (x - mean) * rstd, 0.0)
    if IS_RMS:
        dx = rstd * (g - xhat * c1)
    else:
        dx = rstd * (g - sg / N - xhat * c1)
    return dx, xhat


@triton.jit
def _saved_stats(st_ptr, row, M, IS_RMS: tl.constexpr):
    # (mean, rstd) of a row as the forward stored them (norm_kernels._save_stats; rms_norm's mean:
    # 0); zeros past the last row
    r = tl.cast(row, tl.int64)
    rstd = tl.load(st_ptr + r, mask=row < M, other=0.0)
    if IS_RMS:
        return rstd * 0.0, rstd
    else:
        return tl.load(st_ptr + M + r, mask=row < M, other=0.0), rstd


@triton.jit
def _saved_partial(x, g, cmask, mean, rstd, IS_RMS: tl.constexpr):
    # a chunk's (sum g * xhat, sum g) about the row's saved statistics (rms_norm: sum g unused, 0)
    xhat = tl.where(cmask, (x - mean) * rstd, 0.0)
    if IS_RMS:
        return tl.sum(g * xhat, 0), tl.full([], 0.0, tl.float32)
    else:
        return _sum2(g * xhat, g)


@triton.jit
def _saved_dx(x, g, cmask, mean, rstd, sgx, sg, N, IS_RMS: tl.constexpr):
    # (dx, xhat) of a chunk from the row's saved statistics and its sums of g * xhat and g
    xhat = tl.where(cmask, (x - mean) * rstd, 0.0)
    if IS_RMS:
        dx = rstd * (g - xhat * (sgx / N))
    else:
        dx = rstd * (g - sg / N - xhat * (sgx / N))
    return dx, xhat


@triton.jit
def _split_bwd(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, ws_ptr, st_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    PHASE: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr, EV: tl.constexpr,
    PREFETCH: tl.constexpr, SAVED: tl.constexpr,
):
    # The backward of long rows, over a grid (row groups GR, chunks): program (rg, c) takes chunk c
    # of rows rg, rg + GR, ... The fp32 workspace holds 4 sums per row and chunk (PHASE 1):
    # sum d, sum d^2, sum g * d, sum g, with d = x - x[row, 0] (x itself for rms_norm), g = dy * w.
    # PHASE 2 writes dx and the group's dweight/dbias partials of the chunk (p_ptr[rg, chunk]).
    # EV: the loads' L2 eviction hint (see _ld; the host's HINTS: phase 1 evict_last, so that
    # phase 2 finds x and dy in L2, and phase 2 evict_first); PREFETCH: the program's next row is
    # loaded before it works on the current one. SAVED: each row's statistics come from the
    # forward (st_ptr, _saved_stats), and the workspace's last two sums of a chunk are
    # sum g * xhat and sum g (_saved_partial), which phase 2 adds up.
    DX_TY = dx_ptr.dtype.element_ty
    rg = tl.program_id(0)
    c = tl.program_id(1)
    GR = tl.num_programs(0)
    S = tl.num_programs(1)
    if PHASE == 2:  # the mirror of phase 1: what it read last (still in L2) is read first
        rg = GR - 1 - rg
        c = S - 1 - c
    cols, cmask, w, acc_w, acc_b = _chunk_start(w_ptr, c, N, HAS_WEIGHT, BLOCK_N)
    j = tl.arange(0, CHUNKS_P2)
    jmask = j < S
    count = tl.cdiv(M - rg, GR)
    if PREFETCH:  # the first row's chunk (a count of 0 loads nothing)
        if PHASE == 2:
            row0 = rg + (count - 1) * GR
        else:
            row0 = rg
        r0 = tl.cast(tl.maximum(row0, 0), tl.int64)
        nmask = cols < tl.where(count > 0, N, 0)
        x_next = _ld(x_ptr + r0 * stride_xm + cols, nmask, EV)
        dy_next = _ld(dy_ptr + r0 * stride_dym + cols, nmask, EV)
    for i in range(0, count):
        if PHASE == 2:
            row = rg + (count - 1 - i) * GR
        else:
            row = rg + i * GR
        r64 = tl.cast(row, tl.int64)
        xoff = r64 * stride_xm
        if PREFETCH:
            x = x_next.to(tl.float32)
            dy = dy_next.to(tl.float32)
            if PHASE == 2:
                nrow = row - GR
            else:
                nrow = row + GR
            n64 = tl.cast(tl.maximum(nrow, 0), tl.int64)
            nmask = cols < tl.where(i + 1 < count, N, 0)
            x_next = _ld(x_ptr + n64 * stride_xm + cols, nmask, EV)
            dy_next = _ld(dy_ptr + n64 * stride_dym + cols, nmask, EV)
        else:
            x = _ld(x_ptr + xoff + cols, cmask, EV).to(tl.float32)
            dy = _ld(dy_ptr + r64 * stride_dym + cols, cmask, EV).to(tl.float32)
        if SAVED:
            mean, rstd = _saved_stats(st_ptr, row, M, IS_RMS)
        else:
            shift = _row_shift(x_ptr, xoff, N, IS_RMS)
        if HAS_WEIGHT:
            g = dy * w
        else:
            g = dy
        wbase = ws_ptr + r64 * S * 4
        if SAVED:
            if PHASE == 1:
                sgx, sg = _saved_partial(x, g, cmask, mean, rstd, IS_RMS)
                tl.store(wbase + c * 4 + 2, sgx)
                tl.store(wbase + c * 4 + 3, sg)
            else:
                sgx = tl.sum(tl.load(wbase + j * 4 + 2, mask=jmask, other=0.0), 0)
                sg = tl.sum(tl.load(wbase + j * 4 + 3, mask=jmask, other=0.0), 0)
                dx, xhat = _saved_dx(x, g, cmask, mean, rstd, sgx, sg, N, IS_RMS)
        elif PHASE == 1:
            s1, m2, sgd, sg = _bwd_partial(x, g, cmask, shift, tl.maximum(_part_counts(c, N, BLOCK_N), 1.0), IS_RMS)
            tl.store(wbase + c * 4, s1)
            tl.store(wbase + c * 4 + 1, m2)
            tl.store(wbase + c * 4 + 2, sgd)
            tl.store(wbase + c * 4 + 3, sg)
        else:
            s1, m2, sgd, sg = _merge4(tl.load(wbase + j * 4, mask=jmask, other=0.0),
                                      tl.load(wbase + j * 4 + 1, mask=jmask, other=0.0),
                                      tl.load(wbase + j * 4 + 2, mask=jmask, other=0.0),
                                      tl.load(wbase + j * 4 + 3, mask=jmask, other=0.0),
                                      tl.where(jmask, _part_counts(j, N, BLOCK_N), 0.0), N, IS_RMS)
            dx, xhat = _chunk_dx(x, g, cmask, s1, m2, sgd, sg, shift, N, eps, IS_RMS)
        if PHASE == 2:
            tl.store(dx_ptr + r64 * stride_dxm + cols, _cvt(dx, DX_TY), mask=cmask)
            if WANT_DW:
                acc_w += dy * xhat
            if WANT_DB:
                acc_b += dy
    if PHASE == 2:
        _store_partials(p_ptr, p_off_b, rg, N, cols, cmask, acc_w, acc_b, WANT_DW, WANT_DB)


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd_sums(
    x_ptr, ws_ptr, dy_ptr, w_ptr, st_ptr,
    M, N, stride_xm, stride_dym, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr,
    EV: tl.constexpr = 0, PREFETCH: tl.constexpr = False, SAVED: tl.constexpr = False,
):
    # phase 1 of the long-row backward: the partials of each row and chunk into ws
    _split_bwd(x_ptr, x_ptr, dy_ptr, w_ptr, ws_ptr, ws_ptr, st_ptr, M, N, stride_xm, stride_dym, 0, 0, eps,
               IS_RMS, HAS_WEIGHT, False, False, 1, BLOCK_N, CHUNKS_P2, EV, PREFETCH, SAVED)


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd_split(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, ws_ptr, st_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr, EV: tl.constexpr = 0, PREFETCH: tl.constexpr = False,
    SAVED: tl.constexpr = False,
):
    # phase 2 of the long-row backward: dx and the dweight/dbias partials
    _split_bwd(x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, ws_ptr, st_ptr, M, N, stride_xm, stride_dym, stride_dxm,
               p_off_b, eps, IS_RMS, HAS_WEIGHT, WANT_DW, WANT_DB, 2, BLOCK_N, CHUNKS_P2, EV, PREFETCH, SAVED)
