"""Stage two of TileLang's norm backwards on CUDA: the fp32 partials' column sums, cast to the gradients' dtype.

A backward's kernel writes ``P`` rows of fp32 partials of dweight and dbias into one ``(2, P, N)``
buffer (:func:`~dispatch_tilelang.norm_backward.partials_backward`). :func:`program` sums ``K``
of its two blocks over ``P``, starting at block ``first`` (0: dweight's, 1: dbias's), into a
``(K, N)`` output of the gradients' dtype, the cast folded into the store: one launch where torch
took a reduction and a cast.

A CTA takes ``block_n`` columns of one block. Where ``N`` is a whole number of ``block_n``
(``aligned``), its threads copy tiles of ``block_p`` rows into shared memory with ``cp.async``,
``stages`` tiles in flight, and add each to their registers; the rows past the last whole tile are
added from global memory. Elsewhere (an ``N`` that is not a whole number of 16 fp32) every load is
a guarded one. Each thread adds its rows in a fixed order, then one all-reduce sums the tile's
rows: the same sums, bit for bit, run to run.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

import functools
import threading

import tilelang
import tilelang.language as T

from ._numerics import F32

TILE_FLOATS = 2048  # a stage's tile: 8 KB of fp32
STAGES = 4  # tiles in flight a CTA


@functools.lru_cache(maxsize=None)
def program(n_cols: int, dtype: str, k: int, first: int, aligned: bool, arch: str | None = None):
    """The ``@tilelang.jit`` program (tunables ``block_p``, ``block_n``, ``threads``, ``stages``):
    ``main(parts, out)``, ``parts`` ``(2, P, N)`` fp32, ``out`` ``(k, N)`` in ``dtype``. ``aligned``:
    ``N`` is a whole number of ``block_n`` (the columns unguarded, the full tiles copied with
    ``cp.async``)."""
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}
    N, K = n_cols, k

    @tilelang.jit(target=target, out_idx=None)
    def column_sums(block_p, block_n, threads, stages):
        S = stages
        P = T.dynamic("p")

        @T.prim_func
        def main(parts: T.Tensor((2, P, N), F32), out: T.Tensor((K, N), dtype)):
            with T.Kernel(T.ceildiv(N, block_n), K, threads=threads) as (bx, by):
                acc = T.alloc_fragment((block_p, block_n), F32)
                col = T.alloc_fragment((block_n,), F32)
                src = by + first
                c0 = bx * block_n
                T.clear(acc)
                if aligned:
                    tile = T.alloc_shared((S, block_p, block_n), F32)
                    full = P // block_p  # whole tiles; the rest is added from global memory below
                    for s in T.serial(S - 1):
                        if s < full:
                            T.async_copy(parts[src, s * block_p:(s + 1) * block_p, c0:c0 + block_n], tile[s, :, :])
                    for t in T.serial(full):
                        if t + S - 1 < full:  # the tile S - 1 ahead in flight, this one landed
                            T.async_copy(parts[src, (t + S - 1) * block_p:(t + S) * block_p, c0:c0 + block_n],
                                         tile[(t + S - 1) % S, :, :])
                            T.ptx_wait_group(S - 1)
                        else:
                            T.ptx_wait_group(0)
                        T.sync_threads()
                        for i, j in T.Parallel(block_p, block_n):
                            acc[i, j] += tile[t % S, i, j]
                    for i, j in T.Parallel(block_p, block_n):
                        if full * block_p + i < P:
                            acc[i, j] += parts[src, full * block_p + i, c0 + j]
                else:
                    for t in T.serial(T.ceildiv(P, block_p)):
                        for i, j in T.Parallel(block_p, block_n):
                            if t * block_p + i < P and c0 + j < N:
                                acc[i, j] += parts[src, t * block_p + i, c0 + j]
                T.reduce_sum(acc, col, dim=0)
                for j in T.Parallel(block_n):
                    if aligned or c0 + j < N:
                        out[by, c0 + j] = T.cast(col[j], dtype)

        return main

    return column_sums


def config(n: int, p: int, k: int, sms: int) -> dict:
    """The launch of sums over ``p`` rows of ``k`` blocks of ``n`` columns on ``sms``
    multiprocessors: 16-byte rows (``n`` a multiple of 16) in the widest of 512, 256, ..., 32
    columns a CTA that still makes two CTAs an SM, else 16; a stage's tile of 8 KB, fewer rows
    where ``p`` is smaller (at least two values a thread); up to 128 threads."""
    aligned = n % 16 == 0
    block_n = 16
    if aligned:
        block_n = next((b for b in (512, 256, 128, 64, 32) if n % b == 0 and -(-n // b) * k >= 2 * sms), 16)
    block_p = 1 << (min(TILE_FLOATS // block_n, max(p, 1)).bit_length() - 1)  # a power of two, at most p
    block_p = max(block_p, 64 // block_n)
    threads = max(32, min(128, block_p * block_n // 4))
    return {"block_p": block_p, "block_n": block_n, "threads": threads, "stages": STAGES if aligned else 1,
            "aligned": aligned}


_BUILT: dict[tuple, object] = {}
_LOCK = threading.Lock()


def build(n: int, dtype: str, k: int, first: int, cfg: dict):
    """The compiled column sums of ``cfg`` (built once a process)."""
    from .build import compile_once, cuda_arch

    arch = cuda_arch()
    key = (n, dtype, k, first, arch, *(cfg[name] for name in ("block_p", "block_n", "threads", "stages", "aligned")))
    return compile_once(_BUILT, _LOCK, key, lambda: program(n, dtype, k, first, cfg["aligned"], arch),
                        {name: cfg[name] for name in ("block_p", "block_n", "threads", "stages")})
