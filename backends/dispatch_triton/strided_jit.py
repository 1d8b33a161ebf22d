"""The Triton JIT kernels for softmax, log_softmax and logsumexp over a dim that is not unit-stride.

The input is seen as ``(outer, R, inner)`` through its strides (``R`` the reduced length); each
program owns one ``outer`` index (the slice ``o2 * sxo2 + o1 * sxo``: the kept dims outside the
inner one collapse to one or two groups) and ``BLOCK_I`` consecutive ``inner`` columns, so a tile
``[BLOCK_R, BLOCK_I]`` is read along the inner dim (coalesced when its stride is 1). It walks
``R`` in chunks of ``BLOCK_R`` twice: first for the per-column (max, sum of exp) with an online
rescale, in fp32, then (softmax, log_softmax) to write the output; logsumexp writes one value
per column after the first pass. When the column blocks are too few to fill the device, ``R`` is
shared by several programs: ``_strided_partials`` writes each chunk's (max, sum) to a workspace,
and ``_strided_finish`` merges a column's partials and writes its chunk (or the logsumexp).

Variants, chosen by constexprs (the launcher's config; all off by default):

* ``EVEN``: every chunk is full (``R % BLOCK_R == 0`` and ``INNER % BLOCK_I == 0``, checked by the
  launcher): loads and stores carry no mask.
* ``ONE_PASS`` (``BLOCK_R >= R``, one program per column block): the column is read once into
  registers and written from them (no second read of ``x``). With ``TAIL`` > 0 (``BLOCK_R < R <=
  BLOCK_R + TAIL``), R is held in two tiles, ``BLOCK_R`` rows and ``TAIL`` more, so that an R
  which is not a power of two pads to less (R = 150: 128 + 32 rows, not 256; R = 96: 64 + 32, no
  padding at all).
* ``ACC_2D``: the first pass keeps a running (max, sum) per element of the tile, one exp per
  element and no reduction across threads inside the loop; the rows of the tile are merged once
  after it (the default reduces each chunk over its rows: three reductions, each through shared
  memory and a barrier, per chunk).
* ``PREFETCH``: both passes load chunk ``k + 1`` before working on chunk ``k`` (a register double
  buffer: twice the bytes in flight per program; Triton's ``num_stages`` does not pipeline these
  loads, which feed no ``dot``). With ``EVEN`` the load after the last chunk re-reads the last
  one (in bounds, unmasked) rather than being masked.
* ``TMA`` (inner dim unit-stride, 16-byte aligned strides; the launcher checks): both passes read
  through a tensor descriptor over ``(R, INNER)`` (Hopper's TMA, zero-filled out of bounds) in a
  ``tl.range`` of ``STAGES`` stages, which Triton does pipeline (shared-memory buffers, several
  chunks in flight); ``ACC_2D`` and ``PREFETCH`` do not apply to it.
* ``I32`` (``ONE_PASS``): a tile's offsets within its slab in 32 bits (the launcher checks they
  fit), not 64: the pointers of a tile of 64 elements a thread took 176 registers at 8 warps
  (one program per SM), 128 in 32 bits (ptxas for sm_90a, 16 x 1024 bf16).
* ``FAST_EXP`` (a GPU only: inline PTX): every exp of a tile element is one ``ex2.approx.ftz`` (a
  result below 2**-126 is 0), without ``tl.exp``'s scaling of inputs whose result is subnormal.
* ``REVERSE`` (split R only): the finish takes its programs in the reverse of the partials' order.
* ``COOP`` (softmax, log_softmax; :func:`_strided_coop`): ``R`` cut into ``SPLIT_R`` tiles of
  ``BLOCK_R`` rows held by a group of programs in one launch, which exchange their columns'
  partials and each write their tile from registers: x read once where ``R`` is too long for one
  program's tile, with the tile's rows as wide as a cache line (``ONE_PASS`` over R = 1024 in bf16
  holds 16 columns, 32-byte pieces of each row). Off by default: on an H200 every program waits
  for its group with its tile held, and it ran bf16 softmax over dim 1 of 32 x 1024 x 64 x 64 in
  237 us at best against ``ONE_PASS``'s 194, dim 0 of 4096 x 4096 in 43.5 against 36.3; only the
  transposed 16384 x 4096 gained (121.4 against 125.9; ``sweep_strided_configs.py --grid coop``).
* ``KEEP_X`` (softmax, log_softmax): the pass that reads ``x`` for the columns' stats marks its
  lines to stay in L2 before others (``evict_last``), and the pass that reads it again to write
  marks them to go first (``evict_first``) and writes the output with streaming stores (``.cs``),
  so that the second read finds more of ``x`` in L2.

Special values follow torch: a column of only -inf gives -inf (logsumexp) or NaN (softmax,
log_softmax: 0/0); a NaN anywhere in a column gives NaN; +inf gives +inf for logsumexp and
NaN for softmax/log_softmax (inf - inf), as torch's kernels do.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .exchange import _await_words, _publish_words, _ticket
from .row_math import _exp, _ld


@triton.jit
def _load(ptrs, mask, other, EVEN: tl.constexpr, EV: tl.constexpr):
    """A tile in fp32, with L2 eviction hint ``EV`` (as :func:`~dispatch_triton.row_math._ld`: 1 evict_first,
    2 evict_last)."""
    return _ld(ptrs, mask, EV, other, EVEN).to(tl.float32)


@triton.jit
def _store(ptrs, y, mask, EVEN: tl.constexpr, EV: tl.constexpr = 0):
    """``EV`` 1: a streaming store (``.cs``), whose lines leave L2 first."""
    if EV == 1:
        if EVEN:
            tl.store(ptrs, y, cache_modifier=".cs")
        else:
            tl.store(ptrs, y, mask=mask, cache_modifier=".cs")
    else:
        if EVEN:
            tl.store(ptrs, y)
        else:
            tl.store(ptrs, y, mask=mask)


@triton.jit
def _descriptor(base, R, INNER, sxr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr, TMA: tl.constexpr):
    """A tensor descriptor over the ``(R, INNER)`` slab at ``base`` (inner unit-stride) with
    ``TMA``; else ``base`` itself (unused)."""
    if TMA:
        d = tl.make_tensor_descriptor(base, shape=[R, INNER], strides=[sxr, 1], block_shape=[BLOCK_R, BLOCK_I])
    else:
        d = base
    return d


@triton.jit
def _at(base, col_base, rows, cols, s_r, s_i, I32: tl.constexpr):
    """Pointers to the ``[rows, cols]`` tile of a slab at ``base`` (``col_base``: its columns'
    pointers, 64-bit), strides ``s_r`` and ``s_i``: with ``I32`` the offsets in 32 bits (the launcher
    checks they fit), else ``col_base`` plus 64-bit row offsets."""
    if I32:
        ptrs = base + (rows[:, None] * s_r + cols[None, :] * s_i)
    else:
        ptrs = col_base + rows.to(tl.int64)[:, None] * s_r
    return ptrs


@triton.jit
def _chunk(x_base, sxr, r0, rr, stop, cmask, other, EVEN: tl.constexpr, EV: tl.constexpr):
    """Rows ``r0 + rr`` (those below ``stop``) of the program's columns, in fp32."""
    r = r0 + rr
    mask = (r < stop)[:, None] & cmask[None, :]
    return _load(x_base + r.to(tl.int64)[:, None] * sxr, mask, other, EVEN, EV)


