"""Triton kernels for row softmax, log_softmax and logsumexp over the last dim of a 2-D tensor.

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

Exchange: a partial is published as two 64-bit words ``(tag << 32 | fp32 bits)`` with relaxed
atomic exchanges and read back with volatile loads until every word of the row carries the
launch's tag: no fence, no counter, one L2 round trip when the others are on time. The tag is
an epoch kept on the device: word 0 of the slot buffer is ``(epoch << 32 | ticket)``; the last
ticket of a launch resets the ticket and moves the epoch on in one atomic add, so words left by
earlier launches (or by another config) never count; the host zeroes the buffer every 2^30
launches, long before a 31-bit tag could come round again.

Co-residency: a group's programs wait for each other, so a program takes a *ticket* (that
atomic word, taken in dispatch order) that decides its group. Every ticket below the highest
taken belongs to a program that is running or done, so only the group holding the highest
ticket can wait on programs not yet resident, and it gets them as soon as any other program
exits, provided the device can hold ``n_split`` programs at once; ``n_split`` is capped by the
SM count (one program per SM always fits). logsumexp needs no waiting: the last segment of a row
to arrive (an acq_rel counter that it resets) merges and writes. The Triton interpreter runs
programs one after another, so there partials could never meet in one launch: the split paths
then run as two launches (``PHASE`` 1 publishes, ``PHASE`` 2 merges and writes), the same code
minus the wait.

Semantics follow torch exactly: the input is first rounded to ``out_dtype`` (torch's ``dtype=``
casts before the op), everything accumulates in fp32, rows of all -inf give NaN for
softmax/log_softmax and -inf for logsumexp, a +inf gives NaN rows for softmax/log_softmax and
+inf for logsumexp, NaN propagates. logsumexp uses torch's own formula (max replaced by 0 when
infinite).
"""

from __future__ import annotations

import functools
import os
import threading

import torch
import triton
import triton.language as tl

try:  # the one dispatch import: cache-key-stable stand-ins for absent optional tensors
    from dispatch.autotune.placeholders import placeholder
except Exception:  # pragma: no cover - dispatch not importable (standalone use)
    _PH: dict = {}

    def placeholder(like, dtype, shape=(1,)):
        key = (like.device, dtype, tuple(shape))
        if key not in _PH:
            _PH[key] = torch.zeros(shape, dtype=dtype, device=like.device)
        return _PH[key]


OPS = ("softmax", "log_softmax", "logsumexp")
_OP_CODE = {"softmax": 0, "log_softmax": 1, "logsumexp": 2}
_PATH_CODE = {"rows": 0, "onepass": 0, "online": 1, "split_online": 1, "split": 2}
_IN_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)

MAX_SPLIT = 128  # programs per row in the split paths (width of the partials gather)
_GMAX = 8192  # most concurrent groups
_ROW_OFF = tl.constexpr(64)  # logsumexp's per-row arrival counters in the int32 sync buffer
_SLOT_OFF = 64  # the tagged partials in the int64 slot buffer (word 0: epoch << 32 | ticket)
_EPOCH_RESET = 1 << 30  # launches of a slot buffer before it is zeroed (tags are 31-bit)
_MAXS = tl.constexpr(128)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# The interpreter truncates fp32 -> bf16 where the GPU rounds to nearest even: emulate the GPU
# there (a compile-time False on the GPU, so the branch costs nothing)
_EMU_RNE = tl.constexpr(_interpreting())


# ----------------------------------------------------------------------------------------------
# the kernel
# ----------------------------------------------------------------------------------------------


