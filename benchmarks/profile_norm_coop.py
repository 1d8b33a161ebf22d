"""One cooperative (``COOP``) rms_norm / layer_norm forward config on one GPU, for a profiler: the
compiled kernel's registers, spills and grid, then a few launches to profile, or (``--time``) the
launch's device time, median of three ``do_bench`` medians (L2 flushed), next to a same-size copy.

    python3 benchmarks/profile_norm_coop.py --op layer_norm
    ncu --kernel-name regex:_norm_fwd --launch-skip 3 --launch-count 1 --section SpeedOfLight \\
        --section Occupancy --section WarpStateStats --section LaunchStats \\
        python3 benchmarks/profile_norm_coop.py --op layer_norm

``--variant``: where layer_norm's forward spends what rms_norm's does not. Each variant takes
more of layer_norm's work out of the kernel (so its output is wrong from ``one-word`` on; the
error against torch's is printed), and includes every variant before it:

* ``base``: the kernel as shipped;
* ``no-recheck``: a chunk's partial without the second reduction where its shift is ill placed;
* ``sum-merge``: the row's partials added up in one reduction, not merged by Chan et al.'s rule;
* ``one-word``: one word a chunk exchanged (sum d^2 only, as rms_norm), not two;
* ``no-shift``: no shift, so none of the row's three elements is loaded.

``--variant one-merger`` is not one of those: an alternative to the exchange (right at size on an
H200 and under the interpreter, wrong on the device in one small case: 3 rows of 100 in chunks
of 16 at one warp), in which only
the row's first program reads the row's partials, merges them and publishes the row's mean and
rstd as three words that the others wait for (every program reads all of a row's partials in the
shipped kernel), and each chunk's partial is taken about the chunk's own first element (no shift
element that every program of the row reads).

``--variant chunk-head`` and ``--variant two-pass`` are alternatives too: the shipped exchange,
with each chunk's partial taken from its own elements only, published as (sum x, M2 about the
chunk's mean): about the chunk's first element (``chunk-head``), or about its mean, taken first
(``two-pass``: two reductions in a row); no element of the row that all its programs load
(layer_norm only; results in benchmarks/results/current/norms/layer_norm_coop).

``--variant zero-shift`` and ``--variant first-shift`` are the shipped kernel but for the row's shift:
none (0), or the row's first element alone (one scalar load a program, not the three of the
median); each still re-checks a chunk whose shift is ill placed, so its output stays right.

``--no-bias`` drops the bias as well. A variant replaces helpers of
``dispatch_triton.norm_kernels`` before the first compile, so each runs in its own process (the
JIT keeps a kernel's dependencies from its first compile). Under ``TRITON_INTERPRET=1`` with
``--device cpu`` it runs (small shapes) without timing.

    for v in base no-recheck sum-merge one-word no-shift; do
        python3 benchmarks/profile_norm_coop.py --op layer_norm --time --variant $v; done
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from dispatch_triton import norm_kernels as K
from dispatch_triton import norms as NT
from dispatch_triton.exchange import _await_words, _publish_words, _ticket
from dispatch_triton.row_math import _cvt

VARIANTS = ("base", "no-recheck", "sum-merge", "one-word", "no-shift", "one-merger", "chunk-head", "two-pass",
            "zero-shift", "first-shift")
LOCAL_TWO_PASS = tl.constexpr(0)  # _coop_fwd_local's default: set by use_variant before the first compile


@triton.jit
def _partial_no_recheck(xr, shift, cmask, nc, IS_RMS: tl.constexpr):
    x = xr.to(tl.float32)
    if IS_RMS:
        return tl.full([], 0.0, tl.float32), tl.sum(x * x, 0)
    else:
        d = tl.where(cmask, x - shift, 0.0)
        s, q = K._sum2(d, d * d)
        return s, K._centred(s, q, nc)


@triton.jit
def _stats_sum_merge(slot_ptr, row, S, tag, N, eps, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr,
                     CHUNKS_P2: tl.constexpr, PACK: tl.constexpr = 0):
    vals, jm = _await_words(slot_ptr, 64 + tl.cast(row, tl.int64) * S * 2, S, tag, 2, CHUNKS_P2)
    a, b = tl.split(vals)
    s1, m2 = K._sum2(a, b)
    return K._stats(s1, m2, 0.0, N, eps, False)


@triton.jit
def _publish_one_word(slot_ptr, row, S, c, p1, p2, tag, IS_RMS: tl.constexpr, PACK: tl.constexpr = 0):
    k = tl.arange(0, 1)
    _publish_words(slot_ptr, 64 + tl.cast(row, tl.int64) * S + c, tl.zeros([1], tl.float32) + p2, k, tag)


@triton.jit
def _stats_one_word(slot_ptr, row, S, tag, N, eps, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr,
                    CHUNKS_P2: tl.constexpr, PACK: tl.constexpr = 0):
    vals, jm = _await_words(slot_ptr, 64 + tl.cast(row, tl.int64) * S, S, tag, 1, CHUNKS_P2)
    zero = tl.full([], 0.0, tl.float32)
    return K._stats(zero, tl.sum(tl.sum(vals, 1), 0), zero, N, eps, True)


@triton.jit
def _row_chunk_no_shift(x_ptr, row, stride, cols, M, N, IS_RMS: tl.constexpr):
    lim = tl.where(row < M, N, 0)
    xr = tl.load(x_ptr + tl.cast(row, tl.int64) * stride + cols, mask=cols < lim, other=0.0,
                 eviction_policy="evict_first")
    return xr, tl.full([], 0.0, tl.float32)


@triton.jit
def _row_chunk_first_shift(x_ptr, row, stride, cols, M, N, IS_RMS: tl.constexpr):
    # the row's first element as its shift: one scalar load a program, not three
    off = tl.cast(row, tl.int64) * stride
    lim = tl.where(row < M, N, 0)
    xr = tl.load(x_ptr + off + cols, mask=cols < lim, other=0.0, eviction_policy="evict_first")
    if IS_RMS:
        return xr, tl.full([], 0.0, tl.float32)
    return xr, tl.load(x_ptr + off, mask=lim > 0, other=0.0).to(tl.float32)


@triton.jit
def _word(vals, i: tl.constexpr):
    # word i of a row's published [1, W] words, as a scalar
    k = tl.arange(0, vals.shape[1])
    return tl.sum(tl.sum(tl.where(k[None, :] == i, vals, 0.0), 1), 0)


@triton.jit
def _group(slot_ptr, N, BLOCK_N: tl.constexpr, PHASE: tl.constexpr):
    # (group, chunk, chunks a row, groups, tag) of a program as norm_kernels._coop_fwd takes them:
    # from its ticket on a GPU (PHASE 0), from its program id under the interpreter (tag 1)
    nprog = tl.num_programs(0)
    S = tl.cdiv(N, BLOCK_N)
    tid = tl.program_id(0)
    tag = tid.to(tl.int64) * 0 + 1
    if PHASE == 0:
        tid, tag = _ticket(slot_ptr, nprog)
    return tid // S, tid % S, S, nprog // S, tag


@triton.jit
def _about_row_start(x_ptr, xoff, s, n, jm, N, BLOCK_N: tl.constexpr):
    # the row's first element, the row's mean less it, and each chunk's mean less the row's, from
    # the chunks' sums s of x less their own first elements (n elements each; live lanes jm).
    # Every difference is of nearby numbers or of small ones, so rows far from zero keep their digits
    j = tl.arange(0, s.shape[0])
    shifts = tl.load(x_ptr + xoff + j * BLOCK_N, mask=jm, other=0.0).to(tl.float32)
    ref = tl.load(x_ptr + xoff).to(tl.float32)
    local = tl.where(jm, (shifts - ref) + s / tl.maximum(n, 1.0), 0.0)
    mean_d = tl.sum(n * local, 0) / N
    return ref, mean_d, tl.where(jm, local - mean_d, 0.0)


@triton.jit
def _merge_row(x_ptr, slot_ptr, row, S, tag, M, N, stride_xm, eps, IS_RMS: tl.constexpr, BLOCK_N: tl.constexpr,
               CHUNKS_P2: tl.constexpr):
    # the row's first program: its S chunks' partials (sum d, M2 about each chunk's own first
    # element) merged by Chan et al.'s rule about the row's first element, published as the words
    # (that element, the mean of x less it, rstd) after the chunks' words
    r64 = tl.cast(row, tl.int64)
    vals, jm = _await_words(slot_ptr, 64 + r64 * S * 2, S, tag, 2, CHUNKS_P2)
    s, m2 = tl.split(vals)
    j = tl.arange(0, CHUNKS_P2)
    n = tl.where(jm, K._part_counts(j, N, BLOCK_N), 0.0)
    ref = 0.0
    if IS_RMS:
        mean_d = 0.0
        total = tl.sum(m2, 0)
    else:
        ref, mean_d, dev = _about_row_start(x_ptr, r64 * stride_xm, s, n, jm, N, BLOCK_N)
        total = tl.sum(m2 + n * dev * dev, 0)
    rstd = 1.0 / tl.sqrt(total / N + eps)
    k = tl.arange(0, 4)
    out = tl.where(k == 0, ref, tl.where(k == 1, mean_d, rstd))
    _publish_words(slot_ptr, 64 + M * S * 2 + r64 * 4, out, k, tag)


@triton.jit
def _chunk_shift(x_ptr, row, stride, c, M, N, BLOCK_N: tl.constexpr, IS_RMS: tl.constexpr):
    # the first element of this program's chunk of ``row`` (0 for rms_norm and past the last row)
    if IS_RMS:
        return tl.full([], 0.0, tl.float32)
    else:
        return tl.load(x_ptr + tl.cast(row, tl.int64) * stride + c * BLOCK_N, mask=row < M, other=0.0).to(tl.float32)


@triton.jit
def _coop_fwd_one_merger(x_ptr, y_ptr, w_ptr, b_ptr, slot_ptr, st_ptr, M, N, stride_xm, stride_ym, eps,
                         IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, PHASE: tl.constexpr,
                         BLOCK_N: tl.constexpr, HINTS: tl.constexpr, CHUNKS_P2: tl.constexpr, STATS: tl.constexpr,
                         WB_EACH: tl.constexpr = 0, PACK: tl.constexpr = 0):
    tl.static_assert(not STATS, "the one-merger variant does not save the rows' statistics")
    tl.static_assert(not PACK, "the one-merger variant publishes its own words (no PACK)")
    tl.static_assert(not WB_EACH, "the one-merger variant holds the weight and bias (no WB_EACH)")
    # norm_kernels._coop_fwd's groups, rows and pipeline; a chunk publishes (sum d, M2) about its
    # own first element (two words, rms_norm too); the row's first program merges them
    # (_merge_row) before it waits, like the others, for the row's three words
    OUT_TY = y_ptr.dtype.element_ty
    grp, c, S, n_groups, tag = _group(slot_ptr, N, BLOCK_N, PHASE)
    cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    nc = tl.maximum(K._part_counts(c, N, BLOCK_N), 1.0)
    w, b = K._affine_params(w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS)
    # _row_chunk's IS_RMS=True: the chunk alone, without the row's shift elements
    xr, unused = K._row_chunk(x_ptr, grp, stride_xm, cols, M, N, True)
    if PHASE != 2:
        if grp < M:
            p1, p2 = K._chunk_partial(xr, _chunk_shift(x_ptr, grp, stride_xm, c, M, N, BLOCK_N, IS_RMS), cmask, nc,
                                      IS_RMS)
            _publish_words(slot_ptr, 64 + tl.cast(grp, tl.int64) * S * 2 + c * 2,
                           tl.where(tl.arange(0, 2) == 0, p1, p2), tl.arange(0, 2), tag)
    xr_n, unused = K._row_chunk(x_ptr, grp + n_groups, stride_xm, cols, M, N, True)
    for row in range(grp, M, n_groups):
        nrow = row + n_groups
        if PHASE != 2:
            if nrow < M:
                p1, p2 = K._chunk_partial(xr_n, _chunk_shift(x_ptr, nrow, stride_xm, c, M, N, BLOCK_N, IS_RMS), cmask,
                                          nc, IS_RMS)
                _publish_words(slot_ptr, 64 + tl.cast(nrow, tl.int64) * S * 2 + c * 2,
                               tl.where(tl.arange(0, 2) == 0, p1, p2), tl.arange(0, 2), tag)
        if PHASE != 1:  # (the interpreter's PHASE 2: every partial is out, and a row's first program runs first)
            if c == 0:
                _merge_row(x_ptr, slot_ptr, row, S, tag, M, N, stride_xm, eps, IS_RMS, BLOCK_N, CHUNKS_P2)
        xr_nn, unused = K._row_chunk(x_ptr, nrow + n_groups, stride_xm, cols, M, N, True)
        if PHASE != 1:
            row64 = tl.cast(row, tl.int64)
            words, jm = _await_words(slot_ptr, 64 + M * S * 2 + row64 * 4, 1, tag, 4, 1)
            y = ((xr.to(tl.float32) - _word(words, 0)) - _word(words, 1)) * _word(words, 2)
            if HAS_WEIGHT:
                y = y * w.to(tl.float32)
            if HAS_BIAS:
                y = y + b.to(tl.float32)
            K._st(y_ptr + row64 * stride_ym + cols, _cvt(y, OUT_TY), cmask, HINTS)
        xr = xr_n
        xr_n = xr_nn


@triton.jit
def _local_partial(xr, x0, cmask, nc, TWO_PASS: tl.constexpr):
    # a chunk's (sum x, M2 about the chunk's mean) taken from its own elements only: about its own
    # first element x0 (a second reduction where that is ill placed), or (TWO_PASS) its mean, then
    # M2 about it (two reductions in a row)
    x = xr.to(tl.float32)
    if TWO_PASS:
        s = tl.sum(tl.where(cmask, x, 0.0), 0)
        e = tl.where(cmask, x - s / nc, 0.0)
        return s, tl.sum(e * e, 0)
    else:
        d = tl.where(cmask, x - x0, 0.0)
        s, q = K._sum2(d, d * d)
        m2 = K._centred(s, q, nc)
        if K._ill_placed(s, q, nc):
            e = tl.where(cmask, d - s / nc, 0.0)
            m2 = tl.sum(e * e, 0)
        return s + x0 * nc, m2


@triton.jit
def _coop_fwd_local(x_ptr, y_ptr, w_ptr, b_ptr, slot_ptr, st_ptr, M, N, stride_xm, stride_ym, eps,
                    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, PHASE: tl.constexpr,
                    BLOCK_N: tl.constexpr, HINTS: tl.constexpr, CHUNKS_P2: tl.constexpr, STATS: tl.constexpr,
                    WB_EACH: tl.constexpr = 0, PACK: tl.constexpr = 0):
    tl.static_assert(not IS_RMS, "the local-partial variants are layer_norm's")
    tl.static_assert(not PACK, "the local-partial variants publish two words a chunk (no PACK)")
    tl.static_assert(not WB_EACH, "the local-partial variants hold the weight and bias (no WB_EACH)")
    # norm_kernels._coop_fwd's groups, rows, pipeline and exchange (two words a chunk, merged by
    # every program of the row), with each chunk's partial taken from its own elements only
    # (_local_partial): no element of the row that every program reads
    TWO_PASS: tl.constexpr = LOCAL_TWO_PASS
    OUT_TY = y_ptr.dtype.element_ty
    grp, c, S, n_groups, tag = _group(slot_ptr, N, BLOCK_N, PHASE)
    cols = c * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    nc = tl.maximum(K._part_counts(c, N, BLOCK_N), 1.0)
    w, b = K._affine_params(w_ptr, b_ptr, cols, cmask, HAS_WEIGHT, HAS_BIAS)
    xr, unused = K._row_chunk(x_ptr, grp, stride_xm, cols, M, N, True)  # (IS_RMS=True: no shift loads)
    # the chunk's first element (_chunk_shift; 0 for TWO_PASS, which takes no shift)
    x0 = _chunk_shift(x_ptr, grp, stride_xm, c, M, N, BLOCK_N, TWO_PASS)
    if PHASE != 2:
        if grp < M:
            p1, p2 = _local_partial(xr, x0, cmask, nc, TWO_PASS)
            K._coop_publish(slot_ptr, grp, S, c, p1, p2, tag, False)
    xr_n, unused = K._row_chunk(x_ptr, grp + n_groups, stride_xm, cols, M, N, True)
    x0_n = _chunk_shift(x_ptr, grp + n_groups, stride_xm, c, M, N, BLOCK_N, TWO_PASS)
    for row in range(grp, M, n_groups):
        nrow = row + n_groups
        if PHASE != 2:
            if nrow < M:
                p1, p2 = _local_partial(xr_n, x0_n, cmask, nc, TWO_PASS)
                K._coop_publish(slot_ptr, nrow, S, c, p1, p2, tag, False)
        xr_nn, unused = K._row_chunk(x_ptr, nrow + n_groups, stride_xm, cols, M, N, True)
        x0_nn = _chunk_shift(x_ptr, nrow + n_groups, stride_xm, c, M, N, BLOCK_N, TWO_PASS)
        if PHASE != 1:
            row64 = tl.cast(row, tl.int64)
            mean, rstd = K._coop_stats(slot_ptr, row, S, tag, N, eps, False, BLOCK_N, CHUNKS_P2)
            y = (xr.to(tl.float32) - mean) * rstd
            if HAS_WEIGHT:
                y = y * w.to(tl.float32)
            if HAS_BIAS:
                y = y + b.to(tl.float32)
            K._st(y_ptr + row64 * stride_ym + cols, _cvt(y, OUT_TY), cmask, HINTS)
            if STATS:
                if c == 0:
                    K._save_stats(st_ptr, row, mean, rstd, None, M, False)
        xr = xr_n
        xr_n = xr_nn
        x0 = x0_n
        x0_n = x0_nn


def use_variant(name: str) -> None:
    """Replace what variant ``name`` changes in ``norm_kernels`` (before the first compile): the
    helpers that it and every variant before it take out, or for ``one-merger`` the one-launch
    path's body (and the slot buffer's size)."""
    if name not in VARIANTS:
        raise ValueError(f"--variant must be one of {', '.join(VARIANTS)} (got {name!r})")
    if name == "one-merger":  # two words a chunk and four a row: more than the launcher asks for
        K._coop_fwd = _coop_fwd_one_merger
        slots = NT._split_slots
        NT._split_slots = lambda device, partials: slots(device, 2 * partials + 64)
        return
    if name in ("zero-shift", "first-shift"):  # the shipped kernel but for its shift (output still right)
        K._row_chunk = _row_chunk_no_shift if name == "zero-shift" else _row_chunk_first_shift
        return
    if name in ("chunk-head", "two-pass"):
        global LOCAL_TWO_PASS
        LOCAL_TWO_PASS = tl.constexpr(int(name == "two-pass"))
        K._coop_fwd = _coop_fwd_local
        return
    level = VARIANTS.index(name)
    if level >= 1:
        K._chunk_partial = _partial_no_recheck
    if level >= 2:
        K._coop_stats = _stats_sum_merge
    if level >= 3:
        K._coop_publish, K._coop_stats = _publish_one_word, _stats_one_word
    if level >= 4:
        K._row_chunk = _row_chunk_no_shift


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="rms_norm", choices=NT.NORM_OPS)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--shape", default="64x262144", help="M x N")
    parser.add_argument("--block-n", type=int, default=2048)
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--variant", default="base", choices=VARIANTS)
    parser.add_argument("--no-bias", action="store_true", help="layer_norm without its bias")
    parser.add_argument("--time", action="store_true", help="time the launch (and a same-size copy)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    if args.variant not in ("base", "one-merger") and args.op != "layer_norm":  # (the local ones too)
        parser.error(f"--variant {args.variant} takes layer_norm's work out of its kernel: use --op layer_norm")
    use_variant(args.variant)
    m, n = (int(v) for v in args.shape.split("x"))
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    config = dict(BLOCK_N=args.block_n, ROWS=1, SPLIT=1, PERSIST=0, num_warps=args.warps, num_stages=1, COOP=1)
    bias = args.op == "layer_norm" and not args.no_bias
    launcher = NT.NormLauncher(args.op, m, n, dtype, n, device, config, 1e-5, True, bias, (m, n))
    head = f"{args.op} {args.dtype} {m}x{n} {args.variant}{' no-bias' if args.no_bias else ''} {config}"
    if device.type == "cuda":
        for direct in launcher.direct:
            kernel = direct.compile(*launcher._stand_ins)
            head += f": registers {kernel.n_regs}, spilled {kernel.n_spills}, grid {direct.grid[0]}"
    torch.manual_seed(0)
    x = torch.randn(m, n, device=device, dtype=dtype) + 0.5  # a mean off zero: layer_norm is not rms_norm
    w = torch.randn(n, device=device, dtype=dtype)
    b = torch.randn(n, device=device, dtype=dtype) if bias else None
    ref = torch.nn.functional.rms_norm(x.float(), (n,), w.float(), 1e-5) if args.op == "rms_norm" else \
        torch.nn.functional.layer_norm(x.float(), (n,), w.float(), None if b is None else b.float(), 1e-5)
    err = float((launcher.run(x, w, b).float() - ref).abs().max())
    if not args.time or device.type != "cuda":
        print(f"{head}; error {err:.1e}", flush=True)
        for _ in range(args.launches):
            launcher.run(x, w, b)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return
    src = torch.empty(m * n, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    rounds, copies = [], []
    for _ in range(3):
        copies.append(triton.testing.do_bench(lambda: dst.copy_(src), warmup=10, rep=100, return_mode="median"))
        rounds.append(triton.testing.do_bench(lambda: launcher.run(x, w, b), warmup=10, rep=100,
                                              return_mode="median"))
    us, copy_us = sorted(rounds)[1] * 1e3, sorted(copies)[1] * 1e3
    print(f"{head}: {us:.1f} us (rounds {', '.join(f'{r * 1e3:.1f}' for r in rounds)}), {100 * copy_us / us:.0f}% "
          f"of a same-size copy ({copy_us:.1f} us); error {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
