"""Scalar TileLang expressions shared by the CPU and CUDA kernels: special values and torch's edge cases.

Every helper here runs at trace time and returns a ``PrimExpr``; none of them is a kernel.
They are plain module-level functions (not closures), so a ``@tilelang.jit`` program that
calls them keeps closure cells that TileLang's autotuner can serialize.

Edge cases follow torch exactly (checked against ``torch.softmax`` / ``log_softmax`` /
``logsumexp`` on CPU):

==========================  =======================  ===========
row contains                softmax, log_softmax     logsumexp
==========================  =======================  ===========
a NaN                       all NaN                  NaN
a +inf (no NaN)             all NaN                  +inf
only -inf                   all NaN                  -inf
==========================  =======================  ===========

The kernels keep, per row, the running maximum ``m`` and the sum ``s`` of
``exp(x - safe(m))`` where ``safe(m) = 0`` when ``m`` is infinite (torch's own trick in
``logsumexp``). That keeps an all ``-inf`` prefix of a row from poisoning the online
recurrence with ``-inf - -inf``, and the final formulas below reproduce the table.
"""

from __future__ import annotations

import tilelang.language as T

F32 = "float32"


def neg_inf():
    """-inf as a float32 expression."""
    return -T.infinity(F32)


def pos_inf():
    """+inf as a float32 expression."""
    return T.infinity(F32)


def nan():
    """A quiet NaN as a float32 expression (``NAN`` in the C code, ``CUDART_NAN_F`` in CUDA)."""
    return T.float32(float("nan"))


LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def exp_fast(v):
    """``exp(v)`` as ``exp2(v * log2 e)``: on CUDA a multiply and one ``ex2.approx`` (~2 ulp) instead of
    ``expf``'s ~10 instructions, which bf16 rows at HBM speed cannot afford. exp2(-inf) = 0,
    exp2(+inf) = inf and NaN stays NaN, so the edge-case table holds."""
    return T.exp2(v * T.float32(LOG2E))


def log2_shift(shift):
    """``shift * log2 e`` for the shared-memory kernels' :func:`exp_shifted`, rounded by an IEEE
    multiply, which the compiler never fuses into a later add: the same number wherever it is
    taken, so that its rounding cancels between a row's sum and its output."""
    return T.ieee_mul(shift, T.float32(LOG2E))


def exp_shifted(v, shl):
    """``exp(v - shift)`` as ``exp2(v * log2 e - shl)``, ``shl`` the shift's :func:`log2_shift`: one
    fused multiply-add and one ``ex2`` (:func:`exp_fast` of ``v - shift`` takes a subtraction, a
    multiply and the ``ex2``)."""
    return T.exp2(v * T.float32(LOG2E) - shl)


# 2^f on [-1/2, 1/2], degree 4, fitted to the relative error: at most 2.7e-6 (about 22 float32 ulps;
# a bf16 output's rounding is 2e-3, an fp16 one's 4.9e-4)
EXP2_POLY = (0.9999991908565837, 0.6931219676960609, 0.24024981109537308, 0.05591703917486888,
             0.009560510206481784)
_ROUND = 12582912.0  # 1.5 * 2^23: t + _ROUND holds round(t) in its low mantissa bits, for |t| < 2^22
_ROUND_BITS = 0x4B400000  # _ROUND's bits


def exp2_poly(t):
    """``2^t`` for ``t <= 0`` (up to a rounding above 0) on the FMA and integer pipes, with no
    ``ex2``: ``t`` = n + f with n = round(t), 2^f by :data:`EXP2_POLY` and 2^n put together in the
    exponent bits. A kernel that takes two exponentials an element at HBM speed (softmax of bf16
    rows: the sum's and the output's) can give one of them to this and halve its ``ex2``s, which
    share one unit a quarter of the FMA pipes' width. ``t`` below -127 (``-inf`` too) gives 0 exactly;
    NaN gives 0 (a row holding a NaN has a NaN sum, which makes its outputs NaN). Its IEEE adds and
    bit casts are not vectorized: take it on registers (a fragment), not on a vectorized load."""
    c = T.max(t, T.float32(-127.0))
    y = T.ieee_add(c, T.float32(_ROUND), "rn")  # (IEEE adds: a simplifier would take (c + R) - R for c)
    f = T.ieee_sub(c, T.ieee_sub(y, T.float32(_ROUND), "rn"), "rn")
    p = T.float32(EXP2_POLY[4])
    for k in (3, 2, 1, 0):
        p = p * f + T.float32(EXP2_POLY[k])
    bits = T.shift_left(T.reinterpret("int32", y) - T.int32(_ROUND_BITS - 127), T.int32(23))
    return p * T.reinterpret("float32", bits)


def exp_shifted_poly(v, shl):
    """:func:`exp_shifted` by :func:`exp2_poly`: ``exp(v - shift)`` with no ``ex2``."""
    return exp2_poly(v * T.float32(LOG2E) - shl)


def shift_residual(shift, shl):
    """``shift * log2 e - shl`` in natural-log units, exact (one fused multiply-add): what the rounding
    of ``shl``, the shift's :func:`log2_shift`, puts into every exponent that :func:`exp_shifted`
    takes. A softmax divides it out with the sum; log_softmax and logsumexp take it off the log of
    the sum (:func:`log_sum_shifted`, :func:`logsumexp_shifted`): up to 1.4e-3 for rows about 3e4."""
    return T.ieee_fmaf(shift, T.float32(LOG2E), -shl) * T.float32(LN2)


