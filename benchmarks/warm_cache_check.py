"""Shows that a process with a warm decision cache tunes nothing.

Run it twice with the same DISPATCH_CACHE_DIR: the first run tunes (races every backend for each
call), the second must report 0 measurements and the same choices.

    python benchmarks/warm_cache_check.py [--shapes 4096x4096,256x262144] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import dispatch
from dispatch.autotune import default_cache_dir, measurement_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4096x4096,256x262144")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--ops", default="softmax,log_softmax,logsumexp")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dispatch.configure(autotune=True)
    start = time.perf_counter()
    choices = {}
    for shape in args.shapes.split(","):
        m, n = (int(s) for s in shape.split("x"))
        x = torch.randn(m, n, device=device).to(getattr(torch, args.dtype))
        for op in args.ops.split(","):
            getattr(dispatch, op)(x, -1)
            d = dispatch.explain(op, x, -1).decision
            choices[f"{op} {shape}"] = f"{d.backend} [{d.config}] cached={d.cached}"
    print(json.dumps({"cache_dir": str(default_cache_dir()), "measurements": measurement_count(),
                      "seconds": round(time.perf_counter() - start, 2), "choices": choices}, indent=1))


if __name__ == "__main__":
    main()
