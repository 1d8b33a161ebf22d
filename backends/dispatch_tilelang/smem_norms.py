"""rms_norm and layer_norm forward in TileLang for CUDA, each CTA's chunk of a row held in shared memory.

The row layout of :mod:`.smem_rows` with the statistics of a norm: a row is cut into ``cluster``
chunks of ``tile_n`` columns, one CTA each, the CTAs of a row one thread-block cluster (sm_90+).
A CTA copies its chunk into shared memory with ``cp.async`` and walks it there:

* rms_norm: the sum of squares; one exchange; the output.
* layer_norm: the chunk's sum, then its squares about the chunk's own mean (two walks of shared
  memory, so no element far from the rest costs precision); one exchange of (sum, M2); the row's
  mean and M2 merged from the chunks by Chan et al.'s rule, ``M2 = sum_r M2_r + n_r (mean_r -
  mean)^2``, with each chunk's count ``n_r`` a constant; the output. With ``walks=2`` (an
  option of :func:`program`, not a config: on an H100 it moved the defaults by -2% to +3.5%) the
  sum and the squares come from one walk, of ``d = x - shift`` with the shift the mean of the chunk's first
  ``SHIFT_GROUP`` elements; ``M2 = sum d^2 - (sum d)^2 / n`` then cancels only where the shift
  lies farther from the chunk's mean than the chunk's spread, and there the squares are walked
  again about the mean.

The exchange is :mod:`.smem_rows`': each chunk's two words go to every peer with ``cp.async.bulk``
into distributed shared memory, completing on the peer's mbarrier. The row is read from HBM once
and written once; ``w`` and ``b`` are read by every row (from L2 past the first).

Clusters of 8 CTAs or more at 256 threads carry the rows kernel's launch bound
(:func:`ships_bound`).

``y = (x - mean) * rstd [* w] [+ b]`` in fp32, rounded once to x's dtype; ``M`` is dynamic (rows
on ``blockIdx.x``), ``N`` static, dense rows only; an absent weight or bias is a build-time choice.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

import functools

import tilelang
import tilelang.language as T

from ._numerics import F32, nonneg
from .cuda_kernels import DTYPE_BYTES, _fragment_layout, _row_stat_layout
from .norm_kernels import _affine
from .smem_rows import check_launch, launch_bound, row_words, trade_words


def chunk_count(n: int, tile: int, r):
    """The columns (fp32) of chunk ``r`` of a row of ``n`` cut in chunks of ``tile``."""
    return T.cast(T.min(n - r * tile, tile), F32)


def chan_term(peers, r, mean, n: int, tile: int):
    """Chunk ``r``'s share of its row's M2 (Chan et al.): the chunk's own M2 (``peers[r, 1]``) plus
    its count times the square of its mean's distance from the row's ``mean`` (the chunk's sum is
    ``peers[r, 0]``)."""
    return peers[r, 1] + chunk_count(n, tile, r) * (
        (peers[r, 0] / chunk_count(n, tile, r) - mean) * (peers[r, 0] / chunk_count(n, tile, r) - mean))


SHIFT_GROUP = 16  # walks=2: the chunk's first elements whose mean is the shift


def ships_bound(cluster: int, threads: int) -> bool:
    """Whether the shipped kernel of a config carries the launch bound: clusters of 8 CTAs or more
    at 256 threads. On an H100 (bf16, a weight and layer_norm's bias; each config timed next to
    its twin), at such configs whose registers held an SM to 3-5 CTAs where their chunks allow 6-8,
    the bound took 4-18% off layer_norm at 5 of 6 (layer_norm 64 x 262144's default, 16 chunks of
    16384: 40.5 -> 36.1 us) and 8% off rms_norm at both of its; the others moved -4% to +2%. At
    one or two chunks a row (1024 x 16384, 512 x 32768) it cost layer_norm up to 6%, and at 128
    threads it moved configs by -4% to +10%
    (benchmarks/results/current/norms/smem_norms/launch_bound/)."""
    return cluster >= 8 and threads >= 256


@functools.lru_cache(maxsize=None)
def program(op: str, n_cols: int, dtype: str, has_weight: bool, has_bias: bool, eps: float, tile_n: int,
            cluster: int, arch: str | None = None, walks: int = 3, bound: bool | None = None, early: bool = True):
    """The ``@tilelang.jit`` program (tunables ``block_m``, always 1, and ``threads``) of one (op, N,
    dtype, weight/bias present, eps, tile_n, cluster); ``arch`` pins the target as in
    ``cuda_kernels.program``. ``walks``: layer_norm's walks of its chunk in shared memory, 3 or 2
    (see the module's docstring; rms_norm walks it twice either way). ``bound``: whether the
    kernel carries the rows kernel's launch bound (``smem_rows.launch_bound``: the CTAs an SM that
    its chunk in shared memory allows, each thread kept to what they leave); None, as shipped
    (:func:`ships_bound`), True or False a sweep's twin. A cluster's CTA issues its chunk's copy
    before it waits for its peers to have started (``smem_rows.row_words``'s ``early``): on an
    H100, bf16 with a weight (and layer_norm's bias), 0.2-12% less time at each of 24 configs of
    256 x 65536 and 64 x 262144 (the defaults 2.7-9.7%) than waiting first; ``early=False`` (a
    sweep's twin) builds the kernel that waits first
    (benchmarks/results/current/norms/smem_norms/early/)."""
    if walks not in (2, 3):
        raise ValueError(f"walks must be 2 or 3 (got {walks!r})")
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}
    N, C, TILE = n_cols, cluster, tile_n
    vec = 16 // DTYPE_BYTES[dtype]
    rms = op == "rms_norm"
    one_walk = not rms and walks == 2

    @tilelang.jit(target=target, out_idx=[3])
    def smem_norm(block_m, threads):
        # made here: TileLang's autotuner keys only plain free variables
        trade, words = trade_words(C, early), row_words(C, early)
        reason = check_launch(N, dtype, TILE, C, block_m, threads)
        if reason is not None:
            raise ValueError(reason)
        SUB = vec * threads
        NS = TILE // SUB
        M = T.dynamic("m")

        @T.macro
        def centred_squares(xs, acc, center, q, base):
            # the chunk's sum of squares about center[0], into q: a walk of shared memory
            T.fill(acc, 0.0)
            for k in T.serial(NS):
                for i, j in T.Parallel(1, SUB):
                    acc[i, j] += T.if_then_else(
                        base + k * SUB + j < N,
                        (T.cast(xs[i, k * SUB + j], F32) - center[i]) * (T.cast(xs[i, k * SUB + j], F32) - center[i]),
                        0.0)
            T.reduce_sum(acc, q, dim=1)

        @T.prim_func
        def main(x: T.Tensor((M, N), dtype), w: T.Tensor((N,), dtype), b: T.Tensor((N,), dtype),
                 y: T.Tensor((M, N), dtype)):
            with T.Kernel(M, C, threads=threads, cluster_dims=(1, C, 1)) as (bx, cx):
                if ships_bound(C, threads) if bound is None else bound:
                    T.annotate_min_blocks_per_sm(launch_bound(TILE, dtype, threads))
                xs = T.alloc_shared((1, TILE), dtype)
                acc = T.alloc_fragment((1, SUB), F32)
                s = T.alloc_fragment((1,), F32)
                q = T.alloc_fragment((1,), F32)
                mu = T.alloc_fragment((1,), F32)
                mean = T.alloc_fragment((1,), F32)
                m2 = T.alloc_fragment((1,), F32)
                rstd = T.alloc_fragment((1,), F32)
                layouts = {acc: _fragment_layout(1, SUB, threads, vec)}
                stats = [s, q, mu, mean, m2, rstd]
                if one_walk:  # the second sum's lanes, the shift, whether the shift is ill placed
                    acc2 = T.alloc_fragment((1, SUB), F32)
                    layouts[acc2] = _fragment_layout(1, SUB, threads, vec)
                    sh = T.alloc_fragment((1,), F32)
                    bad = T.alloc_fragment((1,), F32)
                    stats += [sh, bad]
                for stat in stats:
                    layouts[stat] = _row_stat_layout(1, threads)
                T.annotate_layout(layouts)
                if C > 1:
                    mine, peers, got = words(cx)
                base = cx * TILE
                count = T.cast(T.min(N - base, TILE), F32)  # the chunk's columns: the row's rest, at most TILE

                T.copy(x[bx, base], xs, prefer_instruction="cp_async")

                if rms:
                    for i in T.Parallel(1):
                        s[i] = 0.0
                        mu[i] = 0.0
                elif one_walk:
                    # the shift: the mean of the chunk's first SHIFT_GROUP elements (all of them in a shorter chunk)
                    for i in T.Parallel(1):
                        sh[i] = 0.0
                        for g in T.unroll(SHIFT_GROUP):
                            sh[i] += T.if_then_else(base + g < N, T.cast(xs[i, g], F32), 0.0)
                        sh[i] = sh[i] / T.cast(T.min(N - base, SHIFT_GROUP), F32)
                    T.fill(acc, 0.0)
                    T.fill(acc2, 0.0)
                    for k in T.serial(NS):
                        for i, j in T.Parallel(1, SUB):
                            acc[i, j] += T.if_then_else(base + k * SUB + j < N, T.cast(xs[i, k * SUB + j], F32) - sh[i],
                                                        0.0)
                            acc2[i, j] += T.if_then_else(
                                base + k * SUB + j < N,
                                (T.cast(xs[i, k * SUB + j], F32) - sh[i]) * (T.cast(xs[i, k * SUB + j], F32) - sh[i]),
                                0.0)
                    T.reduce_sum(acc, s, dim=1)
                    T.reduce_sum(acc2, q, dim=1)
                    for i in T.Parallel(1):
                        mu[i] = sh[i] + s[i] / count
                        # the shift farther from the chunk's mean than its spread: sum d^2 - (sum d)^2 / n would cancel
                        bad[i] = T.if_then_else(2.0 * (s[i] / count) * (s[i] / count) > q[i] / count, 1.0, 0.0)
                        q[i] = nonneg(q[i] - s[i] * (s[i] / count))
                        s[i] = s[i] + sh[i] * count  # the chunk's sum of x, as the exchange takes it
                    if bad[0] > 0.0:  # the same in every thread: the squares walked again about the mean
                        centred_squares(xs, acc, mu, q, base)
                else:  # the chunk's sum and mean
                    T.fill(acc, 0.0)
                    for k in T.serial(NS):
                        for i, j in T.Parallel(1, SUB):
                            acc[i, j] += T.if_then_else(base + k * SUB + j < N, T.cast(xs[i, k * SUB + j], F32), 0.0)
                    T.reduce_sum(acc, s, dim=1)
                    for i in T.Parallel(1):
                        mu[i] = s[i] / count
                if not one_walk:  # the squares about the chunk's mean
                    centred_squares(xs, acc, mu, q, base)

                if C > 1:
                    mine[0] = s[0]
                    mine[1] = q[0]
                    trade(mine, peers[cx, :], got)
                    for i in T.Parallel(1):
                        mean[i] = 0.0
                        m2[i] = 0.0
                        if not rms:
                            for r in T.unroll(C):
                                mean[i] += peers[r, 0]
                            mean[i] = mean[i] / T.float32(N)
                        for r in T.unroll(C):  # unrolled: each chunk's count folds to a constant
                            if rms:
                                m2[i] += peers[r, 1]
                            else:
                                m2[i] += chan_term(peers, r, mean[i], N, TILE)
                else:
                    for i in T.Parallel(1):
                        mean[i] = mu[i]
                        m2[i] = q[i]
                for i in T.Parallel(1):
                    rstd[i] = T.rsqrt(m2[i] / T.float32(N) + T.float32(eps))

                for k in T.serial(NS):
                    for i, j in T.Parallel(1, SUB):
                        if base + k * SUB + j < N:
                            y[bx, base + k * SUB + j] = T.cast(
                                _affine((T.cast(xs[i, k * SUB + j], F32) - mean[i]) * rstd[i], w, b,
                                        base + k * SUB + j, has_weight, has_bias), dtype)
                if C > 1:
                    T.cluster_wait()  # no CTA leaves while a copy may still read its `mine`

        return main

    return smem_norm
