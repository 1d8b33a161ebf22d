"""The Triton norm backward of long rows under alternative plans, timed in interleaved rounds.

Usage: ``ab_rounds.py SHAPES [DTYPES]`` (``4x262144,8x131072``; ``bfloat16,float32``), from the
repository root. PLANS (JSON, a list of overrides of ``backward_plan``) is timed against the default
plan; without it a default list (row groups GR, chunk length BLOCK_N and num_warps, FINISH). OPS
(comma-separated) in place of both ops; ROUNDS (default 3): rounds of every plan in turn, each
plan's median round kept. Device time of the backward call (dx, dweight, dbias),
triton.testing.do_bench medians (L2 flushed), the better of two a round; % of a copy of the same
bytes (x and dy read, dx written). Each plan's gradients are checked against float64 torch before
it is timed."""
import json
import os
import sys
import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, "benchmarks")
from sweep_norm_backward import _inputs, backward_call  # noqa: E402
from dispatch_triton import norm_backward as NB  # noqa: E402

dev = torch.device("cuda")
SHAPES = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
DTYPES = sys.argv[2].split(",") if len(sys.argv) > 2 else ["bfloat16", "float32"]


def bench(fn):
    return min(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median") for _ in range(2)) * 1e3


copies = {}


def copy_us(numel, dt):
    if (numel, dt) not in copies:
        src = torch.empty(numel, device=dev, dtype=dt)
        dst = torch.empty_like(src)
        copies[(numel, dt)] = bench(lambda: dst.copy_(src))
    return copies[(numel, dt)]


PLANS = json.loads(os.environ["PLANS"]) if os.environ.get("PLANS") else None
OPS = os.environ.get("OPS", "rms_norm,layer_norm").split(",")


def plans(base, m):
    if PLANS is not None:  # the default first, then these
        return [{}] + PLANS
    out = [{}]
    gr = base["GR"]
    for g in sorted({1, 2, max(1, gr // 2), max(1, gr // 4)}):
        if g < gr:
            out.append(dict(GR=g))
    for bn, w in ((1024, 2), (1024, 4), (4096, 8)):
        out.append(dict(BLOCK_N=bn, num_warps=w))
        for g in (1, 2):
            if g < m:
                out.append(dict(BLOCK_N=bn, num_warps=w, GR=g))
    out.append(dict(FINISH=0))
    out.append(dict(GR=1, FINISH=0))
    return out


ROUNDS = int(os.environ.get("ROUNDS", "3"))
for dtn in DTYPES:
    dt = getattr(torch, dtn)
    for op in OPS:
        for m, n in SHAPES:
            inp = _inputs(op, m, n, dt, dev)
            cu = copy_us(3 * m * n // 2, dt)
            leaves = [inp["x"].double().requires_grad_(), inp["w"].double().requires_grad_()]
            if op == "layer_norm":
                leaves.append(inp["b"].double().requires_grad_())
                ref_y = F.layer_norm(leaves[0], (n,), leaves[1], leaves[2], 1e-5)
            else:
                ref_y = F.rms_norm(leaves[0], (n,), leaves[1], 1e-5)
            refs = torch.autograd.grad(ref_y, leaves, inp["dy"].double())
            g = 2 if op == "layer_norm" else 1
            base = NB.backward_plan(m, n, dt, dev, grads=g, op=op)
            calls = []
            for over in plans(base, m):
                try:
                    resolved = NB.backward_plan(m, n, dt, dev, None, over, grads=g, op=op)
                    call = backward_call(op, m, n, dt, None, over, inp)
                    got = call()
                    err = max(float((a.double() - r).abs().max() / r.abs().max()) for a, r in zip(got, refs))
                except Exception as exc:  # noqa: BLE001
                    print(f"{op} {dtn} {m}x{n} {over}: failed {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                    continue
                lab = (f"bn{resolved['BLOCK_N']} w{resolved['num_warps']} GR{resolved['GR']} S{resolved['S']} "
                       f"coop{int(resolved['COOP'])} finish{resolved['FINISH']} reg{resolved['maxnreg']}")
                calls.append((over, lab, err, call, []))
            for _ in range(ROUNDS):
                for c in calls:
                    c[4].append(bench(c[3]))
            res = []
            for over, lab, err, _, ts in calls:
                us = sorted(ts)[len(ts) // 2]
                res.append((us, over))
                print(f"{op} {dtn} {m}x{n} | {str(over):45s} | {lab:52s} | {us:6.1f} us "
                      f"({' '.join(f'{t:.1f}' for t in ts)}) | {100 * cu / us:3.0f}% | err {err:.1e}", flush=True)
            d = res[0][0] if res and res[0][1] == {} else None
            best = min(res, key=lambda r: r[0]) if res else None
            if d and best:
                print(f"SUMMARY {op} {dtn} {m}x{n}: default {d:.1f} us; best {best[0]:.1f} us {best[1]} "
                      f"({best[0] / d:.3f}x)", flush=True)
