"""Rows off the 16-byte grid, read and written 16 bytes at a time (the row kernel's ``ALIGN``).

A row whose stride is not a multiple of 16 bytes (an odd length such as a 50257-word vocabulary,
rows of a contiguous tensor one odd length apart) starts off the 16-byte grid, so a chunk of
columns ``c * BLOCK_N + arange(BLOCK_N)`` can only be loaded and stored an element at a time (on
an H200 a fifth more instructions per element in the split paths, and no 16-byte accesses).
With ``ALIGN`` a program's *window* is its chunk moved back by the row's misalignment ``a`` (the
elements between the grid line before the row and its start): columns ``first + arange(BLOCK_N)``
with ``first = c * BLOCK_N - a``, which start on the grid. The window is taken as ``[BLOCK_N // V,
V]`` groups of 16 bytes (``V`` elements); a mask constant over each group lets the compiler use one
16-byte access per group: the groups lying wholly inside the row are loaded and stored that way,
and the row's first and last groups, which straddle its ends, are read and written element by
element (``_edges``: a ``[2 * V]`` tile) by the program whose window holds them. Nothing outside
the row is read or written.

The windows of a row cover columns ``[-a, n_split * BLOCK_N - a)``: the launcher uses ``ALIGN``
only where the last chunk has ``V - 1`` columns to spare, so they cover the row whatever ``a``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _window(row, stride, c, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # chunk c of a row: the row's offset, its misalignment a (elements) and the window's first
    # element (on the grid when the tensor's pointer is)
    off = tl.cast(row, tl.int64) * stride
    base = (off // V) * V  # a multiple of V the compiler sees as one (a hint alone folds away when c is 0)
    return off, off - base, tl.multiple_of(base + c * BLOCK_N, V)


@triton.jit
def _groups(first, lim, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # the window's element offsets as [groups, V] and the groups wholly inside columns [0, lim)
    g = tl.arange(0, BLOCK_N // V)
    gs = first + g * V
    inner = ((gs >= 0) & (gs + V <= lim))[:, None]
    return (g * V)[:, None] + tl.arange(0, V)[None, :], inner


@triton.jit
def _load_window(ptr, start, first, lim, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # the window's whole groups inside the row (-inf elsewhere), flat: [BLOCK_N]
    offs, inner = _groups(first, lim, BLOCK_N, V)
    x = tl.load(ptr + start + offs, mask=inner, other=float("-inf"), eviction_policy="evict_first")
    return tl.reshape(x, [BLOCK_N])


@triton.jit
def _store_window(ptr, start, first, lim, y, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # y (flat, the window's order) into the window's whole groups inside the row
    offs, inner = _groups(first, lim, BLOCK_N, V)
    tl.store(ptr + start + offs, tl.reshape(y, [BLOCK_N // V, V]), mask=inner, eviction_policy="evict_first")


@triton.jit
def _edges(a, first, lim, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # the columns of the row's first and last groups where they straddle its ends ([2 * V]: the
    # first group, then the last) and which of them are in the row and in this window
    q = tl.arange(0, 2 * V)
    last = ((lim - 1 + a) // V) * V - a
    last = tl.where(last == -a, -2 * V, last)  # one group straddling both ends: taken once (as the first)
    gs = tl.where(q < V, -a, last)
    cols = gs + q % V
    real = ((gs < 0) | (gs + V > lim)) & (gs >= first) & (gs < first + BLOCK_N) & (cols >= 0) & (cols < lim)
    return cols, real


@triton.jit
def _read_window(ptr, row, stride, c, lim, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # chunk c of a row of lim elements through its window: the window's whole groups (-inf
    # elsewhere, flat) and the row's straddling groups ([2 * V], -inf where not this window's)
    off, a, start = _window(row, stride, c, BLOCK_N, V)
    first = c * BLOCK_N - a
    ecols, real = _edges(a, first, lim, BLOCK_N, V)
    xe = tl.load(ptr + off + ecols, mask=real, other=float("-inf"), eviction_policy="evict_first")
    return _load_window(ptr, start, first, lim, BLOCK_N, V), xe


@triton.jit
def _write_window(ptr, row, stride, c, lim, y, ye, BLOCK_N: tl.constexpr, V: tl.constexpr):
    # chunk c's window y and the row's straddling groups ye (as _read_window read them) into the row
    off, a, start = _window(row, stride, c, BLOCK_N, V)
    first = c * BLOCK_N - a
    ecols, real = _edges(a, first, lim, BLOCK_N, V)
    _store_window(ptr, start, first, lim, y, BLOCK_N, V)
    tl.store(ptr + off + ecols, ye, mask=real, eviction_policy="evict_first")
