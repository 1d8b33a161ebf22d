"""What a call of few long rows costs on the host, next to its device time, on the GPU.

Rows longer than a program holds are cut over several programs (the Triton kernel's split
paths), and with few rows the kernel takes a few microseconds: a caller pays the host's cost of
the call. For each shape and op (bf16) this times, in us per call:

``torch``, ``dispatch[triton]``, ``dispatch[tilelang]``, ``dispatch``
    wall time of back-to-back calls (synchronised once per loop);
``triton.run``, ``triton.run host``
    the Triton kernel of the call (its default config, no dispatcher), wall and host only (the
    loop not synchronised: the host's own cost where the device keeps up);
``launch host``
    its launch into a given output (no allocation); for the split paths also
    ``launch host, buffers per call``: the same kernel launched as it was before a stream's buffers
    were bound into launches of their own (the slot buffer looked up and six pointers read per call);
``triton dev``, ``tilelang dev``
    device time under CUDA-graph replay;
``error``
    the Triton kernel's largest error against torch in fp32;
``--lse-splits``
    logsumexp in one launch (``split``: the last program of a row to arrive merges) at chunks of
    2048, 4096 and 8192, against the default: its error against fp32, wall, host, device.

Prints and writes ``split_host.txt`` under ``--out``::

    python3 benchmarks/profile_split_host.py --out DIR [--shapes 1x32768,8x128256] [--lse-splits]
"""

from __future__ import annotations

import argparse
import os

import torch

import dispatch
from graph_timing import graph_replay_us  # benchmarks/, beside this script
from profile_call import per_call

SHAPES = "1x32768,8x32768,4x50257,8x128256,32x151936,1x262144"


def wall(fn) -> float:
    return per_call(fn, 300, 9)


def host(fn) -> float:
    return per_call(fn, 300, 9, synced=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--lse-splits", action="store_true")
    args = ap.parse_args()
    from dispatch_triton import launch as L
    from dispatch_triton.buffers import _lse_buffers, _split_slots
    from dispatch_triton.configs import _cfg, _with_fast_exp, default_config

    dev, lines = torch.device("cuda"), []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    for text in args.shapes.split(","):
        m, n = (int(v) for v in text.split("x"))
        x = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
        for op in ("softmax", "log_softmax", "logsumexp"):
            fn, tfn = getattr(dispatch, op), getattr(torch, op)
            cfg = default_config(op, m, n, x.dtype)
            lau = L.Launcher(op, m, n, x.dtype, x.dtype, n, dev, cfg, like_input=op != "logsumexp")
            run = lau.run
            out = run(x)
            run(x)
            res = {"torch": wall(lambda: tfn(x, -1)), "triton.run": wall(lambda: run(x)),
                   "triton.run host": host(lambda: run(x)), "launch host": host(lambda: lau.launch(x, out)),
                   "dispatch[triton]": wall(lambda: fn(x, -1, backend="triton")),
                   "dispatch[tilelang]": wall(lambda: fn(x, -1, backend="tilelang")),
                   "dispatch": wall(lambda: fn(x, -1)),
                   "triton dev": graph_replay_us(lambda: run(x))[0],
                   "tilelang dev": graph_replay_us(lambda: fn(x, -1, backend="tilelang"))[0]}
            if cfg["path"] in ("split", "split_pipe"):
                # the launch as it was before each stream's buffers were bound into launches of their
                # own: the stream's buffers looked up per call (softmax/log_softmax: the slot buffer;
                # logsumexp: its counters and workspace), six pointers read per call
                t, (mask, ws, sync, slots) = lau._templates[0], lau._stand_ins[2:6]
                need = m * -(-n // cfg["BLOCK_N"])
                if op == "logsumexp":
                    def before():
                        sync_s, ws_s = _lse_buffers(dev, m, need)
                        t.launch(x, out, mask, ws_s, sync_s, slots)
                else:
                    def before():
                        t.launch(x, out, mask, ws, sync, _split_slots(dev, need))
                res["launch host, buffers per call"] = host(before)
                torch.cuda.synchronize()
                assert torch.allclose(out.float(), run(x).float()), "the launch as before disagrees"
            states = [d.state for d in lau.direct]
            ref = getattr(torch, op)(x.float(), -1)
            res["error"] = (run(x).float() - ref).abs().max().item()
            say(f"{op} {m}x{n} {cfg['path']}/{cfg['BLOCK_N']} grid={lau.grid[0]} launches={states} "
                + " ".join(f"{k}={v:.3g}" if k == "error" else f"{k}={v:.2f}" for k, v in res.items()))
            if op == "logsumexp" and args.lse_splits:
                for bn in (2048, 4096, 8192):
                    c = _with_fast_exp(_cfg("split", bn, 1, 1, max(1, bn // 2048)))
                    r2 = L.Launcher(op, m, n, x.dtype, x.dtype, n, dev, c).run
                    err = (r2(x).float() - ref).abs().max().item()
                    say(f"    logsumexp split/{bn}: err={err:.3g} wall={wall(lambda: r2(x)):.2f} "
                        f"host={host(lambda: r2(x)):.2f} dev={graph_replay_us(lambda: r2(x))[0]:.2f}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "split_host.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
