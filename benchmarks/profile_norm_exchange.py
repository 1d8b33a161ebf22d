"""Where the time of the one-launch (``COOP``) rms_norm / layer_norm backward of long rows goes, on one GPU.

Each case's backward (``dispatch_triton.norm_backward.make_backward``, the default plan or the
plan overrides given) is timed with ``triton.testing.do_bench`` (median, L2 flushed between
repetitions) next to a copy of the same byte count (x and dy read, dx written), in one of three
variants of the kernel:

* ``base``: the kernel as shipped; its dx is checked against torch's fp32 backward (max error
  relative to the reference's largest magnitude);
* ``nowait``: a row's partials read once, without waiting for them (wrong results): what the
  waiting costs;
* ``local``: nothing published, nothing read (wrong results; the partials' reductions go too, as
  nothing uses them): the kernel's streaming alone, in the same persistent structure.

* ``saved``: the kernel as shipped, handed each row's statistics as the forward saves them (rstd
  and layer_norm's mean, from torch here: ``sweep_harness.row_stats``), so that a chunk exchanges
  sum g * xhat (and sum g) only; its dx is checked as ``base``'s;
* ``one-merger``: a correct alternative to the exchange (as ``profile_norm_coop.py --variant
  one-merger`` for the forward): each chunk's partials taken about the chunk's own first element,
  and only the row's first program reads the row's partials, merges them and publishes what dx
  needs (the row's first element, the mean of x less it, rstd and dx's two projections) as words
  that the others wait for; its dx is checked as ``base``'s. Under the interpreter it runs in two
  launches (``run_one_merger``; the tests use that).

A variant replaces the exchange helpers of ``dispatch_triton.norm_backward_coop`` before the
first compile, so each runs in its own process (the JIT keeps a kernel's dependencies from its
first compile). Each line also gives the compiled kernel's registers a thread, registers spilled,
and the PTX's counts of atomics, barriers and volatile loads.

    python3 benchmarks/profile_norm_exchange.py base rms_norm:bfloat16:1024x16384,layer_norm:bfloat16:256x65536
    python3 benchmarks/profile_norm_exchange.py local layer_norm:bfloat16:64x262144 \
        '{}' '{"BLOCK_N": 1024, "num_warps": 2}'

Arguments: the variant, a comma-separated list of op:dtype:MxN cases, then plan overrides as JSON
(``{}``: the default plan; see ``backward_plan``).
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from dispatch_triton import norm_backward as NB
from dispatch_triton import norm_backward_coop as C
from dispatch_triton import norm_backward_kernels as K
from dispatch_triton.exchange import _await_words, _publish_words
from dispatch_triton.row_math import _cvt
from profile_norm_coop import _about_row_start, _group, _word
from sweep_harness import row_stats

VARIANTS = ("base", "saved", "nowait", "local", "one-merger")


@triton.jit
def _gather_nowait(slot_ptr, base, S, tag, N, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr):
    # the row's words read once, whatever their tag
    j = tl.arange(0, CHUNKS_P2)
    if IS_RMS:
        k = tl.arange(0, 2)
    else:
        k = tl.arange(0, 4)
    live = (j < S)[:, None] & (k >= 0)[None, :]
    v = tl.load(slot_ptr + base + j[:, None] * k.shape[0] + k[None, :], mask=live, other=0, volatile=True)
    f = (v & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
    t = tl.sum(tl.sum(f, 1), 0)
    return t, t + N, t * 0.5, t * 0.25


@triton.jit
def _gather_local(slot_ptr, base, S, tag, N, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr):
    z = (base * 0).to(tl.float32)
    return z + 1.0, z + N, z + 0.5, z + 0.25


@triton.jit
def _publish_none(slot_ptr, idx, s1, m2, sgd, sg, tag, IS_RMS: tl.constexpr):
    pass


@triton.jit
def _publish_about_own_first(x_ptr, slot_ptr, row, S, c, xr, dyr, w, cmask, nc, stride_xm, tag, SLOT_OFF: tl.constexpr,
                             HAS_WEIGHT: tl.constexpr, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr):
    # a chunk's four partials (K._bwd_partial) about the chunk's own first element, as four words
    r64 = tl.cast(row, tl.int64)
    shift = 0.0
    if not IS_RMS:
        shift = tl.load(x_ptr + r64 * stride_xm + c * BLOCK_N).to(tl.float32)
    g = dyr.to(tl.float32)
    if HAS_WEIGHT:
        g = g * w
    s1, m2, sgd, sg = K._bwd_partial(xr.to(tl.float32), g, cmask, shift, nc, IS_RMS)
    C._publish(slot_ptr, SLOT_OFF + (r64 * S + c) * 4, s1, m2, sgd, sg, tag, False)  # four words, rms_norm too


@triton.jit
def _merge_row(x_ptr, slot_ptr, row, S, tag, M, N, stride_xm, eps, SLOT_OFF: tl.constexpr, IS_RMS: tl.constexpr,
               BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr):
    # the row's first program: the S chunks' partials merged by Chan et al.'s rule about the row's
    # first element, published as the words (that element, the mean of x less it, rstd, c1, c2)
    # after every chunk's words, dx = rstd (g - c2 - xhat c1)
    r64 = tl.cast(row, tl.int64)
    vals, jm = _await_words(slot_ptr, SLOT_OFF + r64 * S * 4, S, tag, 4, CHUNKS_P2)
    even, odd = tl.split(tl.reshape(vals, [CHUNKS_P2, 2, 2]))
    s1, sgd = tl.split(even)
    m2, sg = tl.split(odd)
    j = tl.arange(0, CHUNKS_P2)
    n = tl.where(jm, K._part_counts(j, N, BLOCK_N), 0.0)
    ref = 0.0
    mean_d = 0.0
    c2 = 0.0
    if IS_RMS:
        total = tl.sum(m2, 0)
        sgdt = tl.sum(sgd, 0)
    else:
        ref, mean_d, dev = _about_row_start(x_ptr, r64 * stride_xm, s1, n, jm, N, BLOCK_N)
        total = tl.sum(m2 + n * dev * dev, 0)
        sgdt = tl.sum(sgd + dev * sg, 0)
        c2 = tl.sum(sg, 0) / N
    rstd = 1.0 / tl.sqrt(total / N + eps)
    k = tl.arange(0, 8)
    out = tl.where(k == 0, ref, tl.where(k == 1, mean_d, tl.where(k == 2, rstd, tl.where(k == 3, rstd * sgdt / N,
                                                                                        tl.where(k == 4, c2, 0.0)))))
    _publish_words(slot_ptr, SLOT_OFF + M * S * 4 + r64 * 8, out, k, tag)


@triton.jit(do_not_specialize=["M", "eps"])
def _norm_bwd_one_merger(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, slot_ptr, st_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr, SLOT_OFF: tl.constexpr, SAVED: tl.constexpr = False,
):
    # C._norm_bwd_coop's signature, so that the launcher takes it as is: one launch (the rows'
    # statistics recomputed: run it with the plan's SAVED False)
    tl.static_assert(not SAVED, "the one-merger variant recomputes the statistics: plan SAVED=False")
    _one_merger_body(x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, slot_ptr, M, N, stride_xm, stride_dym, stride_dxm, p_off_b,
                     eps, IS_RMS, HAS_WEIGHT, WANT_DW, WANT_DB, BLOCK_N, CHUNKS_P2, SLOT_OFF, 0)


@triton.jit
def _norm_bwd_one_merger_phased(
    x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, slot_ptr, st_ptr,
    M, N, stride_xm, stride_dym, stride_dxm, p_off_b, eps,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr, WANT_DB: tl.constexpr,
    BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr, SLOT_OFF: tl.constexpr, PHASE: tl.constexpr,
):
    # the interpreter's two launches: PHASE 1 publishes, PHASE 2 merges, waits and writes
    _one_merger_body(x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, slot_ptr, M, N, stride_xm, stride_dym, stride_dxm, p_off_b,
                     eps, IS_RMS, HAS_WEIGHT, WANT_DW, WANT_DB, BLOCK_N, CHUNKS_P2, SLOT_OFF, PHASE)


@triton.jit
def _one_merger_body(x_ptr, dx_ptr, dy_ptr, w_ptr, p_ptr, slot_ptr, M, N, stride_xm, stride_dym, stride_dxm, p_off_b,
                     eps, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, WANT_DW: tl.constexpr,
                     WANT_DB: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS_P2: tl.constexpr, SLOT_OFF: tl.constexpr,
                     PHASE: tl.constexpr):
    # C._norm_bwd_coop's groups, rows and pipeline; four words a chunk (rms_norm too), eight a row
    # after them
    DX_TY = dx_ptr.dtype.element_ty
    grp, c, S, n_groups, tag = _group(slot_ptr, N, BLOCK_N, PHASE)
    cols, cmask, w, acc_w, acc_b = K._chunk_start(w_ptr, c, N, HAS_WEIGHT, BLOCK_N)
    nc = tl.maximum(K._part_counts(c, N, BLOCK_N), 1.0)
    # _coop_chunk's IS_RMS=True: the chunks alone, without the row's shift elements
    xr, dyr, unused, unused2 = C._coop_chunk(x_ptr, dy_ptr, x_ptr, grp, stride_xm, stride_dym, cols, M, N, True,
                                             False)
    if PHASE != 2:
        if grp < M:
            _publish_about_own_first(x_ptr, slot_ptr, grp, S, c, xr, dyr, w, cmask, nc, stride_xm, tag, SLOT_OFF,
                                     HAS_WEIGHT, IS_RMS, BLOCK_N)
    xr_n, dyr_n, unused, unused2 = C._coop_chunk(x_ptr, dy_ptr, x_ptr, grp + n_groups, stride_xm, stride_dym, cols, M,
                                                 N, True, False)
    for row in range(grp, M, n_groups):
        nrow = row + n_groups
        if PHASE != 2:
            if nrow < M:
                _publish_about_own_first(x_ptr, slot_ptr, nrow, S, c, xr_n, dyr_n, w, cmask, nc, stride_xm, tag,
                                         SLOT_OFF, HAS_WEIGHT, IS_RMS, BLOCK_N)
        if PHASE != 1:
            if c == 0:
                _merge_row(x_ptr, slot_ptr, row, S, tag, M, N, stride_xm, eps, SLOT_OFF, IS_RMS, BLOCK_N, CHUNKS_P2)
        xr_nn, dyr_nn, unused, unused2 = C._coop_chunk(x_ptr, dy_ptr, x_ptr, nrow + n_groups, stride_xm, stride_dym,
                                                       cols, M, N, True, False)
        if PHASE != 1:
            r64 = tl.cast(row, tl.int64)
            words, jm = _await_words(slot_ptr, SLOT_OFF + M * S * 4 + r64 * 8, 1, tag, 8, 1)
            dy = dyr.to(tl.float32)
            g = dy
            if HAS_WEIGHT:
                g = dy * w
            rstd = _word(words, 2)
            xhat = tl.where(cmask, ((xr.to(tl.float32) - _word(words, 0)) - _word(words, 1)) * rstd, 0.0)
            dx = rstd * (g - _word(words, 4) - xhat * _word(words, 3))
            tl.store(dx_ptr + r64 * stride_dxm + cols, _cvt(dx, DX_TY), mask=cmask)
            if WANT_DW:
                acc_w += dy * xhat
            if WANT_DB:
                acc_b += dy
        xr = xr_n
        dyr = dyr_n
        xr_n = xr_nn
        dyr_n = dyr_nn
    if PHASE != 1:
        if grp < n_groups:
            K._store_partials(p_ptr, p_off_b, grp, N, cols, cmask, acc_w, acc_b, WANT_DW, WANT_DB)


def run_one_merger(op: str, x, dy, w, with_bias: bool, block_n: int, groups: int = 2) -> tuple:
    """(dx, dweight, dbias or None) of the one-merger backward, launched directly: one launch on a
    GPU, PHASE 1 then 2 under the interpreter (which runs programs one after another)."""
    m, n = x.shape
    s = -(-n // block_n)
    grid = (groups * s,)
    dx = torch.empty_like(x)
    p = torch.zeros(2 * groups * n, device=x.device, dtype=torch.float32)
    slot = torch.zeros(64 + 4 * m * s + 8 * m, device=x.device, dtype=torch.int64)
    args = (x, dx, dy, w, p, slot, p, m, n, x.stride(0), dy.stride(0), dx.stride(0), groups * n, 1e-5)
    meta = dict(IS_RMS=op == "rms_norm", HAS_WEIGHT=True, WANT_DW=True, WANT_DB=with_bias, BLOCK_N=block_n,
                CHUNKS_P2=triton.next_power_of_2(s), SLOT_OFF=64, num_warps=1)
    if x.is_cuda:
        _norm_bwd_one_merger[grid](*args, **meta)
    else:
        for phase in (1, 2):
            _norm_bwd_one_merger_phased[grid](*args, PHASE=phase, **meta)
    sums = p.view(2, groups, n).sum(1)
    return dx, sums[0].to(w.dtype), sums[1].to(w.dtype) if with_bias else None


def _kernels_seen() -> dict:
    return {id(c): c for e in NB._norm_bwd_coop.device_caches.values() for c in e[0].values()}  # the variant's too


def one(op: str, dtype_name: str, shape: str, variant: str, over: dict) -> str:
    m, n = (int(v) for v in shape.split("x"))
    dtype, dev = getattr(torch, dtype_name), torch.device("cuda")
    x = torch.randn(m, n, device=dev, dtype=dtype)
    dy = torch.randn(m, n, device=dev, dtype=dtype)
    w = torch.randn(n, device=dev, dtype=dtype)
    b = torch.randn(n, device=dev, dtype=dtype) if op == "layer_norm" else None
    backward = NB.make_backward(op, m, n, dtype, n, 1e-5, True, b is not None, plan=over or None)
    args = (dy, x, w) + ((b,) if b is not None else ()) + (torch.empty_like(x),)
    if variant == "saved":  # what the forward saves
        args += (row_stats(op, x, 1e-5),)
    plan = NB.backward_plan(m, n, dtype, dev, None, over or None, grads=2 if b is not None else 1, op=op)  # what ran
    before = _kernels_seen()
    out = backward(*args)
    kernels = [(c.n_regs, c.n_spills, c.asm["ptx"].count("atom."), c.asm["ptx"].count("bar.sync"),
                c.asm["ptx"].count("ld.volatile")) for key, c in _kernels_seen().items() if key not in before]
    err = float("nan")
    if variant in ("base", "saved", "one-merger"):
        xs, ws = x.float().requires_grad_(), w.float().requires_grad_()
        ref = F.rms_norm(xs, (n,), ws, 1e-5) if op == "rms_norm" else F.layer_norm(xs, (n,), ws, b.float(), 1e-5)
        gx, = torch.autograd.grad(ref, [xs], dy.float())
        err = float((out[0].float() - gx).abs().max() / gx.abs().max())
    us = triton.testing.do_bench(lambda: backward(*args), warmup=25, rep=200, return_mode="median") * 1e3
    src = torch.empty(int(1.5 * m * n), device=dev, dtype=dtype)
    dst = torch.empty_like(src)
    copy_us = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median") * 1e3
    gbs = 3 * m * n * x.element_size() / us / 1e3
    return (f"{op} {dtype_name} {shape} {variant} {json.dumps(over)} plan GR{plan['GR']} S{plan.get('S')} "
            f"bn{plan['BLOCK_N']} w{plan['num_warps']} coop {plan.get('COOP')} "
            f"(registers, spilled, atomics, barriers, volatile loads) {kernels}: {us:.1f} us {gbs:.0f} GB/s, "
            f"{100 * copy_us / us:.1f}% of a same-size copy ({copy_us:.1f} us), dx error {err:.2e}")


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in VARIANTS:
        print(__doc__)
        return 2
    variant = sys.argv[1]
    if variant == "nowait":
        C._gather = _gather_nowait
    elif variant == "local":
        C._gather, C._publish = _gather_local, _publish_none
    elif variant == "one-merger":  # four words a chunk and eight a row: more than the launcher asks for
        slots = NB._split_slots
        NB._norm_bwd_coop, NB._split_slots = _norm_bwd_one_merger, lambda device, partials: slots(device, 2 * partials)
    cases = [c.split(":") for c in sys.argv[2].split(",")]
    configs = [json.loads(c) for c in sys.argv[3:]] or [{}]
    for op, dtype_name, shape in cases:
        for over in configs:
            try:
                print(one(op, dtype_name, shape, variant, over), flush=True)
            except Exception as exc:  # a plan that does not build: say so, go on
                print(f"{op} {dtype_name} {shape} {variant} {json.dumps(over)}: failed: {type(exc).__name__}: "
                      f"{str(exc)[:200]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
