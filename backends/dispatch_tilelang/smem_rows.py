"""Long-row softmax / log_softmax / logsumexp in TileLang for CUDA, each CTA's chunk held in shared memory.

A row is cut into ``cluster`` chunks of ``tile_n`` columns, one CTA each, the CTAs of a row one
thread-block cluster (sm_90+). A CTA copies its chunk into shared memory with ``cp.async`` (the
bytes in flight hold no registers), then walks it there three times: the max, the sum of
``exp(x - max)`` (a softmax with ``keep`` writing each exponential back over its element), the
output. The chunks' (max, sum) pairs travel to every peer with
``cp.async.bulk`` into distributed shared memory, each completing on the peer's mbarrier, so a CTA
waits only for the pairs it needs. The register-resident family (``cuda_kernels``, ``tile_n > 0``)
holds the chunk in registers, 16-32 values a thread, which caps the bytes an SM has in flight;
here shared memory caps them (up to 7 chunks of 32 KB an SM).

``M`` is dynamic (rows on ``blockIdx.x``), ``N`` static; dense rows only. A cluster a row, a grid
of ``M`` clusters, and the max and the sum walked apart: persistent clusters walking rows (one
chunk a CTA or two, the next row's copy in flight) were 4-120% slower at every shape measured, and
one walk following the copies as they land (a running max and sum) about twice as slow
(benchmarks/results/current/rows_kernels/persistent_rows/).
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

import functools

import tilelang
import tilelang.language as T

from ._numerics import (F32, exp_shifted, exp_shifted_poly, kept_scale, log2_shift, log_sum_shifted,
                        logsumexp_shifted, neg_inf, rescale_log2, safe_max, softmax_scale)
from .cuda_kernels import DTYPE_BYTES, _fragment_layout, _row_stat_layout, share

MAX_CLUSTER = 16
SMEM_BYTES = 200 * 1024  # a CTA's chunk in shared memory (sm_90: 227 KB a CTA at most)
SM_SMEM_BYTES, SM_THREADS, SM_REGISTERS = 228 * 1024, 2048, 65536  # an sm_90 SM's shared memory (1 KB of it
# reserved a CTA), threads and registers
STAGES = 8  # the most parts a staged copy of a chunk is cut into (each a cp.async group)
MIN_REGISTERS = 40  # a thread's registers the launch bound leaves at least (at 32, ptxas spilled)


def ctas_an_sm(smem_bytes: int, threads: int) -> int:
    """The CTAs that an sm_90 SM holds by their shared memory (``smem_bytes`` a CTA, and the KB
    reserved a CTA) and by their threads: registers aside."""
    return max(1, min(SM_SMEM_BYTES // (smem_bytes + 1024), SM_THREADS // threads))


def min_blocks(smem_bytes: int, threads: int) -> int:
    """The CTAs an SM that a launch bound asks for (``__launch_bounds__(threads, k)``, so that ptxas
    keeps each thread's registers to what ``k`` CTAs leave): those that shared memory and threads
    let an SM hold (:func:`ctas_an_sm`), but no more than leave a thread :data:`MIN_REGISTERS`
    registers."""
    return max(1, min(ctas_an_sm(smem_bytes, threads), SM_REGISTERS // (threads * MIN_REGISTERS)))


def staged_parts(steps: int) -> int:
    """The parts a staged copy cuts a walk of ``steps`` steps into: the most, up to
    :data:`STAGES`, that divide it."""
    return max(d for d in range(1, STAGES + 1) if steps % d == 0)


def _chunk_bytes(tile_n: int, dtype: str) -> int:
    """A CTA's shared memory: its chunk, and 1 KB for the cluster's words."""
    return tile_n * DTYPE_BYTES[dtype] + 1024


def ctas_by_smem(tile_n: int, dtype: str, threads: int) -> int:
    """The CTAs of a config that an sm_90 SM holds by their chunks in shared memory (with the
    cluster's words) and by their threads: registers aside."""
    return ctas_an_sm(_chunk_bytes(tile_n, dtype), threads)


def launch_bound(tile_n: int, dtype: str, threads: int) -> int:
    """The CTAs an SM that the kernel's launch bound asks for (:func:`min_blocks` of its chunk and
    the cluster's words). Unbound, ptxas gave 8-step walks 72 registers a thread (3 CTAs
    of 256 threads an SM where shared memory holds 6); bound, those configs took 4.5-11% less time
    (log_softmax 512 x 131072's default 6.6-7.5%), the others -1% to +2.2%; asking for 8 CTAs of
    256 threads (32 registers) spilled at a cluster of 16 and took 21-62% more, 6 took 0-6% less
    (H100; benchmarks/results/current/rows_kernels/smem_rows/launch_bound/)."""
    return min_blocks(_chunk_bytes(tile_n, dtype), threads)


def check_launch(n_cols: int, dtype: str, tile_n: int, cluster: int, block_m: int, threads: int) -> str | None:
    """Why this (tile_n, cluster, block_m, threads) cannot run, or None."""
    vec = 16 // DTYPE_BYTES[dtype]
    if block_m != 1:
        return f"the shared-memory family holds one row's chunk a CTA: block_m must be 1 (got {block_m})"
    if n_cols % vec:
        return (f"rows of {n_cols} are not a whole number of {vec}-element (16-byte) vectors, which this family "
                "copies; the register families (smem=0) serve them")
    if threads % 32 or not 32 <= threads <= 1024:
        return f"threads must be a multiple of 32 in [32, 1024] (got {threads})"
    if not 1 <= cluster <= MAX_CLUSTER:
        return f"cluster must be in [1, {MAX_CLUSTER}] (got {cluster})"
    if tile_n <= 0 or tile_n % (vec * threads):
        return f"tile_n={tile_n} must be a positive multiple of {vec} x {threads} threads"
    if cluster * tile_n < n_cols:
        return (f"cluster x tile_n = {cluster * tile_n} does not cover a row of {n_cols}: "
                "a larger cluster or tile_n would")
    if (cluster - 1) * tile_n >= n_cols:
        return (f"a cluster of {cluster} chunks of {tile_n} leaves its last CTA nothing of a row of {n_cols}: "
                "a smaller cluster or tile_n would")
    if tile_n * DTYPE_BYTES[dtype] > SMEM_BYTES:
        return (f"a chunk of {tile_n} {dtype} exceeds {SMEM_BYTES} bytes of shared memory: "
                "a larger cluster would split it")
    return None


# The smallest chunk worth a CTA of a cluster (the config space's smallest): log_softmax of bf16
# rows of 40960 in eight chunks of 10 KB took 116.2 us, in four of 20 KB 100.7 (H200,
# benchmarks/results/current/rows_kernels/smem_rows/log_softmax_default/).
MIN_CHUNK_BYTES = 16 << 10


def fit_chunk(n_cols: int, dtype: str, cluster: int, threads: int, min_bytes: int = 0) -> tuple[int, int]:
    """``(tile_n, cluster)`` of rows of ``n_cols`` for a config of ``cluster`` chunks at ``threads``: each
    chunk the cluster's share of the row, rounded up to a vector a thread; where that rounding
    would leave the last CTA nothing of the row, or the chunks would hold less than ``min_bytes``
    (this family's refits pass :data:`MIN_CHUNK_BYTES`; a config chosen at the top of a bucket,
    run near its bottom), the cluster halved until neither."""
    step = (16 // DTYPE_BYTES[dtype]) * threads
    tile = share(n_cols, cluster, step)
    while cluster > 1 and ((cluster - 1) * tile >= n_cols or tile * DTYPE_BYTES[dtype] < min_bytes):
        cluster //= 2
        tile = share(n_cols, cluster, step)
    return tile, cluster


def swap_words(cluster: int):
    """A TileLang macro, ``swap(mine, slot, got, parity)``: this CTA of a cluster of ``cluster`` sends its
    words ``mine`` into ``slot`` (its own place in ``peers``, e.g. ``peers[cx, :]``) of every CTA of
    the cluster, itself included, with ``cp.async.bulk``, each copy arriving on the receiver's
    mbarrier ``got[0]`` (a cluster barrier of ``cluster`` arrivals); then waits for the barrier's
    phase ``parity`` (0 for a kernel's first exchange, then alternating): every peer's words have
    landed in its own ``peers``. The caller keeps a peer from sending again before this CTA has
    read them (:func:`trade_words` for a single exchange; a cluster barrier a round in a loop)."""

    @T.macro
    def swap(mine, slot, got, parity):
        for r in T.unroll(cluster):
            T.copy_cluster(mine, slot, dst_block=r, remote_barrier=got[0])
        T.mbarrier_wait_parity(got[0], parity)

    return swap


def trade_words(cluster: int, early: bool = False):
    """A TileLang macro, ``trade(mine, slot, got)``: a kernel's one exchange (:func:`swap_words`, phase
    0), then a relaxed cluster arrive. The kernel allocates ``mine``, ``peers`` and ``got`` at its
    start (:func:`row_words`) and calls ``T.cluster_wait()`` before it ends, so that no CTA leaves
    while a copy out of its ``mine`` may be in flight. ``early`` (as the words were made,
    :func:`row_words`): first wait for every peer to have initialized its barrier. The exchange of
    every shared-memory family (``smem_rows``, ``smem_cols``, ``smem_norms``)."""
    swap = swap_words(cluster)

    @T.macro
    def trade(mine, slot, got):
        if early:
            T.cluster_wait()  # every peer's barrier is initialized
        swap(mine, slot, got, 0)
        T.cluster_arrive_relaxed()  # past the wait: every copy out of `mine` has landed

    return trade


def row_words(cluster: int, early: bool = False):
    """A TileLang macro, ``mine, peers, got = words(cx)``: the shared memory of a row's exchange (this
    CTA's two words, every peer's, and the barrier that counts one copy from each), allocated at
    the kernel's start and touched there, so that nothing else shares their bytes while peers may
    copy into ``peers`` (:func:`trade_words` trades them).

    No peer may copy into the barrier before it is initialized. ``early=True`` (the row and norm
    kernels) leaves the sync that ensures it to the kernel: the barrier is the CTA's own,
    initialized and fenced for the cluster, this macro arrives at the cluster barrier without
    waiting, and :func:`trade_words` of the same ``early`` waits just before the trade, so that the
    chunk's copy is issued before any peer need have started. ``early=False``: a cluster barrier, whose
    kernel starts with a cluster-wide sync (arrive and wait) before anything else."""

    barrier = exchange_barrier(cluster, early)

    @T.macro
    def words(cx):
        mine = T.alloc_shared((4,), F32)
        peers = T.alloc_shared((cluster, 4), F32)
        mine[2] = 0.0
        peers[cx, 2] = 0.0
        return mine, peers, barrier()

    return words


def exchange_barrier(cluster: int, early: bool):
    """A TileLang macro, ``got = barrier()``: the barrier a CTA's trade completes on (one copy from
    each of ``cluster`` peers), made after the kernel's other exchange buffers (:func:`row_words`,
    ``smem_cols``). ``early``: the CTA's own barrier, its init fenced for the cluster where it is
    made, and a relaxed arrive at the cluster barrier, whose wait :func:`trade_words` of the same
    ``early`` takes before the trade; else a cluster barrier (the kernel starts with a cluster-wide
    sync)."""

    @T.macro
    def barrier():
        got = T.alloc_barrier([cluster]) if early else T.alloc_cluster_barrier([cluster])
        if early:
            T.cluster_arrive_relaxed()
        return got

    return barrier


@functools.lru_cache(maxsize=None)
def program(op: str, n_cols: int, in_dtype: str, out_dtype: str, tile_n: int, cluster: int, arch: str | None = None,
            bound: bool = True, staged: bool = False, poly: bool = False, keep: bool = False, early: bool = True):
    """The ``@tilelang.jit`` program (tunables ``block_m``, always 1, and ``threads``) of one (op, N,
    dtypes, tile_n, cluster); ``arch`` pins the target as in ``cuda_kernels.program``. Its launch
    bound asks for :func:`launch_bound` CTAs an SM; ``bound=False`` builds it without (a sweep's
    twin to time it against). ``staged=True`` (a sweep's twin) copies the chunk in up to
    :data:`STAGES` parts, each its own ``cp.async`` group, and walks each part for the max as soon
    as it has landed, while the later parts are still in flight: on an H100 it moved the defaults
    by -0.8% to +0.7%, so the shipped kernel waits for the whole chunk
    (benchmarks/results/current/rows_kernels/smem_rows/staged/). ``poly=True`` (a sweep's twin)
    takes a softmax output's exponent by :func:`_numerics.exp2_poly` on the FMA pipes, the sum's by
    ``ex2``: one ``ex2`` an element, not two (slower than without it at every config measured on an
    H100, benchmarks/results/current/rows_kernels/smem_rows/keep/). ``keep=True`` (config key
    ``keep: 1``; softmax only, other ops are built as without it) takes a softmax's exponentials
    once: the sum's walk writes each back over its element in shared memory, in the input's dtype,
    and the output's walk scales it (``_numerics.kept_scale``), as ``smem_cols`` does; its output
    is rounded twice (within an ulp of the dtype, torch's within half of one).

    A cluster's CTA issues its chunk's copy before it waits for its peers to have started
    (:func:`row_words`'s ``early``), and waits for them only before its trade: on an H100, bf16
    softmax, 2.8-8.7% less time at each of 28 configs of rows of 64K-256K (the defaults 3.6-4.6%)
    than waiting first. ``early=False`` (a sweep's twin) builds the kernel that waits first
    (benchmarks/results/current/rows_kernels/smem_rows/early/).

    Each element's exponent is one fused multiply-add, ``x * log2 e - shift * log2 e``, the shift's
    product rounded the same wherever it is taken (``_numerics.exp_shifted``), and the kernel is
    built with fast math (``ex2.approx.ftz``, no denormal fix-up around each ``exp2``). Against a
    subtraction, a multiply and a plain ``exp2``, at the defaults' configs on an H100: less time at
    12 of 14 (op, shape) pairs, by 0.4-11%, 5.7% more at log_softmax 512 x 131072
    (benchmarks/results/current/rows_kernels/smem_rows/fast_form/)."""
    if poly and keep:
        raise ValueError("poly and keep are two ways to take a softmax output's exponent: ask for one")
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}
    N, C, TILE = n_cols, cluster, tile_n
    vec = 16 // DTYPE_BYTES[in_dtype]
    lse = op == "logsumexp"
    log = op == "log_softmax"
    by_poly = poly and op == "softmax" and C * TILE == N  # (the output's exponent; chunks that cover the row)
    kept = keep and op == "softmax"

    @tilelang.jit(target=target, out_idx=[1], pass_configs={"tl.enable_fast_math": True})
    def smem_rows(block_m, threads):
        # made here: TileLang's autotuner keys only plain free variables
        trade, words = trade_words(C, early), row_words(C, early)
        reason = check_launch(N, in_dtype, TILE, C, block_m, threads)
        if reason is not None:
            raise ValueError(reason)
        SUB = vec * threads
        NS = TILE // SUB
        P = staged_parts(NS)  # the staged copy's parts, NS // P walk steps each
        PART = TILE // P
        M = T.dynamic("m")
        y_shape = (M,) if lse else (M, N)

        @T.macro
        def walk_max(acc, xs, base, start, steps):  # the running max over `steps` walk steps of a chunk from `start`
            for k in T.serial(steps):
                for i, j in T.Parallel(1, SUB):
                    acc[i, j] = T.max(acc[i, j], T.if_then_else(base + start + k * SUB + j < N,
                                                                T.cast(xs[i, start + k * SUB + j], F32), neg_inf()))

        @T.prim_func
        def main(x: T.Tensor((M, N), in_dtype), y: T.Tensor(y_shape, out_dtype)):
            with T.Kernel(M, C, threads=threads, cluster_dims=(1, C, 1)) as (bx, cx):
                if bound:
                    T.annotate_min_blocks_per_sm(launch_bound(TILE, in_dtype, threads))
                xs = T.alloc_shared((1, TILE), in_dtype)
                acc = T.alloc_fragment((1, SUB), F32)
                xf = T.alloc_fragment((1, SUB), in_dtype)  # (poly: a sub-tile of the chunk, and its output)
                ef = T.alloc_fragment((1, SUB), F32)  # (keep: a sub-tile's exponentials)
                yf = T.alloc_fragment((1, SUB), out_dtype)
                m = T.alloc_fragment((1,), F32)
                s = T.alloc_fragment((1,), F32)
                sh = T.alloc_fragment((1,), F32)
                gm = T.alloc_fragment((1,), F32)
                gs = T.alloc_fragment((1,), F32)
                gsh = T.alloc_fragment((1,), F32)
                fin = T.alloc_fragment((1,), F32)
                shl = T.alloc_fragment((1,), F32)  # the shifts times log2 e
                gshl = T.alloc_fragment((1,), F32)
                # one row a CTA: thread t owns the t-th 16-byte vector of a sub-tile; stats in every thread
                layouts = {t: _fragment_layout(1, SUB, threads, vec) for t in (acc, xf, yf, ef)}
                for stat in (m, s, sh, gm, gs, gsh, fin, shl, gshl):
                    layouts[stat] = _row_stat_layout(1, threads)
                T.annotate_layout(layouts)
                if C > 1:
                    mine, peers, got = words(cx)
                base = cx * TILE

                if staged:
                    for p in T.unroll(P, explicit=True):
                        T.async_copy(x[bx, base + p * PART:base + (p + 1) * PART], xs[0, p * PART:(p + 1) * PART])
                    T.fill(acc, neg_inf())
                    for p in T.unroll(P, explicit=True):
                        T.ptx_wait_group(P - 1 - p)
                        walk_max(acc, xs, base, p * PART, NS // P)
                else:
                    T.copy(x[bx, base], xs, prefer_instruction="cp_async")
                    T.fill(acc, neg_inf())
                    walk_max(acc, xs, base, 0, NS)
                T.reduce_max(acc, m, dim=1)
                for i in T.Parallel(1):
                    sh[i] = safe_max(m[i])
                    shl[i] = log2_shift(sh[i])
                T.fill(acc, 0.0)
                for k in T.serial(NS):
                    if kept:  # a sub-tile through registers (whole 16-byte vectors), its exponentials back in its place
                        T.copy(xs[0:1, k * SUB:(k + 1) * SUB], xf)
                        for i, j in T.Parallel(1, SUB):
                            ef[i, j] = T.if_then_else(base + k * SUB + j < N,
                                                      exp_shifted(T.cast(xf[i, j], F32), shl[i]), 0.0)
                            acc[i, j] += ef[i, j]
                            xf[i, j] = T.cast(ef[i, j], in_dtype)
                        T.copy(xf, xs[0:1, k * SUB:(k + 1) * SUB])
                    else:
                        for i, j in T.Parallel(1, SUB):
                            acc[i, j] += T.if_then_else(base + k * SUB + j < N,
                                                        exp_shifted(T.cast(xs[i, k * SUB + j], F32), shl[i]), 0.0)
                T.reduce_sum(acc, s, dim=1)

                if C > 1:
                    mine[0] = m[0]
                    mine[1] = s[0]
                    trade(mine, peers[cx, :], got)
                    for i in T.Parallel(1):
                        gm[i] = neg_inf()
                        for r in T.unroll(C):
                            gm[i] = T.max(gm[i], peers[r, 0])
                        gsh[i] = safe_max(gm[i])
                        gs[i] = 0.0
                        gshl[i] = log2_shift(gsh[i])
                        for r in T.unroll(C):
                            gs[i] += rescale_log2(peers[r, 1], log2_shift(safe_max(peers[r, 0])), gshl[i])
                else:
                    for i in T.Parallel(1):
                        gm[i] = m[i]
                        gs[i] = s[i]
                        gsh[i] = sh[i]
                        gshl[i] = shl[i]

                if lse:
                    if cx == 0:
                        y[bx] = T.cast(logsumexp_shifted(gm[0], gs[0], gshl[0]), out_dtype)
                else:
                    for i in T.Parallel(1):
                        fin[i] = log_sum_shifted(gm[i], gs[i], gsh[i], gshl[i]) if log else softmax_scale(gm[i], gs[i])
                        if kept:
                            fin[i] = kept_scale(fin[i], s[i], shl[i], gshl[i])
                    if by_poly:  # each sub-tile through registers, stored whole
                        for k in T.serial(NS):
                            T.copy(xs[0:1, k * SUB:(k + 1) * SUB], xf)
                            for i, j in T.Parallel(1, SUB):
                                yf[i, j] = T.cast(exp_shifted_poly(T.cast(xf[i, j], F32), gshl[i]) * fin[i], out_dtype)
                            T.copy(yf, y[bx:bx + 1, base + k * SUB:base + (k + 1) * SUB])
                    else:
                        for k in T.serial(NS):
                            for i, j in T.Parallel(1, SUB):
                                if base + k * SUB + j < N:
                                    if log:
                                        y[bx, base + k * SUB + j] = T.cast(
                                            (T.cast(xs[i, k * SUB + j], F32) - gsh[i]) - fin[i], out_dtype)
                                    elif kept:
                                        y[bx, base + k * SUB + j] = T.cast(T.cast(xs[i, k * SUB + j], F32) * fin[i],
                                                                           out_dtype)
                                    else:
                                        y[bx, base + k * SUB + j] = T.cast(
                                            exp_shifted(T.cast(xs[i, k * SUB + j], F32), gshl[i]) * fin[i], out_dtype)
                if C > 1:
                    T.cluster_wait()  # no CTA leaves while a copy may still read its `mine`

        return main

    return smem_rows
