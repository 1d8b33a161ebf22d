"""The Triton JIT kernel for softmax, log_softmax and logsumexp over a dim that is not unit-stride.

The input is seen as ``(outer, R, inner)`` through its strides (``R`` the reduced length); each
program owns one ``outer`` index and ``BLOCK_I`` consecutive ``inner`` columns, so a tile
``[BLOCK_R, BLOCK_I]`` is read along the inner dim (coalesced when its stride is 1). It walks
``R`` in chunks of ``BLOCK_R`` twice: first for the per-column (max, sum of exp) with an online
rescale, in fp32, then (softmax, log_softmax) to write the output; logsumexp writes one value
per column after the first pass.

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
        shift = safe + tl.log(s)
        for r0 in range(0, R, BLOCK_R):
            r = r0 + rr
            mask = (r < R)[:, None] & cmask[None, :]
            v = tl.load(x_base + r.to(tl.int64)[:, None] * sxr, mask=mask, other=0.0).to(tl.float32)
            if OP == 0:
                y = tl.exp(v - safe[None, :]) * inv[None, :]
            else:
                y = v - shift[None, :]
            tl.store(o_base + r.to(tl.int64)[:, None] * sor, y.to(out_ptr.dtype.element_ty), mask=mask)
