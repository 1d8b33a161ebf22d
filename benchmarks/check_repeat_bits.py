"""Do the Triton kernels whose programs exchange partials (the one-launch rms_norm / layer_norm
forward and backward of long rows, softmax's split rows) give the same bits on every call, on one
GPU?

For each case, two inputs A and B (different numbers) are run alternately, ``reps`` times each,
on one stream, and every result is compared with the first one of the same input; for the norms
the backward is then captured in a CUDA graph (on a side stream) and its replays compared with
the eager backward of A. A kernel that used a word left by another launch would differ.

    python3 benchmarks/check_repeat_bits.py 10 rms_norm:bfloat16:256x65536,softmax:bfloat16:64x262144

Arguments: repeats, then comma-separated op:dtype:MxN cases (op: rms_norm, layer_norm, softmax).
Exits 1 when a call or a replay differs (or a case fails), else 0.
"""
from __future__ import annotations

import sys

import torch

import dispatch

dev = torch.device("cuda")


def inputs(op, dtype, m, n, seed):
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(m, n, device=dev, dtype=dtype, generator=g) * (1 + seed)
    dy = torch.randn(m, n, device=dev, dtype=dtype, generator=g)
    w = torch.randn(n, device=dev, dtype=dtype, generator=g)
    b = torch.randn(n, device=dev, dtype=dtype, generator=g) if op == "layer_norm" else None
    return x, dy, w, b


def fwd(op, x, w, b, n):
    if op == "softmax":
        return dispatch.softmax(x, -1, backend="triton")
    fn = getattr(dispatch, op)
    return fn(x, (n,), w, *((b,) if b is not None else ()), eps=1e-5, backend="triton")


def bwd(op, x, w, b, dy, n):
    xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = fwd(op, xl, wl, b, n)
    return torch.autograd.grad(y, [xl], dy)[0]


def run(op, dt, m, n, reps) -> int:
    """Print how many calls (and replays) of one case differ from the first; return that count."""
    dtype = getattr(torch, dt)
    A, B = inputs(op, dtype, m, n, 0), inputs(op, dtype, m, n, 1)
    with torch.no_grad():
        yA, yB = fwd(op, A[0], A[2], A[3], n), fwd(op, B[0], B[2], B[3], n)
        fbad = 0
        for _ in range(reps):
            fbad += int(not torch.equal(fwd(op, A[0], A[2], A[3], n), yA))
            fbad += int(not torch.equal(fwd(op, B[0], B[2], B[3], n), yB))
    line = f"{op} {dt} {m}x{n}: fwd calls differing {fbad}/{2 * reps}"
    if op != "softmax":
        gA, gB = bwd(op, A[0], A[2], A[3], A[1], n), bwd(op, B[0], B[2], B[3], B[1], n)
        bbad, rows = 0, set()
        for _ in range(reps):
            for (x, dy, w, b), g0 in ((A, gA), (B, gB)):
                g = bwd(op, x, w, b, dy, n)
                if not torch.equal(g, g0):
                    bbad += 1
                    rows |= set(torch.nonzero((g != g0).any(1)).flatten().tolist()[:8])
        line += f"; bwd calls differing {bbad}/{2 * reps} rows {sorted(rows)[:8]}"
        stream = torch.cuda.Stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        x, dy, w, b = A
        with torch.cuda.stream(stream):
            xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
            y = fwd(op, xl, wl, b, n)
            torch.autograd.grad(y, [xl], dy, retain_graph=True)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                cap = torch.autograd.grad(y, [xl], dy, retain_graph=True)[0]
        gbad = 0
        for _ in range(reps):
            graph.replay()
            torch.cuda.synchronize()
            gbad += int(not torch.equal(cap, gA))
        line += f"; graph replays differing {gbad}/{reps}"
        fbad += bbad + gbad
    print(line, flush=True)
    return fbad


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    if not torch.cuda.is_available():
        print("needs a CUDA device: the kernels checked here exchange partials between programs on a GPU",
              file=sys.stderr)
        return 2
    reps, bad = int(sys.argv[1]), 0
    for c in sys.argv[2].split(","):
        op, dt, shape = c.split(":")
        m, n = (int(v) for v in shape.split("x"))
        try:
            bad += run(op, dt, m, n, reps)
        except Exception as exc:  # noqa: BLE001 - a case that fails is reported, the others still run
            print(f"{c}: failed {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