@triton.jit
def _next_start(r0, stop, BLOCK_R: tl.constexpr, EVEN: tl.constexpr):
    """Where the chunk after the one at ``r0`` starts: past ``stop`` it is masked out, or with
    ``EVEN`` (no masks) the last chunk again."""
    if EVEN:
        nxt = tl.minimum(r0 + BLOCK_R, stop - BLOCK_R)
    else:
        nxt = r0 + BLOCK_R
    return nxt


@triton.jit
def _write_chunk(o_base, sor, v, r, stop, cmask, safe, inv, log_s, OP: tl.constexpr, EVEN: tl.constexpr,
                 FAST_EXP: tl.constexpr, EV: tl.constexpr):
    """Store softmax (``OP`` 0) or log_softmax (1) of the chunk ``v`` at rows ``r`` from the columns' stats."""
    mask = (r < stop)[:, None] & cmask[None, :]
    if OP == 0:
        y = _exp(v - safe[None, :], FAST_EXP) * inv[None, :]
    else:
        y = (v - safe[None, :]) - log_s[None, :]
    _store(o_base + r.to(tl.int64)[:, None] * sor, y.to(o_base.dtype.element_ty), mask, EVEN, EV)


@triton.jit
def _write_pass(x_base, o_base, sxr, sor, start, stop, cmask, safe, inv, log_s, OP: tl.constexpr,
                BLOCK_R: tl.constexpr, EVEN: tl.constexpr, PREFETCH: tl.constexpr,
                desc, c0, TMA: tl.constexpr, STAGES: tl.constexpr, FAST_EXP: tl.constexpr, EV: tl.constexpr):
    """softmax (``OP`` 0) or log_softmax (1) of rows ``[start, stop)`` from the columns' stats
    (``EV`` 1: x read and the output written as lines to evict first)."""
    rr = tl.arange(0, BLOCK_R)
    if TMA:
        for r0 in tl.range(start, stop, BLOCK_R, num_stages=STAGES):
            v = desc.load([r0, c0]).to(tl.float32)
            _write_chunk(o_base, sor, v, r0 + rr, stop, cmask, safe, inv, log_s, OP, EVEN, FAST_EXP, EV)
    else:
        if PREFETCH:
            v_next = _chunk(x_base, sxr, start, rr, stop, cmask, 0.0, EVEN, EV)
        for r0 in range(start, stop, BLOCK_R):
            if PREFETCH:
                v = v_next
                v_next = _chunk(x_base, sxr, _next_start(r0, stop, BLOCK_R, EVEN), rr, stop, cmask, 0.0, EVEN, EV)
            else:
                v = _chunk(x_base, sxr, r0, rr, stop, cmask, 0.0, EVEN, EV)
            _write_chunk(o_base, sor, v, r0 + rr, stop, cmask, safe, inv, log_s, OP, EVEN, FAST_EXP, EV)


