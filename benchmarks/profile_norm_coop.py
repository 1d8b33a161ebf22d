"""One cooperative (``COOP``) rms_norm / layer_norm forward config on one GPU, for a profiler: the
compiled kernel's registers, spills and grid, then a few launches to profile.

    python3 benchmarks/profile_norm_coop.py --op layer_norm
    ncu --kernel-name regex:_norm_fwd --launch-skip 3 --launch-count 1 --section SpeedOfLight \\
        --section Occupancy --section WarpStateStats --section LaunchStats \\
        python3 benchmarks/profile_norm_coop.py --op layer_norm
"""

from __future__ import annotations

import argparse

import torch

from dispatch_triton import norms as NT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="rms_norm", choices=NT.NORM_OPS)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--shape", default="64x262144", help="M x N")
    parser.add_argument("--block-n", type=int, default=2048)
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--launches", type=int, default=5)
    args = parser.parse_args()
    m, n = (int(v) for v in args.shape.split("x"))
    dtype, device = getattr(torch, args.dtype), torch.device("cuda")
    config = dict(BLOCK_N=args.block_n, ROWS=1, SPLIT=1, PERSIST=0, num_warps=args.warps, num_stages=1, COOP=1)
    bias = args.op == "layer_norm"
    launcher = NT.NormLauncher(args.op, m, n, dtype, n, device, config, 1e-5, True, bias, (m, n))
    for direct in launcher.direct:
        kernel = direct.compile(*launcher._stand_ins)
        print(f"{args.op} {args.dtype} {m}x{n} {config}: registers {kernel.n_regs}, spilled {kernel.n_spills}, "
              f"grid {direct.grid[0]}", flush=True)
    x = torch.randn(m, n, device=device, dtype=dtype)
    w = torch.randn(n, device=device, dtype=dtype)
    b = torch.randn(n, device=device, dtype=dtype) if bias else None
    for _ in range(args.launches):
        launcher.run(x, w, b)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
