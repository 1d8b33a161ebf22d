"""rms_norm and layer_norm forward as TileLang programs: the C target (CPU dialect) and CUDA.

One program factory per (op, N, dtype, weight/bias present, eps, family). Each program takes
``x (M, N)``, ``w (N,)``, ``b (N,)`` and returns ``y (M, N)`` in x's dtype; ``M`` is dynamic. An
absent weight or bias is a build-time choice (the program never reads it; the caller passes a
cached placeholder of shape (N,)). eps is a compile-time constant.

Statistics are shifted: ``d = x - shift`` (layer_norm: the mean of the row's first 32 elements
on the C target, of its first chunk in ``cuda_chunked_program``, so that rows far from zero give
small numbers and one massive element moves the shift by a fraction of its size; 0 for rms_norm);
mean = shift + sum d / N. Rows held in registers (CUDA) take the two-pass variance; the others
``sum d^2 / N - (sum d / N)^2``, whose cancellation the shift bounds (a chunk's mean: (mean -
shift)^2 is at most N / tile_n times the variance) and the C target's float64 sums absorb (its
reductions are sequential, so in fp32 a massive first element would swallow the rest).
``y = (x - mean) * rstd [* w] [+ b]``, rounded once.

* C target (``cpu_program``): tunable ``block_m`` (rows per program); build key ``tile_n``:
  0 holds a whole row in a local tile (read once), otherwise the row is walked in ``tile_n``
  chunks twice. bf16 travels as int16 bit patterns (the C codegen has no bf16).
* CUDA (``cuda_program``): tunables ``block_m`` and ``threads``; the whole row in registers
  (``threads // block_m`` threads per row, N up to 32 values per thread), read once, written once.
* CUDA, longer rows (``cuda_chunked_program``): a CTA per row (``block_m`` 1, tunable ``threads``)
  walks it in chunks of ``tile_n`` (build key) twice: the statistics, then the output, newest
  chunks first, so that the second read mostly hits L2.

``row_stride`` (every program; 0: dense rows): rows ``row_stride`` elements apart (a slice
``x[:, :N]`` of wider rows), read in place through a strided view; y is dense.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

import functools

import tilelang
import tilelang.language as T

from ._numerics import F32, bf16_bits_to_f32, f32_to_bf16_bits, nonneg

_COMPILE_FLAGS = ["-O2"]  # no -ffast-math: keep IEEE semantics
MAX_FP32_PER_THREAD = 32  # CUDA register budget per thread (as the softmax kernels)


def storage_dtype(dtype: str, target: str) -> str:
    """The dtype a ``dtype`` tensor has inside a kernel of ``target`` (bf16 as int16 on "c")."""
    return "int16" if target == "c" and dtype == "bfloat16" else dtype


def _load(v, dtype: str, target: str):
    return bf16_bits_to_f32(v) if target == "c" and dtype == "bfloat16" else T.cast(v, F32)


def _store(f, dtype: str, target: str):
    return f32_to_bf16_bits(f) if target == "c" and dtype == "bfloat16" else T.cast(f, dtype)


def _affine(v, w, b, j, has_weight: bool, has_bias: bool):
    """``v [* w[j]] [+ b[j]]`` in fp32 (the CUDA programs' output expression; absent ones are left out)."""
    if has_weight:
        v = v * T.cast(w[j], F32)
    if has_bias:
        v = v + T.cast(b[j], F32)
    return v


def x_type(T, M, N, dtype: str, row_stride: int):
    """The input's annotation: dense (M, N) rows, or rows ``row_stride`` apart."""
    return T.StridedTensor((M, N), (row_stride, 1), dtype) if row_stride else T.Tensor((M, N), dtype)


@functools.lru_cache(maxsize=None)
def cpu_program(op: str, n_cols: int, dtype: str, has_weight: bool, has_bias: bool, eps: float, tile_n: int,
                row_stride: int = 0):
    """The ``@tilelang.jit`` C-target program (tunable ``block_m``) of one family."""
    import tilelang.cpu.language as T

    N = n_cols
    SX = row_stride
    TILE = N if tile_n <= 0 or tile_n >= N else tile_n
    NT = (N + TILE - 1) // TILE
    HEAD = min(N, 32)  # layer_norm's shift: the mean of the row's first HEAD elements
    ACC = "float64"  # the statistics' sums: sequential on the C target (no tree), and one-pass
    xs = storage_dtype(dtype, "c")
    rms = op == "rms_norm"

    @tilelang.jit(target="c", out_idx=[3], compile_flags=_COMPILE_FLAGS)
    def cpu_norm(block_m):
        M = T.dynamic("m")
        X = x_type(T, M, N, xs, SX)

        @T.prim_func
        def main(x: X, w: T.Tensor((N,), xs), b: T.Tensor((N,), xs), y: T.Tensor((M, N), xs)):
            with T.Kernel(T.ceildiv(M, block_m)) as bx:
                dt = T.alloc_local((block_m, TILE), ACC)
                sq = T.alloc_local((block_m, TILE), ACC)
                part = T.alloc_local((block_m,), ACC)
                part2 = T.alloc_local((block_m,), ACC)
                s1 = T.alloc_local((block_m,), ACC)
                s2 = T.alloc_local((block_m,), ACC)
                shift = T.alloc_local((block_m,), ACC)
                off = T.alloc_local((block_m,), ACC)
                rstd = T.alloc_local((block_m,), ACC)
                yv = T.alloc_local((block_m, TILE), F32)
                for i in T.serial(block_m):
                    s1[i] = 0.0
                    s2[i] = 0.0
                    shift[i] = 0.0
                    if not rms:
                        if bx * block_m + i < M:
                            for k in T.serial(HEAD):
                                shift[i] += T.cast(_load(x[bx * block_m + i, k], dtype, "c"), ACC)
                            shift[i] = shift[i] / T.float64(HEAD)
                for t in T.serial(NT):
                    for i, j in T.grid(block_m, TILE):
                        dt[i, j] = T.if_then_else(
                            bx * block_m + i < M and t * TILE + j < N,
                            T.cast(_load(x[bx * block_m + i, t * TILE + j], dtype, "c"), ACC) - shift[i],
                            T.float64(0))
                    for i, j in T.grid(block_m, TILE):
                        sq[i, j] = dt[i, j] * dt[i, j]
                    T.reduce_sum(dt, part, dim=1)
                    T.reduce_sum(sq, part2, dim=1)
                    for i in T.serial(block_m):
                        s1[i] += part[i]
                        s2[i] += part2[i]
                for i in T.serial(block_m):
                    off[i] = T.float64(0) if rms else s1[i] / T.float64(N)  # mean - shift
                    rstd[i] = T.float64(1) / T.sqrt(nonneg(s2[i] / T.float64(N) - off[i] * off[i]) + T.float64(eps))
                for t in T.serial(NT):
                    if NT > 1:
                        for i, j in T.grid(block_m, TILE):
                            dt[i, j] = T.if_then_else(
                                bx * block_m + i < M and t * TILE + j < N,
                                T.cast(_load(x[bx * block_m + i, t * TILE + j], dtype, "c"), ACC) - shift[i],
                                T.float64(0))
                    for i, j in T.grid(block_m, TILE):
                        if bx * block_m + i < M and t * TILE + j < N:
                            yv[i, j] = T.cast((dt[i, j] - off[i]) * rstd[i], F32)
                            if has_weight:
                                yv[i, j] = yv[i, j] * _load(w[t * TILE + j], dtype, "c")
                            if has_bias:
                                yv[i, j] = yv[i, j] + _load(b[t * TILE + j], dtype, "c")
                            y[bx * block_m + i, t * TILE + j] = _store(yv[i, j], dtype, "c")

        return main

    return cpu_norm


def cuda_check(n_cols: int, block_m: int, threads: int) -> str | None:
    """Why (block_m, threads) cannot hold rows of ``n_cols`` in registers, or None."""
    if threads % 32 or not 32 <= threads <= 1024:
        return f"threads must be a multiple of 32 in [32, 1024] (got {threads})"
    if block_m < 1 or threads % block_m or (threads // block_m) & (threads // block_m - 1):
        return f"threads // block_m must be a power of two (got threads={threads}, block_m={block_m})"
    tpr = threads // block_m
    if -(-n_cols // tpr) > MAX_FP32_PER_THREAD:
        return (f"{-(-n_cols // tpr)} values per thread exceed the register budget of {MAX_FP32_PER_THREAD}; "
                "use more threads per row")
    return None


@functools.lru_cache(maxsize=None)
def cuda_program(op: str, n_cols: int, dtype: str, has_weight: bool, has_bias: bool, eps: float,
                 arch: str | None = None, row_stride: int = 0):
    """The ``@tilelang.jit`` CUDA program (tunables ``block_m``, ``threads``): whole rows in registers."""
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}
    N = n_cols
    SX = row_stride
    rms = op == "rms_norm"

    @tilelang.jit(target=target, out_idx=[3])
    def cuda_norm(block_m, threads):
        reason = cuda_check(N, block_m, threads)
        if reason is not None:
            raise ValueError(reason)
        tpr = threads // block_m
        TILE = -(-N // tpr) * tpr
        M = T.dynamic("m")
        X = x_type(T, M, N, dtype, SX)

        @T.prim_func
        def main(x: X, w: T.Tensor((N,), dtype), b: T.Tensor((N,), dtype), y: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
                xf = T.alloc_fragment((block_m, TILE), F32)
                sq = T.alloc_fragment((block_m, TILE), F32)
                s1 = T.alloc_fragment((block_m,), F32)
                s2 = T.alloc_fragment((block_m,), F32)
                mean = T.alloc_fragment((block_m,), F32)
                rstd = T.alloc_fragment((block_m,), F32)
                for i, j in T.Parallel(block_m, TILE):
                    xf[i, j] = T.if_then_else(bx * block_m + i < M and j < N, T.cast(x[bx * block_m + i, j], F32), 0.0)
                if rms:
                    for i in T.Parallel(block_m):
                        mean[i] = 0.0
                else:
                    T.reduce_sum(xf, s1, dim=1)
                    for i in T.Parallel(block_m):
                        mean[i] = s1[i] / T.float32(N)
                for i, j in T.Parallel(block_m, TILE):
                    sq[i, j] = T.if_then_else(j < N, (xf[i, j] - mean[i]) * (xf[i, j] - mean[i]), 0.0)
                T.reduce_sum(sq, s2, dim=1)
                for i in T.Parallel(block_m):
                    rstd[i] = T.rsqrt(s2[i] / T.float32(N) + T.float32(eps))
                for i, j in T.Parallel(block_m, TILE):
                    if bx * block_m + i < M and j < N:
                        y[bx * block_m + i, j] = T.cast(
                            _affine((xf[i, j] - mean[i]) * rstd[i], w, b, j, has_weight, has_bias), dtype)

        return main

    return cuda_norm


def chunked_check(tile_n: int, block_m: int, threads: int) -> str | None:
    """Why (block_m, threads) cannot walk rows in chunks of ``tile_n``, or None."""
    if block_m != 1:
        return f"a CTA walks one row: block_m must be 1 (got {block_m})"
    if threads % 32 or not 32 <= threads <= 1024:
        return f"threads must be a multiple of 32 in [32, 1024] (got {threads})"
    if tile_n % threads or tile_n // threads > MAX_FP32_PER_THREAD:
        return (f"a chunk of {tile_n} must be a multiple of threads ({threads}) with at most "
                f"{MAX_FP32_PER_THREAD} values per thread")
    return None


@functools.lru_cache(maxsize=None)
def cuda_chunked_program(op: str, n_cols: int, dtype: str, has_weight: bool, has_bias: bool, eps: float,
                         tile_n: int, arch: str | None = None, row_stride: int = 0):
    """The ``@tilelang.jit`` CUDA program for rows longer than a CTA's registers (tunables
    ``block_m``, which must be 1, and ``threads``): a CTA per row, the row walked in ``tile_n`` chunks
    twice (shifted sums, then the output, last chunk first). layer_norm's shift is the mean of the
    row's first chunk (read once more for it)."""
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}
    N = n_cols
    SX = row_stride
    TILE = tile_n
    NT = (N + TILE - 1) // TILE
    rms = op == "rms_norm"

    @tilelang.jit(target=target, out_idx=[3])
    def cuda_norm_chunked(block_m, threads):
        reason = chunked_check(TILE, block_m, threads)
        if reason is not None:
            raise ValueError(reason)
        M = T.dynamic("m")
        X = x_type(T, M, N, dtype, SX)

        @T.prim_func
        def main(x: X, w: T.Tensor((N,), dtype), b: T.Tensor((N,), dtype), y: T.Tensor((M, N), dtype)):
            with T.Kernel(M, threads=threads) as bx:
                xf = T.alloc_fragment((1, TILE), F32)
                sq = T.alloc_fragment((1, TILE), F32)
                p1 = T.alloc_fragment((1,), F32)
                p2 = T.alloc_fragment((1,), F32)
                s1 = T.alloc_fragment((1,), F32)
                s2 = T.alloc_fragment((1,), F32)
                shift = T.alloc_fragment((1,), F32)
                off = T.alloc_fragment((1,), F32)
                rstd = T.alloc_fragment((1,), F32)
                for i in T.Parallel(1):
                    s1[i] = 0.0
                    s2[i] = 0.0
                if rms:
                    for i in T.Parallel(1):
                        shift[i] = 0.0
                else:  # the shift: the mean of the row's first chunk (a reduction, not a lone load of
                    # x[row, 0]: a scalar access beside the chunk loads fails to lower at odd N)
                    for i, j in T.Parallel(1, TILE):
                        xf[i, j] = T.if_then_else(j < N, T.cast(x[bx, j], F32), 0.0)
                    T.reduce_sum(xf, p1, dim=1)
                    for i in T.Parallel(1):
                        shift[i] = p1[i] / T.float32(min(TILE, N))
                for t in T.serial(NT):
                    for i, j in T.Parallel(1, TILE):
                        xf[i, j] = T.if_then_else(t * TILE + j < N, T.cast(x[bx, t * TILE + j], F32) - shift[i], 0.0)
                    for i, j in T.Parallel(1, TILE):
                        sq[i, j] = xf[i, j] * xf[i, j]
                    T.reduce_sum(xf, p1, dim=1)
                    T.reduce_sum(sq, p2, dim=1)
                    for i in T.Parallel(1):
                        s1[i] += p1[i]
                        s2[i] += p2[i]
                if rms:
                    for i in T.Parallel(1):
                        off[i] = 0.0
                        rstd[i] = T.rsqrt(s2[i] / T.float32(N) + T.float32(eps))
                else:
                    for i in T.Parallel(1):
                        off[i] = s1[i] / T.float32(N)  # mean - shift
                        rstd[i] = T.rsqrt(nonneg(s2[i] / T.float32(N) - off[i] * off[i]) + T.float32(eps))
                for t in T.serial(NT):
                    c = NT - 1 - t  # newest chunks first: the likeliest L2 hits
                    for i, j in T.Parallel(1, TILE):
                        if c * TILE + j < N:
                            y[bx, c * TILE + j] = T.cast(
                                _affine((T.cast(x[bx, c * TILE + j], F32) - shift[i] - off[i]) * rstd[i], w, b,
                                        c * TILE + j, has_weight, has_bias), dtype)

        return main

    return cuda_norm_chunked
