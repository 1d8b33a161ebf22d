"""What the protocol's timer charges a launch-bound call, against what the call costs, on the GPU.

A race times each candidate with :func:`dispatch.autotune.timer.measure`. For each shape and op
(bf16, few long rows by default: calls whose kernel takes a few microseconds) and each backend
forced through dispatch, this prints, in us per call:

``events, no head start``
    CUDA events around each call on an idle GPU, no L2 flush (how ``measure`` timed such calls
    before it queued a GPU delay ahead of each repetition);
``events``
    ``measure``'s events now (``host_bound`` off: the device's part alone);
``measure``
    ``measure`` as a race calls it (``host_bound`` on: at least the back-to-back rate);
``back to back``
    wall time of back-to-back calls, synchronised once per loop (what a caller pays);
``graph``
    device time under CUDA-graph replay (the kernel alone).

Prints and writes ``timer_check.txt`` and ``timer_check.json`` under ``--out``::

    python3 benchmarks/timer_check.py --out DIR [--shapes 4x50257,8x128256] [--ops softmax]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch

import dispatch
from dispatch.autotune import TuneSettings
from dispatch.autotune.timer import measure
from graph_timing import graph_replay_us  # benchmarks/, beside this script
from profile_call import per_call

SHAPES = "1x32768,4x50257,8x128256,32x151936,1x262144"
OPS = "softmax,log_softmax,logsumexp"


def events_idle_us(fn, warmup: int = 25, rep: int = 50) -> float:
    """Median of CUDA events around each call, nothing queued ahead of it (no flush, no delay)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(rep)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--ops", default=OPS)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda")
    backends = [n for n, info in dispatch.backends().items() if info.available]
    columns = ("events, no head start", "events", "measure", "back to back", "graph")
    lines = [f"{torch.cuda.get_device_name()}, bf16, us per call: " + " | ".join(columns)]
    rows = []
    print(lines[0], flush=True)
    for shape in args.shapes.split(","):
        m, n = (int(v) for v in shape.split("x"))
        x = torch.randn(m, n, device=device, dtype=torch.bfloat16)
        for op in args.ops.split(","):
            fn = getattr(dispatch, op)
            for name in backends:
                call = (lambda fn=fn, name=name: fn(x, -1, backend=name))
                call()  # tuned and checked once, outside every timing
                row = {"op": op, "shape": shape, "backend": name,
                       "events, no head start": events_idle_us(call),
                       "events": measure(call, device, TuneSettings(flush_l2=False, host_bound=False)).median_us,
                       "measure": measure(call, device, TuneSettings(flush_l2=False, host_bound=True)).median_us,
                       "back to back": per_call(call, 300, 9),
                       "graph": graph_replay_us(call)[0]}
                rows.append(row)
                line = f"{op} {shape} {name}: " + " | ".join(f"{row[c]:.1f}" for c in columns)
                lines.append(line)
                print(line, flush=True)
    with open(os.path.join(args.out, "timer_check.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "timer_check.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "columns": columns, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
