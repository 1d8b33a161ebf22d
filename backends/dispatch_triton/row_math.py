"""Device helpers the Triton row kernels share: loads with L2 eviction hints, rounding to the output
dtype as the GPU rounds, ``exp`` (exact, or one ``ex2.approx``), and a chunk's or a row's (max, sum)
partials and their merge.

The kernels that use them: :mod:`dispatch_triton.jit` (the softmax family's rows),
:mod:`dispatch_triton.lse_chunks` (logsumexp's chunks), the norms' and the strided kernels.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import _interpreting
from .exchange import _MAXS, _await_pairs

# Under the interpreter (a compile-time False on the GPU, so its branches cost nothing there): it
# truncates fp32 -> bf16 where the GPU rounds to nearest even, so _cvt emulates the GPU; and it runs
# a reduction's combine function element by element in Python, so several sums are taken one by one
_INTERPRETED = tl.constexpr(_interpreting())

@triton.jit
def _ld(ptrs, mask, EV: tl.constexpr, other: tl.constexpr = 0.0, EVEN: tl.constexpr = False):
    # a load (``other`` where masked off; no mask with EVEN) with L2 eviction hint EV: 0 none,
    # 1 evict_first (read once), 2 evict_last (read again soon)
    if EV == 1:
        policy: tl.constexpr = "evict_first"
    elif EV == 2:
        policy: tl.constexpr = "evict_last"
    else:
        policy: tl.constexpr = ""
    if EVEN:
        v = tl.load(ptrs, eviction_policy=policy)
    else:
        v = tl.load(ptrs, mask=mask, other=other, eviction_policy=policy)
    return v


@triton.jit
def _cvt(x, TY: tl.constexpr):
    if _INTERPRETED:
        if TY == tl.bfloat16:
            xf = x.to(tl.float32)
            b = xf.to(tl.uint32, bitcast=True)
            b = b + 0x7FFF + ((b >> 16) & 1)
            r = (b & 0xFFFF0000).to(tl.float32, bitcast=True)
            x = tl.where(xf != xf, xf, r)
    return x.to(TY)


@triton.jit
def _load_raw(x_ptr, mask_ptr, xoff, moff, cols, lim, HAS_MASK: tl.constexpr, EVICT: tl.constexpr):
    # raw (uncast) values of cols < lim, and the keep-mask (x itself when there is none)
    valid = cols < lim
    x = tl.load(x_ptr + xoff + cols, mask=valid, other=float("-inf"), eviction_policy=EVICT)
    if HAS_MASK:
        keep = tl.load(mask_ptr + moff + cols, mask=valid, other=0, eviction_policy=EVICT)
    else:
        keep = x
    return x, keep


@triton.jit
def _finish_load(x, keep, HAS_MASK: tl.constexpr, OUT_TY: tl.constexpr):
    x = _cvt(x, OUT_TY).to(tl.float32)  # torch's dtype= casts the input first
    if HAS_MASK:
        x = tl.where(keep != 0, x, float("-inf"))
    return x


def fast_exp_of(config: dict) -> int:
    """A launch config's ``FAST_EXP`` (0 or 1; absent is 0), refused by name under the interpreter,
    which cannot run the inline PTX of :func:`_exp`."""
    flag = int(config.get("FAST_EXP", 0))
    if flag not in (0, 1):
        raise ValueError(f"'FAST_EXP' must be 0 or 1 (got {config['FAST_EXP']})")
    if flag and _interpreting():
        raise ValueError("'FAST_EXP' is inline PTX, which the Triton interpreter does not run: leave it out "
                         "on the CPU")
    return flag


@triton.jit
def _exp(x, FAST_EXP: tl.constexpr):
    """``exp(x)`` in fp32; with ``FAST_EXP`` one ``ex2.approx.ftz`` of ``x * log2(e)`` (results below
    2**-126 flushed to 0), where ``tl.exp`` also scales inputs whose result would be subnormal.
    Inline PTX: a GPU only (the launchers refuse it under the interpreter)."""
    if FAST_EXP:
        y = _exp2_fast(x * 1.4426950408889634)
    else:
        y = tl.exp(x)
    return y


@triton.jit
def _exp2_fast(v):
    # 2**v in one ex2.approx.ftz.f32 (inline PTX: a GPU only)
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [v], dtype=tl.float32, is_pure=True,
                                     pack=1)


@triton.jit
def _eff(m):
    # torch.logsumexp's shift: the max, or 0 where the max is infinite
    return tl.where(tl.abs(m) == float("inf"), 0.0, m)


@triton.jit
def _merge(pm, ps):
    # partials (m_i, s_i), s_i = sum exp(x - eff(m_i)) -> (M, eff(M), S = sum exp(x - eff(M)))
    big_m = tl.max(pm, 0)
    big_e = _eff(big_m)
    s = tl.sum(tl.where(ps == 0.0, 0.0, ps * tl.exp(_eff(pm) - big_e)), 0)
    return big_m, big_e, s


@triton.jit
def _combine(ws_ptr, base, n_split):
    # the partials of a row from the fp32 workspace (logsumexp's last-arriver combine)
    j = tl.arange(0, _MAXS)
    jm = j < n_split
    pm = tl.load(ws_ptr + (base + j) * 2, mask=jm, other=float("-inf"), cache_modifier=".cg")
    ps = tl.load(ws_ptr + (base + j) * 2 + 1, mask=jm, other=0.0, cache_modifier=".cg")
    return _merge(pm, ps)


@triton.jit
def _gather(slot_ptr, base, n_split, tag):
    # wait for the n_split (max, sum) partials of a row, then merge them
    pm, ps, jm = _await_pairs(slot_ptr, base, n_split, tag)
    pm = tl.where(jm, pm, float("-inf"))
    ps = tl.where(jm, ps, 0.0)
    return _merge(pm, ps)


@triton.jit
def _finish_scale(big_m, s, OP: tl.constexpr):
    # softmax/log_softmax: a row whose max is not finite is NaN throughout, as in torch
    s = tl.where(tl.abs(big_m) == float("inf"), float("nan"), s)
    if OP == 0:
        return 1.0 / s
    else:
        return tl.log(s)


@triton.jit
def _chunk_exps(x, xe, ALIGN: tl.constexpr, FAST_EXP: tl.constexpr):
    # a chunk's max m (fp32 values x, with ALIGN also the row's straddling groups xe), its finite
    # stand-in m_e, the exps about it (of x, of xe: xe itself without ALIGN) and their sum
    if ALIGN:
        m = tl.maximum(tl.max(x, 0), tl.max(xe, 0))
        m_e = _eff(m)
        e = _exp(x - m_e, FAST_EXP)
        ee = _exp(xe - m_e, FAST_EXP)
        s = tl.sum(e, 0) + tl.sum(ee, 0)
    else:
        m = tl.max(x, 0)
        m_e = _eff(m)
        e = _exp(x - m_e, FAST_EXP)
        ee = xe
        s = tl.sum(e, 0)
    return m, m_e, e, ee, s


@triton.jit
def _partial(xr, kr, er, HAS_MASK: tl.constexpr, OUT_TY, ALIGN: tl.constexpr, FAST_EXP: tl.constexpr):
    # a chunk's (max, sum of exp about it) from its raw values (_chunk_load's three)
    m, _, _, _, s = _chunk_exps(_finish_load(xr, kr, HAS_MASK, OUT_TY), _finish_load(er, er, False, OUT_TY), ALIGN,
                                FAST_EXP)
    return m, s
