"""softmax / log_softmax / logsumexp over a dim that is not unit-stride, in TileLang: a column per thread.

The call's plan (:func:`dispatch.backend.strided_plan`) views the input as ``outer`` slices of
``R`` x ``inner``, read in place through its strides; the output is laid out as torch's
(contiguous). A column, one ``(o, i)`` pair, is reduced by one thread (on the C target, by one
iteration of a program's column loop): ``R`` is walked in chunks of ``block_r`` values held in
registers with the online max/sum recurrence, then read once more to write the output (from the
registers, without a second read, when ``R`` fits one chunk). Consecutive threads take
consecutive columns, so a warp's loads are coalesced when ``inner`` is the unit-stride dim.

The plan's sizes and strides are compile-time constants (a kernel per layout, as a call key is).
Offsets are 32-bit: an input or output spanning 2**31 elements or more is refused.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.

import functools

import tilelang

from ._numerics import F32, log_sum, logsumexp_value, neg_inf, rescale, safe_max, softmax_scale

MAX_SPAN = 2**31 - 1
BLOCK_RS = (8, 16, 32)
THREADS = (128, 256)


def span(sizes, strides) -> int:
    """Elements from a view's first to its last, plus one (what a flat view of it must hold)."""
    return 1 + sum((int(n) - 1) * int(s) for n, s in zip(sizes, strides) if int(n) > 0)


def plan_key(p) -> tuple:
    """The plan as the hashable, static part of a program's key."""
    return (p.outer, p.R, p.inner, tuple(p.x_strides), tuple(p.out_strides), p.outer1, tuple(p.strides2))