@triton.jit
def _online_update(m, s, nan, v):
    """The columns' running (max, sum of exp at that max, NaN seen) after the chunk ``v``."""
    nan = tl.maximum(nan, tl.max((v != v).to(tl.int32), 0))
    new_m = tl.maximum(m, tl.max(v, 0))
    safe = tl.where(new_m == float("-inf"), 0.0, new_m)
    s = s * tl.exp(m - safe) + tl.sum(tl.exp(v - safe[None, :]), 0)
    return new_m, s, nan


@triton.jit
def _column_stats(x_base, sxr, start, stop, cmask, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr,
                  EVEN: tl.constexpr, ACC_2D: tl.constexpr, PREFETCH: tl.constexpr,
                  desc, c0, TMA: tl.constexpr, STAGES: tl.constexpr, FAST_EXP: tl.constexpr, EV: tl.constexpr):
    """(max, sum of exp(x - max), NaN seen) per column over rows ``[start, stop)``, in fp32 (``EV``
    2: x's lines kept in L2 before others, for a second pass)."""
    rr = tl.arange(0, BLOCK_R)
    if not TMA:
        if PREFETCH:
            v_next = _chunk(x_base, sxr, start, rr, stop, cmask, float("-inf"), EVEN, EV)
    m = tl.full([BLOCK_I], float("-inf"), tl.float32)  # the TMA and plain loops' running stats
    s = tl.zeros([BLOCK_I], tl.float32)
    nan = tl.zeros([BLOCK_I], tl.int32)
    if TMA:
        for r0 in tl.range(start, stop, BLOCK_R, num_stages=STAGES):
            v = desc.load([r0, c0]).to(tl.float32)
            if not EVEN:  # out of bounds reads as 0, and rows past a split's stop are the next split's
                v = tl.where(((r0 + rr) < stop)[:, None] & cmask[None, :], v, float("-inf"))
            m, s, nan = _online_update(m, s, nan, v)
    elif ACC_2D:
        # per element of the tile: running max (NaN once a NaN was seen) and sum at that max
        m2 = tl.full([BLOCK_R, BLOCK_I], float("-inf"), tl.float32)
        s2 = tl.zeros([BLOCK_R, BLOCK_I], tl.float32)
        for r0 in range(start, stop, BLOCK_R):
            if PREFETCH:
                v = v_next
                v_next = _chunk(x_base, sxr, _next_start(r0, stop, BLOCK_R, EVEN), rr, stop, cmask,
                                float("-inf"), EVEN, EV)
            else:
                v = _chunk(x_base, sxr, r0, rr, stop, cmask, float("-inf"), EVEN, EV)
            lo = tl.minimum(m2, v)
            e = _exp(lo - tl.maximum(m2, v), FAST_EXP)  # one of exp(v - m), exp(m - v) is 1: the other only
            e = tl.where(lo == float("-inf"), 0.0, e)
            s2 = tl.where(v > m2, s2 * e + 1.0, s2 + e)
            m2 = tl.maximum(m2, v, propagate_nan=tl.PropagateNan.ALL)
        nan = tl.max((m2 != m2).to(tl.int32), 0)
        m2 = tl.where(m2 != m2, float("-inf"), m2)
        m = tl.max(m2, 0)
        safe = tl.where(m == float("-inf"), 0.0, m)
        s = tl.sum(tl.where(s2 == 0.0, 0.0, s2 * tl.exp(m2 - safe[None, :])), 0)
    else:
        for r0 in range(start, stop, BLOCK_R):
            if PREFETCH:
                v = v_next
                v_next = _chunk(x_base, sxr, _next_start(r0, stop, BLOCK_R, EVEN), rr, stop, cmask,
                                float("-inf"), EVEN, EV)
            else:
                v = _chunk(x_base, sxr, r0, rr, stop, cmask, float("-inf"), EVEN, EV)
            m, s, nan = _online_update(m, s, nan, v)
    return m, s, nan