@triton.jit
def _cvt(x, TY: tl.constexpr):
    if _EMU_RNE:
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
def _publish(slot_ptr, idx, m_c, s_c, tag):
    # a partial as two self-validating 64-bit words (tag << 32 | fp32 bits): no fence, no counter
    hi = tag << 32
    tl.atomic_xchg(slot_ptr + idx, hi | m_c.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")
    tl.atomic_xchg(slot_ptr + idx + 1, hi | s_c.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")


@triton.jit
def _gather(slot_ptr, base, n_split, tag):
    # wait until the n_split partials of a row carry this launch's tag, then merge them
    j = tl.arange(0, _MAXS)
    jm = j < n_split
    p = slot_ptr + base + j * 2
    vm = tl.load(p, mask=jm, other=0, volatile=True)
    vs = tl.load(p + 1, mask=jm, other=0, volatile=True)
    bad = tl.sum((jm & (((vm >> 32) != tag) | ((vs >> 32) != tag))).to(tl.int32), 0)
    while bad > 0:
        vm = tl.load(p, mask=jm, other=0, volatile=True)
        vs = tl.load(p + 1, mask=jm, other=0, volatile=True)
        bad = tl.sum((jm & (((vm >> 32) != tag) | ((vs >> 32) != tag))).to(tl.int32), 0)
    pm = (vm & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
    ps = (vs & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
    pm = tl.where(jm, pm, float("-inf"))
    ps = tl.where(jm, ps, 0.0)
    return _merge(pm, ps)


@triton.jit
def _seg_stats(x_ptr, mask_ptr, xoff, moff, N, lo, hi, HAS_MASK: tl.constexpr, OUT_TY: tl.constexpr,
               BLOCK_N: tl.constexpr):
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
        e = tl.exp(-tl.abs(d))
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


@triton.jit(do_not_specialize=["N_BUCKET"])
def _softmax_kernel(
    x_ptr, out_ptr, mask_ptr, ws_ptr, sync_ptr, slot_ptr,
    M, N, stride_xm, stride_om, stride_mm,
    N_BUCKET,  # noqa: ARG001 - autotune key only (bucketed row length)
    OP: tl.constexpr, HAS_MASK: tl.constexpr, PHASE: tl.constexpr,
    PATH: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, SPLIT: tl.constexpr,
    NW: tl.constexpr, NS: tl.constexpr,  # noqa: ARG001 - mirrors of num_warps/num_stages for the grid
):
    OUT_TY = out_ptr.dtype.element_ty
    pid = tl.program_id(0)
    if PATH == 0:
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
        e = tl.exp(x - m_e[:, None])
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
        if PATH == 2:
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
                # one 64-bit word = (epoch << 32 | ticket). Tickets come in dispatch order and
                # decide the group (see the module docstring); the last one resets the ticket
                # and moves the epoch on, atomically, for the next launch
                word = tl.atomic_add(slot_ptr, 1, sem="relaxed")
                tid = (word & 0xFFFFFFFF).to(tl.int32)
                if tid == nprog - 1:
                    tl.atomic_add(slot_ptr, (1 << 32) - nprog.to(tl.int64), sem="relaxed")
                tag = ((word >> 32) % 0x7FFFFFFF) + 1
        grp = tid // n_split
        c = tid % n_split
        lo = c * bps
        hi = tl.minimum(lo + bps, nblocks)
        cols = c * BLOCK_N + tl.arange(0, BLOCK_N)  # PATH 2: this program's chunk
        if PATH == 2:
            # the first row's chunk; each iteration then prefetches the next row's
            r0 = grp.to(tl.int64)
            x_nxt, k_nxt = _load_raw(x_ptr, mask_ptr, r0 * stride_xm, r0 * stride_mm, cols,
                                     tl.where(grp < M, N, 0), HAS_MASK, "evict_first")
        for row in range(grp, M, n_groups):
            row64 = tl.cast(row, tl.int64)
            xoff = row64 * stride_xm
            moff = row64 * stride_mm
            wbase = row * n_split
            sbase = 64 + row64 * n_split * 2  # this row's partials in the slot buffer
            if PATH == 2:
                x = _finish_load(x_nxt, k_nxt, HAS_MASK, OUT_TY)
                m_c = tl.max(x, 0)
                mc_e = _eff(m_c)
                e = tl.exp(x - mc_e)
                s_c = tl.sum(e, 0)
            else:
                if PHASE != 2:
                    m_c, s_c = _seg_stats(x_ptr, mask_ptr, xoff, moff, N, lo, hi, HAS_MASK, OUT_TY, BLOCK_N)
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
                nrow = row + n_groups
                nrow64 = nrow.to(tl.int64)
                x_nxt, k_nxt = _load_raw(x_ptr, mask_ptr, nrow64 * stride_xm, nrow64 * stride_mm, cols,
                                         tl.where(nrow < M, N, 0), HAS_MASK, "evict_first")
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
                    optr = out_ptr + row64 * stride_om + cols
                    if OP == 0:
                        # exp(x - M) / S = exp(x - eff(m_c)) * exp(eff(m_c) - eff(M)) / S
                        f = tl.where(m_c == float("-inf"), 0.0 * scale, tl.exp(mc_e - big_e) * scale)
                        y = e * f
                    else:
                        y = (x - big_m) - scale
                    tl.store(optr, _cvt(y, OUT_TY), mask=cols < N, eviction_policy="evict_first")
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
                            y = tl.exp(xb - big_m) * scale
                        else:
                            y = (xb - big_m) - scale
                        bc = b * BLOCK_N + cols0
                        tl.store(out_ptr + row64 * stride_om + bc, _cvt(y, OUT_TY), mask=bc < N,
                                 eviction_policy="evict_first")


# ----------------------------------------------------------------------------------------------
# configs
# ----------------------------------------------------------------------------------------------


def _np2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _device_sms(device: torch.device | None = None) -> int:
    """SMs of ``device`` (or the current CUDA device); 132 (an H100/H200) when there is no GPU."""
    if device is not None and device.type == "cuda":
        return _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    if device is None and torch.cuda.is_available():
        return _sm_count(torch.cuda.current_device())
    return 132


def _cfg(path, block_n, rows=1, split=1, warps=4, stages=1) -> dict:
    return {"path": path, "BLOCK_N": int(block_n), "ROWS": int(rows), "SPLIT": int(split),
            "num_warps": int(warps), "num_stages": int(stages)}


def _warps_for(tile: int, per_thread: int) -> int | None:
    w = tile // (32 * per_thread)
    return w if 1 <= w <= 32 else None


def _n_split(path_code: int, n: int, block_n: int, split: int) -> int:
    nblocks = _cdiv(n, block_n)
    if path_code == 2:
        return nblocks
    ns0 = max(1, min(split, nblocks))
    bps = _cdiv(nblocks, ns0)
    return _cdiv(nblocks, bps)


def _space(op: str, np2: int, esz: int, sms: int) -> list[dict]:
    # Pruned with the H200 sweeps (benchmarks/results/triton_kernels_h200.md): 4 or fewer
    # elements per thread never won; the split path beat onepass only beyond 16K elements and
    # always did best at 32 elements per thread; the streamed path never beat split for
    # softmax/log_softmax, so it is kept only where split cannot go (rows too long for it).
    out: list[dict] = []
    cap = min(MAX_SPLIT, sms)
    # rows / onepass: the whole row in registers; tiles of 1K-16K elements, 8-32 per thread
    if np2 <= 32768:
        bn = max(np2, 16)
        tiles = [t for t in (1024, 2048, 4096, 8192, 16384) if bn <= t <= max(8192, bn)] or [bn]
        for t in tiles:
            rows = t // bn
            for per in (8, 16, 32):
                w = _warps_for(t, per)
                if w is not None:
                    out.append(_cfg("rows" if rows > 1 else "onepass", bn, rows, 1, w))
    if op != "logsumexp":
        # split: a row across programs, each chunk in registers, 32 elements per thread
        if np2 >= 32768:
            for bn in (2048, 4096, 8192, 16384):
                if 2 <= np2 // bn <= cap:
                    out.append(_cfg("split", bn, 1, 1, bn // (32 * 32)))
        # rows longer than split can hold (no hard cap on N): streamed, alone or cut over programs
        if np2 > 16384 * cap:
            out.append(_cfg("online", 4096, 1, 1, 8, 2))
            for sp in (16, 64):
                if sp <= cap:
                    out.append(_cfg("split_online", 2048, 1, sp, 4, 2))
    else:
        # logsumexp reads once: streamed, one program per row or a row cut over a few
        if np2 >= 16384:
            for bn, w in ((1024, 4), (2048, 4), (4096, 8)):
                out.append(_cfg("online", bn, 1, 1, w, 2))
        if np2 >= 65536:
            for bn, w, sp in ((4096, 8, 4), (2048, 4, 16), (2048, 4, 32)):
                if sp <= cap:
                    out.append(_cfg("split_online", bn, 1, sp, w, 2))
    return out


def config_space(op: str, n_rows: int, n_cols: int, dtype: torch.dtype) -> list[dict]:
    """Candidate configs for an (n_rows, n_cols) input of ``dtype``, in a deterministic order.

    Depends on the row length only through its next power of two (the autotune key's bucket),
    so every row length of a bucket has the same candidates; ``n_rows`` is accepted for the
    protocol but does not prune. Configs that cannot fit (a row wider than the registers of one
    program, a split wider than the device can hold at once) or cannot win (a streamed path for
    a row that fits in registers) are left out.
    """
    _check_op(op)
    esz = torch.empty((), dtype=dtype).element_size()
    return _space(op, _np2(max(int(n_cols), 1)), esz, _device_sms())


def default_config(op: str, n_rows: int, n_cols: int, dtype: torch.dtype) -> dict:
    """The heuristic pick, fitted to the H200 sweeps (benchmarks/results/triton_kernels_h200.md).

    softmax/log_softmax: rows of <= 512 in 1K-element tiles (several rows per program) at 8 per
    thread; rows that fit in registers one per program at 16 (2-byte) or 8-32 (fp32) per
    thread; longer rows split over programs in 4096-element chunks. logsumexp (read-only, it
    wants more in flight per thread): 32 per thread on short rows, then streamed, one program
    per row when rows are many, a row cut over several programs when they are few.
    """
    space = config_space(op, n_rows, n_cols, dtype)
    np2 = _np2(max(int(n_cols), 1))
    esz = torch.empty((), dtype=dtype).element_size()
    sms = _device_sms()
    lse = op == "logsumexp"
    want: dict | None = None
    if np2 <= 512:
        bn = max(np2, 16)
        want = _cfg("rows", bn, 1024 // bn, 1, 1 if lse else 4)
    elif np2 <= 16384:
        if lse and esz == 2:
            want = _cfg("rows", 1024, 2, 1, 2) if np2 == 1024 else _cfg("onepass", np2, 1, 1, np2 // 1024)
        elif esz == 2:
            want = _cfg("onepass", np2, 1, 1, max(1, min(32, np2 // 512)))
        else:
            want = _cfg("onepass", np2, 1, 1, max(1, min(16, np2 // 256)))
    elif lse:
        if np2 >= 65536 and n_rows < 4 * sms:
            # few long rows: cut each over several streaming programs to fill the device
            want = _cfg("split_online", 4096, 1, 4, 8, 2) if n_rows >= sms else _cfg("split_online", 2048, 1, 32, 4, 2)
        else:
            want = _cfg("online", 4096, 1, 1, 8, 2) if esz == 2 else _cfg("online", 1024, 1, 1, 4, 2)
    else:
        want = _cfg("split", 4096, 1, 1, 4)
        while want not in space and want["BLOCK_N"] < 16384:  # fewer programs per row if needed
            bn = want["BLOCK_N"] * 2
            want = _cfg("split", bn, 1, 1, bn // 1024)
        if want not in space:
            # beyond what split can hold: stream, over several programs per row when rows are few
            path = "split_online" if n_rows < 4 * sms else "online"
            want = next((c for c in space if c["path"] == path), None)
    if want in space:
        return dict(want)
    return dict(space[0])


def _universe(op: str) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for k in range(0, 32):
        for esz in (2, 4):
            for sms in {_device_sms()}:
                for c in _space(op, 1 << k, esz, sms):
                    seen.setdefault(_cfg_key(c), c)
    return list(seen.values())


def _cfg_key(c: dict) -> tuple:
    return (c["path"], c["BLOCK_N"], c["ROWS"], c["SPLIT"], c["num_warps"], c["num_stages"])


def _to_triton(c: dict) -> triton.Config:
    return triton.Config({"PATH": _PATH_CODE[c["path"]], "BLOCK_N": c["BLOCK_N"], "ROWS": c["ROWS"],
                          "SPLIT": c["SPLIT"], "NW": c["num_warps"], "NS": c["num_stages"]},
                         num_warps=c["num_warps"], num_stages=c["num_stages"])


def config_from_triton(cfg: triton.Config) -> dict:
    """The config dict of a ``triton.Config`` this module built (e.g. an autotuner's winner)."""
    kw = cfg.kwargs
    code = kw["PATH"]
    if code == 0:
        path = "rows" if kw["ROWS"] > 1 else "onepass"
    elif code == 1:
        path = "split_online" if kw["SPLIT"] > 1 else "online"
    else:
        path = "split"
    return _cfg(path, kw["BLOCK_N"], kw["ROWS"], kw["SPLIT"], cfg.num_warps, cfg.num_stages)


# ----------------------------------------------------------------------------------------------
# launching
# ----------------------------------------------------------------------------------------------

_SYNC_LOCK = threading.Lock()
_SYNC: dict = {}
_SLOTS: dict = {}


def _stream_key(device: torch.device):
    if device.type == "cuda":
        return (device, torch.cuda.current_stream(device).cuda_stream)
    return (device, 0)


def _sync_buffer(device: torch.device, rows_needed: int) -> torch.Tensor:
    """A zeroed int32 buffer per (device, stream) that every launch leaves zeroed again."""
    key = _stream_key(device)
    need = int(_ROW_OFF) + max(int(rows_needed), 0)
    buf = _SYNC.get(key)
    if buf is None or buf.numel() < need:
        with _SYNC_LOCK:
            buf = _SYNC.get(key)
            if buf is None or buf.numel() < need:
                buf = torch.zeros(max(need, 2 * (buf.numel() if buf is not None else 0), 1 << 12),
                                  dtype=torch.int32, device=device)
                _SYNC[key] = buf
    return buf


def _slot_buffer(device: torch.device, partials_needed: int) -> torch.Tensor:
    """The int64 buffer of tagged partials per (device, stream); word 0 is (epoch << 32 | ticket).

    Each launch of the split path moves the epoch on (on the device), and a partial counts only
    when it carries the launch's tag, so stale words from earlier launches are never mistaken
    for fresh ones. Tags are 31-bit: the buffer is zeroed every ``_EPOCH_RESET`` launches, far
    before a tag could come round again.
    """
    key = _stream_key(device)
    need = _SLOT_OFF + 2 * max(int(partials_needed), 0)
    with _SYNC_LOCK:
        entry = _SLOTS.get(key)
        if entry is None or entry[0].numel() < need:
            old = entry[0].numel() if entry is not None else 0
            entry = [torch.zeros(max(need, 2 * old, 1 << 12), dtype=torch.int64, device=device), 0]
            _SLOTS[key] = entry
        entry[1] += 1
        if entry[1] >= _EPOCH_RESET:
            entry[0].zero_()
            entry[1] = 0
        return entry[0]


def _estimate_occupancy(path_code: int, block_n: int, warps: int, esz: int) -> int:
    threads = 32 * warps
    per = max(1, block_n // threads)
    if path_code == 2:
        regs = per * (1 + (0.5 if esz == 2 else 1.0)) + 40
    else:
        regs = per * (2 + 2 * esz / 4) + 40
    regs = min(255, int(-(-regs // 8) * 8))
    return max(1, min(65536 // (regs * threads), 2048 // threads, 32))


def _occupancy_of(kernel, warps: int) -> int:
    """Programs per SM for a compiled kernel (registers, shared memory, threads, block limit)."""
    kernel._init_handles()
    regs = max(1, int(kernel.n_regs))
    per_warp = -(-(regs * 32) // 256) * 256
    occ = min(65536 // (per_warp * warps), 64 // warps, 32)
    smem = int(getattr(kernel.metadata, "shared", 0) or 0)
    if smem:
        occ = min(occ, 233472 // (smem + 1024))
    return max(1, occ)


_OCC: dict = {}


def _capacity(device: torch.device, args: tuple, meta: dict) -> int:
    """Programs the device holds at once for this launch (measured from the compiled kernel)."""
    path_code, block_n, warps = meta["PATH"], meta["BLOCK_N"], meta["NW"]
    if device.type != "cuda":
        return 2  # interpreter: two groups, so the persistent row loop is exercised
    x, out = args[0], args[1]
    key = (device, x.dtype, out.dtype, meta["OP"], meta["HAS_MASK"], path_code, block_n, meta["ROWS"],
           meta["SPLIT"], warps, meta["NS"], tuple(int(a) % 16 == 0 for a in args[6:11]))
    occ = _OCC.get(key)
    if occ is None:
        try:
            k = _softmax_kernel.warmup(*args, grid=(1,), OP=meta["OP"], HAS_MASK=meta["HAS_MASK"], PHASE=0,
                                       PATH=path_code, BLOCK_N=block_n, ROWS=meta["ROWS"], SPLIT=meta["SPLIT"],
                                       NW=warps, NS=meta["NS"], num_warps=warps, num_stages=meta["NS"])
            occ = _occupancy_of(k, warps)
        except Exception:  # pragma: no cover - fall back to a register estimate
            occ = _estimate_occupancy(path_code, block_n, warps, x.element_size())
        _OCC[key] = occ
    return _device_sms(device) * occ


def _grid_size(device, M, N, args, meta) -> int:
    path_code = meta["PATH"]
    if path_code == 0:
        return _cdiv(M, meta["ROWS"])
    ns = _n_split(path_code, N, meta["BLOCK_N"], meta["SPLIT"])
    cap = _capacity(device, args, meta)
    groups = max(1, min(M, max(1, cap // ns), _GMAX))
    return groups * ns


def _check_op(op: str) -> None:
    if op not in _OP_CODE:
        raise ValueError(f"unknown op {op!r}; expected one of {OPS}")


def _prepare(op, x, out_dtype, mask):
    _check_op(op)
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError("x must be a 2-D tensor (M, N)")
    if x.dtype not in _IN_DTYPES:
        raise TypeError(f"triton kernels take fp32/fp16/bf16 input, not {x.dtype}")
    if out_dtype is None:
        out_dtype = x.dtype
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"triton kernels write fp32/fp16/bf16, not {out_dtype}")
    M, N = x.shape
    if N > 1 and x.stride(1) != 1:
        raise ValueError("x must have unit stride along its last dim (x.stride(1) == 1)")
    if mask is not None:
        if op == "logsumexp":
            raise ValueError("a mask is only supported for softmax/log_softmax")
        if tuple(mask.shape) != (M, N):
            raise ValueError(f"mask must have shape {(M, N)}, got {tuple(mask.shape)}")
        if mask.dtype not in _MASK_DTYPES:
            raise TypeError(f"mask must be bool/int8/uint8, got {mask.dtype}")
        if mask.device != x.device:
            raise ValueError("mask must be on x's device")
        if N > 1 and mask.stride(1) != 1:
            mask = mask.contiguous()
        if mask.dtype != torch.int8:
            mask = mask.view(torch.int8)  # same bytes; keeps the autotune key one dtype
    out = torch.empty((M,) if op == "logsumexp" else (M, N), dtype=out_dtype, device=x.device)
    return M, N, out_dtype, mask, out


def _empty_result(op, M, N, out):
    if M == 0 or N == 0:
        if op == "logsumexp" and M > 0:
            out.fill_(float("-inf"))
        return True
    return False


def _validate(config: dict, N: int, device: torch.device) -> tuple[int, int]:
    code = _PATH_CODE.get(config.get("path"))
    if code is None:
        raise ValueError(f"unknown path {config.get('path')!r}")
    bn = int(config["BLOCK_N"])
    if bn < 1 or bn & (bn - 1):
        raise ValueError(f"BLOCK_N must be a power of two, got {bn}")
    if code == 0 and bn < N:
        raise ValueError(f"path {config['path']!r} holds whole rows: BLOCK_N={bn} < N={N}")
    ns = _n_split(code, N, bn, int(config.get("SPLIT", 1)))
    if ns > MAX_SPLIT:
        raise ValueError(f"{ns} programs per row > {MAX_SPLIT}: use a larger BLOCK_N or SPLIT")
    if device.type == "cuda" and ns > _device_sms(device):
        raise ValueError(f"{ns} programs per row > {_device_sms(device)} SMs: they could not all be resident")
    return code, ns


def run(op: str, x: torch.Tensor, out_dtype: torch.dtype, config: dict, mask: torch.Tensor | None = None
        ) -> torch.Tensor:
    """Run ``op`` over the rows of ``x`` (M, N) with ``config``; a new tensor in ``out_dtype``.

    ``mask`` (optional, softmax/log_softmax): a keep-mask of shape (M, N), bool/int8/uint8;
    positions where it is 0 count as -inf.
    """
    out, launch = prepare(op, x, out_dtype, config, mask)
    launch()
    return out


def prepare(op: str, x: torch.Tensor, out_dtype: torch.dtype, config: dict, mask: torch.Tensor | None = None):
    """``(out, launch)``: the output tensor and a no-argument callable that fills it.

    Everything but the kernel launch (checks, allocation, grid) happens here, once; calling
    ``launch()`` again recomputes ``out`` in place (what a benchmark times).
    """
    M, N, out_dtype, mask, out = _prepare(op, x, out_dtype, mask)
    if _empty_result(op, M, N, out):
        return out, (lambda: None)
    code, ns = _validate(config, N, x.device)
    has_mask = mask is not None
    mask_arg = mask if has_mask else placeholder(x, torch.int8)
    lse_split = op == "logsumexp" and ns > 1
    ws = torch.empty(M * ns * 2, dtype=torch.float32, device=x.device) if lse_split else placeholder(x, torch.float32)
    sync = _sync_buffer(x.device, M if lse_split else 0)
    exchange = op != "logsumexp" and ns > 1
    slot_dev = x.device
    bn, rows, split, warps = int(config["BLOCK_N"]), int(config["ROWS"]), int(config["SPLIT"]), int(config["num_warps"])
    stages = int(config.get("num_stages", 1))
    out_stride = N if op != "logsumexp" else 1
    mstride = mask_arg.stride(0) if has_mask else 0
    meta = dict(OP=_OP_CODE[op], HAS_MASK=has_mask, PATH=code, BLOCK_N=bn, ROWS=rows, SPLIT=split, NW=warps, NS=stages)
    common = dict(meta, num_warps=warps, num_stages=stages)
    slots = _slot_buffer(slot_dev, M * ns) if exchange else placeholder(x, torch.int64)
    args = (x, out, mask_arg, ws, sync, slots, M, N, x.stride(0), out_stride, mstride, _np2(N))
    grid = (_grid_size(x.device, M, N, args, meta),)
    kernel = _softmax_kernel[grid]
    if exchange and _interpreting():
        # the interpreter runs programs one by one: partials could never meet in one launch
        def launch():
            kernel(*args, PHASE=1, **common)
            kernel(*args, PHASE=2, **common)
    elif exchange:
        need = M * ns

        def launch():
            buf = _slot_buffer(slot_dev, need)  # counts the launch (epoch bookkeeping)
            kernel(*args[:5], buf, *args[6:], PHASE=0, **common)
    else:
        def launch():
            kernel(*args, PHASE=0, **common)
    return out, launch


# ----------------------------------------------------------------------------------------------
# Triton's native autotuner
# ----------------------------------------------------------------------------------------------

_AUTOTUNED: dict = {}
_AUTOTUNED_LOCK = threading.Lock()


def _max_split_of(op: str, N: int, dtype: torch.dtype) -> int:
    ns = 1
    for c in config_space(op, 0, N, dtype):
        ns = max(ns, _n_split(_PATH_CODE[c["path"]], N, c["BLOCK_N"], c["SPLIT"]))
    return ns


def autotuned(op: str, do_bench=None):
    """The ``triton.autotune``-wrapped kernel for ``op`` (one per (op, do_bench), cached).

    ``key`` is ``N_BUCKET`` only (the next power of two of N; Triton adds every tensor
    argument's dtype), the configs are this op's candidates across all buckets, pruned at each
    launch to ``config_space(op, M, N, x.dtype)``. Launch it through :func:`run_autotuned` (or
    :func:`launch_autotuned`), which passes the int8 placeholder when there is no mask.
    """
    _check_op(op)
    key = (op, do_bench)
    fn = _AUTOTUNED.get(key)
    if fn is None:
        with _AUTOTUNED_LOCK:
            fn = _AUTOTUNED.get(key)
            if fn is None:
                configs = [_to_triton(c) for c in _universe(op)]

                def prune(configs, named_args, **kwargs):
                    x = named_args["x_ptr"]
                    n = int(named_args["N"])
                    allowed = [_cfg_key(c) for c in config_space(op, int(named_args["M"]), n, x.dtype)]
                    if _interpreting() and op != "logsumexp":
                        # the interpreter runs programs one by one: split partials could never meet
                        allowed = [k for k in allowed
                                   if k[0] in ("rows", "onepass") or _n_split(_PATH_CODE[k[0]], n, k[1], k[3]) == 1]
                    by_key = {_cfg_key(config_from_triton(c)): c for c in configs}
                    kept = [by_key[k] for k in allowed if k in by_key]
                    if not kept:
                        raise ValueError(f"no {op} config fits N={n}")
                    return kept

                fn = triton.autotune(configs=configs, key=["N_BUCKET"], prune_configs_by={"early_config_prune": prune},
                                     do_bench=do_bench)(_softmax_kernel)
                _AUTOTUNED[key] = fn
    return fn


def launch_autotuned(kernel, op: str, x: torch.Tensor, out: torch.Tensor, mask_arg: torch.Tensor, has_mask: bool
                     ) -> torch.Tensor:
    """Launch an :func:`autotuned` kernel with explicit mask argument and ``HAS_MASK`` toggle.

    Low level (the tests use it to check cache keys); :func:`run_autotuned` is the normal entry.
    """
    M, N = x.shape
    ns = _max_split_of(op, N, x.dtype)
    lse = op == "logsumexp"
    ws = torch.empty(M * ns * 2, dtype=torch.float32, device=x.device) if (lse and ns > 1) else placeholder(
        x, torch.float32)
    sync = _sync_buffer(x.device, M if lse else 0)
    slots = _slot_buffer(x.device, M * ns) if op != "logsumexp" else placeholder(x, torch.int64)
    out_stride = N if op != "logsumexp" else 1
    mstride = mask_arg.stride(0) if (has_mask and mask_arg.dim() == 2) else 0
    args = (x, out, mask_arg, ws, sync, slots, M, N, x.stride(0), out_stride, mstride, _np2(N))

    def grid(meta):
        return (_grid_size(x.device, M, N, args, meta),)

    kernel[grid](*args, OP=_OP_CODE[op], HAS_MASK=bool(has_mask), PHASE=0)
    return out


def run_autotuned(op: str, x: torch.Tensor, out_dtype: torch.dtype | None = None, mask: torch.Tensor | None = None,
                  do_bench=None) -> torch.Tensor:
    """Like :func:`run`, the config chosen by Triton's autotuner (see :func:`autotuned`)."""
    M, N, out_dtype, mask, out = _prepare(op, x, out_dtype, mask)
    if _empty_result(op, M, N, out):
        return out
    kernel = autotuned(op, do_bench)
    has_mask = mask is not None
    mask_arg = mask if has_mask else placeholder(x, torch.int8)
    return launch_autotuned(kernel, op, x, out, mask_arg, has_mask)
