# experiment patches of the COOP forward (applied on the device copy only)
import sys
p = "backends/dispatch_triton/norm_kernels.py"
s = open(p).read()
which = sys.argv[1]
def rep(old, new):
    global s
    assert old in s, old
    s = s.replace(old, new)
if "shift0" in which:  # no row shift: d = x
    rep("""    if IS_RMS:
        return tl.full([], 0.0, tl.float32)
    else:
        a = tl.load(x_ptr + xoff, mask=N > 0""", """    if True:
        return tl.full([], 0.0, tl.float32)
    else:
        a = tl.load(x_ptr + xoff, mask=N > 0""")
if "nofall" in which and "plain" not in which:  # no per-chunk second reduction
    rep("""        if _ill_placed(s, q, nc):  # assigned, not returned, in the branch: Triton 3.6 fails to lower that
            e = tl.where(cmask, d - s / nc, 0.0)
            m2 = tl.sum(e * e, 0)
        return s, m2""", """        return s, m2""")
if "plain" in which:  # raw (sum d, sum d^2) about the row shift published, summed: no Chan merge
    rep("""        s, q = _sum2(d, d * d)
        m2 = _centred(s, q, nc)
        if _ill_placed(s, q, nc):  # assigned, not returned, in the branch: Triton 3.6 fails to lower that
            e = tl.where(cmask, d - s / nc, 0.0)
            m2 = tl.sum(e * e, 0)
        return s, m2""", """        s, q = _sum2(d, d * d)
        return s, q""")
    rep("""        n = tl.where(jm, _part_counts(tl.arange(0, CHUNKS_P2), N, BLOCK_N), 0.0)
        s1, m2 = _merge_parts(a, b, n, IS_RMS)""", """        s1 = tl.sum(a, 0)
        m2 = tl.maximum(tl.sum(b, 0) - s1 * (s1 / N), 0.0)""")
if "onered" in which:  # the chunk partial's two sums as two plain tl.sum
    rep("""        s, q = _sum2(d, d * d)
        m2 = _centred(s, q, nc)""", """        s = tl.sum(d, 0)
        q = tl.sum(d * d, 0)
        m2 = _centred(s, q, nc)""")
open(p, "w").write(s)
print("patched", which)
