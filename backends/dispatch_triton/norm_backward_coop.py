"""The one-launch Triton backward of long rows (``_norm_bwd_coop``, GPU only): persistent programs in
groups, each holding one chunk of a row, that exchange the partials of a row's chunks (layer_norm's
four, rms_norm's two; with the forward's statistics, one or two) through epoch-tagged words in the
stream's slot buffer, as the softmax split path does (see :mod:`dispatch_triton.exchange`).

Its per-chunk arithmetic is the two-launch backward's, its dweight/dbias partials and in-launch
column sums the rows backward's (both in :mod:`dispatch_triton.norm_backward_kernels`); the host
side is :mod:`dispatch_triton.norm_backward`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .exchange import _await_words, _publish_words, _ticket
from .row_math import _cvt
from .norm_backward_kernels import (_bwd_partial, _chunk_dx, _chunk_start, _finish_columns, _merge4, _saved_dx,
                                    _saved_partial, _saved_stats, _store_partials)
from .norm_stats import _part_counts, _row_shift, _sum2


@triton.jit
def _words(IS_RMS: tl.constexpr, SAVED: tl.constexpr):
    # tagged words a chunk publishes: rms_norm's dx needs sum x^2 and sum g x only; with the
    # forward's statistics (SAVED) sum g * xhat (and layer_norm's sum g)
    if SAVED:
        if IS_RMS:
            return 1
        else:
            return 2
    elif IS_RMS:
        return 2
    else:
        return 4


@triton.jit
def _publish(slot_ptr, idx, s1, m2, sgd, sg, tag, IS_RMS: tl.constexpr):
    # a chunk's partials as tagged words from idx (exchange._publish_words, one vector exchange):
    # rms_norm's two (m2, sgd), layer_norm's four
    if IS_RMS:
        k = tl.arange(0, 2)
        v = tl.where(k == 0, m2, sgd)
    else:
        k = tl.arange(0, 4)
        v = tl.where(k == 0, s1, tl.where(k == 1, m2, tl.where(k == 2, sgd, sg)))
    _publish_words(slot_ptr, idx, v, k, tag)


@triton.jit
def _gather(slot_ptr, base, S, tag, N, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr):
    # wait for the S chunks of a row's partials (_publish; exchange._await_words), then the row's
    # (sum d, M2, sum g (x - mean), sum g), merged in chunk order (_merge4; the same order on every
    # program: same result)
    if IS_RMS:
        vals, jm = _await_words(slot_ptr, base, S, tag, 2, CHUNKS_P2)
        m2, sgd = tl.split(vals)
        m2t, sgdt = _sum2(m2, sgd)  # 0 past the last chunk
        zero = tl.full([], 0.0, tl.float32)
        return zero, m2t, sgdt, zero
    else:
        vals, jm = _await_words(slot_ptr, base, S, tag, 4, CHUNKS_P2)
        even, odd = tl.split(tl.reshape(vals, [CHUNKS_P2, 2, 2]))  # [j, h] = word 2h, word 2h + 1
        s1, sgd = tl.split(even)
        m2, sg = tl.split(odd)
        counts = tl.where(jm, _part_counts(tl.arange(0, CHUNKS_P2), N, BLOCK_N), 0.0)
        return _merge4(s1, m2, sgd, sg, counts, N, IS_RMS)


@triton.jit
def _coop_chunk(x_ptr, dy_ptr, st_ptr, row, stride_xm, stride_dym, cols, M, N, IS_RMS: tl.constexpr,
                SAVED: tl.constexpr):
    # one program's raw chunks of x and dy of ``row`` (zeros past the row's end and past the last
    # row), in the input's dtype, and the row's two statistics (r0, r1): (shift, 0) (_row_shift,
    # fp32), or with SAVED its saved (mean, rstd)
    r64 = tl.cast(row, tl.int64)
    lim = tl.where(row < M, N, 0)
    x = tl.load(x_ptr + r64 * stride_xm + cols, mask=cols < lim, other=0.0, eviction_policy="evict_first")
    dy = tl.load(dy_ptr + r64 * stride_dym + cols, mask=cols < lim, other=0.0, eviction_policy="evict_first")
    if SAVED:
        r0, r1 = _saved_stats(st_ptr, row, M, IS_RMS)
    else:
        r0 = _row_shift(x_ptr, r64 * stride_xm, lim, IS_RMS)
        r1 = r0 * 0.0
    return x, dy, r0, r1


@triton.jit
def _chunk_g(xr, dyr, w, HAS_WEIGHT: tl.constexpr):
    # a chunk's x, dy and g = dy * w in fp32
    x = xr.to(tl.float32)
    dy = dyr.to(tl.float32)
    if HAS_WEIGHT:
        g = dy * w
    else:
        g = dy
    return x, dy, g


@triton.jit
def _coop_publish(slot_ptr, idx, xr, dyr, r0, r1, w, cmask, nc, tag, HAS_WEIGHT: tl.constexpr,
                  IS_RMS: tl.constexpr, SAVED: tl.constexpr):
    # a chunk's partials (_bwd_partial about the shift r0; SAVED: _saved_partial about the saved
    # (mean, rstd) = (r0, r1)), published
    x, dy, g = _chunk_g(xr, dyr, w, HAS_WEIGHT)
    if SAVED:
        sgx, sg = _saved_partial(x, g, cmask, r0, r1, IS_RMS)
        if IS_RMS:
            k = tl.arange(0, 1)
            _publish_words(slot_ptr, idx, tl.zeros([1], tl.float32) + sgx, k, tag)
        else:
            k = tl.arange(0, 2)
            _publish_words(slot_ptr, idx, tl.where(k == 0, sgx, sg), k, tag)
    else:
        s1, m2, sgd, sg = _bwd_partial(x, g, cmask, r0, nc, IS_RMS)
        _publish(slot_ptr, idx, s1, m2, sgd, sg, tag, IS_RMS)


@triton.jit
def _gather_saved(slot_ptr, base, S, tag, IS_RMS: tl.constexpr, CHUNKS_P2: tl.constexpr):
    # the row's (sum g * xhat, sum g) once its S chunks' words (_coop_publish with SAVED) carry
    # this launch's tag, added in chunk order (the same on every program of the row)
    if IS_RMS:
        vals, jm = _await_words(slot_ptr, base, S, tag, 1, CHUNKS_P2)  # 0 past the last chunk
        return tl.sum(tl.sum(vals, 1), 0), tl.full([], 0.0, tl.float32)
    else:
        vals, jm = _await_words(slot_ptr, base, S, tag, 2, CHUNKS_P2)
        sgx, sg = tl.split(vals)
        return _sum2(sgx, sg)


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd_coop(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, o0_ptr, o1_ptr, slot_ptr, st_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr, SLOT_OFF: tl.constexpr, SAVED: tl.constexpr = False,
    FINISH: tl.constexpr = 0, FINISH_CW: tl.constexpr = 32, FINISH_BG: tl.constexpr = 1,
):
    # The backward of long rows in one launch: persistent programs in groups of S = cdiv(N,
    # BLOCK_N), each holding one chunk of a row (x and dy) in registers; it publishes the chunk's
    # partials (as _split_bwd's phase 1; rms_norm's two that its dx needs), waits for the other
    # chunks of the row (_gather), and writes its chunk of dx from registers: x and dy are read
    # once. Pipelined one row ahead (as the softmax split_pipe path): a program publishes the sums
    # of its NEXT row before it awaits this row's, so they have had a whole iteration to arrive,
    # and in the loop the row after next is already loading when the next row's sums wait for its
    # values (on an H100, against loading it after that publish: 1-8% off rows of 10K-262K at 64
    # rows or more, but layer_norm bf16 256 x 65536 2% slower; 4-32 rows -5% to +3%). Not before
    # the first row's publish: there it cost 4-32 rows up to 15%. The forward kernel keeps the
    # other order (_coop_fwd)
    # A program's group comes from a ticket taken in dispatch order, and the tag of its words
    # from the launch's epoch (see dispatch_triton.exchange): only the group holding the
    # highest ticket may wait on programs not yet resident, and the host sizes the grid so that
    # every program is resident. dweight/dbias as _norm_bwd: a row of partials per group
    # (p_ptr[group, :]), reduced by _column_sum, or with FINISH > 0 in this launch by the FINISH
    # programs that finish last (_finish_columns, FINISH_CW columns a slice, ticketed on word 1 of
    # the slot buffer: word 0's tickets decide the groups, and a fast group may finish before
    # every program has taken one; o0/o1: the wanted ones of dweight and dbias). GPU only: the
    # interpreter runs programs one after another, where the sums could never meet (the two-launch
    # path serves it). SAVED: the rows' statistics come from the forward (st_ptr): a chunk
    # publishes sum g * xhat (and layer_norm's sum g) instead.
    DX_TY = dx_ptr.dtype.element_ty
    nprog = tl.num_programs(0)
    S = tl.cdiv(N, BLOCK_N)
    n_groups = nprog // S
    tid, tag = _ticket(slot_ptr, nprog)
    grp = tid // S
    c = tid % S
    cols, cmask, w, acc_w, acc_b = _chunk_start(w_ptr, c, N, HAS_WEIGHT, BLOCK_N)
    nc = tl.maximum(_part_counts(c, N, BLOCK_N), 1.0)
    NW = _words(IS_RMS, SAVED)
    xr, dyr, r0, r1 = _coop_chunk(x_ptr, dy_ptr, st_ptr, grp, stride_xm, stride_dym, cols, M, N, IS_RMS, SAVED)
    if grp < M:
        _coop_publish(slot_ptr, SLOT_OFF + tl.cast(grp, tl.int64) * S * NW + c * NW, xr, dyr, r0, r1, w, cmask, nc,
                      tag, HAS_WEIGHT, IS_RMS, SAVED)
    xr_n, dyr_n, r0_n, r1_n = _coop_chunk(x_ptr, dy_ptr, st_ptr, grp + n_groups, stride_xm, stride_dym, cols, M, N,
                                          IS_RMS, SAVED)
    for row in range(grp, M, n_groups):
        nrow = row + n_groups
        xr_nn, dyr_nn, r0_nn, r1_nn = _coop_chunk(x_ptr, dy_ptr, st_ptr, nrow + n_groups, stride_xm, stride_dym, cols,
                                                  M, N, IS_RMS, SAVED)
        if nrow < M:
            _coop_publish(slot_ptr, SLOT_OFF + tl.cast(nrow, tl.int64) * S * NW + c * NW, xr_n, dyr_n, r0_n, r1_n, w,
                          cmask, nc, tag, HAS_WEIGHT, IS_RMS, SAVED)
        r64 = tl.cast(row, tl.int64)
        if SAVED:
            sgx, sg = _gather_saved(slot_ptr, SLOT_OFF + r64 * S * NW, S, tag, IS_RMS, CHUNKS_P2)
        else:
            s1, m2, sgd, sg = _gather(slot_ptr, SLOT_OFF + r64 * S * NW, S, tag, N, IS_RMS, BLOCK_N, CHUNKS_P2)
        x, dy, g = _chunk_g(xr, dyr, w, HAS_WEIGHT)
        if SAVED:
            dx, xhat = _saved_dx(x, g, cmask, r0, r1, sgx, sg, N, IS_RMS)
        else:
            dx, xhat = _chunk_dx(x, g, cmask, s1, m2, sgd, sg, r0, N, eps, IS_RMS)
        tl.store(dx_ptr + r64 * stride_dxm + cols, _cvt(dx, DX_TY), mask=cmask, eviction_policy="evict_first")
        if WANT_DW:
            acc_w += dy * xhat
        if WANT_DB:
            acc_b += dy
        xr = xr_n
        dyr = dyr_n
        r0 = r0_n
        r1 = r1_n
        xr_n = xr_nn
        dyr_n = dyr_nn
        r0_n = r0_nn
        r1_n = r1_nn
    if grp < n_groups:
        _store_partials(p_ptr, p_off_b, grp, N, cols, cmask, acc_w, acc_b, WANT_DW, WANT_DB)
    if FINISH > 0:
        _finish_columns(p_ptr, p_off_b, o0_ptr, o1_ptr, slot_ptr + 1, nprog, n_groups, N, WANT_DW, WANT_DB, FINISH,
                        FINISH_CW, FINISH_BG)
