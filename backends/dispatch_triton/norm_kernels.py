"""The Triton JIT kernels of rms_norm and layer_norm, forward and backward, over rows of N elements.

A row is N consecutive elements (the normalized dims, dense); rows are ``stride_xm`` apart. All
arithmetic is in fp32; results are rounded once to the output's dtype.

``_norm_fwd`` (forward), paths chosen by constexprs:

* ``ONE_PASS`` (``BLOCK_N >= N``): tiles of ``ROWS`` whole rows held in registers: read once,
  written once. A program per tile, or (``PERSIST``) a persistent grid of G programs walking
  tiles ``pid, pid + G, ...`` that load the next tile before working on the current one, so a
  program always has a load in flight. layer_norm's variance is the two-pass one, over the
  centred values in registers.
* chunked, ``PHASE`` 0: one program per row walks it in ``BLOCK_N`` chunks twice (statistics, then
  the output, newest chunks first, so the second read mostly hits L2).
* split, ``PHASE`` 1 then 2 (two launches): a row is cut into ``SPLIT`` segments, one program each,
  so that a few long rows still fill the device. Phase 1 writes each segment's partial sums to a
  workspace, phase 2 combines a row's partials (in a fixed order) and writes its segment; phase 2
  walks the programs and chunks in the mirror order of phase 1, so its first reads hit L2.

Two options, off by default (config keys of the same names; benchmarks/sweep_norm_configs.py
compares them): ``PREFETCH`` (chunked and split paths: the next chunk's load is issued before the
current chunk is reduced or written, two chunks in flight per program instead of one, as the
persistent one-pass grid does with tiles) and ``HINTS`` (L2 eviction hints: ``y`` stored
evict_first; on the chunked and split paths the first read of ``x`` evict_last, so that the second
read finds it in L2 rather than in HBM).

Statistics of a chunked row are shifted sums: ``d = x - x[0]``, ``sum d`` and ``sum d^2`` (so
layer_norm's variance does not cancel catastrophically for rows far from zero); rms_norm needs
only ``sum x^2``.

``_norm_bwd`` (backward of rows held in registers): a persistent grid of G programs (as many as
are resident at once), each over tiles ``pid, pid + G, ...`` of ``ROWS`` rows; ``w`` is loaded
once per program. Per row it recomputes the statistics from the ``x`` in registers (no extra
read) and writes ``dx``; it accumulates its rows' ``dy * xhat`` (dweight) and ``dy`` (dbias) in
fp32 registers and writes them once, into its row of an fp32 partials buffer ``[G, N]`` (dbias's
``p_off_b`` further on), which ``_column_sum`` then reduces over G in a fixed order:
deterministic, run to run.

``_norm_bwd_sums`` then ``_norm_bwd_split`` (backward of long rows): two launches over a grid
(row groups, chunks of ``BLOCK_N`` columns). Phase 1: per row and chunk, four sums (``sum d``, ``sum d^2``,
``sum g * d``, ``sum g``, with ``g = dy * w``) into a workspace. Phase 2 (programs, rows and
chunks in the mirror order, so its first reads hit L2): per row, the chunks' sums combined into
the statistics and the two projections ``dx`` needs, ``dx`` written, and the chunk's dweight and
dbias accumulated over the group's rows in registers, written once per program.

``HAS_WEIGHT`` / ``HAS_BIAS`` are constexprs that the autotuner's key never sees: an absent
weight or bias is passed as a cached placeholder of the input's dtype, so calls with and without
them share one autotune entry (Triton keys on every tensor argument's dtype).
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import _interpreting

# The interpreter truncates fp32 -> bf16 where the GPU rounds to nearest even: emulate the GPU
_EMU_RNE = tl.constexpr(_interpreting())


@triton.jit
def _to_out(x, TY: tl.constexpr):
    if _EMU_RNE:
        if TY == tl.bfloat16:
            b = x.to(tl.uint32, bitcast=True)
            b = b + 0x7FFF + ((b >> 16) & 1)
            r = (b & 0xFFFF0000).to(tl.float32, bitcast=True)
            x = tl.where(x != x, x, r)
    return x.to(TY)


@triton.jit
def _affine(xhat, w_ptr, b_ptr, cols, cmask, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    y = xhat
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    return y


@triton.jit
def _ld(ptrs, mask, EV: tl.constexpr):
    # a masked load (0 where masked off) with L2 eviction hint EV: 0 none, 1 evict_first, 2 evict_last
    if EV == 1:
        v = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    elif EV == 2:
        v = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_last")
    else:
        v = tl.load(ptrs, mask=mask, other=0.0)
    return v


@triton.jit
def _st(ptrs, v, mask, EV: tl.constexpr):
    # a masked store with L2 eviction hint EV: 0 none, 1 evict_first (the output is not read again)
    if EV == 1:
        tl.store(ptrs, v, mask=mask, eviction_policy="evict_first")
    else:
        tl.store(ptrs, v, mask=mask)


@triton.jit
def _chunk_sums(x_ptr, xoff, shift, N, lo, hi, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr,
                PREFETCH: tl.constexpr = 0, EV: tl.constexpr = 0):
    # (sum d, sum d^2) over chunks [lo, hi) of a row, d = x - shift (x itself for rms_norm);
    # PREFETCH: the next chunk's load is issued before the current one is summed
    cols0 = tl.arange(0, BLOCK_N)
    s1 = tl.zeros([BLOCK_N], tl.float32)
    s2 = tl.zeros([BLOCK_N], tl.float32)
    if PREFETCH:
        ncols = lo * BLOCK_N + cols0
        x_next = _ld(x_ptr + xoff + ncols, (ncols < N) & (ncols < hi * BLOCK_N), EV)
    for c in range(lo, hi):
        cols = c * BLOCK_N + cols0
        cmask = cols < N
        if PREFETCH:
            x = x_next.to(tl.float32)
            ncols = cols + BLOCK_N
            x_next = _ld(x_ptr + xoff + ncols, (ncols < N) & (ncols < hi * BLOCK_N), EV)
        else:
            x = _ld(x_ptr + xoff + cols, cmask, EV).to(tl.float32)
        if IS_RMS:
            s2 += x * x  # sum x unused: not kept
        else:
            d = tl.where(cmask, x - shift, 0.0)
            s1 += d
            s2 += d * d
    return tl.sum(s1, 0), tl.sum(s2, 0)


@triton.jit
def _stats(s1, s2, shift, N, eps, IS_RMS: tl.constexpr):
    # (mean, rstd) of a row from its shifted sums (mean 0 for rms_norm)
    if IS_RMS:
        mean = s1 * 0.0
        var = s2 / N
    else:
        m1 = s1 / N
        mean = shift + m1
        var = tl.maximum(s2 / N - m1 * m1, 0.0)
    return mean, 1.0 / tl.sqrt(var + eps)


@triton.jit
def _row_shift(x_ptr, xoff, IS_RMS: tl.constexpr):
    if IS_RMS:
        return 0.0
    else:
        return tl.load(x_ptr + xoff).to(tl.float32)


@triton.jit
def _tile_ptrs(base, t, ROWS: tl.constexpr, cols, cmask, M, stride):
    # pointers and mask of tile t: rows t * ROWS ... of BLOCK_N columns
    rows = t * ROWS + tl.arange(0, ROWS)
    mask = (rows < M)[:, None] & cmask[None, :]
    return base + rows.to(tl.int64)[:, None] * stride + cols[None, :], mask


@triton.jit
def _rows_out(x, mask, w, b, yptrs, N, eps, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
              HAS_BIAS: tl.constexpr, EV_OUT: tl.constexpr = 0):
    # a tile of whole rows (fp32, zeros where masked off) normalized and stored
    if IS_RMS:
        xc = x
    else:
        xc = tl.where(mask, x - (tl.sum(x, 1) / N)[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / N + eps)
    y = xc * rstd[:, None]
    if HAS_WEIGHT:
        y = y * w.to(tl.float32)[None, :]
    if HAS_BIAS:
        y = y + b.to(tl.float32)[None, :]
    _st(yptrs, _to_out(y, yptrs.dtype.element_ty), mask, EV_OUT)


@triton.jit(do_not_specialize=["M", "N_BUCKET", "eps"])  # M: row counts never recompile
def _norm_fwd(
    x_ptr, y_ptr, w_ptr, b_ptr, ws_ptr,
    M, N, stride_xm, stride_ym, eps,
    N_BUCKET,  # noqa: ARG001 - the autotune key only (bucketed row length)
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, PHASE: tl.constexpr,
    ONE_PASS: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, SPLIT: tl.constexpr,
    PERSIST: tl.constexpr, PREFETCH: tl.constexpr = 0, HINTS: tl.constexpr = 0,
):
    OUT_TY = y_ptr.dtype.element_ty
    pid = tl.program_id(0)
    # HINTS (0 or 1): y stored evict_first (_st's 1); long rows: x's first read evict_last (_ld's 2)
    if ONE_PASS:
        cols = tl.arange(0, BLOCK_N)
        cmask = cols < N
        w = 0.0
        b = 0.0
        if HAS_WEIGHT:
            w = tl.load(w_ptr + cols, mask=cmask, other=0.0)
        if HAS_BIAS:
            b = tl.load(b_ptr + cols, mask=cmask, other=0.0)
        if PERSIST:
            G = tl.num_programs(0)
            ptrs, mask = _tile_ptrs(x_ptr, pid, ROWS, cols, cmask, M, stride_xm)
            x_next = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
            for t in range(pid, tl.cdiv(M, ROWS), G):
                x = x_next
                # the next tile's load is in flight while this one is reduced and written
                nptrs, nmask = _tile_ptrs(x_ptr, t + G, ROWS, cols, cmask, M, stride_xm)
                x_next = tl.load(nptrs, mask=nmask, other=0.0, eviction_policy="evict_first")
                yptrs, mask = _tile_ptrs(y_ptr, t, ROWS, cols, cmask, M, stride_ym)
                _rows_out(x.to(tl.float32), mask, w, b, yptrs, N, eps, IS_RMS, HAS_WEIGHT, HAS_BIAS, HINTS)
        else:
            ptrs, mask = _tile_ptrs(x_ptr, pid, ROWS, cols, cmask, M, stride_xm)
            x = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            yptrs, mask = _tile_ptrs(y_ptr, pid, ROWS, cols, cmask, M, stride_ym)
            _rows_out(x, mask, w, b, yptrs, N, eps, IS_RMS, HAS_WEIGHT, HAS_BIAS, HINTS)
    else:
        row = tl.program_id(0)
        seg = tl.program_id(1)
        if PHASE == 2:
            # the mirror of phase 1's order: what phase 1 read last (still in L2) is re-read first
            row = M - 1 - row
            seg = SPLIT - 1 - seg
        xoff = tl.cast(row, tl.int64) * stride_xm
        yoff = tl.cast(row, tl.int64) * stride_ym
        nchunks = tl.cdiv(N, BLOCK_N)
        per = tl.cdiv(nchunks, SPLIT)
        lo = seg * per
        hi = tl.minimum(lo + per, nchunks)
        shift = _row_shift(x_ptr, xoff, IS_RMS)
        if PHASE == 1:
            s1, s2 = _chunk_sums(x_ptr, xoff, shift, N, lo, hi, IS_RMS, BLOCK_N, PREFETCH, HINTS * 2)
            base = (tl.cast(row, tl.int64) * SPLIT + seg) * 2
            tl.store(ws_ptr + base, s1)
            tl.store(ws_ptr + base + 1, s2)
        else:
            if PHASE == 0:
                s1, s2 = _chunk_sums(x_ptr, xoff, shift, N, 0, nchunks, IS_RMS, BLOCK_N, PREFETCH, HINTS * 2)
            else:
                j = tl.arange(0, SPLIT)
                base = tl.cast(row, tl.int64) * SPLIT * 2
                s1 = tl.sum(tl.load(ws_ptr + base + j * 2), 0)
                s2 = tl.sum(tl.load(ws_ptr + base + j * 2 + 1), 0)
            mean, rstd = _stats(s1, s2, shift, N, eps, IS_RMS)
            if PHASE == 0:
                lo = 0
                hi = nchunks
            cols0 = tl.arange(0, BLOCK_N)
            if PREFETCH:
                ncols = (hi - 1) * BLOCK_N + cols0
                x_next = _ld(x_ptr + xoff + ncols, (ncols < N) & (ncols >= lo * BLOCK_N), 1)
            for i in range(0, hi - lo):
                c = hi - 1 - i  # newest chunks first: the likeliest L2 (or L1) hits
                cols = c * BLOCK_N + cols0
                cmask = cols < N
                if PREFETCH:  # the next (older) chunk's load in flight while this one is written
                    x = x_next.to(tl.float32)
                    ncols = cols - BLOCK_N
                    x_next = _ld(x_ptr + xoff + ncols, (ncols < N) & (ncols >= lo * BLOCK_N), 1)
                else:
                    x = _ld(x_ptr + xoff + cols, cmask, 1).to(tl.float32)
                y = _affine((x - mean) * rstd, w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS)
                _st(y_ptr + yoff + cols, _to_out(y, OUT_TY), cmask, HINTS)


@triton.jit
def _rows_bwd(x, dy, w, mask, N, eps, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr):
    # a tile of whole rows (fp32, zeros where masked off): (dx, xhat), the statistics recomputed
    if IS_RMS:
        xc = x
    else:
        xc = tl.where(mask, x - (tl.sum(x, 1) / N)[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / N + eps)
    xhat = xc * rstd[:, None]
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


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, EVICT: tl.constexpr = True, PREFETCH: tl.constexpr = False,
):
    # rows held in registers; dweight partials at p_ptr[pid, :], dbias partials p_off_b further on;
    # EVICT: x and dy loaded evict_first (read once); PREFETCH: the program's next tile is loaded
    # before the current one is worked on (two tiles in flight)
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
    for t in range(pid, tl.cdiv(M, ROWS), G):
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
        tl.store(dxp, _to_out(dx, DX_TY), mask=mask)
        if WANT_DW:
            acc_w += tl.sum(dy * xhat, 0)
        if WANT_DB:
            acc_b += tl.sum(dy, 0)
    poff = tl.cast(pid, tl.int64) * N
    if WANT_DW:
        tl.store(p_ptr + poff + cols, acc_w, mask=cmask)
    if WANT_DB:
        tl.store(p_ptr + p_off_b + poff + cols, acc_b, mask=cmask)


@triton.jit
def _column_sum(p_ptr, out0_ptr, out1_ptr, G, N, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    # out_k[n] = sum over g of p[k, g, n], in a fixed order (the second stage of dweight/dbias):
    # k = program_id(1), 0 or 1 (the wanted ones of dweight and dbias, in that order)
    k = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    base = p_ptr + tl.cast(k, tl.int64) * G * N
    acc = tl.zeros([BLOCK_G, BLOCK_N], tl.float32)
    for g0 in range(0, G, BLOCK_G):
        g = g0 + tl.arange(0, BLOCK_G)
        acc += tl.load(base + g.to(tl.int64)[:, None] * N + cols[None, :], mask=(g < G)[:, None] & cmask[None, :],
                       other=0.0)
    total = tl.sum(acc, 0)
    if k == 0:
        tl.store(out0_ptr + cols, _to_out(total, out0_ptr.dtype.element_ty), mask=cmask)
    else:
        tl.store(out1_ptr + cols, _to_out(total, out1_ptr.dtype.element_ty), mask=cmask)


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
def _chunk_dx(x, g, cmask, s1, s2, sgd, sg, shift, N, eps, IS_RMS: tl.constexpr):
    # (dx, xhat) of a chunk from the row's four sums (sum d, sum d^2, sum g * d, sum g)
    mean, rstd = _stats(s1, s2, shift, N, eps, IS_RMS)
    if IS_RMS:
        c1 = rstd * sgd / N  # sum g * xhat / N, xhat = x * rstd
    else:
        c1 = rstd * (sgd - (s1 / N) * sg) / N  # xhat = (d - sum d / N) * rstd
    xhat = tl.where(cmask, (x - mean) * rstd, 0.0)
    if IS_RMS:
        dx = rstd * (g - xhat * c1)
    else:
        dx = rstd * (g - sg / N - xhat * c1)
    return dx, xhat


@triton.jit
def _split_bwd(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, ws_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    PHASE: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr, EV: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    # The backward of long rows, over a grid (row groups GR, chunks): program (rg, c) takes chunk c
    # of rows rg, rg + GR, ... The fp32 workspace holds 4 sums per row and chunk (PHASE 1):
    # sum d, sum d^2, sum g * d, sum g, with d = x - x[row, 0] (x itself for rms_norm), g = dy * w.
    # PHASE 2 writes dx and the group's dweight/dbias partials of the chunk (p_ptr[rg, chunk]).
    # EV: the loads' L2 eviction hint (see _ld; the host's HINTS: phase 1 evict_last, so that
    # phase 2 finds x and dy in L2, and phase 2 evict_first); PREFETCH: the program's next row is
    # loaded before it works on the current one.
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
        shift = _row_shift(x_ptr, xoff, IS_RMS)
        if HAS_WEIGHT:
            g = dy * w
        else:
            g = dy
        wbase = ws_ptr + r64 * S * 4
        if PHASE == 1:
            if IS_RMS:
                d = x
            else:
                d = tl.where(cmask, x - shift, 0.0)
            tl.store(wbase + c * 4, tl.sum(d, 0))
            tl.store(wbase + c * 4 + 1, tl.sum(d * d, 0))
            tl.store(wbase + c * 4 + 2, tl.sum(g * d, 0))
            tl.store(wbase + c * 4 + 3, tl.sum(g, 0))
        else:
            s1 = tl.sum(tl.load(wbase + j * 4, mask=jmask, other=0.0), 0)
            s2 = tl.sum(tl.load(wbase + j * 4 + 1, mask=jmask, other=0.0), 0)
            sgd = tl.sum(tl.load(wbase + j * 4 + 2, mask=jmask, other=0.0), 0)
            sg = tl.sum(tl.load(wbase + j * 4 + 3, mask=jmask, other=0.0), 0)
            dx, xhat = _chunk_dx(x, g, cmask, s1, s2, sgd, sg, shift, N, eps, IS_RMS)
            tl.store(dx_ptr + r64 * stride_dxm + cols, _to_out(dx, DX_TY), mask=cmask)
            if WANT_DW:
                acc_w += dy * xhat
            if WANT_DB:
                acc_b += dy
    if PHASE == 2:
        poff = tl.cast(rg, tl.int64) * N
        if WANT_DW:
            tl.store(p_ptr + poff + cols, acc_w, mask=cmask)
        if WANT_DB:
            tl.store(p_ptr + p_off_b + poff + cols, acc_b, mask=cmask)


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd_sums(
    x_ptr, ws_ptr, dy_ptr, w_ptr,
    M, N, stride_xm, stride_dym, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr,
    EV: tl.constexpr = 0, PREFETCH: tl.constexpr = False,
):
    # phase 1 of the long-row backward: the four sums of each row and chunk into ws
    _split_bwd(x_ptr, x_ptr, dy_ptr, w_ptr, ws_ptr, ws_ptr, M, N, stride_xm, stride_dym, 0, 0, eps,
               IS_RMS, HAS_WEIGHT, False, False, 1, BLOCK_N, CHUNKS_P2, EV, PREFETCH)


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd_split(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, ws_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr, EV: tl.constexpr = 0, PREFETCH: tl.constexpr = False,
):
    # phase 2 of the long-row backward: dx and the dweight/dbias partials
    _split_bwd(x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, ws_ptr, M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
               IS_RMS, HAS_WEIGHT, WANT_DW, WANT_DB, 2, BLOCK_N, CHUNKS_P2, EV, PREFETCH)


@triton.jit
def _publish4(slot_ptr, idx, a, b, c, d, tag):
    # four fp32 partials as self-validating 64-bit words (tag << 32 | fp32 bits): no fence, no counter
    hi = tag << 32
    tl.atomic_xchg(slot_ptr + idx, hi | a.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")
    tl.atomic_xchg(slot_ptr + idx + 1, hi | b.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")
    tl.atomic_xchg(slot_ptr + idx + 2, hi | c.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")
    tl.atomic_xchg(slot_ptr + idx + 3, hi | d.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")


@triton.jit
def _word_value(v, jm):
    return tl.where(jm, (v & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True), 0.0)


@triton.jit
def _gather4(slot_ptr, base, S, tag, CHUNKS_P2: tl.constexpr):
    # wait until the S chunks of a row have published their four sums with this launch's tag;
    # then their totals, summed in chunk order (the same order on every program: same result)
    j = tl.arange(0, CHUNKS_P2)
    jm = j < S
    p = slot_ptr + base + j * 4
    v0 = tl.zeros([CHUNKS_P2], tl.int64)
    v1 = v0
    v2 = v0
    v3 = v0
    bad = tl.sum(jm.to(tl.int32), 0)  # every chunk outstanding until read
    while bad > 0:
        v0 = tl.load(p, mask=jm, other=0, volatile=True)
        v1 = tl.load(p + 1, mask=jm, other=0, volatile=True)
        v2 = tl.load(p + 2, mask=jm, other=0, volatile=True)
        v3 = tl.load(p + 3, mask=jm, other=0, volatile=True)
        bad = tl.sum((jm & (((v0 >> 32) != tag) | ((v1 >> 32) != tag) | ((v2 >> 32) != tag)
                            | ((v3 >> 32) != tag))).to(tl.int32), 0)
    return (tl.sum(_word_value(v0, jm), 0), tl.sum(_word_value(v1, jm), 0), tl.sum(_word_value(v2, jm), 0),
            tl.sum(_word_value(v3, jm), 0))


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd_coop(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, slot_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr, SLOT_OFF: tl.constexpr,
):
    # The backward of long rows in one launch: persistent programs in groups of S = cdiv(N,
    # BLOCK_N), each holding one chunk of a row (x and dy) in registers; it publishes the chunk's
    # four sums (as _split_bwd's phase 1), waits for the other chunks of the row (_gather4), and
    # writes its chunk of dx from registers: x and dy are read once. The next row's chunk is in
    # flight while the sums meet. A program's group comes from a ticket taken in dispatch order,
    # and the tag of its words from the launch's epoch (see dispatch_triton.jit's split path):
    # only the group holding the highest ticket may wait on programs not yet resident, and the
    # host sizes the grid so that every program is resident. dweight/dbias as _norm_bwd: a row of
    # partials per group (p_ptr[group, :]), reduced by _column_sum. GPU only: the interpreter runs
    # programs one after another, where the sums could never meet (the two-launch path serves it).
    DX_TY = dx_ptr.dtype.element_ty
    nprog = tl.num_programs(0)
    S = tl.cdiv(N, BLOCK_N)
    n_groups = nprog // S
    word = tl.atomic_add(slot_ptr, 1, sem="relaxed")
    tid = (word & 0xFFFFFFFF).to(tl.int32)
    if tid == nprog - 1:  # the last ticket resets the count and moves the epoch on for the next launch
        tl.atomic_add(slot_ptr, (1 << 32) - nprog.to(tl.int64), sem="relaxed")
    tag = ((word >> 32) % 0x7FFFFFFF) + 1
    grp = tid // S
    c = tid % S
    cols, cmask, w, acc_w, acc_b = _chunk_start(w_ptr, c, N, HAS_WEIGHT, BLOCK_N)
    r0 = tl.cast(grp, tl.int64)
    lim = tl.where(grp < M, N, 0)
    x_next = tl.load(x_ptr + r0 * stride_xm + cols, mask=cols < lim, other=0.0, eviction_policy="evict_first")
    dy_next = tl.load(dy_ptr + r0 * stride_dym + cols, mask=cols < lim, other=0.0, eviction_policy="evict_first")
    for row in range(grp, M, n_groups):
        r64 = tl.cast(row, tl.int64)
        xoff = r64 * stride_xm
        x = x_next.to(tl.float32)
        dy = dy_next.to(tl.float32)
        shift = _row_shift(x_ptr, xoff, IS_RMS)
        if HAS_WEIGHT:
            g = dy * w
        else:
            g = dy
        if IS_RMS:
            d = x
        else:
            d = tl.where(cmask, x - shift, 0.0)
        base = SLOT_OFF + r64 * S * 4
        _publish4(slot_ptr, base + c * 4, tl.sum(d, 0), tl.sum(d * d, 0), tl.sum(g * d, 0), tl.sum(g, 0), tag)
        # the next row's chunk goes out now, to land while this row's sums meet
        n64 = tl.cast(row + n_groups, tl.int64)
        lim = tl.where(row + n_groups < M, N, 0)
        x_next = tl.load(x_ptr + n64 * stride_xm + cols, mask=cols < lim, other=0.0, eviction_policy="evict_first")
        dy_next = tl.load(dy_ptr + n64 * stride_dym + cols, mask=cols < lim, other=0.0,
                          eviction_policy="evict_first")
        s1, s2, sgd, sg = _gather4(slot_ptr, base, S, tag, CHUNKS_P2)
        dx, xhat = _chunk_dx(x, g, cmask, s1, s2, sgd, sg, shift, N, eps, IS_RMS)
        tl.store(dx_ptr + r64 * stride_dxm + cols, _to_out(dx, DX_TY), mask=cmask, eviction_policy="evict_first")
        if WANT_DW:
            acc_w += dy * xhat
        if WANT_DB:
            acc_b += dy
    if grp < n_groups:
        poff = tl.cast(grp, tl.int64) * N
        if WANT_DW:
            tl.store(p_ptr + poff + cols, acc_w, mask=cmask)
        if WANT_DB:
            tl.store(p_ptr + p_off_b + poff + cols, acc_b, mask=cmask)