def input_span(key) -> int:
    """Elements of the input's flat view for the plan ``key``."""
    outer, R, inner, (sxo, sxr, sxi), _, outer1, (sx2, _) = key
    o1 = outer1 or outer
    return span((outer // max(o1, 1), o1, R, inner), (sx2, sxo, sxr, sxi))


def _offsets(key):
    """``(x_at(o, r, i), y_at(o, r, i))``: the flat offsets of the plan ``key``."""
    outer, _, _, (sxo, sxr, sxi), (soo, sor, soi), outer1, (sx2, so2) = key
    if outer1:
        def x_at(o, r, i):
            return (o // outer1) * sx2 + (o % outer1) * sxo + r * sxr + i * sxi

        def y_at(o, r, i):
            return (o // outer1) * so2 + (o % outer1) * soo + r * sor + i * soi
    else:
        def x_at(o, r, i):
            return o * sxo + r * sxr + i * sxi

        def y_at(o, r, i):
            return o * soo + r * sor + i * soi
    return x_at, y_at


def _fold_chunk(T, v, st, n: int):
    """The online max/sum recurrence over the chunk ``v[:n]`` (a ``T.macro`` of dialect ``T``): the
    chunk's max into ``st[3]``, its sum of exp(v - safe(max)) into ``st[4]``, the running max, sum
    and shift (``st[0..2]``) carried over. One body for the CUDA and C programs."""

    @T.macro
    def fold():
        for r in T.unroll(n):
            st[3] = T.max(st[3], v[r])
        st[4] = 0.0
        for r in T.unroll(n):
            st[4] += T.exp(v[r] - safe_max(st[3]))
        st[1] = rescale(st[1], st[2], safe_max(st[3])) + st[4]
        st[0] = st[3]
        st[2] = safe_max(st[3])

    return fold


@functools.lru_cache(maxsize=None)
def program(op: str, key: tuple, in_dtype: str, out_dtype: str, target: str, block_r: int, arch: str | None = None):
    """The ``@tilelang.jit`` program of one layout: tunable ``threads`` (CUDA) or ``block_i`` (C)."""
    if target == "cuda":
        return _cuda_program(op, key, in_dtype, out_dtype, block_r, arch)
    return _c_program(op, key, in_dtype, out_dtype, block_r)


def _layout(op: str, key: tuple, BR: int) -> tuple:
    """What both programs close over: sizes, offset functions, the op's kind, the flat views'
    lengths and the chunks of R."""
    outer, R, inner = key[:3]
    lse = op == "logsumexp"
    return (outer, R, inner, *_offsets(key), lse, op == "log_softmax", max(1, input_span(key)),
            max(1, outer * inner * (1 if lse else R)), -(-R // BR))


def _cuda_program(op, key, in_dtype, out_dtype, BR, arch):
    import tilelang.language as T

    outer, R, inner, x_at, y_at, lse, log, XS, YS, NT = _layout(op, key, BR)
    target = "cuda" if arch is None else {"kind": "cuda", "arch": arch}

    @tilelang.jit(target=target, out_idx=[1])
    def cuda_strided(threads):
        @T.prim_func
        def main(x: T.Tensor((XS,), in_dtype), y: T.Tensor((YS,), out_dtype)):
            with T.Kernel(outer, T.ceildiv(inner, threads), threads=threads) as (bo, bi):
                tx = T.get_thread_binding(0)
                v = T.alloc_local((BR,), F32)
                st = T.alloc_local((5,), F32)  # running max, sum, shift; the chunk's max; the factor
                col = bi * threads + tx
                if col < inner:
                    st[0] = neg_inf()
                    st[1] = 0.0
                    st[2] = 0.0
                    for t in T.serial(NT):
                        st[3] = st[0]
                        for r in T.unroll(BR):
                            v[r] = T.if_then_else(t * BR + r < R, T.cast(x[x_at(bo, t * BR + r, col)], F32), neg_inf())
                        _fold_chunk(T, v, st, BR)()
                    if lse:
                        y[y_at(bo, 0, col)] = T.cast(logsumexp_value(st[0], st[1]), out_dtype)
                    else:
                        st[4] = log_sum(st[0], st[1]) if log else softmax_scale(st[0], st[1])
                        if NT == 1:
                            for r in T.unroll(BR):
                                if r < R:
                                    if log:
                                        y[y_at(bo, r, col)] = T.cast((v[r] - st[2]) - st[4], out_dtype)
                                    else:
                                        y[y_at(bo, r, col)] = T.cast(T.exp(v[r] - st[2]) * st[4], out_dtype)
                        else:
                            for r in T.serial(R):
                                if log:
                                    y[y_at(bo, r, col)] = T.cast(
                                        (T.cast(x[x_at(bo, r, col)], F32) - st[2]) - st[4], out_dtype)
                                else:
                                    y[y_at(bo, r, col)] = T.cast(
                                        T.exp(T.cast(x[x_at(bo, r, col)], F32) - st[2]) * st[4], out_dtype)

        return main

    return cuda_strided


def _c_program(op, key, in_dtype, out_dtype, BR):
    import tilelang.cpu.language as T

    from .cpu_kernels import _COMPILE_FLAGS, _load, _store, storage_dtype

    outer, R, inner, x_at, y_at, lse, log, XS, YS, NT = _layout(op, key, BR)
    x_store, y_store = storage_dtype(in_dtype), storage_dtype(out_dtype)

    @tilelang.jit(target="c", out_idx=[1], compile_flags=_COMPILE_FLAGS)
    def c_strided(block_i):
        @T.prim_func
        def main(x: T.Tensor((XS,), x_store), y: T.Tensor((YS,), y_store)):
            with T.Kernel(outer, T.ceildiv(inner, block_i)) as (bo, bi):
                v = T.alloc_local((BR,), F32)
                st = T.alloc_local((5,), F32)  # running max, sum, shift; the chunk's max; the factor
                for c in T.serial(block_i):
                    if bi * block_i + c < inner:
                        st[0] = neg_inf()
                        st[1] = 0.0
                        st[2] = 0.0
                        for t in T.serial(NT):
                            st[3] = st[0]
                            for r in T.serial(BR):
                                v[r] = T.if_then_else(t * BR + r < R, _load(x[x_at(bo, t * BR + r, bi * block_i + c)],
                                                                             in_dtype), neg_inf())
                            _fold_chunk(T, v, st, BR)()
                        if lse:
                            y[y_at(bo, 0, bi * block_i + c)] = _store(logsumexp_value(st[0], st[1]), out_dtype)
                        else:
                            st[4] = log_sum(st[0], st[1]) if log else softmax_scale(st[0], st[1])
                            for r in T.serial(R):
                                if log:
                                    y[y_at(bo, r, bi * block_i + c)] = _store(
                                        (_load(x[x_at(bo, r, bi * block_i + c)], in_dtype) - st[2]) - st[4], out_dtype)
                                else:
                                    y[y_at(bo, r, bi * block_i + c)] = _store(
                                        T.exp(_load(x[x_at(bo, r, bi * block_i + c)], in_dtype) - st[2]) * st[4],
                                        out_dtype)

        return main

    return c_strided
