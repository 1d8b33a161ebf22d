"""The Triton JIT kernel for row softmax, log_softmax and logsumexp, and its device helpers.

One JIT kernel, ``_softmax_kernel``, holds every path; the path is a tuned constexpr (``PATH``)
so that one Triton autotuner can choose among all of them:

``rows`` / ``onepass`` (PATH 0)
    A ``[ROWS, BLOCK_N]`` tile per program, ``BLOCK_N >= N``: the whole row is held in registers,
    read once, written once. ``ROWS > 1`` packs several short rows per program.
``online`` / ``split_online`` (PATH 1)
    Persistent programs; a row is cut into ``n_split`` segments (``SPLIT`` bounds it, 1 for
    ``online``). Each program streams its segment once to get a per-lane (max, sum) with one
    ``exp`` per element, then re-reads it (in reverse, so the most recent blocks are still in L2)
    to write the output. Works for any N; 3 memory passes unless the re-read hits L2.
``split`` (PATH 2)
    Persistent programs in groups of ``n_split = cdiv(N, BLOCK_N)``; each holds one chunk of a
    row in registers, publishes its partial (max, sum), waits for the other partials of the row,
    merges them and writes its chunk from registers: the row is read once and written once
    whatever its length. The next row's chunk is already in flight while the partials meet.
``split_pipe`` (PATH 3)
    ``split`` pipelined one row ahead: a program publishes the partial of its next row before it
    waits for this row's, so the partials of a row have had a whole iteration to arrive; chunks
    are held raw (input dtype) and the output is recomputed from them, which leaves registers
    for a second chunk in flight.

``chunks`` (PATH 4, logsumexp only)
    Persistent programs walk all chunks of all rows, each chunk held in registers while the next
    one loads, and write per-chunk (max, sum) partials; the last chunk of a row to arrive merges
    them (as ``split`` does for logsumexp). Nothing waits, the row is read once, one launch. Rows
    that are a whole number of chunks (``EVEN``) load without a mask an element.

The partials of the split paths meet through :mod:`dispatch_triton.exchange` (epoch-tagged words,
tickets that decide a program's group; the host caps ``n_split`` at the SM count, and one program
per SM always fits, so a group's programs are resident together). logsumexp needs no waiting: the
last segment of a row to arrive (an acq_rel counter that it resets) merges and writes, so its
``split`` path takes one program per chunk rather than persistent groups (``chunks``: persistent
programs over chunks). The Triton interpreter
runs programs one after another, so there partials could never meet in one launch: the split
paths then run as two launches (``PHASE`` 1 publishes, ``PHASE`` 2 merges and writes), the same
code minus the wait.

Semantics follow torch exactly: the input is first rounded to ``out_dtype`` (torch's ``dtype=``
casts before the op), everything accumulates in fp32, rows of all -inf give NaN for
softmax/log_softmax and -inf for logsumexp, a +inf gives NaN rows for softmax/log_softmax and
+inf for logsumexp, NaN propagates. logsumexp uses torch's own formula (max replaced by 0 when
infinite).

Op and path names and their codes live in :mod:`dispatch_triton.configs`; the host side that
sizes the grid and launches this kernel in :mod:`dispatch_triton.launch`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import _interpreting
from .exchange import _MAXS, _await_pairs, _publish, _ticket
from .window import _read_window, _write_window

_ROW_OFF = tl.constexpr(64)  # logsumexp's per-row arrival counters in the int32 sync buffer


# Under the interpreter (a compile-time False on the GPU, so its branches cost nothing there): it
# truncates fp32 -> bf16 where the GPU rounds to nearest even, so _cvt emulates the GPU; and it runs
# a reduction's combine function element by element in Python, so several sums are taken one by one
_INTERPRETED = tl.constexpr(_interpreting())


@triton.jit
def _ld(ptrs, mask, EV: tl.constexpr, other: tl.constexpr = 0.0, EVEN: tl.constexpr = False):
    # a load (``other`` where masked off; no mask with EVEN) with L2 eviction hint EV: 0 none,
    # 1 evict_first (read once), 2 evict_last (read again soon)
    if EV == 1:
        policy: tl.constexpr = "evict_first"
    elif EV == 2:
        policy: tl.constexpr = "evict_last"
    else:
        policy: tl.constexpr = ""
    if EVEN:
        v = tl.load(ptrs, eviction_policy=policy)
    else:
        v = tl.load(ptrs, mask=mask, other=other, eviction_policy=policy)
    return v


@triton.jit
def _cvt(x, TY: tl.constexpr):
    if _INTERPRETED:
        if TY == tl.bfloat16:
            xf = x.to(tl.float32)
            b = xf.to(tl.uint32, bitcast=True)
            b = b + 0x7FFF + ((b >> 16) & 1)
            r = (b & 0xFFFF0000).to(tl.float32, bitcast=True)
            x = tl.where(xf != xf, xf, r)
    return x.to(TY)


@triton.jit
def _load_raw(x_ptr, mask_ptr, xoff, moff, cols, lim, HAS_MASK: tl.constexpr, EVICT: tl.constexpr):
    # raw (uncast) values of cols < lim, and the keep-mask (x itself when there is none)
    valid = cols < lim
    x = tl.load(x_ptr + xoff + cols, mask=valid, other=float("-inf"), eviction_policy=EVICT)
    if HAS_MASK:
        keep = tl.load(mask_ptr + moff + cols, mask=valid, other=0, eviction_policy=EVICT)
    else:
        keep = x
    return x, keep


@triton.jit
def _finish_load(x, keep, HAS_MASK: tl.constexpr, OUT_TY: tl.constexpr):
    x = _cvt(x, OUT_TY).to(tl.float32)  # torch's dtype= casts the input first
    if HAS_MASK:
        x = tl.where(keep != 0, x, float("-inf"))
    return x


def fast_exp_of(config: dict) -> int:
    """A launch config's ``FAST_EXP`` (0 or 1; absent is 0), refused by name under the interpreter,
    which cannot run the inline PTX of :func:`_exp`."""
    flag = int(config.get("FAST_EXP", 0))
    if flag not in (0, 1):
        raise ValueError(f"'FAST_EXP' must be 0 or 1 (got {config['FAST_EXP']})")
    if flag and _interpreting():
        raise ValueError("'FAST_EXP' is inline PTX, which the Triton interpreter does not run: leave it out "
                         "on the CPU")
    return flag


@triton.jit
def _exp(x, FAST_EXP: tl.constexpr):
    """``exp(x)`` in fp32; with ``FAST_EXP`` one ``ex2.approx.ftz`` of ``x * log2(e)`` (results below
    2**-126 flushed to 0), where ``tl.exp`` also scales inputs whose result would be subnormal.
    Inline PTX: a GPU only (the launchers refuse it under the interpreter)."""
    if FAST_EXP:
        y = _exp2_fast(x * 1.4426950408889634)
    else:
        y = tl.exp(x)
    return y


@triton.jit
def _exp2_fast(v):
    # 2**v in one ex2.approx.ftz.f32 (inline PTX: a GPU only)
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [v], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def _eff(m):
    # torch.logsumexp's shift: the max, or 0 where the max is infinite
    return tl.where(tl.abs(m) == float("inf"), 0.0, m)


@triton.jit
def _merge(pm, ps):
    # partials (m_i, s_i), s_i = sum exp(x - eff(m_i)) -> (M, eff(M), S = sum exp(x - eff(M)))
    big_m = tl.max(pm, 0)
    big_e = _eff(big_m)
    s = tl.sum(tl.where(ps == 0.0, 0.0, ps * tl.exp(_eff(pm) - big_e)), 0)
    return big_m, big_e, s


@triton.jit
def _combine(ws_ptr, base, n_split):
    # the partials of a row from the fp32 workspace (logsumexp's last-arriver combine)
    j = tl.arange(0, _MAXS)
    jm = j < n_split
    pm = tl.load(ws_ptr + (base + j) * 2, mask=jm, other=float("-inf"), cache_modifier=".cg")
    ps = tl.load(ws_ptr + (base + j) * 2 + 1, mask=jm, other=0.0, cache_modifier=".cg")
    return _merge(pm, ps)


@triton.jit
def _gather(slot_ptr, base, n_split, tag):
    # wait for the n_split (max, sum) partials of a row, then merge them
    pm, ps, jm = _await_pairs(slot_ptr, base, n_split, tag)
    pm = tl.where(jm, pm, float("-inf"))
    ps = tl.where(jm, ps, 0.0)
    return _merge(pm, ps)


@triton.jit
def _seg_stats(x_ptr, mask_ptr, xoff, moff, N, lo, hi, HAS_MASK: tl.constexpr, OUT_TY: tl.constexpr,
               BLOCK_N: tl.constexpr, FAST_EXP: tl.constexpr):
    # one pass over blocks [lo, hi) of a row, the next block always in flight: per-lane running
    # (max, sum) with ONE exp per element
    cols0 = tl.arange(0, BLOCK_N)
    m_v = tl.full([BLOCK_N], float("-inf"), tl.float32)
    s_v = tl.zeros([BLOCK_N], tl.float32)
    xn, kn = _load_raw(x_ptr, mask_ptr, xoff, moff, lo * BLOCK_N + cols0, tl.where(lo < hi, N, 0), HAS_MASK,
                       "evict_last")
    for b in range(lo, hi):
        x = _finish_load(xn, kn, HAS_MASK, OUT_TY)
        nb = b + 1
        xn, kn = _load_raw(x_ptr, mask_ptr, xoff, moff, nb * BLOCK_N + cols0, tl.where(nb < hi, N, 0), HAS_MASK,
                           "evict_last")
        d = x - m_v
        e = _exp(-tl.abs(d), FAST_EXP)
        up = d > 0.0
        s_new = tl.where(up, s_v * e + 1.0, s_v + e)
        s_v = tl.where(x == float("-inf"), s_v, s_new)
        m_v = tl.where(up, x, m_v)
    m_c = tl.max(m_v, 0)
    s_c = tl.sum(tl.where(m_v == float("-inf"), s_v * 0.0, s_v * tl.exp(m_v - _eff(m_c))), 0)
    return m_c, s_c


@triton.jit
def _finish_scale(big_m, s, OP: tl.constexpr):
    # softmax/log_softmax: a row whose max is not finite is NaN throughout, as in torch
    s = tl.where(tl.abs(big_m) == float("inf"), float("nan"), s)
    if OP == 0:
        return 1.0 / s
    else:
        return tl.log(s)


@triton.jit
def _chunk_load(x_ptr, mask_ptr, row, stride_xm, stride_mm, c, cols, M, N, HAS_MASK: tl.constexpr,
                ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # program c's raw chunk of ``row`` (all -inf past the last row) and its keep-mask; with ALIGN
    # its window instead (dispatch_triton.window), and third, the row's straddling groups
    r64 = tl.cast(row, tl.int64)
    lim = tl.where(row < M, N, 0)
    if ALIGN:
        x, xe = _read_window(x_ptr, row, stride_xm, c, lim, BLOCK_N, V)
        keep = x
    else:
        x, keep = _load_raw(x_ptr, mask_ptr, r64 * stride_xm, r64 * stride_mm, cols, lim, HAS_MASK, "evict_first")
        xe = tl.full([2 * V], float("-inf"), x.dtype)  # no edges: a constant, nothing is loaded
    return x, keep, xe


@triton.jit
def _chunk_exps(x, xe, ALIGN: tl.constexpr, FAST_EXP: tl.constexpr):
    # a chunk's max m (fp32 values x, with ALIGN also the row's straddling groups xe), its finite
    # stand-in m_e, the exps about it (of x, of xe: xe itself without ALIGN) and their sum
    if ALIGN:
        m = tl.maximum(tl.max(x, 0), tl.max(xe, 0))
        m_e = _eff(m)
        e = _exp(x - m_e, FAST_EXP)
        ee = _exp(xe - m_e, FAST_EXP)
        s = tl.sum(e, 0) + tl.sum(ee, 0)
    else:
        m = tl.max(x, 0)
        m_e = _eff(m)
        e = _exp(x - m_e, FAST_EXP)
        ee = xe
        s = tl.sum(e, 0)
    return m, m_e, e, ee, s


@triton.jit
def _partial(xr, kr, er, HAS_MASK: tl.constexpr, OUT_TY, ALIGN: tl.constexpr, FAST_EXP: tl.constexpr):
    # a chunk's (max, sum of exp about it) from its raw values (_chunk_load's three)
    m, _, _, _, s = _chunk_exps(_finish_load(xr, kr, HAS_MASK, OUT_TY), _finish_load(er, er, False, OUT_TY), ALIGN,
                                FAST_EXP)
    return m, s


@triton.jit
def _rebuilt(x, big_m, big_e, scale, OP: tl.constexpr, FAST_EXP: tl.constexpr):
    # softmax / log_softmax of raw-chunk values x (fp32) from the row's stats
    if OP == 0:
        y = _exp(x - big_e, FAST_EXP) * scale  # scale is NaN where the row's max is not finite
    else:
        y = (x - big_m) - scale
    return y


@triton.jit
def _window_row(x_ptr, out_ptr, row, N, stride_xm, stride_om, OP: tl.constexpr, OUT_TY, FAST_EXP: tl.constexpr,
                BLOCK_N: tl.constexpr, V: tl.constexpr):
    # PATH 0 with ALIGN (one row a program, off the 16-byte grid): the row through its window, the
    # groups inside it 16 bytes at a time, its straddling first and last groups element by element
    xr, er = _read_window(x_ptr, row, stride_xm, 0, N, BLOCK_N, V)
    x = _finish_load(xr, xr, False, OUT_TY)
    xe = _finish_load(er, er, False, OUT_TY)
    m, m_e, e, ee, s = _chunk_exps(x, xe, True, FAST_EXP)
    if OP == 2:
        tl.store(out_ptr + row, _cvt(tl.log(s) + m_e, OUT_TY))
    else:
        scale = _finish_scale(m, s, OP)
        if OP == 0:
            y = e * scale
            ye = ee * scale
        else:
            y = (x - m) - scale
            ye = (xe - m) - scale
        _write_window(out_ptr, row, stride_om, 0, N, _cvt(y, OUT_TY), _cvt(ye, OUT_TY), BLOCK_N, V)


@triton.jit
def _split_pipe(x_ptr, out_ptr, mask_ptr, slot_ptr, M, N, stride_xm, stride_om, stride_mm, grp, c, n_groups,
                n_split, tag, cols, OP: tl.constexpr, HAS_MASK: tl.constexpr, PHASE: tl.constexpr, OUT_TY,
                FAST_EXP: tl.constexpr, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # PATH 3: the split path, pipelined one row ahead and lean on registers. Per iteration a
    # program publishes the partial of its NEXT row before it waits for THIS row's partials (so
    # the wait is normally over before it starts), then prefetches the row after next (prefetched
    # before that publish, as the norms' one-launch backward does, the family's few and long rows
    # took 0.93-1.10x the time on an H100, longer at 36 of 54 calls), and rebuilds this row's
    # output from the raw (input-dtype) chunk instead of holding fp32 values and exps across the
    # wait: three raw chunks live, and no fp32 tile outlives its use.
    xr, kr, er = _chunk_load(x_ptr, mask_ptr, grp, stride_xm, stride_mm, c, cols, M, N, HAS_MASK, ALIGN, BLOCK_N, V)
    if PHASE != 2:
        if grp < M:
            m_c, s_c = _partial(xr, kr, er, HAS_MASK, OUT_TY, ALIGN, FAST_EXP)
            _publish(slot_ptr, 64 + tl.cast(grp, tl.int64) * n_split * 2 + c * 2, m_c, s_c, tag)
    xr_n, kr_n, er_n = _chunk_load(x_ptr, mask_ptr, grp + n_groups, stride_xm, stride_mm, c, cols, M, N, HAS_MASK,
                                   ALIGN, BLOCK_N, V)
    for row in range(grp, M, n_groups):
        nrow = row + n_groups
        if PHASE != 2:
            if nrow < M:
                m_n, s_n = _partial(xr_n, kr_n, er_n, HAS_MASK, OUT_TY, ALIGN, FAST_EXP)
                _publish(slot_ptr, 64 + tl.cast(nrow, tl.int64) * n_split * 2 + c * 2, m_n, s_n, tag)
        xr_nn, kr_nn, er_nn = _chunk_load(x_ptr, mask_ptr, nrow + n_groups, stride_xm, stride_mm, c, cols, M, N,
                                          HAS_MASK, ALIGN, BLOCK_N, V)
        if PHASE != 1:
            row64 = tl.cast(row, tl.int64)
            big_m, big_e, s = _gather(slot_ptr, 64 + row64 * n_split * 2, n_split, tag)
            scale = _finish_scale(big_m, s, OP)
            y = _rebuilt(_finish_load(xr, kr, HAS_MASK, OUT_TY), big_m, big_e, scale, OP, FAST_EXP)
            if ALIGN:
                ye = _rebuilt(_finish_load(er, er, False, OUT_TY), big_m, big_e, scale, OP, FAST_EXP)
                _write_window(out_ptr, row, stride_om, c, N, _cvt(y, OUT_TY), _cvt(ye, OUT_TY), BLOCK_N, V)
            else:
                tl.store(out_ptr + row64 * stride_om + cols, _cvt(y, OUT_TY), mask=cols < N,
                         eviction_policy="evict_first")
        xr, kr, er = xr_n, kr_n, er_n
        xr_n, kr_n, er_n = xr_nn, kr_nn, er_nn


@triton.jit
def _lse_chunk_load(x_ptr, t64, n_split, end, N, stride_xm, ALIGN: tl.constexpr, EVEN: tl.constexpr,
                    BLOCK_N: tl.constexpr, V: tl.constexpr):
    # chunk t64 of all rows' chunks (all -inf from chunk ``end`` on): its raw values and, with ALIGN,
    # its window and the row's straddling groups (as _chunk_load). EVEN (every chunk whole): no mask
    # an element, one predicate for the chunk (nothing loads from ``end`` on; those values are never
    # used)
    row = t64 // n_split
    c = t64 % n_split
    if EVEN:
        cols = tl.arange(0, BLOCK_N)
        if _INTERPRETED:  # its loads take no mask made from a scalar's
            whole = cols < tl.where(t64 < end, BLOCK_N, 0)
        else:
            whole = tl.broadcast_to(t64 < end, [BLOCK_N])
        x = tl.load(x_ptr + row * stride_xm + c * BLOCK_N + cols, mask=whole, eviction_policy="evict_first")
        xe = tl.full([2 * V], float("-inf"), x.dtype)
        return x, xe
    lim = tl.where(t64 < end, N, 0)
    if ALIGN:
        x, xe = _read_window(x_ptr, row, stride_xm, c, lim, BLOCK_N, V)
    else:
        x, _ = _load_raw(x_ptr, x_ptr, row * stride_xm, 0, c * BLOCK_N + tl.arange(0, BLOCK_N), lim, False,
                         "evict_first")
        xe = tl.full([2 * V], float("-inf"), x.dtype)  # no edges: a constant, nothing is loaded
    return x, xe


@triton.jit
def _lse_partial(xr, er, OUT_TY, ALIGN: tl.constexpr, FAST_EXP: tl.constexpr):
    # a chunk's (max, sum of exp about it) from its raw values; with FAST_EXP each exp is one fused
    # multiply-add and one ex2.approx (exp2(x * log2e - max * log2e))
    if FAST_EXP:
        x = _finish_load(xr, xr, False, OUT_TY)
        m = tl.max(x, 0)
        if ALIGN:
            xe = _finish_load(er, er, False, OUT_TY)
            m = tl.maximum(m, tl.max(xe, 0))
        ml = _eff(m) * 1.4426950408889634
        s = tl.sum(_exp2_fast(x * 1.4426950408889634 - ml), 0)
        if ALIGN:
            s += tl.sum(_exp2_fast(xe * 1.4426950408889634 - ml), 0)
    else:
        m, s = _partial(xr, xr, er, False, OUT_TY, ALIGN, FAST_EXP)
    return m, s


@triton.jit
def _lse_chunks(x_ptr, out_ptr, ws_ptr, sync_ptr, M, N, stride_xm, BLOCK_N: tl.constexpr, OUT_TY,
                FAST_EXP: tl.constexpr, ALIGN: tl.constexpr, EVEN: tl.constexpr, V: tl.constexpr):
    # PATH 4, logsumexp only, one launch: persistent programs each take a run of consecutive chunks
    # (program p: chunks [p * T // P, (p + 1) * T // P) of the T = M * n_split chunks of all rows),
    # each chunk held in registers while the next one is already loading, and write every chunk's
    # (max, sum) to the workspace. Where a program leaves a row it adds the chunks it took of it to
    # the row's acq_rel counter (one atomic, and the fence before it, per row a program touches, not
    # per chunk: the fence waits for the chunk in flight); the program that completes the count
    # merges the row's partials, writes it and resets the counter. No program ever waits on another.
    n_split = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0)
    total = tl.cast(M, tl.int64) * n_split  # M is a constant 1 where the call has one row
    lo = pid * total // nprog
    hi = (pid + 1) * total // nprog
    xr, er = _lse_chunk_load(x_ptr, lo, n_split, hi, N, stride_xm, ALIGN, EVEN, BLOCK_N, V)
    taken = 0
    for t in range(lo, hi):
        xr_n, er_n = _lse_chunk_load(x_ptr, t + 1, n_split, hi, N, stride_xm, ALIGN, EVEN, BLOCK_N, V)
        m_c, s_c = _lse_partial(xr, er, OUT_TY, ALIGN, FAST_EXP)
        tl.store(ws_ptr + t * 2, m_c)
        tl.store(ws_ptr + t * 2 + 1, s_c)
        taken += 1
        if (t % n_split == n_split - 1) | (t == hi - 1):  # this program's last chunk of the row
            tl.debug_barrier()
            row = t // n_split
            old = tl.atomic_add(sync_ptr + _ROW_OFF + row, taken, sem="acq_rel")
            if old + taken == n_split:
                big_m, big_e, s = _combine(ws_ptr, row * n_split, n_split)
                tl.store(out_ptr + row, _cvt(tl.log(s) + big_e, OUT_TY))
                tl.atomic_xchg(sync_ptr + _ROW_OFF + row, 0, sem="relaxed")
            taken = 0
        xr, er = xr_n, er_n


@triton.jit(do_not_specialize=["N_BUCKET"])
def _softmax_kernel(
    x_ptr, out_ptr, mask_ptr, ws_ptr, sync_ptr, slot_ptr,
    M, N, stride_xm, stride_om, stride_mm,
    N_BUCKET,  # noqa: ARG001 - autotune key only (bucketed row length)
    OP: tl.constexpr, HAS_MASK: tl.constexpr, PHASE: tl.constexpr,
    PATH: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, SPLIT: tl.constexpr,
    NW: tl.constexpr, NS: tl.constexpr,  # noqa: ARG001 - mirrors of num_warps/num_stages for the grid
    FAST_EXP: tl.constexpr = 0,
    ALIGN: tl.constexpr = 0,
    EVEN: tl.constexpr = 0,
):
    OUT_TY = out_ptr.dtype.element_ty
    V: tl.constexpr = 128 // x_ptr.dtype.element_ty.primitive_bitwidth  # elements per 16 bytes (ALIGN)
    tl.static_assert(not (ALIGN and HAS_MASK), "ALIGN reads rows without a mask")
    pid = tl.program_id(0)
    if PATH == 4:
        _lse_chunks(x_ptr, out_ptr, ws_ptr, sync_ptr, M, N, stride_xm, BLOCK_N, OUT_TY, FAST_EXP, ALIGN, EVEN, V)
    elif PATH == 0 and ALIGN:  # one row a program (the launcher's condition), through its window
        _window_row(x_ptr, out_ptr, pid, N, stride_xm, stride_om, OP, OUT_TY, FAST_EXP, BLOCK_N, V)
    elif PATH == 0:
        # ---- whole rows in registers, ROWS rows per program -----------------------------------
        rows = pid * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK_N)
        rmask = rows < M
        valid = rmask[:, None] & (cols < N)[None, :]
        rows64 = rows.to(tl.int64)
        x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=valid, other=float("-inf"),
                    eviction_policy="evict_first")
        x = _cvt(x, OUT_TY).to(tl.float32)
        if HAS_MASK:
            keep = tl.load(mask_ptr + rows64[:, None] * stride_mm + cols[None, :], mask=valid, other=0,
                           eviction_policy="evict_first")
            x = tl.where(keep != 0, x, float("-inf"))
        m = tl.max(x, 1)
        m_e = _eff(m)
        e = _exp(x - m_e[:, None], FAST_EXP)
        s = tl.sum(e, 1)
        if OP == 2:
            tl.store(out_ptr + rows, _cvt(tl.log(s) + m_e, OUT_TY), mask=rmask)
        else:
            optr = out_ptr + rows64[:, None] * stride_om + cols[None, :]
            if OP == 0:
                y = e * _finish_scale(m, s, OP)[:, None]
            else:
                y = (x - m[:, None]) - _finish_scale(m, s, OP)[:, None]
            tl.store(optr, _cvt(y, OUT_TY), mask=valid, eviction_policy="evict_first")
    else:
        # ---- persistent programs, a row cut into n_split segments -----------------------------
        nprog = tl.num_programs(0)
        nblocks = tl.cdiv(N, BLOCK_N)
        if PATH >= 2:
            bps = 1
            n_split = nblocks
        else:
            ns0 = tl.minimum(nblocks, SPLIT)
            bps = tl.cdiv(nblocks, ns0)
            n_split = tl.cdiv(nblocks, bps)
        n_groups = nprog // n_split
        EXCHANGE: tl.constexpr = OP != 2  # softmax/log_softmax: every segment needs the row's stats
        tid = pid
        tag = pid.to(tl.int64) * 0 + 1  # the two-launch (interpreter) split uses tag 1
        if EXCHANGE and PHASE == 0:
            if n_split > 1:
                tid, tag = _ticket(slot_ptr, nprog)
        grp = tid // n_split
        c = tid % n_split
        lo = c * bps
        hi = tl.minimum(lo + bps, nblocks)
        cols = c * BLOCK_N + tl.arange(0, BLOCK_N)  # PATH 2/3: this program's chunk
        if PATH == 3:
            _split_pipe(x_ptr, out_ptr, mask_ptr, slot_ptr, M, N, stride_xm, stride_om, stride_mm, grp, c, n_groups,
                        n_split, tag, cols, OP, HAS_MASK, PHASE, OUT_TY, FAST_EXP, ALIGN, BLOCK_N, V)
        else:
            if PATH == 2:
                # the first row's chunk; each iteration then prefetches the next row's
                x_nxt, k_nxt, xe_nxt = _chunk_load(x_ptr, mask_ptr, grp, stride_xm, stride_mm, c, cols, M, N,
                                                   HAS_MASK, ALIGN, BLOCK_N, V)
            for row in range(grp, M, n_groups):
                row64 = tl.cast(row, tl.int64)
                xoff = row64 * stride_xm
                moff = row64 * stride_mm
                wbase = row * n_split
                sbase = 64 + row64 * n_split * 2  # this row's partials in the slot buffer
                if PATH == 2:
                    x = _finish_load(x_nxt, k_nxt, HAS_MASK, OUT_TY)
                    xe = _finish_load(xe_nxt, xe_nxt, False, OUT_TY)
                    m_c, mc_e, e, ee, s_c = _chunk_exps(x, xe, ALIGN, FAST_EXP)
                else:
                    if PHASE != 2:
                        m_c, s_c = _seg_stats(x_ptr, mask_ptr, xoff, moff, N, lo, hi, HAS_MASK, OUT_TY, BLOCK_N,
                                              FAST_EXP)
                    else:
                        m_c = tl.full([], float("-inf"), tl.float32)
                        s_c = tl.full([], 0.0, tl.float32)
                big_m = m_c
                big_e = _eff(m_c)
                s = s_c
                if EXCHANGE:
                    if n_split > 1:
                        if PHASE != 2:
                            _publish(slot_ptr, sbase + c * 2, m_c, s_c, tag)
                if PATH == 2:
                    # the next row's chunk goes out now, to land while this row's partials meet
                    x_nxt, k_nxt, xe_nxt = _chunk_load(x_ptr, mask_ptr, row + n_groups, stride_xm, stride_mm, c,
                                                       cols, M, N, HAS_MASK, ALIGN, BLOCK_N, V)
                if OP == 2:
                    # logsumexp: no waiting; the last segment to arrive combines and writes
                    if n_split == 1:
                        tl.store(out_ptr + row, _cvt(tl.log(s) + big_e, OUT_TY))
                    else:
                        tl.store(ws_ptr + (wbase + c) * 2, m_c)
                        tl.store(ws_ptr + (wbase + c) * 2 + 1, s_c)
                        tl.debug_barrier()
                        old = tl.atomic_add(sync_ptr + _ROW_OFF + row, 1, sem="acq_rel")
                        if old == n_split - 1:
                            big_m, big_e, s = _combine(ws_ptr, wbase, n_split)
                            tl.store(out_ptr + row, _cvt(tl.log(s) + big_e, OUT_TY))
                            tl.atomic_xchg(sync_ptr + _ROW_OFF + row, 0, sem="relaxed")
                elif PHASE != 1:
                    if n_split > 1:
                        big_m, big_e, s = _gather(slot_ptr, sbase, n_split, tag)
                    scale = _finish_scale(big_m, s, OP)
                    if PATH == 2:
                        if OP == 0:
                            # exp(x - M) / S = exp(x - eff(m_c)) * exp(eff(m_c) - eff(M)) / S
                            f = tl.where(m_c == float("-inf"), 0.0 * scale, tl.exp(mc_e - big_e) * scale)
                            y = e * f
                        else:
                            y = (x - big_m) - scale
                        if ALIGN:
                            if OP == 0:
                                ye = ee * f
                            else:
                                ye = (xe - big_m) - scale
                            _write_window(out_ptr, row, stride_om, c, N, _cvt(y, OUT_TY), _cvt(ye, OUT_TY), BLOCK_N, V)
                        else:
                            tl.store(out_ptr + row64 * stride_om + cols, _cvt(y, OUT_TY), mask=cols < N,
                                     eviction_policy="evict_first")
                    else:
                        # second pass, newest blocks first (the likeliest L2 hits), next block in flight
                        cols0 = tl.arange(0, BLOCK_N)
                        xn, kn = _load_raw(x_ptr, mask_ptr, xoff, moff, (hi - 1) * BLOCK_N + cols0,
                                           tl.where(lo < hi, N, 0), HAS_MASK, "evict_first")
                        for i in range(0, hi - lo):
                            b = hi - 1 - i
                            xb = _finish_load(xn, kn, HAS_MASK, OUT_TY)
                            pb = tl.maximum(b - 1, lo)
                            xn, kn = _load_raw(x_ptr, mask_ptr, xoff, moff, pb * BLOCK_N + cols0,
                                               tl.where(b - 1 >= lo, N, 0), HAS_MASK, "evict_first")
                            if OP == 0:
                                y = _exp(xb - big_m, FAST_EXP) * scale
                            else:
                                y = (xb - big_m) - scale
                            bc = b * BLOCK_N + cols0
                            tl.store(out_ptr + row64 * stride_om + bc, _cvt(y, OUT_TY), mask=bc < N,
                                     eviction_policy="evict_first")

