"""A row's statistics in the Triton norm kernels, forward and backward: the sums of a walk over a
row's chunks, a chunk's partials, and the parts of a row merged.

``d = x - shift``, the shift the median of the means of 16 elements at the row's head, middle
and tail (where a row's chunks are held in registers, of single elements there; ``_row_shift``:
small numbers for rows far from zero, and one massive element does not move it), and per part
of the row (a chunk, a segment, the whole walk) ``sum d`` and ``M2``, its sum of squares about
its own mean, ``sum d^2 - (sum d)^2 / n``. That difference cancels where the shift is farther
from the part's mean than the part's spread (``_ill_placed``: massive elements in two of the
three groups, a part far from the rest): there the part is summed again about its mean (a
second reduction over the chunk in registers, a second walk), so it never loses more than a
bit. The parts merge by Chan et al.'s rule,
``M2 = sum M2_p + sum n_p (mean_p - mean)^2``, which subtracts nothing. rms_norm needs only
``sum x^2`` (its shift is 0). ``LANES`` (the chunked and split paths) keeps a running
(mean, M2) per lane instead (``_lane_stats``): no shift, never a second walk.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .row_math import _INTERPRETED, _ld


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


_SHIFT_GROUP = tl.constexpr(16)  # elements of each of _row_shift's three groups


@triton.jit
def _row_shift(x_ptr, xoff, N, IS_RMS: tl.constexpr, GROUP: tl.constexpr = _SHIFT_GROUP):
    # the shift of a row's statistics (0 for rms_norm): the median of the means of three groups of
    # GROUP elements, at the row's head, middle and tail (_shift_loads, _shift_of). Near the
    # row's mean for rows far from zero, so d = x - shift stays small; a median, so one massive
    # element does not move it. Where it lands farther from a part's mean than the part's spread
    # anyway, _ill_placed catches it; a walk of a row (_chunk_sums) then walks it again. With a
    # group of 16 that is none of 256 x 65536 rows of N(0, 1), t(3), uniform or per-channel scaled
    # values, against 15 to 56 for the median of three single elements (whose rows, on a grid that
    # runs every row at once, set the kernel's time). GROUP = 1 (three scalar loads, no reduction)
    # where a row's chunks are held in registers (the one-launch exchange): there a second
    # reduction costs no walk, and on an H200 the groups of 16 took 3-22% longer (Dec 5,
    # sweep_norm_configs.py), while they took 10-13% off the chunked walks of bf16 rows of 32K-64K
    if IS_RMS:
        return tl.full([], 0.0, tl.float32)
    else:
        a, b, c = _shift_loads(x_ptr, xoff, N, GROUP)
        return _shift_of(a, b, c, N, GROUP)


@triton.jit
def _shift_loads(x_ptr, xoff, N, GROUP: tl.constexpr = _SHIFT_GROUP):
    # the three groups of a row (fewer elements where N < GROUP, then overlapping; none for
    # N = 0: a row past the last) that _row_shift takes the median of the means of, raw: a caller
    # that needs the shift only later issues these loads first and takes it (_shift_of) where it
    # needs it, so that nothing waits for them in between
    if GROUP == 1:
        a = tl.load(x_ptr + xoff, mask=N > 0, other=0.0)
        b = tl.load(x_ptr + xoff + (N - 1) // 2, mask=N > 0, other=0.0)
        c = tl.load(x_ptr + xoff + N - 1, mask=N > 0, other=0.0)
    else:
        k = tl.arange(0, GROUP)
        g = tl.minimum(N, GROUP)
        kmask = k < g
        a = tl.load(x_ptr + xoff + k, mask=kmask, other=0.0)
        b = tl.load(x_ptr + xoff + (N - g) // 2 + k, mask=kmask, other=0.0)
        c = tl.load(x_ptr + xoff + (N - g) + k, mask=kmask, other=0.0)
    return a, b, c


@triton.jit
def _shift_of(a, b, c, N, GROUP: tl.constexpr = _SHIFT_GROUP):
    # the median of the means of _shift_loads' three groups (0 for N = 0)
    if GROUP == 1:
        ma = a.to(tl.float32)
        mb = b.to(tl.float32)
        mc = c.to(tl.float32)
    else:
        inv = 1.0 / tl.maximum(tl.minimum(N, GROUP), 1).to(tl.float32)
        ma = tl.sum(a.to(tl.float32), 0) * inv
        mb = tl.sum(b.to(tl.float32), 0) * inv
        mc = tl.sum(c.to(tl.float32), 0) * inv
    return tl.maximum(tl.minimum(ma, mb), tl.minimum(tl.maximum(ma, mb), mc))


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
