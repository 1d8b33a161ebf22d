"""The Triton JIT kernels of rms_norm and layer_norm, forward and backward, over rows of N elements.

A row is N consecutive elements (the normalized dims, dense); rows are ``stride_xm`` apart. All
arithmetic is in fp32; results are rounded once to the output's dtype.

``_norm_fwd`` (forward), paths chosen by constexprs:

* ``ONE_PASS`` (``BLOCK_N >= N``): ``ROWS`` whole rows per program, held in registers: read once,
  written once. layer_norm's variance is the two-pass one, over the centred values in registers.
* chunked, ``PHASE`` 0: one program per row walks it in ``BLOCK_N`` chunks twice (statistics, then
  the output, newest chunks first, so the second read mostly hits L2).
* split, ``PHASE`` 1 then 2 (two launches): a row is cut into ``SPLIT`` segments, one program each,
  so that a few long rows still fill the device. Phase 1 writes each segment's partial sums to a
  workspace, phase 2 combines a row's partials (in a fixed order) and writes its segment; phase 2
  walks the programs and chunks in the mirror order of phase 1, so its first reads hit L2.

Statistics of a chunked row are shifted sums: ``d = x - x[0]``, ``sum d`` and ``sum d^2`` (so
layer_norm's variance does not cancel catastrophically for rows far from zero); rms_norm needs
only ``sum x^2``.

``_norm_bwd`` (backward): persistent programs, each over rows ``pid, pid + G, ...``. Per row it
recomputes the statistics from ``x`` and writes ``dx``; it accumulates its rows' ``dy * xhat``
(dweight) and ``dy`` (dbias) into its own row of an fp32 partials buffer ``[G, N]``, which
``_column_sum`` then reduces over G in a fixed order: deterministic, run to run.

``_norm_bwd_split`` (backward of few long rows): a row cut into segments over three launches
(segment statistics; segment sums of ``g * xhat`` and ``g``; ``dx`` and the partials), so that a
handful of 256K-element rows still fills the device.

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
def _chunk_sums(x_ptr, xoff, shift, N, lo, hi, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr):
    # (sum d, sum d^2) over chunks [lo, hi) of a row, d = x - shift (x itself for rms_norm)
    cols0 = tl.arange(0, BLOCK_N)
    s1 = tl.zeros([BLOCK_N], tl.float32)
    s2 = tl.zeros([BLOCK_N], tl.float32)
    for c in range(lo, hi):
        cols = c * BLOCK_N + cols0
        cmask = cols < N
        x = tl.load(x_ptr + xoff + cols, mask=cmask, other=0.0).to(tl.float32)
        if IS_RMS:
            d = x
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


@triton.jit(do_not_specialize=["M", "N_BUCKET", "eps"])  # M: row counts never recompile
def _norm_fwd(
    x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr,
    M, N, stride_xm, stride_ym, eps,
    N_BUCKET,  # noqa: ARG001 - the autotune key only (bucketed row length)
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, PHASE: tl.constexpr,
    ONE_PASS: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, SPLIT: tl.constexpr,
):
    OUT_TY = y_ptr.dtype.element_ty
    pid = tl.program_id(0)
    if ONE_PASS:
        rows = pid * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK_N)
        cmask = cols < N
        mask = (rows < M)[:, None] & cmask[None, :]
        rows64 = rows.to(tl.int64)
        x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        if IS_RMS:
            xc = x
        else:
            xc = tl.where(mask, x - (tl.sum(x, 1) / N)[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / N + eps)
        xhat = xc * rstd[:, None]
        y = xhat
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
        if HAS_BIAS:
            y = y + tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rows64[:, None] * stride_ym + cols[None, :], _to_out(y, OUT_TY), mask=mask)
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
            s1, s2 = _chunk_sums(x_ptr, xoff, shift, N, lo, hi, IS_RMS, BLOCK_N)
            base = (tl.cast(row, tl.int64) * SPLIT + seg) * 2
            tl.store(ws_ptr + base, s1)
            tl.store(ws_ptr + base + 1, s2)
        else:
            if PHASE == 0:
                s1, s2 = _chunk_sums(x_ptr, xoff, shift, N, 0, nchunks, IS_RMS, BLOCK_N)
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
            for i in range(0, hi - lo):
                c = hi - 1 - i  # newest chunks first: the likeliest L2 (or L1) hits
                cols = c * BLOCK_N + cols0
                cmask = cols < N
                x = tl.load(x_ptr + xoff + cols, mask=cmask, other=0.0, eviction_policy="evict_first").to(tl.float32)
                y = _affine((x - mean) * rstd, w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS)
                tl.store(y_ptr + yoff + cols, _to_out(y, OUT_TY), mask=cmask)


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd(
    x_ptr, w_ptr, dy_ptr, dx_ptr, pw_ptr, pb_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    ONE_PASS: tl.constexpr, BLOCK_N: tl.constexpr,
):
    DX_TY = dx_ptr.dtype.element_ty
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    cols0 = tl.arange(0, BLOCK_N)
    poff = tl.cast(pid, tl.int64) * N
    if ONE_PASS:
        cmask = cols0 < N
        if HAS_WEIGHT:
            w = tl.load(w_ptr + cols0, mask=cmask, other=0.0).to(tl.float32)
        acc_w = tl.zeros([BLOCK_N], tl.float32)
        acc_b = tl.zeros([BLOCK_N], tl.float32)
        for row in range(pid, M, G):
            r64 = tl.cast(row, tl.int64)
            x = tl.load(x_ptr + r64 * stride_xm + cols0, mask=cmask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + r64 * stride_dym + cols0, mask=cmask, other=0.0).to(tl.float32)
            if IS_RMS:
                xc = x
            else:
                xc = tl.where(cmask, x - tl.sum(x, 0) / N, 0.0)
            rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 0) / N + eps)
            xhat = xc * rstd
            if HAS_WEIGHT:
                g = dy * w
            else:
                g = dy
            c1 = tl.sum(g * xhat, 0) / N
            if IS_RMS:
                dx = rstd * (g - xhat * c1)
            else:
                c2 = tl.sum(g, 0) / N
                dx = rstd * (g - c2 - xhat * c1)
            tl.store(dx_ptr + r64 * stride_dxm + cols0, _to_out(dx, DX_TY), mask=cmask)
            if WANT_DW:
                acc_w += dy * xhat
            if WANT_DB:
                acc_b += dy
        if WANT_DW:
            tl.store(pw_ptr + poff + cols0, acc_w, mask=cmask)
        if WANT_DB:
            tl.store(pb_ptr + poff + cols0, acc_b, mask=cmask)
    else:
        nchunks = tl.cdiv(N, BLOCK_N)
        if WANT_DW or WANT_DB:
            zero = tl.zeros([BLOCK_N], tl.float32)
            for c in range(0, nchunks):
                cols = c * BLOCK_N + cols0
                if WANT_DW:
                    tl.store(pw_ptr + poff + cols, zero, mask=cols < N)
                if WANT_DB:
                    tl.store(pb_ptr + poff + cols, zero, mask=cols < N)
        for row in range(pid, M, G):
            r64 = tl.cast(row, tl.int64)
            xoff = r64 * stride_xm
            dyoff = r64 * stride_dym
            shift = _row_shift(x_ptr, xoff, IS_RMS)
            s1, s2 = _chunk_sums(x_ptr, xoff, shift, N, 0, nchunks, IS_RMS, BLOCK_N)
            mean, rstd = _stats(s1, s2, shift, N, eps, IS_RMS)
            a1 = tl.zeros([BLOCK_N], tl.float32)
            a2 = tl.zeros([BLOCK_N], tl.float32)
            for i in range(0, nchunks):
                c = nchunks - 1 - i  # passes alternate direction: each starts on what the last read
                cols = c * BLOCK_N + cols0
                cmask = cols < N
                x = tl.load(x_ptr + xoff + cols, mask=cmask, other=0.0).to(tl.float32)
                g = tl.load(dy_ptr + dyoff + cols, mask=cmask, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    g = g * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
                xhat = tl.where(cmask, (x - mean) * rstd, 0.0)
                a1 += g * xhat
                a2 += g
            c1 = tl.sum(a1, 0) / N
            c2 = tl.sum(a2, 0) / N
            for c in range(0, nchunks):
                cols = c * BLOCK_N + cols0
                cmask = cols < N
                x = tl.load(x_ptr + xoff + cols, mask=cmask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + dyoff + cols, mask=cmask, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    g = dy * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
                else:
                    g = dy
                xhat = (x - mean) * rstd
                if IS_RMS:
                    dx = rstd * (g - xhat * c1)
                else:
                    dx = rstd * (g - c2 - xhat * c1)
                tl.store(dx_ptr + r64 * stride_dxm + cols, _to_out(dx, DX_TY), mask=cmask)
                if WANT_DW:
                    pw = tl.load(pw_ptr + poff + cols, mask=cmask, other=0.0)
                    tl.store(pw_ptr + poff + cols, pw + dy * xhat, mask=cmask)
                if WANT_DB:
                    pb = tl.load(pb_ptr + poff + cols, mask=cmask, other=0.0)
                    tl.store(pb_ptr + poff + cols, pb + dy, mask=cmask)


@triton.jit
def _column_sum(p_ptr, out_ptr, G, N, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    # out[n] = sum over g of p[g, n], in a fixed order (the second stage of dweight/dbias)
    OUT_TY = out_ptr.dtype.element_ty
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    acc = tl.zeros([BLOCK_G, BLOCK_N], tl.float32)
    for g0 in range(0, G, BLOCK_G):
        g = g0 + tl.arange(0, BLOCK_G)
        acc += tl.load(p_ptr + g.to(tl.int64)[:, None] * N + cols[None, :], mask=(g < G)[:, None] & cmask[None, :],
                       other=0.0)
    tl.store(out_ptr + cols, _to_out(tl.sum(acc, 0), OUT_TY), mask=cmask)


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd_split(
    x_ptr, w_ptr, dy_ptr, dx_ptr, pw_ptr, pb_ptr, ws_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    PHASE: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
):
    # The backward of few long rows: a row cut into SPLIT segments over three launches. Program
    # (rg, seg) takes segment seg of rows rg, rg + GR, ... Per row and segment the fp32 workspace
    # holds 4 sums: (sum d, sum d^2) from PHASE 1, (sum g * xhat, sum g) from PHASE 2; PHASE 3
    # writes dx and adds dy * xhat and dy into row rg of the partials (its own columns only).
    DX_TY = dx_ptr.dtype.element_ty
    rg = tl.program_id(0)
    seg = tl.program_id(1)
    GR = tl.num_programs(0)
    nchunks = tl.cdiv(N, BLOCK_N)
    per = tl.cdiv(nchunks, SPLIT)
    lo = seg * per
    hi = tl.minimum(lo + per, nchunks)
    cols0 = tl.arange(0, BLOCK_N)
    j = tl.arange(0, SPLIT)
    poff = tl.cast(rg, tl.int64) * N
    if PHASE == 3:
        if WANT_DW or WANT_DB:
            zero = tl.zeros([BLOCK_N], tl.float32)
            for c in range(lo, hi):
                cols = c * BLOCK_N + cols0
                if WANT_DW:
                    tl.store(pw_ptr + poff + cols, zero, mask=cols < N)
                if WANT_DB:
                    tl.store(pb_ptr + poff + cols, zero, mask=cols < N)
    for row in range(rg, M, GR):
        r64 = tl.cast(row, tl.int64)
        xoff = r64 * stride_xm
        dyoff = r64 * stride_dym
        base = r64 * SPLIT * 4
        shift = _row_shift(x_ptr, xoff, IS_RMS)
        if PHASE == 1:
            s1, s2 = _chunk_sums(x_ptr, xoff, shift, N, lo, hi, IS_RMS, BLOCK_N)
            tl.store(ws_ptr + base + seg * 4, s1)
            tl.store(ws_ptr + base + seg * 4 + 1, s2)
        else:
            s1 = tl.sum(tl.load(ws_ptr + base + j * 4), 0)
            s2 = tl.sum(tl.load(ws_ptr + base + j * 4 + 1), 0)
            mean, rstd = _stats(s1, s2, shift, N, eps, IS_RMS)
            if PHASE == 2:
                a1 = tl.zeros([BLOCK_N], tl.float32)
                a2 = tl.zeros([BLOCK_N], tl.float32)
                for i in range(0, hi - lo):
                    c = hi - 1 - i  # against phase 1's direction: its last chunks are still in L2
                    cols = c * BLOCK_N + cols0
                    cmask = cols < N
                    x = tl.load(x_ptr + xoff + cols, mask=cmask, other=0.0).to(tl.float32)
                    g = tl.load(dy_ptr + dyoff + cols, mask=cmask, other=0.0).to(tl.float32)
                    if HAS_WEIGHT:
                        g = g * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
                    a1 += g * tl.where(cmask, (x - mean) * rstd, 0.0)
                    a2 += g
                tl.store(ws_ptr + base + seg * 4 + 2, tl.sum(a1, 0))
                tl.store(ws_ptr + base + seg * 4 + 3, tl.sum(a2, 0))
            else:
                c1 = tl.sum(tl.load(ws_ptr + base + j * 4 + 2), 0) / N
                c2 = tl.sum(tl.load(ws_ptr + base + j * 4 + 3), 0) / N
                for c in range(lo, hi):
                    cols = c * BLOCK_N + cols0
                    cmask = cols < N
                    x = tl.load(x_ptr + xoff + cols, mask=cmask, other=0.0).to(tl.float32)
                    dy = tl.load(dy_ptr + dyoff + cols, mask=cmask, other=0.0).to(tl.float32)
                    if HAS_WEIGHT:
                        g = dy * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
                    else:
                        g = dy
                    xhat = (x - mean) * rstd
                    if IS_RMS:
                        dx = rstd * (g - xhat * c1)
                    else:
                        dx = rstd * (g - c2 - xhat * c1)
                    tl.store(dx_ptr + r64 * stride_dxm + cols, _to_out(dx, DX_TY), mask=cmask)
                    if WANT_DW:
                        pw = tl.load(pw_ptr + poff + cols, mask=cmask, other=0.0)
                        tl.store(pw_ptr + poff + cols, pw + dy * xhat, mask=cmask)
                    if WANT_DB:
                        pb = tl.load(pb_ptr + poff + cols, mask=cmask, other=0.0)
                        tl.store(pb_ptr + poff + cols, pb + dy, mask=cmask)
