"""Row softmax / log_softmax / logsumexp in TileLang for CUDA: register-resident rows, cluster-split long rows.

One program factory per (op, row length, dtypes, tile_n, cluster). The returned
``@tilelang.jit`` program takes the tunables ``block_m`` (rows per CTA) and ``threads``
(threads per CTA); the build-time keys pick the family:

* ``tile_n == 0`` -- *row*: each CTA holds ``block_m`` whole rows in registers
  (``threads // block_m`` threads per row, so short rows reduce inside a warp with shuffles
  only), reads them once and writes them once.
* ``tile_n > 0`` -- *split*: a row is cut into ``tile_n`` chunks. ``cluster`` CTAs of one
  thread-block cluster (sm_90+, ``cluster <= 8``) share a row; each keeps its chunk in
  registers, and the per-chunk (max, sum) pairs are exchanged through distributed shared
  memory (``T.copy_cluster`` to every peer, two ``T.cluster_sync``). With
  ``cluster * tile_n >= N`` the row is still read exactly once. Otherwise each CTA takes
  ``ceil(N / (cluster * tile_n))`` tiles with the online max/sum recurrence and reads them a
  second time (mostly from L2). ``cluster == 1`` needs no cluster support at all. On an H200
  this family reaches ~2.4-2.5 TB/s on 64K..256K-column bf16 rows (the whole-row family
  3.6-4.1 TB/s up to 16K columns): the cluster barriers, not the bytes, bound it; see
  benchmarks/results/history/2026-11/tilelang_kernels_h200.md.

Every CTA's fragment layout is pinned with ``T.annotate_layout``: thread ``t`` of row ``i``
owns 16-byte vectors ``t, t + tpr, t + 2 tpr, ...`` of the row, so loads and stores are
coalesced 128-bit accesses and the row reduction spans exactly ``tpr`` threads. ``M`` is
dynamic (rows go on ``blockIdx.x``, up to 2**31 - 1); ``N`` is static.

``row_stride`` (a build-time key; 0: dense rows): rows ``row_stride`` elements apart (a slice
``x[:, :N]`` of wider rows, leading dims that collapse to such rows), read in place through a
strided view; the output is dense. The vectors then divide the stride too, so that every row
starts on a vector (given a data pointer aligned to one).
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations, which
# name closure variables (shapes, dtypes), so they must stay real objects.

import functools

import tilelang
import tilelang.language as T

from ._numerics import (
    F32,
    exp_fast,
    log_sum,
    logsumexp_value,
    nan,
    neg_inf,
    rescale,
    row_is_nan_for_softmax,
    safe_max,
    softmax_scale,
)
from .norm_kernels import x_type

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def share(n: int, parts: int, step: int) -> int:
    """``n`` cut into ``parts``, one part rounded up to a multiple of ``step`` (a chunk of a row or of ``R``)."""
    return -(-(-(-n // parts)) // step) * step


# Portable cluster size. TileLang's launcher also allows non-portable 16, but no cluster-16 kernel
# has been verified on a GPU yet.
MAX_CLUSTER = 8
# Register budget per thread: 32 fp32 values (a 1024-thread CTA stays <= 64 registers, no spills).
MAX_FP32_PER_THREAD = 32


def vector_width(n_cols: int, dtype: str, row_stride: int = 0) -> int:
    """Elements per 16-byte access, reduced until it divides the row and the row stride (so every
    row start stays aligned; 0: dense rows, the row's length apart)."""
    vec = 16 // DTYPE_BYTES[dtype]
    while vec > 1 and (n_cols % vec or row_stride % vec):
        vec //= 2
    return vec


def tile_width(n_cols: int, in_dtype: str, tile_n: int, block_m: int, threads: int, row_stride: int = 0) -> int:
    """Columns one CTA holds per tile: the padded row for the row family, ``tile_n`` otherwise."""
    vec = vector_width(n_cols, in_dtype, row_stride)
    step = vec * (threads // block_m)
    if tile_n <= 0:
        return -(-n_cols // step) * step
    return tile_n


def check_launch(n_cols: int, in_dtype: str, tile_n: int, cluster: int, block_m: int, threads: int,
                 row_stride: int = 0) -> str | None:
    """Why (block_m, threads) cannot run this family, or None. Also used to prune the config space.

    A config that passes for dense rows passes for every ``row_stride``: a stride can only narrow
    the vectors, which never pads a tile more nor breaks a ``tile_n`` multiple."""
    if threads % 32 or not 32 <= threads <= 1024:
        return f"threads must be a multiple of 32 in [32, 1024] (got {threads})"
    if block_m < 1 or threads % block_m or (threads // block_m) & (threads // block_m - 1):
        return f"threads // block_m must be a power of two (got threads={threads}, block_m={block_m})"
    if not 1 <= cluster <= MAX_CLUSTER:
        return f"cluster must be in [1, {MAX_CLUSTER}] (got {cluster})"
    if tile_n <= 0 and cluster != 1:
        return "the whole-row family (tile_n=0) runs without a cluster"
    vec = vector_width(n_cols, in_dtype, row_stride)
    tpr = threads // block_m
    if tile_n > 0 and tile_n % (vec * tpr):
        return f"tile_n={tile_n} must be a multiple of vector width {vec} x {tpr} threads per row"
    per_thread = tile_width(n_cols, in_dtype, tile_n, block_m, threads, row_stride) // tpr
    if per_thread > MAX_FP32_PER_THREAD:
        return (f"{per_thread} values per thread exceed the register budget of {MAX_FP32_PER_THREAD}; "
                "use more threads, a smaller tile_n, or a larger cluster")
    return None


def _row_stat_layout(block_m: int, tpr: int):
    """Per-row scalars live in every thread of their row (row ``i`` <-> threads ``i*tpr .. i*tpr + tpr - 1``).

    Pinned for every ``(block_m,)`` fragment: left to inference, a fragment filled from shared
    memory can get another thread mapping (row ``tid % block_m``) than the reductions' outputs,
    and a loop mixing the two would read other rows' values.
    """
    return T.Fragment((block_m,), forward_thread_fn=lambda i, rep: i * tpr + rep, replicate=tpr, forward_index_fn=lambda i: 0)


def _fragment_layout(block_m: int, tile: int, tpr: int, vec: int):
    return T.Fragment(
        (block_m, tile),
        forward_thread_fn=lambda i, j: i * tpr + (j // vec) % tpr,
        forward_index_fn=lambda i, j: (j // (vec * tpr)) * vec + j % vec,
    )


@functools.lru_cache(maxsize=None)
def program(op: str, n_cols: int, in_dtype: str, out_dtype: str, tile_n: int, cluster: int, arch: str | None = None,
            row_stride: int = 0):
    """The ``@tilelang.jit`` program (tunables ``block_m``, ``threads``) for one CUDA kernel family.

    ``arch`` (e.g. ``"sm_90"``) pins the target; None lets TileLang read it off the current device.
    ``row_stride``: 0 for dense rows (the program is then exactly the dense one), else the
    elements between consecutive rows of the input.
    """
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}
    N = n_cols
    C = cluster
    S = row_stride
    vec = vector_width(N, in_dtype, S)
    lse = op == "logsumexp"
    log = op == "log_softmax"

    @tilelang.jit(target=target, out_idx=[1])
    def cuda_rowwise(block_m, threads):
        reason = check_launch(N, in_dtype, tile_n, C, block_m, threads, S)
        if reason is not None:
            raise ValueError(reason)
        tpr = threads // block_m
        TILE = tile_width(N, in_dtype, tile_n, block_m, threads, S)
        NT = -(-N // (C * TILE))  # tiles per CTA
        M = T.dynamic("m")
        y_shape = (M,) if lse else (M, N)
        X = x_type(T, M, N, in_dtype, S)

        @T.prim_func
        def main(x: X, y: T.Tensor(y_shape, out_dtype)):
            with T.Kernel(T.ceildiv(M, block_m), C, threads=threads, cluster_dims=(1, C, 1)) as (bx, cx):
                xf = T.alloc_fragment((block_m, TILE), F32)
                ef = T.alloc_fragment((block_m, TILE), F32)
                m = T.alloc_fragment((block_m,), F32)
                s = T.alloc_fragment((block_m,), F32)
                tm = T.alloc_fragment((block_m,), F32)
                ts = T.alloc_fragment((block_m,), F32)
                shift = T.alloc_fragment((block_m,), F32)
                fin = T.alloc_fragment((block_m,), F32)
                gm = T.alloc_fragment((block_m,), F32)
                gs = T.alloc_fragment((block_m,), F32)
                gshift = T.alloc_fragment((block_m,), F32)
                layouts = {xf: _fragment_layout(block_m, TILE, tpr, vec), ef: _fragment_layout(block_m, TILE, tpr, vec)}
                for stat in (m, s, tm, ts, shift, fin, gm, gs, gshift):
                    layouts[stat] = _row_stat_layout(block_m, tpr)
                T.annotate_layout(layouts)
                T.fill(m, neg_inf())
                T.fill(s, 0.0)
                T.fill(shift, 0.0)

                # Pass 1: this CTA's share of the row, max and sum of exp(x - safe(max)).
                for t in T.serial(NT):
                    for i, j in T.Parallel(block_m, TILE):
                        xf[i, j] = T.if_then_else(
                            bx * block_m + i < M and (cx * NT + t) * TILE + j < N,
                            T.cast(x[bx * block_m + i, (cx * NT + t) * TILE + j], F32),
                            neg_inf(),
                        )
                    T.reduce_max(xf, tm, dim=1)
                    for i in T.Parallel(block_m):
                        tm[i] = T.max(m[i], tm[i])
                        ts[i] = safe_max(tm[i])
                    if log:
                        for i, j in T.Parallel(block_m, TILE):
                            ef[i, j] = exp_fast(xf[i, j] - ts[i])
                        T.reduce_sum(ef, fin, dim=1)
                    else:
                        for i, j in T.Parallel(block_m, TILE):
                            xf[i, j] = exp_fast(xf[i, j] - ts[i])
                        T.reduce_sum(xf, fin, dim=1)
                    for i in T.Parallel(block_m):
                        s[i] = rescale(s[i], shift[i], ts[i]) + fin[i]
                        m[i] = tm[i]
                        shift[i] = ts[i]

                # Combine the cluster's partial (max, sum) pairs through distributed shared memory.
                if C > 1:
                    mine = T.alloc_shared((2, block_m), F32)
                    peers = T.alloc_shared((C, 2, block_m), F32)
                    for i in T.Parallel(block_m):
                        mine[0, i] = m[i]
                        mine[1, i] = s[i]
                    # A full cluster barrier, not an early arrive + late wait: TileLang may place
                    # `peers` over its reductions' shared workspace, so a peer may only write
                    # into it once every CTA is past its reductions (measured: the split
                    # barrier corrupts rows).
                    T.cluster_sync()
                    for r in T.unroll(C):
                        T.copy_cluster(mine, peers[cx, :, :], dst_block=r)
                    T.cluster_sync()
                    for i in T.Parallel(block_m):
                        gm[i] = neg_inf()
                        for r in T.unroll(C):
                            gm[i] = T.max(gm[i], peers[r, 0, i])
                        gshift[i] = safe_max(gm[i])
                        gs[i] = 0.0
                        for r in T.unroll(C):
                            gs[i] += rescale(peers[r, 1, i], safe_max(peers[r, 0, i]), gshift[i])
                else:
                    for i in T.Parallel(block_m):
                        gm[i] = m[i]
                        gs[i] = s[i]
                        gshift[i] = shift[i]

                # Pass 2: outputs.
                if lse:
                    for i in T.Parallel(block_m):
                        if cx == 0 and bx * block_m + i < M:
                            y[bx * block_m + i] = T.cast(logsumexp_value(gm[i], gs[i]), out_dtype)
                else:
                    for i in T.Parallel(block_m):
                        if log:
                            fin[i] = log_sum(gm[i], gs[i])
                        elif NT > 1:
                            fin[i] = softmax_scale(gm[i], gs[i])
                        else:
                            # xf holds exp(x - shift); carry it to the row's shift and normalize.
                            fin[i] = T.if_then_else(
                                row_is_nan_for_softmax(gm[i], gs[i]),
                                nan(),
                                T.if_then_else(s[i] == 0.0, 0.0, T.exp(shift[i] - gshift[i]) / gs[i]),
                            )
                    for t in T.serial(NT):
                        if NT > 1:
                            for i, j in T.Parallel(block_m, TILE):
                                xf[i, j] = T.if_then_else(
                                    bx * block_m + i < M and (cx * NT + t) * TILE + j < N,
                                    T.cast(x[bx * block_m + i, (cx * NT + t) * TILE + j], F32),
                                    neg_inf(),
                                )
                        for i, j in T.Parallel(block_m, TILE):
                            if bx * block_m + i < M and (cx * NT + t) * TILE + j < N:
                                if log:
                                    y[bx * block_m + i, (cx * NT + t) * TILE + j] = T.cast(
                                        (xf[i, j] - gshift[i]) - fin[i], out_dtype)
                                elif NT > 1:
                                    y[bx * block_m + i, (cx * NT + t) * TILE + j] = T.cast(exp_fast(xf[i, j] - gshift[i]) * fin[i], out_dtype)
                                else:
                                    y[bx * block_m + i, (cx * NT + t) * TILE + j] = T.cast(xf[i, j] * fin[i], out_dtype)

        return main

    return cuda_rowwise
