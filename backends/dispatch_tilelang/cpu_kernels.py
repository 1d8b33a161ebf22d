"""Row softmax / log_softmax / logsumexp written in TileLang's CPU dialect, compiled for ``target="c"``.

One program factory per (op, row length, dtypes, tile_n). The returned ``@tilelang.jit``
program takes the single tunable ``block_m`` (rows per tile program); everything else is
fixed when the factory runs:

* ``tile_n == 0`` (or ``tile_n >= n_cols``): the whole row sits in one local tile and is read
  once;
* ``0 < tile_n < n_cols``: the row is walked in ``tile_n`` chunks with the online max/sum
  recurrence, then read a second time to write the output.

The CPU dialect has no threads: ``T.Parallel`` over local buffers is rejected, so the loops are
``T.serial``/``T.grid`` and the reductions are ``T.reduce_*`` over ``T.alloc_local`` buffers
(fragments need a thread layout). The number of rows ``M`` is dynamic; ``N`` is static.
bf16 is stored as int16 bit patterns (see ``_numerics``), since the C codegen has no bf16 type.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations, which
# name closure variables (shapes, dtypes), so they must stay real objects.

import functools

import tilelang
import tilelang.cpu.language as T

from ._numerics import (
    F32,
    bf16_bits_to_f32,
    f32_to_bf16_bits,
    log_sum,
    logsumexp_value,
    neg_inf,
    rescale,
    safe_max,
    softmax_scale,
)

# gcc without -O is several times slower; no -ffast-math: it would fold the inf/NaN tests away.
_COMPILE_FLAGS = ["-O2"]


def storage_dtype(dtype: str) -> str:
    """The dtype a tensor of ``dtype`` has inside a C-target kernel (bf16 travels as int16)."""
    return "int16" if dtype == "bfloat16" else dtype


def _load(v, dtype: str):
    return bf16_bits_to_f32(v) if dtype == "bfloat16" else T.cast(v, F32)


def _store(f, dtype: str):
    return f32_to_bf16_bits(f) if dtype == "bfloat16" else T.cast(f, dtype)


@functools.lru_cache(maxsize=None)
def program(op: str, n_cols: int, in_dtype: str, out_dtype: str, tile_n: int):
    """The ``@tilelang.jit`` program (tunable ``block_m``) for one kernel family on the C target."""
    N = n_cols
    TILE = N if tile_n <= 0 or tile_n >= N else tile_n
    NT = (N + TILE - 1) // TILE
    x_store = storage_dtype(in_dtype)
    y_store = storage_dtype(out_dtype)
    lse = op == "logsumexp"
    log = op == "log_softmax"

    @tilelang.jit(target="c", out_idx=[1], compile_flags=_COMPILE_FLAGS)
    def cpu_rowwise(block_m):
        M = T.dynamic("m")
        y_shape = (M,) if lse else (M, N)

        @T.prim_func
        def main(x: T.Tensor((M, N), x_store), y: T.Tensor(y_shape, y_store)):
            with T.Kernel(T.ceildiv(M, block_m)) as bx:
                xt = T.alloc_local((block_m, TILE), F32)
                et = T.alloc_local((block_m, TILE), F32)
                m = T.alloc_local((block_m,), F32)
                s = T.alloc_local((block_m,), F32)
                tm = T.alloc_local((block_m,), F32)
                ts = T.alloc_local((block_m,), F32)
                shift = T.alloc_local((block_m,), F32)
                fin = T.alloc_local((block_m,), F32)
                for i in T.serial(block_m):
                    m[i] = neg_inf()
                    s[i] = 0.0
                    shift[i] = 0.0

                # Pass 1: running max and sum of exp(x - safe(max)) over the tiles.
                for t in T.serial(NT):
                    for i, j in T.grid(block_m, TILE):
                        xt[i, j] = T.if_then_else(
                            bx * block_m + i < M and t * TILE + j < N,
                            _load(x[bx * block_m + i, t * TILE + j], in_dtype),
                            neg_inf(),
                        )
                    if TILE > 1:
                        T.reduce_max(xt, tm, dim=1)
                        for i in T.serial(block_m):
                            tm[i] = T.max(m[i], tm[i])
                    else:  # (a reduction over one column, then a read of its result, compiles to a read of
                        # the value from before the reduction when block_m is 1 too)
                        for i in T.serial(block_m):
                            tm[i] = T.max(m[i], xt[i, 0])
                    for i in T.serial(block_m):
                        ts[i] = safe_max(tm[i])
                    for i, j in T.grid(block_m, TILE):
                        et[i, j] = T.exp(xt[i, j] - ts[i])
                    if TILE > 1:
                        T.reduce_sum(et, fin, dim=1)
                    else:
                        for i in T.serial(block_m):
                            fin[i] = et[i, 0]
                    for i in T.serial(block_m):
                        s[i] = rescale(s[i], shift[i], ts[i]) + fin[i]
                        m[i] = tm[i]
                        shift[i] = ts[i]

                # Pass 2: the output (re-reading x only when the row took more than one tile).
                if lse:
                    for i in T.serial(block_m):
                        if bx * block_m + i < M:
                            y[bx * block_m + i] = _store(logsumexp_value(m[i], s[i]), out_dtype)
                else:
                    for i in T.serial(block_m):
                        fin[i] = log_sum(m[i], s[i]) if log else softmax_scale(m[i], s[i])
                    for t in T.serial(NT):
                        if NT > 1:
                            for i, j in T.grid(block_m, TILE):
                                xt[i, j] = T.if_then_else(
                                    bx * block_m + i < M and t * TILE + j < N,
                                    _load(x[bx * block_m + i, t * TILE + j], in_dtype),
                                    neg_inf(),
                                )
                        for i, j in T.grid(block_m, TILE):
                            if bx * block_m + i < M and t * TILE + j < N:
                                if log:
                                    y[bx * block_m + i, t * TILE + j] = _store((xt[i, j] - shift[i]) - fin[i],
                                                                               out_dtype)
                                elif NT > 1:
                                    y[bx * block_m + i, t * TILE + j] = _store(T.exp(xt[i, j] - shift[i]) * fin[i], out_dtype)
                                else:
                                    y[bx * block_m + i, t * TILE + j] = _store(et[i, j] * fin[i], out_dtype)

        return main

    return cpu_rowwise
