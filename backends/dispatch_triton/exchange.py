"""Partials exchanged between the programs of one Triton launch: tickets and epoch-tagged words.

The split paths of the row kernels (:mod:`dispatch_triton.jit`) and the one-launch norm paths
(:mod:`dispatch_triton.norm_kernels`, :mod:`dispatch_triton.norm_backward_coop`) cut a row into
chunks held by a group of programs, which must meet: each publishes its chunk's partials and waits
for the others'.

Words: a partial is published as a 64-bit word ``(tag << 32 | fp32 bits)`` with a relaxed atomic
exchange and read back until every word of the row carries the launch's tag: no fence, no
counter, one L2 round trip when the others are on time. ``_publish`` sends a (max, sum) pair as
two scalar exchanges; ``_publish_words`` sends a chunk's partials in one vector exchange (on an
H200 that took 2-14% off layer_norm's long-row backward against one scalar exchange a word);
``_publish_packed`` sends two values in one word, ``(tag15 << 48 | 24 bits | 24 bits)``, each
value kept to 16 significant bits, for a result rounded to a 2-byte dtype: half the words to read
back.
Every thread waits for its own copies (``_await_tagged``): where a block of words is smaller
than the program, the compiler gives a word to several threads, and a copy read before the word
arrived must never be used because another thread's copy of it passed a tag check. (Checking
the tags with a reduction did exactly that: a reduction reads one copy, the arithmetic after it
may read another, and rms_norm's backward at 256 x 65536 gave different bits on every call.)
The tag is an epoch kept on the device: word 0 of the slot buffer is ``(epoch << 32 | ticket)``;
the last ticket of a launch resets the ticket and moves the epoch on in one atomic add, so words
left by earlier launches (or by another config) never count; the host (:mod:`dispatch_triton.buffers`)
zeroes the buffer every 2^14 launches, long before a packed word's 15-bit tag could come round
again. Until then a 31-bit tag is below 2^16, so a packed word's top 16 bits never match a
plain word's tag (nor a plain word's a packed one's).

Co-residency: a group's programs wait for each other, so a program takes a *ticket* (that
atomic word, taken in dispatch order) that decides its group. Every ticket below the highest
taken belongs to a program that is running or done, so only the group holding the highest
ticket can wait on programs not yet resident, and it gets them as soon as any other program
exits, provided the device can hold a group's programs at once (the host sizes the grid so).
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import _interpreting

_MAXS = tl.constexpr(128)  # the most partials of one row that _await_pairs reads
_INTERPRETED = tl.constexpr(_interpreting())  # the interpreter runs no inline assembly
# a word at $1 read until its upper half is the tag $2 (none read where $3 is 0: the value is 0),
# by the thread that holds it: no barrier, no reduction, so no other thread's copy can stand in
_SPIN_ASM = """{
.reg .pred pw;
.reg .b64 tw;
mov.b64 $0, 0;
setp.eq.s32 pw, $3, 0;
@pw bra DONE_W;
SPIN_W:
ld.relaxed.gpu.global.b64 $0, [$1];
shr.u64 tw, $0, TAG_SHIFT;
setp.ne.s64 pw, tw, $2;
@pw bra SPIN_W;
DONE_W:
}"""
_SPIN = tl.constexpr(_SPIN_ASM.replace("TAG_SHIFT", "32"))  # the tag in the upper half
_SPIN_PACKED = tl.constexpr(_SPIN_ASM.replace("TAG_SHIFT", "48"))  # the 15-bit tag of a packed word


@triton.jit
def _ticket(slot_ptr, nprog, ACQ_REL: tl.constexpr = False):
    # (ticket, tag) of this program in a launch of exchanging groups. One 64-bit word holds
    # (epoch << 32 | ticket); tickets come in dispatch order and decide the group (see the module
    # docstring); the last one resets the ticket and moves the epoch on, atomically, for the
    # next launch. The tag (31 bits, never 0) marks this launch's partials (_epoch_tag). ACQ_REL:
    # the atomics acquire and release (the ticket also publishes what the program wrote), else relaxed
    if ACQ_REL:
        sem: tl.constexpr = "acq_rel"
    else:
        sem: tl.constexpr = "relaxed"
    word = tl.atomic_add(slot_ptr, 1, sem=sem)
    tid = (word & 0xFFFFFFFF).to(tl.int32)
    if tid == nprog - 1:
        tl.atomic_add(slot_ptr, (1 << 32) - nprog.to(tl.int64), sem=sem)
    return tid, _epoch_tag(word)


@triton.jit
def _epoch_tag(word):
    # the tag of the epoch that the ticket word ``word`` holds (31 bits, never 0)
    return ((word >> 32) % 0x7FFFFFFF) + 1


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
def _await_tagged(p, live, tag, PACKED: tl.constexpr = False):
    # the 64-bit words at p (where live) once they carry this launch's tag, each as read by the
    # thread that holds it (see the module docstring); 0 where not live. PACKED: words of
    # _publish_packed, whose tag is their top 16 bits
    if PACKED:
        shift: tl.constexpr = 48
        spin: tl.constexpr = _SPIN_PACKED
    else:
        shift: tl.constexpr = 32
        spin: tl.constexpr = _SPIN
    v = tl.load(p, mask=live, other=0, volatile=True)
    bad = tl.sum(tl.ravel((live & ((v >> shift) != tag)).to(tl.int32)), 0)
    while bad > 0:
        v = tl.load(p, mask=live, other=0, volatile=True)
        bad = tl.sum(tl.ravel((live & ((v >> shift) != tag)).to(tl.int32)), 0)
    if _INTERPRETED:
        return v
    else:
        stale = live & ((v >> shift) != tag)
        fresh = tl.inline_asm_elementwise(spin, "=l,l,l,r", [p, tag, stale.to(tl.int32)], dtype=tl.int64,
                                          is_pure=False, pack=1)
        return tl.where(stale, fresh, v)


@triton.jit
def _packed_tag(tag):
    # the 15-bit tag (never 0) of packed words, from a launch's 31-bit one: consecutive launches'
    # differ, and the slot buffer is zeroed long before one could come round (_EPOCH_RESET)
    return ((tag - 1) % 0x7FFF) + 1


@triton.jit
def _top24(v):
    # the upper 24 bits of fp32 v (sign, exponent, 15 bits of mantissa), rounded to nearest; NaN and
    # infinities kept as they are (truncated: no carry into the sign)
    bits = v.to(tl.uint32, bitcast=True)
    special = (bits & 0x7F800000) == 0x7F800000
    return (tl.where(special, bits, bits + 0x80) >> 8).to(tl.int64)


@triton.jit
def _publish_packed(slot_ptr, idx, a, b, tag):
    # two fp32 values in ONE tagged word at idx: (tag15 << 48 | top24(a) << 24 | top24(b)), each
    # value kept to 16 significant bits (a relative 2^-16); half the words of _publish_words to
    # publish and, for every program of the row, to read back
    word = (_packed_tag(tag).to(tl.int64) << 48) | (_top24(a) << 24) | _top24(b)
    tl.atomic_xchg(slot_ptr + idx, word, sem="relaxed")


@triton.jit
def _await_packed(slot_ptr, base, n, tag, P2: tl.constexpr):
    # the n packed words from base (_publish_packed; word j at base + j) once they carry this
    # launch's tag: their two values (a, b) as fp32 ([P2] each, 0 past n) and the mask of the live words
    j = tl.arange(0, P2)
    jm = j < n
    v = _await_tagged(slot_ptr + base + j, jm, _packed_tag(tag), True)
    a = (((v >> 24) & 0xFFFFFF) << 8).to(tl.uint32).to(tl.float32, bitcast=True)
    b = ((v & 0xFFFFFF) << 8).to(tl.uint32).to(tl.float32, bitcast=True)
    return a, b, jm


@triton.jit
def _fp32_of(v):
    # the fp32 value of tagged words
    return (v & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)


@triton.jit
def _await_words(slot_ptr, base, n, tag, W: tl.constexpr, P2: tl.constexpr):
    # the n groups of W words from base (a row's partials, group j at base + j * W) once they carry
    # this launch's tag: their fp32 values [P2, W] (0 past n) and the mask of the live groups
    j = tl.arange(0, P2)
    jm = j < n
    k = tl.arange(0, W)
    live = jm[:, None] & (k >= 0)[None, :]
    v = _await_tagged(slot_ptr + base + j[:, None] * W + k[None, :], live, tag)
    return _fp32_of(v), jm


@triton.jit
def _await_pairs(slot_ptr, base, n_split, tag):
    # the n_split pairs of words at base (partials of a row) once they carry this launch's tag:
    # their fp32 values (a, b) and the mask of the live lanes (a and b are 0 past n_split); one wait
    # for both words of every pair
    vals, jm = _await_words(slot_ptr, base, n_split, tag, 2, _MAXS)
    a, b = tl.split(vals)
    return a, b, jm
