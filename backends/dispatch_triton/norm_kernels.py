"""The Triton JIT kernels of the rms_norm and layer_norm forward, over rows of N elements.

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
* ``COOP`` (one launch; see ``_coop_fwd``): persistent programs in groups of ``cdiv(N, BLOCK_N)``,
  each holding one chunk of a row in registers; they exchange partial sums through epoch-tagged
  words in a slot buffer (``ws_ptr``), as the softmax split path does (``dispatch_triton.exchange``),
  so a row is read once and written once whatever its length. Under the interpreter, ``PHASE`` 1
  then 2 split it into two launches (publish, then await and write).
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

A row's statistics, however it is read (the sums of a walk, a chunk's partials, parts merged):
:mod:`dispatch_triton.norm_stats`.

``STATS`` (a call that records a gradient of long rows; see ``norm_backward.make_backward``'s
``saves``): every path also stores each row's rstd at ``st_ptr[row]`` and layer_norm's mean ``M``
further on (``_save_stats``), so that the backward need not recompute them.

``HAS_WEIGHT`` / ``HAS_BIAS`` are constexprs that the autotuner's key never sees: an absent
weight or bias is passed as a cached placeholder of the input's dtype, so calls with and without
them share one autotune entry (Triton keys on every tensor argument's dtype).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .exchange import _await_packed, _await_words, _publish_packed, _publish_words, _ticket
from .row_math import _cvt, _ld
from .norm_stats import (_centred, _chunk_partial, _chunk_sums, _ill_placed, _lane_stats, _merge_parts,
                         _part_counts, _row_shift, _shift_loads, _shift_of, _stats, _sum2)


@triton.jit
def _affine(xhat, w_ptr, b_ptr, cols, cmask, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    y = xhat
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    return y


@triton.jit
def _affine_params(w_ptr, b_ptr, cols, cmask, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    # the weight and bias at ``cols``, raw (0.0 for an absent one), for a program that holds them
    # across its rows
    w = 0.0
    b = 0.0
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=cmask, other=0.0)
    if HAS_BIAS:
        b = tl.load(b_ptr + cols, mask=cmask, other=0.0)
    return w, b


@triton.jit
def _tile_params(w, b, w_ptr, b_ptr, cols, cmask, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                 WB_EACH: tl.constexpr):
    # a persistent program's weight and bias for its next tile: those it holds, or with WB_EACH
    # loaded again (from L2) rather than held in registers across tiles
    if WB_EACH:
        return _affine_params(w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS)
    else:
        return w, b


@triton.jit
def _st(ptrs, v, mask, EV: tl.constexpr):
    # a masked store with L2 eviction hint EV: 0 none, 1 evict_first (the output is not read again)
    if EV == 1:
        tl.store(ptrs, v, mask=mask, eviction_policy="evict_first")
    else:
        tl.store(ptrs, v, mask=mask)


@triton.jit
def _tile_ptrs(base, t, ROWS: tl.constexpr, cols, cmask, M, stride):
    # pointers and mask of tile t: rows t * ROWS ... of BLOCK_N columns
    rows = t * ROWS + tl.arange(0, ROWS)
    mask = (rows < M)[:, None] & cmask[None, :]
    return base + rows.to(tl.int64)[:, None] * stride + cols[None, :], mask


@triton.jit
def _save_stats(st_ptr, rows, mean, rstd, mask, M, IS_RMS: tl.constexpr):
    # what the backward would otherwise recompute (STATS): a row's rstd at st_ptr[row] and, for
    # layer_norm, its mean M further on (rows, mean, rstd: scalars or vectors alike; mask None: all)
    r = tl.cast(rows, tl.int64)
    tl.store(st_ptr + r, rstd, mask=mask)
    if not IS_RMS:
        tl.store(st_ptr + M + r, mean, mask=mask)


@triton.jit
def _rows_out(x, mask, w, b, yptrs, N, eps, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
              HAS_BIAS: tl.constexpr, EV_OUT: tl.constexpr, st_ptr, t, M, ROWS: tl.constexpr,
              STATS: tl.constexpr, ONE_SUM: tl.constexpr):
    # a tile t of whole rows (fp32, zeros where masked off) normalized and stored (STATS: and
    # their statistics, _save_stats); layer_norm's statistics from two reductions in a row (the
    # mean, then the centred squares) or, ONE_SUM, from one
    if IS_RMS:
        mean = tl.zeros([ROWS], tl.float32)
        xc = x
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / N + eps)
    elif ONE_SUM:
        # sum x and sum x^2 in one reduction (one exchange between the warps, not two in a row);
        # M2 = sum x^2 - (sum x)^2 / N loses at most a bit where the mean is within the spread of
        # zero (_ill_placed); a tile holding a row beyond that sums its centred squares again
        s, q = _sum2(x, x * x, 1)
        mean = s / N
        xc = tl.where(mask, x - mean[:, None], 0.0)
        m2 = _centred(s, q, N)
        if tl.max(_ill_placed(s, q, N).to(tl.int32), 0) != 0:
            m2 = tl.sum(xc * xc, 1)
        rstd = 1.0 / tl.sqrt(m2 / N + eps)
    else:
        mean = tl.sum(x, 1) / N
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / N + eps)
    if STATS:
        rows = t * ROWS + tl.arange(0, ROWS)
        _save_stats(st_ptr, rows, mean, rstd, rows < M, M, IS_RMS)
    y = xc * rstd[:, None]
    if HAS_WEIGHT:
        y = y * w.to(tl.float32)[None, :]
    if HAS_BIAS:
        y = y + b.to(tl.float32)[None, :]
    _st(yptrs, _cvt(y, yptrs.dtype.element_ty), mask, EV_OUT)


@triton.jit
def _row_chunk(x_ptr, row, stride, cols, M, N, IS_RMS: tl.constexpr):
    # one program's raw chunk of ``row`` in the input's dtype (zeros past the row's end and past the
    # last row) and the row's shift (_row_shift of single elements, fp32)
    off = tl.cast(row, tl.int64) * stride
    lim = tl.where(row < M, N, 0)
    xr = tl.load(x_ptr + off + cols, mask=cols < lim, other=0.0, eviction_policy="evict_first")
    return xr, _row_shift(x_ptr, off, lim, IS_RMS, 1)


@triton.jit
def _coop_publish(slot_ptr, row, S, c, p1, p2, tag, IS_RMS: tl.constexpr, PACK: tl.constexpr = 0):
    # a chunk's partial (_chunk_partial) as tagged words in ONE exchange (exchange._publish_words):
    # rms_norm needs its sum x^2 only (one word), layer_norm (sum d, M2); PACK: layer_norm's two in
    # one word (exchange._publish_packed)
    r64 = tl.cast(row, tl.int64)
    if PACK:
        _publish_packed(slot_ptr, 64 + r64 * S + c, p1, p2, tag)
    elif IS_RMS:
        k = tl.arange(0, 1)
        _publish_words(slot_ptr, 64 + r64 * S + c, tl.zeros([1], tl.float32) + p2, k, tag)
    else:
        k = tl.arange(0, 2)
        _publish_words(slot_ptr, 64 + r64 * S * 2 + c * 2, tl.where(k == 0, p1, p2), k, tag)


@triton.jit
def _coop_stats(slot_ptr, row, S, tag, N, eps, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr,
                CHUNKS_P2: tl.constexpr, PACK: tl.constexpr = 0):
    # (mean of d = x - shift, rstd) of a row once its S chunks' partials (_coop_publish) carry this
    # launch's tag (one wait over CHUNKS_P2 >= S lanes), merged in chunk order on every program of
    # the row (so all of them get the same numbers)
    r64 = tl.cast(row, tl.int64)
    zero = tl.full([], 0.0, tl.float32)
    if IS_RMS:
        vals, jm = _await_words(slot_ptr, 64 + r64 * S, S, tag, 1, CHUNKS_P2)  # 0 past the last chunk
        return _stats(zero, tl.sum(tl.sum(vals, 1), 0), zero, N, eps, IS_RMS)
    else:
        if PACK:
            a, b, jm = _await_packed(slot_ptr, 64 + r64 * S, S, tag, CHUNKS_P2)
        else:
            vals, jm = _await_words(slot_ptr, 64 + r64 * S * 2, S, tag, 2, CHUNKS_P2)
            a, b = tl.split(vals)
        n = tl.where(jm, _part_counts(tl.arange(0, CHUNKS_P2), N, BLOCK_N), 0.0)
        s1, m2 = _merge_parts(a, b, n, IS_RMS)
        return _stats(s1, m2, zero, N, eps, IS_RMS)  # shift 0: the mean of d


@triton.jit
def _coop_fwd(x_ptr, y_ptr, w_ptr, b_ptr, slot_ptr, st_ptr, M, N, stride_xm, stride_ym, eps, IS_RMS: tl.constexpr,
              HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, PHASE: tl.constexpr, BLOCK_N: tl.constexpr,
              HINTS: tl.constexpr, CHUNKS_P2: tl.constexpr, STATS: tl.constexpr, WB_EACH: tl.constexpr = 0,
              PACK: tl.constexpr = 0):
    # COOP: persistent programs in groups of S = cdiv(N, BLOCK_N), each holding one chunk of a row
    # (and its weight/bias) in registers; a group walks rows grp, grp + G, ... Per row a program
    # publishes its chunk's partial, the group's programs wait for the row's S partials, and each
    # writes its chunk from registers: x read once, y written once, whatever N. Pipelined one row
    # ahead (as the softmax split_pipe path): the partial of the NEXT row goes out before this
    # row's are awaited, so they have had a whole iteration to arrive, and the row after next is
    # loading meanwhile (its load issued after that partial is out: issued before it in the loop,
    # as the backward's one-launch kernel does, layer_norm took 2-27% longer at five of six shapes
    # of 64-256 rows of 64K-256K on an H100, 6% less at the sixth; rms_norm -2% to +6%). Tickets, tags
    # and co-residency: dispatch_triton.exchange; under the interpreter two launches: PHASE 1
    # publishes, PHASE 2 awaits (tag 1). WB_EACH: the chunk's weight and bias loaded again (from
    # L2) for each row's output rather than held in registers across rows: fewer registers a
    # thread, more programs resident. PACK: layer_norm's two partials of a chunk in one word, for a
    # 2-byte output (exchange._publish_packed)
    OUT_TY = y_ptr.dtype.element_ty
    nprog = tl.num_programs(0)
    S = tl.cdiv(N, BLOCK_N)
    n_groups = nprog // S
    tid = tl.program_id(0)
    tag = tid.to(tl.int64) * 0 + 1
    if PHASE == 0:
        tid, tag = _ticket(slot_ptr, nprog)
    grp = tid // S
    c = tid % S
    cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    nc = tl.maximum(_part_counts(c, N, BLOCK_N), 1.0)
    w = 0.0
    b = 0.0
    if not WB_EACH:  # held across rows
        w, b = _affine_params(w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS)
    xr, sh = _row_chunk(x_ptr, grp, stride_xm, cols, M, N, IS_RMS)
    if PHASE != 2:
        if grp < M:
            p1, p2 = _chunk_partial(xr, sh, cmask, nc, IS_RMS)
            _coop_publish(slot_ptr, grp, S, c, p1, p2, tag, IS_RMS, PACK)
    xr_n, sh_n = _row_chunk(x_ptr, grp + n_groups, stride_xm, cols, M, N, IS_RMS)
    for row in range(grp, M, n_groups):
        nrow = row + n_groups
        if PHASE != 2:
            if nrow < M:
                p1, p2 = _chunk_partial(xr_n, sh_n, cmask, nc, IS_RMS)
                _coop_publish(slot_ptr, nrow, S, c, p1, p2, tag, IS_RMS, PACK)
        xr_nn, sh_nn = _row_chunk(x_ptr, nrow + n_groups, stride_xm, cols, M, N, IS_RMS)
        if PHASE != 1:
            row64 = tl.cast(row, tl.int64)
            mean_d, rstd = _coop_stats(slot_ptr, row, S, tag, N, eps, IS_RMS, BLOCK_N, CHUNKS_P2, PACK)
            y = ((xr.to(tl.float32) - sh) - mean_d) * rstd
            # WB_EACH: loaded after the wait (issued before it, they would stay live across it)
            wt, bt = _tile_params(w, b, w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS, WB_EACH)
            if HAS_WEIGHT:
                y = y * wt.to(tl.float32)
            if HAS_BIAS:
                y = y + bt.to(tl.float32)
            _st(y_ptr + row64 * stride_ym + cols, _cvt(y, OUT_TY), cmask, HINTS)
            if STATS:
                if c == 0:  # the row's first chunk stores them (a branch: a masked store spilled registers)
                    _save_stats(st_ptr, row, sh + mean_d, rstd, None, M, IS_RMS)
        xr = xr_n
        xr_n = xr_nn
        sh = sh_n
        sh_n = sh_nn


@triton.jit(do_not_specialize=["M", "N_BUCKET", "eps"])  # M: row counts never recompile
def _norm_fwd(
    x_ptr, y_ptr, w_ptr, b_ptr, ws_ptr, st_ptr,
    M, N, stride_xm, stride_ym, eps,
    N_BUCKET,  # noqa: ARG001 - the autotune key only (bucketed row length)
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, PHASE: tl.constexpr,
    ONE_PASS: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, SPLIT: tl.constexpr,
    PERSIST: tl.constexpr, PREFETCH: tl.constexpr = 0, HINTS: tl.constexpr = 0, COOP: tl.constexpr = 0,
    CHUNKS_P2: tl.constexpr = 0,  # COOP: a power of two >= the chunks of a row (the width of its wait)
    STATS: tl.constexpr = 0,  # each row's rstd (layer_norm: and mean) stored at st_ptr (_save_stats)
    ONE_SUM: tl.constexpr = 0,  # rows in registers: layer_norm's statistics from one reduction (_rows_out)
    WB_EACH: tl.constexpr = 0,  # persistent grid, COOP: weight and bias loaded for each tile (row), not held
    STAGES: tl.constexpr = 0,  # persistent grid: > 1, the tile loop pipelined by Triton (loads ahead to shared memory)
    LANES: tl.constexpr = 0,  # chunked and split paths: layer_norm's statistics by lanes (_lane_stats)
    PACK: tl.constexpr = 0,  # COOP, layer_norm, a 2-byte output: a chunk's two partials in one word
):
    OUT_TY = y_ptr.dtype.element_ty
    pid = tl.program_id(0)
    # HINTS (0 or 1): y stored evict_first (_st's 1); long rows: x's first read evict_last (_ld's 2)
    if COOP:  # ws_ptr is the int64 slot buffer of the exchange
        _coop_fwd(x_ptr, y_ptr, w_ptr, b_ptr, ws_ptr, st_ptr, M, N, stride_xm, stride_ym, eps, IS_RMS, HAS_WEIGHT,
                  HAS_BIAS, PHASE, BLOCK_N, HINTS, CHUNKS_P2, STATS, WB_EACH, PACK)
    elif ONE_PASS:
        cols = tl.arange(0, BLOCK_N)
        cmask = cols < N
        w, b = _affine_params(w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS)
        if PERSIST and STAGES > 1:
            # Triton's pipeline loads the next STAGES - 1 tiles into shared memory while this one is
            # reduced and written (no register holds a tile ahead)
            for t in tl.range(pid, tl.cdiv(M, ROWS), tl.num_programs(0), num_stages=STAGES):
                ptrs, mask = _tile_ptrs(x_ptr, t, ROWS, cols, cmask, M, stride_xm)
                x = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
                yptrs, mask = _tile_ptrs(y_ptr, t, ROWS, cols, cmask, M, stride_ym)
                wt, bt = _tile_params(w, b, w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS, WB_EACH)
                _rows_out(x.to(tl.float32), mask, wt, bt, yptrs, N, eps, IS_RMS, HAS_WEIGHT, HAS_BIAS, HINTS,
                          st_ptr, t, M, ROWS, STATS, ONE_SUM)
        elif PERSIST:
            G = tl.num_programs(0)
            ptrs, mask = _tile_ptrs(x_ptr, pid, ROWS, cols, cmask, M, stride_xm)
            x_next = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
            for t in range(pid, tl.cdiv(M, ROWS), G):
                x = x_next
                # the next tile's load is in flight while this one is reduced and written
                nptrs, nmask = _tile_ptrs(x_ptr, t + G, ROWS, cols, cmask, M, stride_xm)
                x_next = tl.load(nptrs, mask=nmask, other=0.0, eviction_policy="evict_first")
                yptrs, mask = _tile_ptrs(y_ptr, t, ROWS, cols, cmask, M, stride_ym)
                wt, bt = _tile_params(w, b, w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS, WB_EACH)
                _rows_out(x.to(tl.float32), mask, wt, bt, yptrs, N, eps, IS_RMS, HAS_WEIGHT, HAS_BIAS, HINTS,
                          st_ptr, t, M, ROWS, STATS, ONE_SUM)
        else:
            ptrs, mask = _tile_ptrs(x_ptr, pid, ROWS, cols, cmask, M, stride_xm)
            x = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            yptrs, mask = _tile_ptrs(y_ptr, pid, ROWS, cols, cmask, M, stride_ym)
            _rows_out(x, mask, w, b, yptrs, N, eps, IS_RMS, HAS_WEIGHT, HAS_BIAS, HINTS, st_ptr, pid, M, ROWS,
                      STATS, ONE_SUM)
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
        if PHASE == 1:
            if LANES and not IS_RMS:  # no second walk; the shift (for the partials) only after this one
                sa, sb, sc = _shift_loads(x_ptr, xoff, N)
                cnt, m_seg, s2 = _lane_stats(x_ptr, xoff, N, lo, hi, BLOCK_N, PREFETCH, HINTS * 2)
                s1 = cnt * (m_seg - _shift_of(sa, sb, sc, N))
            else:
                shift = _row_shift(x_ptr, xoff, N, IS_RMS)
                s1, s2 = _chunk_sums(x_ptr, xoff, shift, N, lo, hi, IS_RMS, BLOCK_N, PREFETCH, HINTS * 2)
            base = (tl.cast(row, tl.int64) * SPLIT + seg) * 2
            tl.store(ws_ptr + base, s1)
            tl.store(ws_ptr + base + 1, s2)
        else:
            if PHASE == 0 and LANES and not IS_RMS:  # the row's statistics by lanes: never a second walk
                cnt, mean, m2 = _lane_stats(x_ptr, xoff, N, 0, nchunks, BLOCK_N, PREFETCH, HINTS * 2)
                rstd = 1.0 / tl.sqrt(m2 / N + eps)
            else:
                shift = _row_shift(x_ptr, xoff, N, IS_RMS)
                if PHASE == 0:
                    s1, s2 = _chunk_sums(x_ptr, xoff, shift, N, 0, nchunks, IS_RMS, BLOCK_N, PREFETCH, HINTS * 2)
                else:
                    j = tl.arange(0, SPLIT)
                    base = tl.cast(row, tl.int64) * SPLIT * 2
                    s1, s2 = _merge_parts(tl.load(ws_ptr + base + j * 2), tl.load(ws_ptr + base + j * 2 + 1),
                                          _part_counts(j, N, per * BLOCK_N), IS_RMS)
                mean, rstd = _stats(s1, s2, shift, N, eps, IS_RMS)
            if STATS:
                if seg == 0:  # PHASE 2: the row's first segment stores them
                    _save_stats(st_ptr, row, mean, rstd, None, M, IS_RMS)
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
                _st(y_ptr + yoff + cols, _cvt(y, OUT_TY), cmask, HINTS)
