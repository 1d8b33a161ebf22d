"""Run one strided-kernel config on one layout case a few times, for a profiler (``ncu``) to capture::

    ncu --clock-control none --section SpeedOfLight --section Occupancy \\
        python3 benchmarks/run_strided.py --case dim0_4096x4096 --op logsumexp \\
        --config '{"BLOCK_I": 16, "BLOCK_R": 64, "SPLIT_R": 2, "num_warps": 4, "ACC_2D": 1}'

The case names are ``sweep_strided_configs.py``'s; without ``--config`` the default config runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from dispatch_triton import strided as S

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_strided_configs import CASES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    parser.add_argument("--op", default="softmax", choices=("softmax", "log_softmax", "logsumexp"))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--config", help="a JSON config (the default config without it)")
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    shape, view, dim = CASES[args.case]
    x = view(torch.randn(*shape, device="cuda", dtype=getattr(torch, args.dtype)))
    d = dim % x.dim()
    p = S.plan(args.op, x.shape, x.stride(), (d,))
    want = getattr(torch, args.op)(x, d)
    cfg = json.loads(args.config) if args.config else S.default_config(p, x.device)
    launcher = S.StridedLauncher(args.op, p, want.dtype, want.shape, x.device, cfg)
    for _ in range(args.calls):
        got = launcher.run(x)
    torch.cuda.synchronize()
    err = (got.float() - want.float()).abs().nan_to_num().max().item()
    print(f"{args.case} {args.op} {cfg}: max abs err {err:.3g}")


if __name__ == "__main__":
    main()
