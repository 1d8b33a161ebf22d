"""Partials exchanged between the programs of one Triton launch: tickets and epoch-tagged words.

The split paths of the row kernels (:mod:`dispatch_triton.jit`) and the one-launch norm paths
(:mod:`dispatch_triton.norm_kernels`, :mod:`dispatch_triton.norm_backward_kernels`) cut a row into
chunks held by a group of programs, which must meet: each publishes its chunk's partials and waits
for the others'.

Words: a partial is published as a 64-bit word ``(tag << 32 | fp32 bits)`` with a relaxed atomic
exchange and read back with volatile loads until every word of the row carries the launch's tag:
no fence, no counter, one L2 round trip when the others are on time. ``_publish`` sends a
(max, sum) pair as two scalar exchanges; ``_publish_words`` sends a chunk's partials in one
vector exchange and ``_await_words`` reads a row's block of them with one vector load a try (on
an H200 that took 2-14% off layer_norm's long-row backward against one scalar exchange a word).
The tag is an epoch kept on the device: word 0 of the slot buffer is ``(epoch << 32 | ticket)``;
the last ticket of a launch resets the ticket and moves the epoch on in one atomic add, so words
left by earlier launches (or by another config) never count; the host (:mod:`dispatch_triton.launch`)
zeroes the buffer every 2^30 launches, long before a 31-bit tag could come round again.

Co-residency: a group's programs wait for each other, so a program takes a *ticket* (that
atomic word, taken in dispatch order) that decides its group. Every ticket below the highest
taken belongs to a program that is running or done, so only the group holding the highest
ticket can wait on programs not yet resident, and it gets them as soon as any other program
exits, provided the device can hold a group's programs at once (the host sizes the grid so).
"""

from __future__ import annotations

import triton
import triton.language as tl

_MAXS = tl.constexpr(128)  # the most partials of one row that _await_pairs reads


@triton.jit
def _ticket(slot_ptr, nprog):
    # (ticket, tag) of this program in a launch of exchanging groups. One 64-bit word holds
    # (epoch << 32 | ticket); tickets come in dispatch order and decide the group (see the module
    # docstring); the last one resets the ticket and moves the epoch on, atomically, for the
    # next launch. The tag (31 bits, never 0) marks this launch's partials.
    word = tl.atomic_add(slot_ptr, 1, sem="relaxed")
    tid = (word & 0xFFFFFFFF).to(tl.int32)
    if tid == nprog - 1:
        tl.atomic_add(slot_ptr, (1 << 32) - nprog.to(tl.int64), sem="relaxed")
    return tid, ((word >> 32) % 0x7FFFFFFF) + 1


@triton.jit
def _publish_words(slot_ptr, idx, v, k, tag):
    # fp32 values v (lanes k = 0, 1, ...) as tagged words at idx + k, in ONE vector exchange
    tl.atomic_xchg(slot_ptr + idx + k, (tag << 32) | v.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")


@triton.jit
def _publish(slot_ptr, idx, m_c, s_c, tag):
    # a partial as two self-validating 64-bit words (tag << 32 | fp32 bits): no fence, no counter
    hi = tag << 32
    tl.atomic_xchg(slot_ptr + idx, hi | m_c.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")
    tl.atomic_xchg(slot_ptr + idx + 1, hi | s_c.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")


@triton.jit
def _await_words(slot_ptr, base, n, tag, W: tl.constexpr, P2: tl.constexpr):
    # wait until the n groups of W words from base (a row's partials, group j at base + j * W) carry
    # this launch's tag, one vector load of the whole block a try: their fp32 values [P2, W] (0
    # past n) and the mask of the live groups
    j = tl.arange(0, P2)
    jm = j < n
    k = tl.arange(0, W)
    live = jm[:, None] & (k >= 0)[None, :]
    p = slot_ptr + base + j[:, None] * W + k[None, :]
    v = tl.load(p, mask=live, other=0, volatile=True)
    bad = tl.sum(tl.sum((live & ((v >> 32) != tag)).to(tl.int32), 1), 0)
    while bad > 0:
        v = tl.load(p, mask=live, other=0, volatile=True)
        bad = tl.sum(tl.sum((live & ((v >> 32) != tag)).to(tl.int32), 1), 0)
    return (v & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True), jm


@triton.jit
def _await_pairs(slot_ptr, base, n_split, tag):
    # wait until the n_split pairs of words at base (partials of a row) carry this launch's tag:
    # their fp32 values (a, b) and the mask of the live lanes (a and b are 0 past n_split)
    j = tl.arange(0, _MAXS)
    jm = j < n_split
    p = slot_ptr + base + j * 2
    va = tl.load(p, mask=jm, other=0, volatile=True)
    vb = tl.load(p + 1, mask=jm, other=0, volatile=True)
    bad = tl.sum((jm & (((va >> 32) != tag) | ((vb >> 32) != tag))).to(tl.int32), 0)
    while bad > 0:
        va = tl.load(p, mask=jm, other=0, volatile=True)
        vb = tl.load(p + 1, mask=jm, other=0, volatile=True)
        bad = tl.sum((jm & (((va >> 32) != tag) | ((vb >> 32) != tag))).to(tl.int32), 0)
    a = (va & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
    b = (vb & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
    return a, b, jm
