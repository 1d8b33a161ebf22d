"""The Triton JIT kernels of the rms_norm and layer_norm forward, over rows of N elements, and the
helpers the backward kernels (:mod:`dispatch_triton.norm_backward_kernels`) share.

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

Statistics of a chunked row: ``d = x - shift``, the shift the median of the means of 16 elements
at the row's head, middle and tail (small numbers for rows far from zero, and one massive element
does not move it), and per part of the row (a chunk, a segment, the whole walk) ``sum d`` and ``M2``, its sum of
squares about its own mean, ``sum d^2 - (sum d)^2 / n``. That difference cancels where the shift
is farther from the part's mean than the part's spread (massive elements at two of those three
places, a part far from the rest): there the part is summed again about its mean (a second
reduction over the chunk in registers, a second walk), so it never loses more than a bit. The
parts merge by Chan et al.'s rule, ``M2 = sum M2_p + sum n_p (mean_p - mean)^2``, which subtracts
nothing. rms_norm needs only ``sum x^2``.

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

from .exchange import _await_words, _publish_words, _ticket
from .jit import _INTERPRETED, _cvt, _ld


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
def _merge_parts(s, m2, n, IS_RMS: tl.constexpr):
    # (sum d, M2) of a row from its parts' sums ``s``, M2 about each part's own mean ``m2`` and
    # element counts ``n`` (fp32 vectors; 0 where a lane holds no part): Chan et al.'s rule. rms_norm:
    # m2 is a part's sum x^2, added up.
    if IS_RMS:
        return tl.sum(s, 0), tl.sum(m2, 0)
    total, dev = _part_devs(s, n)
    return total, tl.sum(m2 + n * dev * dev, 0)


@triton.jit
def _part_devs(s, n):
    # the row's sum of d from its parts' sums s (counts n), and each part's mean less the row's
    # (0 where a lane holds no part)
    total = tl.sum(s, 0)
    mean = total / tl.maximum(tl.sum(n, 0), 1.0)
    return total, tl.where(n > 0, s / tl.maximum(n, 1.0) - mean, 0.0)


@triton.jit
def _part_counts(j, N, PART):
    # elements in part j of a row cut in parts of PART elements (fp32; 0 past the row)
    return tl.minimum(tl.maximum(N - j * PART, 0), PART).to(tl.float32)


@triton.jit
def _first_chunk(x_ptr, xoff, c, N, hi, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr, EV: tl.constexpr):
    # what a walk over chunks c.. (before hi) of a row starts with: with PREFETCH chunk c's load in
    # flight (its raw values), else nothing (0.0); _next_chunk takes it
    if PREFETCH:
        ncols = c * BLOCK_N + tl.arange(0, BLOCK_N)
        return _ld(x_ptr + xoff + ncols, (ncols < N) & (ncols < hi * BLOCK_N), EV)
    else:
        return 0.0


@triton.jit
def _next_chunk(x_ptr, xoff, cols, x_next, N, hi, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr,
                EV: tl.constexpr):
    # a walk's chunk at cols (fp32, 0 past the row) and what the next step takes: with PREFETCH
    # this chunk came in flight a step ago and the next one's load is issued now, before this one
    # is used
    if PREFETCH:
        x = x_next.to(tl.float32)
        ncols = cols + BLOCK_N
        x_next = _ld(x_ptr + xoff + ncols, (ncols < N) & (ncols < hi * BLOCK_N), EV)
    else:
        x = _ld(x_ptr + xoff + cols, cols < N, EV).to(tl.float32)
    return x, x_next


@triton.jit
def _walk_sums(x_ptr, xoff, shift, N, lo, hi, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr,
               PREFETCH: tl.constexpr = 0, EV: tl.constexpr = 0):
    # (sum d, sum d^2) over chunks [lo, hi) of a row, d = x - shift (x itself for rms_norm, whose
    # sum d is not kept); PREFETCH: the next chunk's load is issued before the current one is summed
    cols0 = tl.arange(0, BLOCK_N)
    s1 = tl.zeros([BLOCK_N], tl.float32)
    s2 = tl.zeros([BLOCK_N], tl.float32)
    x_next = _first_chunk(x_ptr, xoff, lo, N, hi, BLOCK_N, PREFETCH, EV)
    for c in range(lo, hi):
        cols = c * BLOCK_N + cols0
        cmask = cols < N
        x, x_next = _next_chunk(x_ptr, xoff, cols, x_next, N, hi, BLOCK_N, PREFETCH, EV)
        if IS_RMS:
            s2 += x * x
        else:
            d = tl.where(cmask, x - shift, 0.0)
            s1 += d
            s2 += d * d
    return tl.sum(s1, 0), tl.sum(s2, 0)


@triton.jit
def _lane_stats(x_ptr, xoff, N, lo, hi, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr = 0, EV: tl.constexpr = 0):
    # (count, mean, M2) over chunks [lo, hi) of a layer_norm row, walked once, with no shift: each
    # lane (a column of the chunks) keeps its running (mean, M2) by Welford's update, one chunk a
    # step (a chunk's count is the same in every lane it covers), and the lanes are merged by Chan
    # et al.'s rule. Stable wherever the row sits and whatever massive elements it holds, so never
    # a second walk. (_chunk_sums walks a row again wherever its shift, _row_shift, lands more than
    # a standard deviation from the mean: rows whose three groups are off by that much, or hold
    # massive elements at two of the three. When the shift was the median of three single
    # elements, one N(0, 1) row in seven did, and on an H200 the chunked path at bf16 256 x 65536
    # took 32.1 us against 27.8 with the shift set to 0, which such rows never re-walk.)
    cols0 = tl.arange(0, BLOCK_N)
    first = lo * BLOCK_N + cols0
    mean = _ld(x_ptr + xoff + first, (first < N) & (first < hi * BLOCK_N), EV).to(tl.float32)  # one value a lane
    m2 = tl.zeros([BLOCK_N], tl.float32)
    x_next = _first_chunk(x_ptr, xoff, lo + 1, N, hi, BLOCK_N, PREFETCH, EV)
    for c in range(lo + 1, hi):
        cols = c * BLOCK_N + cols0
        cmask = cols < N
        x, x_next = _next_chunk(x_ptr, xoff, cols, x_next, N, hi, BLOCK_N, PREFETCH, EV)
        delta = x - mean
        upd = mean + delta * (1.0 / (c - lo + 1))
        m2 = tl.where(cmask, m2 + delta * (x - upd), m2)
        mean = tl.where(cmask, upd, mean)
    # the lanes merged about lane 0's mean g (a value near the row's: the sums below add small
    # numbers for rows far from zero), in plain sums, whose order (a tree on the GPU, pairwise in
    # the interpreter) loses nothing that matters; a fold of Chan's rule in lane order lost 6e-5 of
    # M2 in the interpreter, one massive lane's M2 swamping the rest
    n = tl.where(cols0 < N, tl.maximum(tl.minimum((N - 1 - cols0) // BLOCK_N + 1, hi) - lo, 0), 0).to(tl.float32)
    count = tl.sum(n, 0)
    g = tl.sum(tl.where(cols0 == 0, mean, 0.0), 0)
    dm = mean - g
    mu = tl.sum(n * dm, 0) / tl.maximum(count, 1.0)
    dev = dm - mu
    return count, g + mu, tl.sum(m2 + n * dev * dev, 0)


@triton.jit
def _centred(s, q, n):
    # M2 (the sum of squares about the mean) of n values from their sum s and sum of squares q
    # about a shift, where that shift is within one spread of their mean (see _ill_placed)
    return tl.maximum(q - s * (s / n), 0.0)


@triton.jit
def _ill_placed(s, q, n):
    # the shift is farther from the values' mean than their spread, (s / n)^2 > q / n - (s / n)^2:
    # q - s^2 / n would cancel to a few digits there (a massive element in the row's head moves the
    # shift), so the sums are taken again about the mean
    m = s / n
    return 2.0 * m * m > q / n


@triton.jit
def _chunk_sums(x_ptr, xoff, shift, N, lo, hi, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr,
                PREFETCH: tl.constexpr = 0, EV: tl.constexpr = 0):
    # (sum d, M2) over chunks [lo, hi) of a row, d = x - shift; walked once, and once more about the
    # mean where the shift is ill placed; rms_norm: (0, sum x^2)
    s, q = _walk_sums(x_ptr, xoff, shift, N, lo, hi, IS_RMS, BLOCK_N, PREFETCH, EV)
    if IS_RMS:
        return s, q
    n = tl.maximum(tl.minimum(N, hi * BLOCK_N) - lo * BLOCK_N, 1).to(tl.float32)
    if _ill_placed(s, q, n):
        m = s / n
        s2, q2 = _walk_sums(x_ptr, xoff, shift + m, N, lo, hi, IS_RMS, BLOCK_N, PREFETCH, EV)
        return s2 + m * n, _centred(s2, q2, n)
    else:
        return s, _centred(s, q, n)


@triton.jit
def _stats(s1, m2, shift, N, eps, IS_RMS: tl.constexpr):
    # (mean, rstd) of a row from sum d (d = x - shift) and M2 (layer_norm; rms_norm: sum x^2, mean 0)
    if IS_RMS:
        mean = s1 * 0.0
    else:
        mean = shift + s1 / N
    return mean, 1.0 / tl.sqrt(m2 / N + eps)


@triton.jit
def _row_shift(x_ptr, xoff, N, IS_RMS: tl.constexpr):
    # the shift of a row's statistics (0 for rms_norm): the median of the means of three groups of
    # _SHIFT_GROUP elements, at the row's head, middle and tail (_shift_loads, _shift_of). Near the
    # row's mean for rows far from zero, so d = x - shift stays small; a median, so one massive
    # element does not move it. Where it lands farther from a part's mean than the part's spread
    # anyway, _ill_placed catches it; a walk of a row (_chunk_sums) then walks it again. With a
    # group of 16 that is none of 256 x 65536 rows of N(0, 1), t(3), uniform or per-channel scaled
    # values, against 15 to 56 for the median of three single elements (whose rows, on a grid that
    # runs every row at once, set the kernel's time)
    if IS_RMS:
        return tl.full([], 0.0, tl.float32)
    else:
        a, b, c = _shift_loads(x_ptr, xoff, N)
        return _shift_of(a, b, c, N)


_SHIFT_GROUP = tl.constexpr(16)  # elements of each of _row_shift's three groups


@triton.jit
def _shift_loads(x_ptr, xoff, N):
    # the three groups of a row (fewer elements where N < _SHIFT_GROUP, then overlapping; none for
    # N = 0: a row past the last) that _row_shift takes the median of the means of, raw: a caller
    # that needs the shift only later issues these loads first and takes it (_shift_of) where it
    # needs it, so that nothing waits for them in between
    k = tl.arange(0, _SHIFT_GROUP)
    g = tl.minimum(N, _SHIFT_GROUP)
    kmask = k < g
    a = tl.load(x_ptr + xoff + k, mask=kmask, other=0.0)
    b = tl.load(x_ptr + xoff + (N - g) // 2 + k, mask=kmask, other=0.0)
    c = tl.load(x_ptr + xoff + (N - g) + k, mask=kmask, other=0.0)
    return a, b, c


@triton.jit
def _shift_of(a, b, c, N):
    # the median of the means of _shift_loads' three groups (0 for N = 0)
    inv = 1.0 / tl.maximum(tl.minimum(N, _SHIFT_GROUP), 1).to(tl.float32)
    ma = tl.sum(a.to(tl.float32), 0) * inv
    mb = tl.sum(b.to(tl.float32), 0) * inv
    mc = tl.sum(c.to(tl.float32), 0) * inv
    return tl.maximum(tl.minimum(ma, mb), tl.minimum(tl.maximum(ma, mb), mc))


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
    # last row) and the row's shift (_row_shift, fp32)
    off = tl.cast(row, tl.int64) * stride
    lim = tl.where(row < M, N, 0)
    xr = tl.load(x_ptr + off + cols, mask=cols < lim, other=0.0, eviction_policy="evict_first")
    return xr, _row_shift(x_ptr, off, lim, IS_RMS)


@triton.jit
def _add2(a0, b0, a1, b1):
    return a0 + a1, b0 + b1


@triton.jit
def _add4(a0, b0, c0, d0, a1, b1, c1, d1):
    return a0 + a1, b0 + b1, c0 + c1, d0 + d1


@triton.jit
def _sum2(a, b, AXIS: tl.constexpr = 0):
    # two sums along AXIS in one reduction on a GPU (one exchange between the warps, not two);
    # the interpreter runs a combine function element by element, so there: two sums
    if _INTERPRETED:
        return tl.sum(a, AXIS), tl.sum(b, AXIS)
    else:
        return tl.reduce((a, b), AXIS, _add2)


@triton.jit
def _sum4(a, b, c, d):
    # four sums over a chunk in one reduction on a GPU (see _sum2)
    if _INTERPRETED:
        return tl.sum(a, 0), tl.sum(b, 0), tl.sum(c, 0), tl.sum(d, 0)
    else:
        return tl.reduce((a, b, c, d), 0, _add4)


@triton.jit
def _chunk_partial(xr, shift, cmask, nc, IS_RMS: tl.constexpr):
    # a chunk's partial (sum d, M2 about the chunk's mean of d) over its nc elements, d = x - shift:
    # one reduction, a second about the chunk's mean where the shift is ill placed; rms_norm:
    # (0, sum x^2)
    x = xr.to(tl.float32)
    if IS_RMS:
        return tl.full([], 0.0, tl.float32), tl.sum(x * x, 0)
    else:
        d = tl.where(cmask, x - shift, 0.0)
        s, q = _sum2(d, d * d)
        m2 = _centred(s, q, nc)
        if _ill_placed(s, q, nc):  # assigned, not returned, in the branch: Triton 3.6 fails to lower that
            e = tl.where(cmask, d - s / nc, 0.0)
            m2 = tl.sum(e * e, 0)
        return s, m2


@triton.jit
def _coop_publish(slot_ptr, row, S, c, p1, p2, tag, IS_RMS: tl.constexpr):
    # a chunk's partial (_chunk_partial) as tagged words in ONE exchange (exchange._publish_words):
    # rms_norm needs its sum x^2 only (one word), layer_norm (sum d, M2)
    r64 = tl.cast(row, tl.int64)
    if IS_RMS:
        k = tl.arange(0, 1)
        _publish_words(slot_ptr, 64 + r64 * S + c, tl.zeros([1], tl.float32) + p2, k, tag)
    else:
        k = tl.arange(0, 2)
        _publish_words(slot_ptr, 64 + r64 * S * 2 + c * 2, tl.where(k == 0, p1, p2), k, tag)


@triton.jit
def _coop_stats(slot_ptr, row, S, tag, N, eps, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr,
                CHUNKS_P2: tl.constexpr):
    # (mean of d = x - shift, rstd) of a row once its S chunks' partials (_coop_publish) carry this
    # launch's tag (one wait over CHUNKS_P2 >= S lanes), merged in chunk order on every program of
    # the row (so all of them get the same numbers)
    r64 = tl.cast(row, tl.int64)
    zero = tl.full([], 0.0, tl.float32)
    if IS_RMS:
        vals, jm = _await_words(slot_ptr, 64 + r64 * S, S, tag, 1, CHUNKS_P2)  # 0 past the last chunk
        return _stats(zero, tl.sum(tl.sum(vals, 1), 0), zero, N, eps, IS_RMS)
    else:
        vals, jm = _await_words(slot_ptr, 64 + r64 * S * 2, S, tag, 2, CHUNKS_P2)
        a, b = tl.split(vals)
        n = tl.where(jm, _part_counts(tl.arange(0, CHUNKS_P2), N, BLOCK_N), 0.0)
        s1, m2 = _merge_parts(a, b, n, IS_RMS)
        return _stats(s1, m2, zero, N, eps, IS_RMS)  # shift 0: the mean of d


@triton.jit
def _coop_fwd(x_ptr, y_ptr, w_ptr, b_ptr, slot_ptr, st_ptr, M, N, stride_xm, stride_ym, eps, IS_RMS: tl.constexpr,
              HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, PHASE: tl.constexpr, BLOCK_N: tl.constexpr,
              HINTS: tl.constexpr, CHUNKS_P2: tl.constexpr, STATS: tl.constexpr, WB_EACH: tl.constexpr = 0):
    # COOP: persistent programs in groups of S = cdiv(N, BLOCK_N), each holding one chunk of a row
    # (and its weight/bias) in registers; a group walks rows grp, grp + G, ... Per row a program
    # publishes its chunk's partial, the group's programs wait for the row's S partials, and each
    # writes its chunk from registers: x read once, y written once, whatever N. Pipelined one row
    # ahead (as the softmax split_pipe path): the partial of the NEXT row goes out before this
    # row's are awaited, so they have had a whole iteration to arrive, and the row after next is
    # loading meanwhile. Tickets, tags and co-residency: dispatch_triton.exchange;
    # under the interpreter two launches: PHASE 1 publishes, PHASE 2 awaits (tag 1). WB_EACH: the
    # chunk's weight and bias loaded again (from L2) for each row's output rather than held in
    # registers across rows: fewer registers a thread, more programs resident
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
            _coop_publish(slot_ptr, grp, S, c, p1, p2, tag, IS_RMS)
    xr_n, sh_n = _row_chunk(x_ptr, grp + n_groups, stride_xm, cols, M, N, IS_RMS)
    for row in range(grp, M, n_groups):
        nrow = row + n_groups
        if PHASE != 2:
            if nrow < M:
                p1, p2 = _chunk_partial(xr_n, sh_n, cmask, nc, IS_RMS)
                _coop_publish(slot_ptr, nrow, S, c, p1, p2, tag, IS_RMS)
        xr_nn, sh_nn = _row_chunk(x_ptr, nrow + n_groups, stride_xm, cols, M, N, IS_RMS)
        if PHASE != 1:
            row64 = tl.cast(row, tl.int64)
            mean_d, rstd = _coop_stats(slot_ptr, row, S, tag, N, eps, IS_RMS, BLOCK_N, CHUNKS_P2)
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
):
    OUT_TY = y_ptr.dtype.element_ty
    pid = tl.program_id(0)
    # HINTS (0 or 1): y stored evict_first (_st's 1); long rows: x's first read evict_last (_ld's 2)
    if COOP:  # ws_ptr is the int64 slot buffer of the exchange
        _coop_fwd(x_ptr, y_ptr, w_ptr, b_ptr, ws_ptr, st_ptr, M, N, stride_xm, stride_ym, eps, IS_RMS, HAS_WEIGHT,
                  HAS_BIAS, PHASE, BLOCK_N, HINTS, CHUNKS_P2, STATS, WB_EACH)
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
