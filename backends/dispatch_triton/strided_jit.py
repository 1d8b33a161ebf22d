"""The Triton JIT kernels for softmax, log_softmax and logsumexp over a dim that is not unit-stride.

The input is seen as ``(outer, R, inner)`` through its strides (``R`` the reduced length); each
program owns one ``outer`` index and ``BLOCK_I`` consecutive ``inner`` columns, so a tile
``[BLOCK_R, BLOCK_I]`` is read along the inner dim (coalesced when its stride is 1). It walks
``R`` in chunks of ``BLOCK_R`` twice: first for the per-column (max, sum of exp) with an online
rescale, in fp32, then (softmax, log_softmax) to write the output; logsumexp writes one value
per column after the first pass. When the column blocks are too few to fill the device, ``R`` is
shared by several programs: ``_strided_partials`` writes each chunk's (max, sum) to a workspace,
and ``_strided_finish`` merges a column's partials and writes its chunk (or the logsumexp).

Special values follow torch: a column of only -inf gives -inf (logsumexp) or NaN (softmax,
log_softmax: 0/0); a NaN anywhere in a column gives NaN; +inf gives +inf for logsumexp and
NaN for softmax/log_softmax (inf - inf), as torch's kernels do.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _strided_kernel(x_ptr, out_ptr, R, INNER, n_iblocks, sxo, sxr, sxi, soo, sor, soi,
                    OP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    pid = tl.program_id(0)
    o = (pid // n_iblocks).to(tl.int64)
    cols = (pid % n_iblocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    cmask = cols < INNER
    x_base = x_ptr + o * sxo + cols.to(tl.int64)[None, :] * sxi
    o_base = out_ptr + o * soo + cols.to(tl.int64)[None, :] * soi
    rr = tl.arange(0, BLOCK_R)
    m = tl.full([BLOCK_I], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_I], tl.float32)
    nan = tl.zeros([BLOCK_I], tl.int32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + rr
        mask = (r < R)[:, None] & cmask[None, :]
        v = tl.load(x_base + r.to(tl.int64)[:, None] * sxr, mask=mask, other=float("-inf")).to(tl.float32)
        nan = tl.maximum(nan, tl.max((v != v).to(tl.int32), 0))
        new_m = tl.maximum(m, tl.max(v, 0))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        s = s * tl.exp(m - safe) + tl.sum(tl.exp(v - safe[None, :]), 0)
        m = new_m
    safe = tl.where(m == float("-inf"), 0.0, m)
    if OP == 2:  # logsumexp: one value per column
        res = safe + tl.log(s)
        res = tl.where(m == float("-inf"), float("-inf"), res)
        res = tl.where(m == float("inf"), float("inf"), res)
        res = tl.where(nan > 0, float("nan"), res)
        tl.store(out_ptr + o * soo + cols.to(tl.int64) * soi, res.to(out_ptr.dtype.element_ty), mask=cmask)
    else:
        inv = 1.0 / s
        log_s = tl.log(s)  # log_softmax = (x - max) - log(sum): exact difference first, as torch
        for r0 in range(0, R, BLOCK_R):
            r = r0 + rr
            mask = (r < R)[:, None] & cmask[None, :]
            v = tl.load(x_base + r.to(tl.int64)[:, None] * sxr, mask=mask, other=0.0).to(tl.float32)
            if OP == 0:
                y = tl.exp(v - safe[None, :]) * inv[None, :]
            else:
                y = (v - safe[None, :]) - log_s[None, :]
            tl.store(o_base + r.to(tl.int64)[:, None] * sor, y.to(out_ptr.dtype.element_ty), mask=mask)


# -- R split over several programs: partial (max, sum) per chunk of R, then a merge that writes ------

@triton.jit
def _strided_partials(x_ptr, ws_ptr, R, INNER, n_iblocks, rows_per_split, n_splits, sxo, sxr, sxi,
                      BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    """Program (column block, split): the (max, sum of exp) of its chunk of R, for its columns, into
    ``ws`` as ``[2, outer, n_splits, INNER]`` fp32 (a column holding NaN stores NaN as its max)."""
    pid = tl.program_id(0)
    sp = tl.program_id(1)
    o = (pid // n_iblocks).to(tl.int64)
    cols = (pid % n_iblocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    cmask = cols < INNER
    x_base = x_ptr + o * sxo + cols.to(tl.int64)[None, :] * sxi
    rr = tl.arange(0, BLOCK_R)
    m = tl.full([BLOCK_I], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_I], tl.float32)
    nan = tl.zeros([BLOCK_I], tl.int32)
    start = sp * rows_per_split
    stop = tl.minimum(start + rows_per_split, R)
    for r0 in range(start, stop, BLOCK_R):
        r = r0 + rr
        mask = (r < stop)[:, None] & cmask[None, :]
        v = tl.load(x_base + r.to(tl.int64)[:, None] * sxr, mask=mask, other=float("-inf")).to(tl.float32)
        nan = tl.maximum(nan, tl.max((v != v).to(tl.int32), 0))
        new_m = tl.maximum(m, tl.max(v, 0))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        s = s * tl.exp(m - safe) + tl.sum(tl.exp(v - safe[None, :]), 0)
        m = new_m
    m = tl.where(nan > 0, float("nan"), m)
    slot = (o * n_splits + sp) * INNER + cols
    plane = tl.num_programs(0) // n_iblocks * n_splits * INNER
    tl.store(ws_ptr + slot, m, mask=cmask)
    tl.store(ws_ptr + plane + slot, s, mask=cmask)


@triton.jit
def _strided_finish(x_ptr, out_ptr, ws_ptr, R, INNER, n_iblocks, rows_per_split, n_splits, sxo, sxr, sxi,
                    soo, sor, soi, OP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr,
                    BLOCK_S: tl.constexpr):
    """Program (column block, split): merge the partials of its columns, then write its chunk of R
    (softmax, log_softmax) or, with one split, the columns' logsumexp."""
    pid = tl.program_id(0)
    sp = tl.program_id(1)
    o = (pid // n_iblocks).to(tl.int64)
    cols = (pid % n_iblocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    cmask = cols < INNER
    splits = tl.arange(0, BLOCK_S)
    pmask = (splits < n_splits)[:, None] & cmask[None, :]
    slot = (o * n_splits + splits[:, None]) * INNER + cols[None, :]
    plane = tl.num_programs(0) // n_iblocks * n_splits * INNER
    m_p = tl.load(ws_ptr + slot, mask=pmask, other=float("-inf"))
    s_p = tl.load(ws_ptr + plane + slot, mask=pmask, other=0.0)
    nan = tl.max((m_p != m_p).to(tl.int32), 0)
    m_p = tl.where(m_p != m_p, float("-inf"), m_p)
    m = tl.max(m_p, 0)
    safe = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(s_p * tl.exp(m_p - safe[None, :]), 0)
    s = tl.where(nan > 0, float("nan"), s)
    if OP == 2:
        res = safe + tl.log(s)
        res = tl.where(m == float("-inf"), float("-inf"), res)
        res = tl.where(m == float("inf"), float("inf"), res)
        res = tl.where(nan > 0, float("nan"), res)
        tl.store(out_ptr + o * soo + cols.to(tl.int64) * soi, res.to(out_ptr.dtype.element_ty), mask=cmask)
    else:
        x_base = x_ptr + o * sxo + cols.to(tl.int64)[None, :] * sxi
        o_base = out_ptr + o * soo + cols.to(tl.int64)[None, :] * soi
        rr = tl.arange(0, BLOCK_R)
        inv = 1.0 / s
        log_s = tl.log(s)  # log_softmax = (x - max) - log(sum): exact difference first, as torch
        start = sp * rows_per_split
        stop = tl.minimum(start + rows_per_split, R)
        for r0 in range(start, stop, BLOCK_R):
            r = r0 + rr
            mask = (r < stop)[:, None] & cmask[None, :]
            v = tl.load(x_base + r.to(tl.int64)[:, None] * sxr, mask=mask, other=0.0).to(tl.float32)
            if OP == 0:
                y = tl.exp(v - safe[None, :]) * inv[None, :]
            else:
                y = (v - safe[None, :]) - log_s[None, :]
            tl.store(o_base + r.to(tl.int64)[:, None] * sor, y.to(out_ptr.dtype.element_ty), mask=mask)