def rescale_log2(s_old, shl_old, shl_new):
    """:func:`rescale` of a sum taken by :func:`exp_shifted`: its shifts as :func:`log2_shift` products."""
    return T.if_then_else(s_old == T.float32(0), T.float32(0), s_old * T.exp2(shl_old - shl_new))


def kept_scale(fin, s_part, shl_part, shl_row):
    """The factor that turns a part's kept exponentials (taken at ``shl_part``, summing to ``s_part``)
    into the row's output, ``fin`` the row's (``1/sum``, NaN for a NaN row): ``fin`` carried to the
    row's shift. A part of -inf in a row whose ``fin`` is a number gets 0, not an overflowing
    factor; a NaN ``fin`` stays NaN."""
    return T.if_then_else(T.And(s_part == T.float32(0), fin > T.float32(0)), T.float32(0),
                          fin * T.exp2(shl_part - shl_row))


def is_inf(v):
    """``v`` is +inf or -inf (no ``fabs``: the C codegen cannot print it)."""
    return T.Or(v == pos_inf(), v == neg_inf())


def nonneg(v):
    """``v`` clamped at 0 from below, a NaN kept: a variance's rounding below 0 is 0, while a row
    whose variance is NaN (a NaN, or +inf and -inf, in it) stays NaN, as torch's does. ``max(v, 0)``
    would make it 0: ``fmaxf`` returns the operand that is not NaN."""
    return T.if_then_else(v < 0, T.cast(0, v.dtype), v)


def safe_max(m):
    """The shift used for ``exp``: ``m``, or 0 when ``m`` is infinite."""
    return T.if_then_else(is_inf(m), T.float32(0), m)


def rescale(s_old, shift_old, shift_new):
    """Carry a partial sum from shift ``shift_old`` to ``shift_new``; an empty (zero) sum stays 0.

    The guard matters when the old part was all ``-inf`` (shift 0, sum 0) and the new shift is
    very negative: ``exp(0 - shift_new)`` overflows and ``0 * inf`` would be NaN. A NaN sum is
    not 0, so NaN still propagates.
    """
    return T.if_then_else(s_old == T.float32(0), T.float32(0), s_old * T.exp(shift_old - shift_new))


def row_is_nan_for_softmax(m, s):
    """softmax / log_softmax of the row is all NaN: a +inf or only -inf in the row.

    TileLang's simplifier rewrites ``not (s > 0)`` into ``s <= 0``, so a NaN sum is not caught
    here; it needs no catching: ``1/s`` and ``log(s)`` are NaN already.
    """
    return T.Or(m == pos_inf(), T.Not(s > T.float32(0)))


def softmax_scale(m, s):
    """The factor ``1/s`` that turns ``exp(x - safe(m))`` into softmax, or NaN for a NaN row."""
    return T.if_then_else(row_is_nan_for_softmax(m, s), nan(), T.float32(1) / s)


def log_sum(m, s):
    """``log(s)``, NaN for a NaN row: ``(x - safe(m)) - log_sum`` is log_softmax, in torch's order
    (``x - (safe(m) + log(s))`` rounds the sum first: off by up to half an ulp of ``m``, 3e-5
    where fp32 rows reach 400, three times the fp32 tolerance next to the row's max)."""
    return T.if_then_else(row_is_nan_for_softmax(m, s), nan(), T.log(s))


def log_sum_shifted(m, s, sh, shl):
    """:func:`log_sum` of a sum of :func:`exp_shifted` terms at ``shl`` (``sh``'s :func:`log2_shift`)."""
    return log_sum(m, s) - shift_residual(sh, shl)


def logsumexp_shifted(m, s, shl):
    """:func:`logsumexp_value` of a sum of :func:`exp_shifted` terms at ``shl``, the
    :func:`log2_shift` of ``safe_max(m)``."""
    return (T.log(s) - shift_residual(safe_max(m), shl)) + safe_max(m)


def logsumexp_value(m, s):
    """``log(s) + safe(m)``, which is already torch's answer for every row in the table."""
    return T.log(s) + safe_max(m)


# -- bfloat16 on the C target -----------------------------------------------------------------
# TileLang 0.1.15's C codegen cannot print a bfloat16 type ("Cannot convert type bfloat16 to C
# type"), so bf16 tensors travel as int16 bit patterns and are widened / rounded here.


def bf16_bits_to_f32(v):
    """Widen a bf16 bit pattern held in an int16 to float32 (exact)."""
    wide = T.shift_left(T.cast(T.reinterpret(v, "uint16"), "uint32"), T.uint32(16))
    return T.reinterpret(wide, F32)


def f32_to_bf16_bits(f):
    """Round float32 to bf16 (nearest, ties to even; NaN -> 0x7FC0 as torch) as an int16 pattern."""
    u = T.reinterpret(f, "uint32")
    rounded = T.shift_right(u + T.uint32(0x7FFF) + T.bitwise_and(T.shift_right(u, T.uint32(16)), T.uint32(1)), T.uint32(16))
    bits = T.if_then_else(f != f, T.uint32(0x7FC0), rounded)
    return T.reinterpret(T.cast(bits, "uint16"), "int16")
