"""rms_norm and layer_norm backward in TileLang for CUDA (sm_90+), a row's chunks of ``x`` and ``dy`` in shared memory.

The row layout of :mod:`.smem_norms`: a row in ``cluster`` chunks of ``tile_n`` columns, one CTA
each, the CTAs of a row one thread-block cluster (sm_90+). The grid is persistent over rows: ``P``
clusters (the partials' rows), cluster ``p`` taking rows ``p, p + P, ...``. For each row a CTA
copies its chunks of ``x`` and ``dy`` into shared memory with ``cp.async`` and walks them there:

* layer_norm: the chunk's sum of ``x`` (its mean ``mu_r``), then ``sum (x - mu_r)^2``, ``sum g`` and
  ``sum g (x - mu_r)`` with ``g = dy * w`` (one walk, one batched all-reduce of the three sums:
  one set of barriers); one exchange of the four words over distributed shared memory; the row's
  mean, ``M2 = sum_r M2_r + n_r (mu_r - mean)^2`` (Chan et al.) and
  ``sum g (x - mean) = sum_r [sum_r g (x - mu_r) + (mu_r - mean) sum_r g]``, exact algebra with
  no cancellation of large terms;
* rms_norm: ``sum x^2`` and ``sum g x`` (one batched all-reduce); one exchange of two words;

then ``dx = rstd (g - mean(g) - xhat mean(g xhat))`` (no ``mean(g)`` for rms_norm), written once, and
the chunk's ``dy * xhat`` and ``dy`` added to the CTA's dweight / dbias accumulators (registers,
``tile_n / threads`` each). After its last row a CTA writes its accumulators to row ``p`` of the
fp32 partials ``(P, N)``; stage two sums them over ``P`` in a fixed order (deterministic). ``x``
and ``dy`` are read once and ``dx`` written once; ``w``'s chunk is copied into shared memory once
a CTA.

The exchange's mbarrier completes once a row: the row ``i`` of a cluster waits on parity ``i % 2``,
and a cluster barrier after each row (arrive once a CTA has read its peers' words, wait before
its next send) keeps a fast CTA from overwriting words a slow peer has not read.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

import functools
import threading

import tilelang
import tilelang.language as T

from ._numerics import F32
from .cuda_kernels import DTYPE_BYTES, _fragment_layout, _row_stat_layout
from .smem_norms import chan_term, chunk_count
from .smem_rows import check_launch, row_words, swap_words

MAX_ACC_PER_THREAD = 32  # dweight (and dbias) values a thread accumulates in registers
SMEM_BYTES = 208 * 1024  # a CTA's chunks (sm_90: 227 KB a CTA at most)


def check_backward(n_cols: int, dtype: str, tile_n: int, cluster: int, block_m: int, threads: int,
                   ahead: bool = False) -> str | None:
    """Why this (tile_n, cluster, block_m, threads, ahead) cannot run the backward, or None."""
    reason = check_launch(n_cols, dtype, tile_n, cluster, block_m, threads)
    if reason is not None:
        return reason
    if tile_n // threads > MAX_ACC_PER_THREAD:
        return (f"a chunk of {tile_n} over {threads} threads is {tile_n // threads} accumulators a thread, over "
                f"{MAX_ACC_PER_THREAD}: more threads or a larger cluster would hold it")
    chunks = 5 if ahead else 3  # x and dy (two of each ahead) and w
    if chunks * tile_n * DTYPE_BYTES[dtype] > SMEM_BYTES:
        return (f"{chunks} chunks of {tile_n} {dtype} (x, dy{' twice' if ahead else ''} and w) exceed "
                f"{SMEM_BYTES // 1024} KB of shared memory: a larger cluster would split them")
    return None


def _sums_layout(sums: int, sub: int, threads: int, vec: int):
    """``sums`` rows of one walk's partial sums, column ``j`` of each in the thread that holds column
    ``j`` of the chunk's sub-tile (as :func:`.cuda_kernels._fragment_layout`): one all-reduce takes them all."""
    per = sub // threads
    return T.Fragment((sums, sub), forward_thread_fn=lambda i, j: (j // vec) % threads,
                      forward_index_fn=lambda i, j: i * per + (j // (vec * threads)) * vec + j % vec)


def _sums_stat_layout(sums: int, threads: int):
    """The reduced ``sums``, every one in every thread."""
    return T.Fragment((sums,), forward_thread_fn=lambda i, rep: rep, replicate=threads, forward_index_fn=lambda i: i)


@functools.lru_cache(maxsize=None)
def program(op: str, n_cols: int, dtype: str, has_weight: bool, has_bias: bool, eps: float, tile_n: int,
            cluster: int, ahead: bool = False, blocks: int = 1, arch: str | None = None):
    """The ``@tilelang.jit`` program (tunables ``block_m``, always 1, and ``threads``) of one (op, N,
    dtype, weight/bias present, eps, tile_n, cluster): ``main(x, w, dy, dx, pw, pb)``, every tensor
    preallocated; the grid is ``pw``'s rows ``P`` (1 <= P <= M) by ``cluster``. ``pb`` is written
    for layer_norm with a bias only, ``pw`` with a weight only. ``ahead``: two buffers of ``x`` and ``dy``
    a CTA, the next row's copy in flight while this row is walked. ``blocks`` > 1: the compiler
    keeps a thread's registers few enough for that many CTAs an SM (``__launch_bounds__``)."""
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}
    N, C, TILE = n_cols, cluster, tile_n
    vec = 16 // DTYPE_BYTES[dtype]
    rms = op == "rms_norm"
    want_b = has_bias and not rms

    @tilelang.jit(target=target, out_idx=None)
    def smem_norm_bwd(block_m, threads):
        swap, words = swap_words(C), row_words(C)  # made here: TileLang's autotuner keys only plain free variables

        def gw(g, w):  # g = dy * w, in fp32
            return T.cast(g, F32) * T.cast(w, F32) if has_weight else T.cast(g, F32)

        reason = check_backward(N, dtype, TILE, C, block_m, threads, ahead)
        if reason is not None:
            raise ValueError(reason)
        SUB = vec * threads
        NS = TILE // SUB
        S = 2 if ahead else 1
        B = 2 if rms else 3  # sums of the second walk: (x - mu)^2, g (x - mu)[, g]
        M = T.dynamic("m")
        P = T.dynamic("p")

        @T.prim_func
        def main(x: T.Tensor((M, N), dtype), w: T.Tensor((N,), dtype), dy: T.Tensor((M, N), dtype),
                 dx: T.Tensor((M, N), dtype), pw: T.Tensor((P, N), F32), pb: T.Tensor((P, N), F32)):
            with T.Kernel(P, C, threads=threads, cluster_dims=(1, C, 1)) as (bx, cx):
                if blocks > 1:
                    T.annotate_min_blocks_per_sm(blocks)
                xs = T.alloc_shared((S, TILE), dtype)
                gs = T.alloc_shared((S, TILE), dtype)
                ws = T.alloc_shared((TILE,), dtype)
                a0 = T.alloc_fragment((1, SUB), F32)
                acc = T.alloc_fragment((B, SUB), F32)  # the second walk's sums, reduced together
                sums = T.alloc_fragment((B,), F32)
                aw = T.alloc_fragment((1, TILE), F32)
                ab = T.alloc_fragment((1, TILE), F32)
                s = T.alloc_fragment((1,), F32)
                mu = T.alloc_fragment((1,), F32)
                q = T.alloc_fragment((1,), F32)
                sg = T.alloc_fragment((1,), F32)
                sgx = T.alloc_fragment((1,), F32)
                mean = T.alloc_fragment((1,), F32)
                rstd = T.alloc_fragment((1,), F32)
                c1 = T.alloc_fragment((1,), F32)
                c2 = T.alloc_fragment((1,), F32)
                layouts = {a0: _fragment_layout(1, SUB, threads, vec), acc: _sums_layout(B, SUB, threads, vec),
                           sums: _sums_stat_layout(B, threads)}
                layouts[aw] = _fragment_layout(1, TILE, threads, vec)
                layouts[ab] = _fragment_layout(1, TILE, threads, vec)
                for stat in (s, mu, q, sg, sgx, mean, rstd, c1, c2):
                    layouts[stat] = _row_stat_layout(1, threads)
                T.annotate_layout(layouts)
                if C > 1:
                    mine, peers, got = words(cx)
                else:
                    mine = T.alloc_shared((4,), F32)
                base = cx * TILE
                count = T.min(N - base, TILE)  # this chunk's columns

                if has_weight:
                    T.copy(w[base], ws, prefer_instruction="cp_async")
                T.fill(aw, 0.0)
                T.fill(ab, 0.0)

                R = T.ceildiv(M - bx, P)  # this cluster's rows
                if ahead:
                    T.async_copy(x[bx, base], xs[0, :])
                    T.async_copy(dy[bx, base], gs[0, :])
                for i in T.serial(R):
                    row = bx + i * P
                    u = i % S  # this row's buffer
                    if ahead:
                        if i + 1 < R:  # the next row's copies in flight; this row's landed
                            T.async_copy(x[row + P, base], xs[(i + 1) % S, :])
                            T.async_copy(dy[row + P, base], gs[(i + 1) % S, :])
                            T.ptx_wait_group(2)
                        else:
                            T.ptx_wait_group(0)
                    else:
                        T.async_copy(x[row, base], xs[0, :])  # both copies in flight, then one wait
                        T.async_copy(dy[row, base], gs[0, :])
                        T.ptx_wait_group(0)

                    if rms:
                        for r in T.Parallel(1):
                            mu[r] = 0.0
                            s[r] = 0.0
                            sg[r] = 0.0
                    else:  # the chunk's sum and mean
                        T.fill(a0, 0.0)
                        for k in T.serial(NS):
                            for r, j in T.Parallel(1, SUB):
                                a0[r, j] += T.if_then_else(base + k * SUB + j < N, T.cast(xs[u, k * SUB + j], F32), 0.0)
                        T.reduce_sum(a0, s, dim=1)
                        for r in T.Parallel(1):
                            mu[r] = s[r] / T.cast(count, F32)
                    T.fill(acc, 0.0)
                    for k in T.serial(NS):
                        for r, j in T.Parallel(B, SUB):  # sum r: (x - mu)^2, [g,] g (x - mu)
                            if base + k * SUB + j < N:
                                acc[r, j] += T.if_then_else(
                                    r == 0,
                                    (T.cast(xs[u, k * SUB + j], F32) - mu[0])
                                    * (T.cast(xs[u, k * SUB + j], F32) - mu[0]),
                                    gw(gs[u, k * SUB + j], ws[k * SUB + j]) * T.if_then_else(
                                        r == B - 1, T.cast(xs[u, k * SUB + j], F32) - mu[0], 1.0))
                    T.reduce_sum(acc, sums, dim=1, batch=B)  # one all-reduce's barriers for every sum
                    for r in T.Parallel(B):  # the words this CTA sends: s, q[, sg], sgx
                        mine[r + 1 + (r if rms else 0)] = sums[r]

                    if C > 1:
                        mine[0] = s[0]
                        swap(mine, peers[cx, :], got, i % 2)
                        for r in T.Parallel(1):
                            mean[r] = 0.0
                            q[r] = 0.0
                            sg[r] = 0.0
                            sgx[r] = 0.0
                            if not rms:
                                for p in T.unroll(C):
                                    mean[r] += peers[p, 0]
                                mean[r] = mean[r] / T.float32(N)
                            for p in T.unroll(C):  # unrolled: each chunk's count folds to a constant
                                if rms:
                                    q[r] += peers[p, 1]
                                    sgx[r] += peers[p, 3]
                                else:
                                    q[r] += chan_term(peers, p, mean[r], N, TILE)
                                    sg[r] += peers[p, 2]
                                    sgx[r] += peers[p, 3] + (
                                        peers[p, 0] / chunk_count(N, TILE, p) - mean[r]) * peers[p, 2]
                        T.cluster_arrive()  # this CTA has read its peers' words of row i
                    else:
                        for r in T.Parallel(1):
                            mean[r] = mu[r]
                            q[r] = mine[1]
                            sgx[r] = mine[3]
                            if not rms:
                                sg[r] = mine[2]
                    for r in T.Parallel(1):
                        rstd[r] = T.rsqrt(q[r] / T.float32(N) + T.float32(eps))
                        c1[r] = rstd[r] * sgx[r] / T.float32(N)
                        c2[r] = sg[r] / T.float32(N)

                    for k in T.serial(NS):
                        for r, j in T.Parallel(1, SUB):
                            if base + k * SUB + j < N:
                                if has_weight:
                                    dx[row, base + k * SUB + j] = T.cast(rstd[r] * (
                                        T.cast(gs[u, k * SUB + j], F32) * T.cast(ws[k * SUB + j], F32) - c2[r]
                                        - (T.cast(xs[u, k * SUB + j], F32) - mean[r]) * rstd[r] * c1[r]), dtype)
                                    aw[r, k * SUB + j] += (T.cast(gs[u, k * SUB + j], F32)
                                                           * (T.cast(xs[u, k * SUB + j], F32) - mean[r]) * rstd[r])
                                else:
                                    dx[row, base + k * SUB + j] = T.cast(rstd[r] * (
                                        T.cast(gs[u, k * SUB + j], F32) - c2[r]
                                        - (T.cast(xs[u, k * SUB + j], F32) - mean[r]) * rstd[r] * c1[r]), dtype)
                                if want_b:
                                    ab[r, k * SUB + j] += T.cast(gs[u, k * SUB + j], F32)
                    if C > 1:
                        T.cluster_wait()  # every peer has read this row's words: the next send may land

                for k in T.serial(NS):
                    for r, j in T.Parallel(1, SUB):
                        if base + k * SUB + j < N:
                            if has_weight:
                                pw[bx, base + k * SUB + j] = aw[r, k * SUB + j]
                            if want_b:
                                pb[bx, base + k * SUB + j] = ab[r, k * SUB + j]

        return main

    return smem_norm_bwd


# -- host side: configs and the backward of one call shape ---------------------------------------

CLUSTERS = (1, 2, 4, 8, 16)
THREADS = (256, 512, 128)


def refusal(n: int, dtype: str) -> str | None:
    """Why this family cannot take the backward of rows of ``n``, or None."""
    from .norm_configs import smem_refusal

    return smem_refusal(n, dtype, 0) or (None if configs(n, dtype) else
                                         f"no (cluster, threads) of this family holds rows of {n} {dtype}")


def configs(n: int, dtype: str) -> list[dict]:
    """Every (cluster, threads) that holds rows of ``n``, fewest chunks first, then ``threads`` in
    :data:`THREADS` order; ``tile_n`` the cluster's share of the row (``fit_chunk``); the next
    row's copy in flight (``ahead``) where it fits; registers for one CTA an SM (``blocks``), a
    persistent grid of two clusters' CTAs an SM, one for 512 threads in fewer than 16 chunks, and
    for 128 threads four, eight for chunks of up to 2 KB (``per_sm``). On an H200, rows of 1024
    bf16 took 8-14% less kernel time (CUDA profiler) with eight CTAs of 128 threads an SM than
    with four. The rest came from a first sweep whose times counted host gaps (do_bench): 512
    threads 10-17% less with one than with two, 256 threads 0-8% more with one, 16 chunks of 512
    threads 11% more in fp32."""
    from .smem_rows import fit_chunk

    out = []
    for cluster in CLUSTERS:
        for threads in THREADS:
            tile, c = fit_chunk(n, dtype, cluster, threads)
            if c != cluster or check_backward(n, dtype, tile, c, 1, threads) is not None:
                continue
            ahead = int(check_backward(n, dtype, tile, c, 1, threads, True) is None)
            per_sm = 1 if threads > 256 and c < 16 else 2
            if threads == 128:
                per_sm = 8 if tile * DTYPE_BYTES[dtype] <= 2048 else 4
            cfg = {"block_m": 1, "threads": threads, "tile_n": tile, "cluster": c, "ahead": ahead, "blocks": 1,
                   "per_sm": per_sm}
            if cfg not in out:
                out.append(cfg)
    return out


def default_config(n: int, dtype: str) -> dict | None:
    """The config a backward of rows of ``n`` runs, or None where none holds them. On an H200
    (benchmarks/results/current/norms/smem_norm_backward/): rows of up to 4 KB whole in 128
    threads (eight or four CTAs an SM), the fastest kernels by CUDA's profiler; from the first
    sweep, whose times counted host gaps: rows of up to 32K in the fewest chunks (256 threads up
    to chunks of 8192, else 512), longer rows in chunks of 8192 at 256 threads (262144: 16 chunks
    of 16384 at 512), the next row's copy in flight wherever it fit. A race timed from CUDA-graph
    replays found these the family's fastest (or within 0.5%) at bf16 rows of 1K-16K, but
    rms_norm's at 8192, which ran 4.5% faster with one CTA an SM; longer rows were not raced so."""
    found = configs(n, dtype)
    if not found:
        return None
    if n * DTYPE_BYTES[dtype] <= 4096:  # short rows: many small CTAs an SM
        for cfg in found:
            if cfg["threads"] == 128 and cfg["cluster"] == 1:
                return dict(cfg)
    for cfg in found:
        small = cfg["tile_n"] <= 8192
        if (cfg["threads"] == 256) == small and (n <= 32768 or cfg["tile_n"] <= 8192 or cfg["cluster"] == 16):
            return dict(cfg)
    return dict(found[0])


_BUILT: dict[tuple, object] = {}
_LOCK = threading.Lock()


def build(op: str, n: int, dtype: str, has_weight: bool, has_bias: bool, eps: float, config: dict):
    """The compiled kernel of ``config`` (built once a process; threads may build different ones at once)."""
    from .build import compile_once, cuda_arch

    arch = cuda_arch()
    key = (op, n, dtype, has_weight, has_bias, eps, arch, *(int(config[k]) for k in ("tile_n", "cluster", "threads")),
           bool(config.get("ahead")), int(config.get("blocks", 1)))
    return compile_once(
        _BUILT, _LOCK, key,
        lambda: program(op, n, dtype, has_weight, has_bias, eps, int(config["tile_n"]), int(config["cluster"]),
                        bool(config.get("ahead")), int(config.get("blocks", 1)), arch),
        {"block_m": 1, "threads": int(config["threads"])})


def make(op: str, m: int, n: int, dtype, has_weight: bool, has_bias: bool, eps: float, config: dict | None = None):
    """``backward(grad, input, weight, [bias,] output) -> (dinput, dweight[, dbias])`` of rows of
    ``n`` (CUDA, sm_90+), with ``config`` (default: :func:`default_config`): the grid's rows ``P``
    are ``per_sm`` clusters' CTAs an SM, at most ``m``."""
    from .configs import sm_count
    from .norm_backward import partials_backward
    from .norms import DTYPES

    name = DTYPES[dtype]
    cfg = dict(config or default_config(n, name))
    per_sm, cluster = int(cfg.get("per_sm", 2)), int(cfg["cluster"])
    kernel = None

    def compiled():
        nonlocal kernel
        if kernel is None:
            kernel = build(op, n, name, has_weight, has_bias and op != "rms_norm", eps, cfg)
        return kernel

    def rows(device) -> int:
        return min(m, max(1, -(-per_sm * sm_count(device) // cluster)))

    return partials_backward(op, m, n, dtype, has_bias, rows, compiled, "cuda")