@triton.jit
def _held_out(v, e, safe, inv, log_s, OP: tl.constexpr):
    """softmax (``OP`` 0: ``e`` = exp(v - safe) times ``inv``) or log_softmax (1) of a tile ``v`` held
    in registers, from its columns' stats."""
    if OP == 0:
        y = e * inv[None, :]
    else:
        y = (v - safe[None, :]) - log_s[None, :]  # the exact difference first, as torch
    return y


@triton.jit
def _lse_store(ptrs, m, s, nan, cmask, EVEN: tl.constexpr):
    safe = tl.where(m == float("-inf"), 0.0, m)
    res = safe + tl.log(s)
    res = tl.where(m == float("-inf"), float("-inf"), res)
    res = tl.where(m == float("inf"), float("inf"), res)
    res = tl.where(nan > 0, float("nan"), res)
    _store(ptrs, res.to(ptrs.dtype.element_ty), cmask, EVEN)


@triton.jit
def _strided_kernel(x_ptr, out_ptr, R, INNER, n_iblocks, outer1, sxo2, sxo, sxr, sxi, soo2, soo, sor, soi,
                    OP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr,
                    EVEN: tl.constexpr, ONE_PASS: tl.constexpr, ACC_2D: tl.constexpr, PREFETCH: tl.constexpr,
                    TMA: tl.constexpr, STAGES: tl.constexpr, FAST_EXP: tl.constexpr, KEEP_X: tl.constexpr,
                    TAIL: tl.constexpr = 0, I32: tl.constexpr = 0):
    pid = tl.program_id(0)
    o = (pid // n_iblocks).to(tl.int64)
    o2, o1 = o // outer1, o % outer1  # the outer slice: two groups of kept dims at most
    xo = o2 * sxo2 + o1 * sxo
    oo = o2 * soo2 + o1 * soo
    c0 = (pid % n_iblocks) * BLOCK_I
    cols = c0 + tl.arange(0, BLOCK_I)
    desc = _descriptor(x_ptr + xo, R, INNER, sxr, BLOCK_R, BLOCK_I, TMA)
    cmask = cols < INNER
    x_base = x_ptr + xo + cols.to(tl.int64)[None, :] * sxi
    o_base = out_ptr + oo + cols.to(tl.int64)[None, :] * soi
    rr = tl.arange(0, BLOCK_R)
    if ONE_PASS:  # the whole of R in one tile (or two, with TAIL): read once, written from registers
        mask = (rr < R)[:, None] & cmask[None, :]
        v = _load(_at(x_ptr + xo, x_base, rr, cols, sxr, sxi, I32), mask, float("-inf"), EVEN, 0)
        m = tl.max(v, 0)
        if TAIL > 0:  # rows BLOCK_R .. BLOCK_R + TAIL - 1
            rt = BLOCK_R + tl.arange(0, TAIL)
            mask_t = (rt < R)[:, None] & cmask[None, :]
            vt = _load(_at(x_ptr + xo, x_base, rt, cols, sxr, sxi, I32), mask_t, float("-inf"), EVEN, 0)
            m = tl.maximum(m, tl.max(vt, 0))
        safe = tl.where(m == float("-inf"), 0.0, m)
        e = _exp(v - safe[None, :], FAST_EXP)
        s = tl.sum(e, 0)
        if TAIL > 0:
            et = _exp(vt - safe[None, :], FAST_EXP)
            s += tl.sum(et, 0)
        if OP == 2:
            nan = tl.max((v != v).to(tl.int32), 0)
            if TAIL > 0:
                nan = tl.maximum(nan, tl.max((vt != vt).to(tl.int32), 0))
            _lse_store(out_ptr + oo + cols.to(tl.int64) * soi, m, s, nan, cmask, EVEN)
        else:
            inv = 1.0 / s
            log_s = tl.log(s)
            y = _held_out(v, e, safe, inv, log_s, OP)
            o_rr = _at(out_ptr + oo, o_base, rr, cols, sor, soi, I32)
            _store(o_rr, y.to(out_ptr.dtype.element_ty), mask, EVEN)
            if TAIL > 0:
                yt = _held_out(vt, et, safe, inv, log_s, OP)
                o_rt = _at(out_ptr + oo, o_base, rt, cols, sor, soi, I32)
                _store(o_rt, yt.to(out_ptr.dtype.element_ty), mask_t, EVEN)
    else:
        m, s, nan = _column_stats(x_base, sxr, 0, R, cmask, BLOCK_R, BLOCK_I, EVEN, ACC_2D, PREFETCH, desc, c0, TMA,
                                  STAGES, FAST_EXP, KEEP_X * 2)
        safe = tl.where(m == float("-inf"), 0.0, m)
        if OP == 2:  # logsumexp: one value per column
            _lse_store(out_ptr + oo + cols.to(tl.int64) * soi, m, s, nan, cmask, EVEN)
        else:
            if ACC_2D:
                s = tl.where((nan > 0) | (m == float("inf")), float("nan"), s)  # as the chunked merge gives
            # log_softmax = (x - max) - log(sum): exact difference first, as torch
            _write_pass(x_base, o_base, sxr, sor, 0, R, cmask, safe, 1.0 / s, tl.log(s), OP, BLOCK_R, EVEN, PREFETCH,
                        desc, c0, TMA, STAGES, FAST_EXP, KEEP_X)


# -- R split over several programs: partial (max, sum) per chunk of R, then a merge that writes ------

@triton.jit
def _strided_partials(x_ptr, ws_ptr, R, INNER, n_iblocks, outer1, sxo2, rows_per_split, n_splits, sxo, sxr, sxi,
                      BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr, EVEN: tl.constexpr, ACC_2D: tl.constexpr,
                      PREFETCH: tl.constexpr, TMA: tl.constexpr, STAGES: tl.constexpr, FAST_EXP: tl.constexpr,
                      KEEP_X: tl.constexpr):
    """Program (column block, split): the (max, sum of exp) of its chunk of R, for its columns, into
    ``ws`` as ``[2, outer, n_splits, INNER]`` fp32 (a column holding NaN stores NaN as its max)."""
    pid = tl.program_id(0)
    sp = tl.program_id(1)
    o = (pid // n_iblocks).to(tl.int64)
    o2, o1 = o // outer1, o % outer1  # the outer slice: two groups of kept dims at most
    xo = o2 * sxo2 + o1 * sxo
    c0 = (pid % n_iblocks) * BLOCK_I
    cols = c0 + tl.arange(0, BLOCK_I)
    desc = _descriptor(x_ptr + xo, R, INNER, sxr, BLOCK_R, BLOCK_I, TMA)
    cmask = cols < INNER
    x_base = x_ptr + xo + cols.to(tl.int64)[None, :] * sxi
    start = sp * rows_per_split
    stop = tl.minimum(start + rows_per_split, R)
    m, s, nan = _column_stats(x_base, sxr, start, stop, cmask, BLOCK_R, BLOCK_I, EVEN, ACC_2D, PREFETCH, desc, c0,
                              TMA, STAGES, FAST_EXP, KEEP_X * 2)
    m = tl.where(nan > 0, float("nan"), m)
    slot = (o * n_splits + sp) * INNER + cols
    plane = tl.num_programs(0) // n_iblocks * n_splits * INNER
    _store(ws_ptr + slot, m, cmask, EVEN)
    _store(ws_ptr + plane + slot, s, cmask, EVEN)


@triton.jit
def _partials(ws_ptr, plane, o, n_splits, INNER, splits, cols, cmask):
    """The partials ``splits`` of the columns from ``ws``: (max with NaN as -inf, sum, NaN seen)."""
    pmask = (splits < n_splits)[:, None] & cmask[None, :]
    slot = (o * n_splits + splits[:, None]) * INNER + cols[None, :]
    m_p = tl.load(ws_ptr + slot, mask=pmask, other=float("-inf"))
    s_p = tl.load(ws_ptr + plane + slot, mask=pmask, other=0.0)
    nan = tl.max((m_p != m_p).to(tl.int32), 0)
    return tl.where(m_p != m_p, float("-inf"), m_p), s_p, nan


@triton.jit
def _merge_partials(ws_ptr, o, n_splits, n_iblocks, INNER, cols, cmask, BLOCK_S: tl.constexpr, BLOCK_I: tl.constexpr,
                    MERGE_S: tl.constexpr):
    """The columns' (max, sum of exp at that max, NaN seen) from their ``n_splits`` partials in ``ws``
    (``[2, outer, n_splits, INNER]``): in one ``[BLOCK_S, BLOCK_I]`` tile, or where that is too large
    to hold (``MERGE_S < BLOCK_S``) ``MERGE_S`` partials a step with a running rescale."""
    plane = tl.num_programs(0) // n_iblocks * n_splits * INNER
    if MERGE_S >= BLOCK_S:
        m_p, s_p, nan = _partials(ws_ptr, plane, o, n_splits, INNER, tl.arange(0, BLOCK_S), cols, cmask)
        m = tl.max(m_p, 0)
        safe = tl.where(m == float("-inf"), 0.0, m)
        s = tl.sum(s_p * tl.exp(m_p - safe[None, :]), 0)
    else:
        m = tl.full([BLOCK_I], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK_I], tl.float32)
        nan = tl.zeros([BLOCK_I], tl.int32)
        for k0 in range(0, n_splits, MERGE_S):
            m_p, s_p, nan_p = _partials(ws_ptr, plane, o, n_splits, INNER, k0 + tl.arange(0, MERGE_S), cols, cmask)
            nan = tl.maximum(nan, nan_p)
            new_m = tl.maximum(m, tl.max(m_p, 0))
            safe = tl.where(new_m == float("-inf"), 0.0, new_m)
            s = s * tl.exp(m - safe) + tl.sum(s_p * tl.exp(m_p - safe[None, :]), 0)
            m = new_m
    s = tl.where(nan > 0, float("nan"), s)
    return m, s, nan


@triton.jit
def _strided_finish(x_ptr, out_ptr, ws_ptr, R, INNER, n_iblocks, outer1, sxo2, rows_per_split, n_splits, sxo, sxr,
                    sxi, soo2, soo, sor, soi, OP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr,
                    BLOCK_S: tl.constexpr, EVEN: tl.constexpr, PREFETCH: tl.constexpr, TMA: tl.constexpr,
                    STAGES: tl.constexpr, FAST_EXP: tl.constexpr, REVERSE: tl.constexpr, MERGE_S: tl.constexpr,
                    KEEP_X: tl.constexpr):
    """Program (column block, split): merge the partials of its columns (``MERGE_S`` a step, see
    :func:`_merge_partials`), then write its chunk of R (softmax, log_softmax) or, with one split,
    the columns' logsumexp. With ``REVERSE`` the programs take their (column block, split) in the
    reverse of the launch order: the first to run read the slabs that the partials' last programs
    read, the likeliest still in L2."""
    if REVERSE:
        pid = tl.num_programs(0) - 1 - tl.program_id(0)
        sp = tl.num_programs(1) - 1 - tl.program_id(1)
    else:
        pid = tl.program_id(0)
        sp = tl.program_id(1)
    o = (pid // n_iblocks).to(tl.int64)
    o2, o1 = o // outer1, o % outer1  # the outer slice: two groups of kept dims at most
    xo = o2 * sxo2 + o1 * sxo
    oo = o2 * soo2 + o1 * soo
    c0 = (pid % n_iblocks) * BLOCK_I
    cols = c0 + tl.arange(0, BLOCK_I)
    cmask = cols < INNER
    m, s, nan = _merge_partials(ws_ptr, o, n_splits, n_iblocks, INNER, cols, cmask, BLOCK_S, BLOCK_I, MERGE_S)
    safe = tl.where(m == float("-inf"), 0.0, m)
    if OP == 2:
        _lse_store(out_ptr + oo + cols.to(tl.int64) * soi, m, s, nan, cmask, EVEN)
    else:
        x_base = x_ptr + xo + cols.to(tl.int64)[None, :] * sxi
        o_base = out_ptr + oo + cols.to(tl.int64)[None, :] * soi
        start = sp * rows_per_split
        stop = tl.minimum(start + rows_per_split, R)
        # log_softmax = (x - max) - log(sum): exact difference first, as torch
        desc = _descriptor(x_ptr + xo, R, INNER, sxr, BLOCK_R, BLOCK_I, TMA)
        _write_pass(x_base, o_base, sxr, sor, start, stop, cmask, safe, 1.0 / s, tl.log(s), OP, BLOCK_R, EVEN,
                    PREFETCH, desc, c0, TMA, STAGES, FAST_EXP, KEEP_X)


# -- R shared by programs that meet in one launch (COOP): x read once, whatever R -------------------

@triton.jit
def _strided_coop(x_ptr, out_ptr, slot_ptr, R, INNER, n_iblocks, outer1, sxo2, sxo, sxr, sxi, soo2, soo, sor, soi,
                  OP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr, SPLIT: tl.constexpr,
                  SPLIT_P2: tl.constexpr, EVEN: tl.constexpr, FAST_EXP: tl.constexpr, I32: tl.constexpr,
                  PHASE: tl.constexpr):
    """softmax (``OP`` 0) or log_softmax (1) with ``R`` cut into ``SPLIT`` tiles of ``BLOCK_R`` rows, one
    per program of a group that shares a column block: each holds its tile in registers, publishes
    its columns' (max, sum of exp at that max) as tagged words (:mod:`~dispatch_triton.exchange`),
    waits for the group's others, merges them (the same numbers on every program of the group) and
    writes its tile from registers. A program's group and tile come from its ticket, taken in
    dispatch order, so a group waits only on programs that are running or next to run. Words of
    a group: the ``SPLIT`` tiles' maxes, then their sums, ``BLOCK_I`` each, from word
    ``64 + group * 2 * SPLIT * BLOCK_I`` of the slot buffer. Under the interpreter, which runs
    programs one after another, two launches: ``PHASE`` 1 publishes, ``PHASE`` 2 awaits (tag 1)
    and writes."""
    tid = tl.program_id(0)
    tag = tid.to(tl.int64) * 0 + 1
    if PHASE == 0:
        tid, tag = _ticket(slot_ptr, tl.num_programs(0))
    grp = tid // SPLIT
    c = tid % SPLIT
    o = (grp // n_iblocks).to(tl.int64)
    o2, o1 = o // outer1, o % outer1  # the outer slice: two groups of kept dims at most
    xo = o2 * sxo2 + o1 * sxo
    oo = o2 * soo2 + o1 * soo
    cols = (grp % n_iblocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    cmask = cols < INNER
    rr = c * BLOCK_R + tl.arange(0, BLOCK_R)
    mask = (rr < R)[:, None] & cmask[None, :]
    x_base = x_ptr + xo + cols.to(tl.int64)[None, :] * sxi
    v = _load(_at(x_ptr + xo, x_base, rr, cols, sxr, sxi, I32), mask, float("-inf"), EVEN, 0)
    k = tl.arange(0, BLOCK_I)
    base = 64 + grp.to(tl.int64) * (2 * SPLIT * BLOCK_I)
    if PHASE != 2:
        m = tl.max(v, 0)
        safe = tl.where(m == float("-inf"), 0.0, m)
        s = tl.sum(_exp(v - safe[None, :], FAST_EXP), 0)  # NaN where the tile holds a NaN (or +inf)
        _publish_words(slot_ptr, base + c * BLOCK_I, m, k, tag)
        _publish_words(slot_ptr, base + (SPLIT + c) * BLOCK_I, s, k, tag)
    if PHASE != 1:
        pm, live = _await_words(slot_ptr, base, SPLIT, tag, BLOCK_I, SPLIT_P2)
        ps, _ = _await_words(slot_ptr, base + SPLIT * BLOCK_I, SPLIT, tag, BLOCK_I, SPLIT_P2)
        pm = tl.where(live[:, None], pm, float("-inf"))
        big = tl.max(pm, 0)
        safe = tl.where(big == float("-inf"), 0.0, big)
        # a tile of -inf only adds 0; a NaN sum (NaN or +inf in the column) makes the column NaN, as torch
        total = tl.sum(tl.where(ps == 0.0, 0.0, ps * tl.exp(pm - safe[None, :])), 0)
        if OP == 0:
            y = _exp(v - safe[None, :], FAST_EXP) * (1.0 / total)[None, :]
        else:
            y = (v - safe[None, :]) - tl.log(total)[None, :]  # the exact difference first, as torch
        o_base = out_ptr + oo + cols.to(tl.int64)[None, :] * soi
        _store(_at(out_ptr + oo, o_base, rr, cols, sor, soi, I32), y.to(out_ptr.dtype.element_ty), mask, EVEN)
