"""softmax / log_softmax / logsumexp over a dim that is not the last, in TileLang for CUDA: tiles in shared memory.

The input is a contiguous ``(outer, R, inner)`` tensor reduced over ``R`` (dim 1 of (B, C, H, W)
is ``(B, C, H*W)``; dim 0 of a matrix is ``(1, R, N)``). A CTA takes ``block_i`` consecutive
columns of one ``o`` and a chunk of ``tile_r`` values of ``R``: a ``tile_r x block_i`` tile whose
rows are ``block_i`` adjacent elements (128 bytes for 64 bf16), copied into shared memory with
``cp.async`` and walked there three times, as :mod:`.smem_rows` walks a row's chunk. Where ``R``
is longer than one chunk, the ``cluster`` CTAs of a column tile are one thread-block cluster
(sm_90+) and trade their columns' (max, sum) through distributed shared memory.

A thread owns one 16-byte vector of a tile row; the threads of a column vector reduce its values
together (TileLang's all-reduce over the threads ``block_i / vec`` apart).
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

import functools

import tilelang
import tilelang.language as T

from ._numerics import (F32, exp_shifted, kept_scale, log2_shift, log_sum_shifted, logsumexp_shifted, neg_inf,
                        rescale_log2, safe_max, softmax_scale)
from .cuda_kernels import DTYPE_BYTES, share
from .smem_rows import exchange_barrier, min_blocks, staged_parts, trade_words

MAX_CLUSTER = 16
SMEM_BYTES = 200 * 1024
UNROLL = 2  # tile rows a thread holds a step: two 16-byte vectors in flight from shared memory
TILE_BYTES = 64 * 1024  # the largest tile the configs offer: three CTAs an SM
MIN_CTAS = 1024  # R is cut finer (a larger cluster) while the grid has fewer CTAs than this (and see default_config)
MIN_TILES = 256  # column tiles of 128-byte rows, or narrower tiles
MIN_R = 128  # the default's shortest R (measured from 256 up)


def check_launch(key: tuple, dtype: str, block_i: int, tile_r: int, cluster: int, threads: int) -> str | None:
    """Why this (block_i, tile_r, cluster, threads) cannot run on ``(outer, R, inner)``, or None."""
    _, R, inner = key
    vec = 16 // DTYPE_BYTES[dtype]
    if inner % vec:
        return (f"columns come in rows of {inner} elements, not a whole number of {vec}-element (16-byte) vectors, "
                "which this family copies")
    if block_i % vec or block_i <= 0 or inner % block_i:
        return f"block_i={block_i} must be a multiple of {vec} that divides the {inner} columns"
    if threads % 32 or not 32 <= threads <= 1024:
        return f"threads must be a multiple of 32 in [32, 1024] (got {threads})"
    lanes = block_i // vec
    if threads % lanes:
        return f"threads={threads} must be a multiple of block_i / {vec} = {lanes}"
    step = _step(dtype, block_i, threads)
    if tile_r <= 0 or tile_r % step:
        return f"tile_r={tile_r} must be a positive multiple of {step} ({UNROLL} x threads / (block_i / {vec}))"
    if not 1 <= cluster <= MAX_CLUSTER:
        return f"cluster must be in [1, {MAX_CLUSTER}] (got {cluster})"
    if cluster * tile_r < R:
        return f"cluster x tile_r = {cluster * tile_r} does not cover R = {R}: a larger cluster or tile_r would"
    if tile_r * block_i * DTYPE_BYTES[dtype] > SMEM_BYTES:
        return f"a {tile_r} x {block_i} tile of {dtype} exceeds {SMEM_BYTES} bytes of shared memory"
    return None


def smem_bytes(dtype: str, block_i: int, tile_r: int, cluster: int) -> int:
    """A CTA's shared memory: its tile and, in a cluster, the (max, sum) words it trades (its own,
    its peers', the merged ones) and the cluster's barrier (one mbarrier)."""
    words = 0 if cluster == 1 else (4 + 2 * cluster) * block_i * 4 + 8
    return tile_r * block_i * DTYPE_BYTES[dtype] + words


def launch_bound(dtype: str, block_i: int, tile_r: int, cluster: int, threads: int) -> int:
    """The CTAs an SM that a launch bound asks for: as many as shared memory and threads let an SM
    hold (``smem_rows.min_blocks``), no more than leave a thread 40 registers."""
    return min_blocks(smem_bytes(dtype, block_i, tile_r, cluster), threads)


def _tile_layout(rows: int, block_i: int, lanes: int, vec: int, groups: int):
    """Thread ``t`` holds vector ``t % lanes`` of tile rows ``t // lanes``, ``t // lanes + groups``, ..."""
    return T.Fragment((rows, block_i), forward_thread_fn=lambda i, j: (i % groups) * lanes + j // vec,
                      forward_index_fn=lambda i, j: (i // groups) * vec + j % vec)


def _column_layout(block_i: int, lanes: int, vec: int, groups: int):
    """A column's scalar in every thread that holds a vector of that column."""
    return T.Fragment((block_i,), forward_thread_fn=lambda j, rep: rep * lanes + j // vec, replicate=groups,
                      forward_index_fn=lambda j: j % vec)


@functools.lru_cache(maxsize=None)
def program(op: str, key: tuple, in_dtype: str, out_dtype: str, block_i: int, tile_r: int, cluster: int,
            arch: str | None = None, bound: bool = False, staged: bool = False, early: bool = False):
    """The ``@tilelang.jit`` program (tunable ``threads``) of one (op, (outer, R, inner), dtypes, tile).
    ``bound=True`` builds it with a launch bound of :func:`launch_bound` CTAs an SM, a sweep's twin:
    on an H100 it moved the defaults by -2.2% to +1.9% and no bound config led, so the shipped
    kernel has none (benchmarks/results/current/layouts/smem_cols/launch_bound/). ``staged=True`` (a
    sweep's twin) copies the tile in up to ``smem_rows.STAGES`` parts, each its own ``cp.async``
    group, and walks each part for the max as soon as it has landed: on an H100 4.6% slower at the
    default of dim 0 of 4096 x 4096, level elsewhere, so not shipped
    (benchmarks/results/current/layouts/smem_cols/staged/). ``early=True`` (a sweep's twin)
    issues the tile's copy before its cluster's peers need have started, and waits for them only
    before its trade (``smem_rows.row_words``'s ``early``, as the row kernels ship).

    As ``smem_rows.program``'s, each exponent is one fused multiply-add against the shift's product
    (rounded by an IEEE multiply wherever it is taken, so that it is the same number in a column's
    sum and its output) and the kernel is built with fast math. Softmax takes one ``exp2`` an
    element, not two: the sum's walk writes each exponential back over its element in shared
    memory, in the input's dtype, and the output's walk scales it by ``exp2(shl_tile - shl_column) /
    sum``, so its output is rounded twice (within an ulp of the input's dtype, where torch's is
    within half of one). Softmax, bf16, on an H100: 2.4-6.8% less time than before at each default
    config swept (benchmarks/results/current/layouts/smem_cols/fast_form/)."""
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}
    keep = op == "softmax"
    outer, R, inner = key
    BI, TR, C = block_i, tile_r, cluster
    vec = 16 // DTYPE_BYTES[in_dtype]
    lanes = BI // vec
    NI = inner // BI
    lse = op == "logsumexp"
    log = op == "log_softmax"

    @tilelang.jit(target=target, out_idx=[1], pass_configs={"tl.enable_fast_math": True})
    def smem_cols(threads):
        # a tuple or a macro among the free variables would fail TileLang's autotuner: made here
        trade, barrier = trade_words(C, early), exchange_barrier(C, early)
        reason = check_launch((outer, R, inner), in_dtype, BI, TR, C, threads)
        if reason is not None:
            raise ValueError(reason)
        G = threads // lanes
        SR = UNROLL * G
        NS = TR // SR
        P = staged_parts(NS)  # the staged copy's parts, NS // P walk steps each
        PR = TR // P
        y_shape = (outer, inner) if lse else (outer, R, inner)

        @T.macro
        def walk_max(acc, xs, r0, start, steps):  # the running max over `steps` walk steps of a tile from row `start`
            for k in T.serial(steps):
                for i, j in T.Parallel(SR, BI):
                    acc[i, j] = T.max(acc[i, j], T.if_then_else(r0 + start + k * SR + i < R,
                                                                T.cast(xs[start + k * SR + i, j], F32), neg_inf()))

        @T.prim_func
        def main(x: T.Tensor((outer, R, inner), in_dtype), y: T.Tensor(y_shape, out_dtype)):
            with T.Kernel(outer * NI, C, threads=threads, cluster_dims=(1, C, 1)) as (bx, cx):
                if bound:
                    T.annotate_min_blocks_per_sm(launch_bound(in_dtype, BI, TR, C, threads))
                xs = T.alloc_shared((TR, BI), in_dtype)
                acc = T.alloc_fragment((SR, BI), F32)
                ef = T.alloc_fragment((SR, BI), F32)  # a step's exponentials (softmax)
                m = T.alloc_fragment((BI,), F32)
                s = T.alloc_fragment((BI,), F32)
                sh = T.alloc_fragment((BI,), F32)
                gsh = T.alloc_fragment((BI,), F32)
                fin = T.alloc_fragment((BI,), F32)
                shl = T.alloc_fragment((BI,), F32)  # the shifts times log2 e
                gshl = T.alloc_fragment((BI,), F32)
                layouts = {acc: _tile_layout(SR, BI, lanes, vec, G), ef: _tile_layout(SR, BI, lanes, vec, G)}
                for stat in (m, s, sh, gsh, fin, shl, gshl):
                    layouts[stat] = _column_layout(BI, lanes, vec, G)
                T.annotate_layout(layouts)
                if C > 1:
                    # live from the start (see smem_rows): peers copy into `peers` at any time, and `cs` must not
                    # share its bytes
                    mine = T.alloc_shared((2, BI), F32)
                    peers = T.alloc_shared((C, 2, BI), F32)
                    cs = T.alloc_shared((2, BI), F32)  # each column's shift and factor, merged
                    g = T.alloc_local((3,), F32)  # a column's max, shift, sum
                    peers[cx, 0, 0] = 0.0
                    cs[0, 0] = 0.0
                    got = barrier()
                bo = bx // NI
                i0 = (bx % NI) * BI
                r0 = cx * TR

                if staged:
                    for p in T.unroll(P, explicit=True):
                        T.async_copy(x[bo, r0 + p * PR:r0 + (p + 1) * PR, i0:i0 + BI], xs[p * PR:(p + 1) * PR, :])
                    T.fill(acc, neg_inf())
                    for p in T.unroll(P, explicit=True):
                        T.ptx_wait_group(P - 1 - p)
                        walk_max(acc, xs, r0, p * PR, NS // P)
                else:
                    T.copy(x[bo, r0:r0 + TR, i0:i0 + BI], xs, prefer_instruction="cp_async")
                    T.fill(acc, neg_inf())
                    walk_max(acc, xs, r0, 0, NS)
                T.reduce_max(acc, m, dim=0, batch=vec)
                for j in T.Parallel(BI):
                    sh[j] = safe_max(m[j])
                    shl[j] = log2_shift(sh[j])
                T.fill(acc, 0.0)
                for k in T.serial(NS):
                    for i, j in T.Parallel(SR, BI):
                        if keep:
                            ef[i, j] = T.if_then_else(r0 + k * SR + i < R,
                                                      exp_shifted(T.cast(xs[k * SR + i, j], F32), shl[j]), 0.0)
                            acc[i, j] += ef[i, j]
                            xs[k * SR + i, j] = T.cast(ef[i, j], in_dtype)
                        else:
                            acc[i, j] += T.if_then_else(r0 + k * SR + i < R,
                                                        exp_shifted(T.cast(xs[k * SR + i, j], F32), shl[j]), 0.0)
                T.reduce_sum(acc, s, dim=0, batch=vec)

                if C > 1:
                    for j in T.Parallel(BI):
                        mine[0, j] = m[j]
                        mine[1, j] = s[j]
                    trade(mine, peers[cx, :, :], got)
                    # A column's merge once, by thread j (not by each of the `G` threads that hold the
                    # column: their C steps of exp each would outweigh a short tile's own work).
                    tx = T.get_thread_binding(0)
                    if tx < BI:
                        g[0] = neg_inf()
                        for r in T.unroll(C):
                            g[0] = T.max(g[0], peers[r, 0, tx])
                        g[1] = safe_max(g[0])
                        g[2] = 0.0
                        for r in T.unroll(C):
                            g[2] += rescale_log2(peers[r, 1, tx], log2_shift(safe_max(peers[r, 0, tx])),
                                                 log2_shift(g[1]))
                        if lse:
                            if cx == 0:
                                y[bo, i0 + tx] = T.cast(logsumexp_shifted(g[0], g[2], log2_shift(g[1])), out_dtype)
                        else:
                            cs[0, tx] = g[1]
                            cs[1, tx] = (log_sum_shifted(g[0], g[2], g[1], log2_shift(g[1])) if log
                                         else softmax_scale(g[0], g[2]))
                    if not lse:
                        for j in T.Parallel(BI):
                            gsh[j] = cs[0, j]
                            fin[j] = cs[1, j]
                            gshl[j] = log2_shift(gsh[j])
                else:
                    for j in T.Parallel(BI):
                        gsh[j] = sh[j]
                        gshl[j] = shl[j]
                        if lse:
                            y[bo, i0 + j] = T.cast(logsumexp_shifted(m[j], s[j], shl[j]), out_dtype)
                        else:
                            fin[j] = log_sum_shifted(m[j], s[j], sh[j], shl[j]) if log else softmax_scale(m[j], s[j])

                if keep:
                    for j in T.Parallel(BI):
                        fin[j] = kept_scale(fin[j], s[j], shl[j], gshl[j])
                if not lse:
                    for k in T.serial(NS):
                        for i, j in T.Parallel(SR, BI):
                            if r0 + k * SR + i < R:
                                if log:
                                    y[bo, r0 + k * SR + i, i0 + j] = T.cast(
                                        (T.cast(xs[k * SR + i, j], F32) - gsh[j]) - fin[j], out_dtype)
                                else:
                                    y[bo, r0 + k * SR + i, i0 + j] = T.cast(T.cast(xs[k * SR + i, j], F32) * fin[j],
                                                                            out_dtype)
                if C > 1:
                    T.cluster_wait()  # no CTA leaves while a copy may still read its `mine`

        return main

    return smem_cols


def tile_rows(R: int, dtype: str, block_i: int, cluster: int, threads: int) -> int:
    """The rows of ``R`` a CTA holds: a ``cluster``-th of ``R``, rounded up to the rows that
    ``threads`` walk in a step. Derived, not tuned: a config (``block_i``, ``cluster``,
    ``threads``) tuned on one ``R`` serves every ``R`` of its bucket."""
    return share(R, cluster, _step(dtype, block_i, threads))


def _step(dtype: str, block_i: int, threads: int) -> int:
    """The tile rows ``threads`` walk in a step: :data:`UNROLL` rows a thread, ``block_i / vec`` threads a row."""
    return UNROLL * threads // (block_i // (16 // DTYPE_BYTES[dtype]))


def check_config(key: tuple, dtype: str, cfg: dict) -> str | None:
    """Why ``cfg`` (``block_i``, ``cluster``, ``threads``) cannot run on ``(outer, R, inner)``, or None."""
    try:
        bi, c, threads = int(cfg["block_i"]), int(cfg["cluster"]), int(cfg["threads"])
    except (KeyError, TypeError, ValueError):
        return f"config {cfg} must give block_i, cluster and threads as ints"
    if c <= 0 or threads <= 0 or bi * DTYPE_BYTES[dtype] < 16:
        return f"config {cfg}: block_i, cluster and threads must be positive (block_i a multiple of 16 bytes)"
    return check_launch(key, dtype, bi, tile_rows(key[1], dtype, bi, c, threads), c, threads)


def _fits(key: tuple, dtype: str, bi: int, c: int, threads: int) -> bool:
    """A config the space offers: it runs, its tile within :data:`TILE_BYTES`, every CTA given
    rows of ``R`` (a config tuned on a longer ``R`` of the bucket may leave the last CTAs none:
    they load nothing, write nothing, and pass (-inf, 0) to the merge)."""
    tr = tile_rows(key[1], dtype, bi, c, threads)
    return (check_launch(key, dtype, bi, tr, c, threads) is None and tr * bi * DTYPE_BYTES[dtype] <= TILE_BYTES
            and (c - 1) * tr < key[1])


def tile_configs(key: tuple, dtype: str, threads: int = 128) -> list[dict]:
    """The configs of ``(outer, R, inner)`` with tiles of at most :data:`TILE_BYTES`: for tile rows
    of 128, 64 and 32 bytes that divide a row of ``inner``, ``R`` cut into the fewest chunks
    (a power-of-two cluster) that keep a tile under the cap, then into twice as many while the
    grid has fewer than :data:`MIN_CTAS` CTAs."""
    outer, R, inner = key
    size = DTYPE_BYTES[dtype]
    out = []
    for row_bytes in (128, 64, 32):
        bi = row_bytes // size
        if bi < 16 // size or inner % bi:
            continue
        c = _fewest_chunks(R, row_bytes)
        while c < MAX_CLUSTER and outer * (inner // bi) * c < MIN_CTAS and R * row_bytes > 2 * c * 8192:
            c *= 2
        if _fits(key, dtype, bi, c, threads):
            out.append({"block_i": bi, "cluster": c, "threads": threads})
    return out


def _fewest_chunks(R: int, row_bytes: int) -> int:
    """The fewest chunks (a power of two, up to :data:`MAX_CLUSTER`) that cut ``R`` rows of
    ``row_bytes`` into tiles of at most :data:`TILE_BYTES`."""
    c = 1
    while c < MAX_CLUSTER and R * row_bytes > c * TILE_BYTES:
        c *= 2
    return c


def default_config(key: tuple, dtype: str) -> dict | None:
    """Tile rows of 128 bytes where the grid has :data:`MIN_TILES` column tiles or more at that
    width, or :data:`MIN_CTAS` CTAs or more at tiles of :data:`TILE_BYTES` (a long ``R`` over few
    column tiles); else of 64 (else the widest that divides a row); 128 threads. None where ``R``
    is shorter than :data:`MIN_R` or no tile fits (``R`` too long for 16 chunks of
    :data:`TILE_BYTES`, rows not a whole number of 32 bytes).

    The second clause, on an H100 (benchmarks/results/current/layouts/smem_cols/wide_rows/): dim 1
    of 8x4096x1024 bf16 softmax 60.5 -> 58.2 us, log_softmax 61.7 -> 58.0, dim 0 of 4096x4096 fp32
    softmax 63.8 -> 57.5 (on an H200, Dec 4, before the fast form: 56.1 -> 55.2 and 51.1 -> 46.5);
    dim 0 of 4096x4096 bf16, 512 CTAs at 128-byte rows, keeps 64-byte rows (32.3 us against 35.2)."""
    outer, R, inner = key
    configs = tile_configs(key, dtype)
    if R < MIN_R or not configs:
        return None
    size = DTYPE_BYTES[dtype]
    by_width = {c["block_i"] * size: c for c in configs}
    wide = by_width.get(128)
    if wide is not None:
        tiles = outer * (inner // wide["block_i"])
        if tiles >= MIN_TILES or tiles * _fewest_chunks(R, 128) >= MIN_CTAS:
            return wide
    return by_width.get(64) or configs[0]


def configs(key: tuple, dtype: str) -> list[dict]:
    """What a tune times: the tiles of :func:`tile_configs` at 128 and 256 threads, and each one's
    neighbours with half and twice its cluster."""
    out = []
    for threads in (128, 256):
        for cfg in tile_configs(key, dtype, threads):
            for c in (cfg["cluster"] // 2, cfg["cluster"], cfg["cluster"] * 2):
                near = {**cfg, "cluster": c}
                if c >= 1 and near not in out and _fits(key, dtype, cfg["block_i"], c, threads):
                    out.append(near)
    return out
