"""How many elements a thread of Triton's long-row kernels should hold (one GPU).

Triton's long rows are cut into chunks of ``BLOCK_N`` elements, one program of ``num_warps`` warps
a chunk (``split``, ``split_pipe``, logsumexp's ``chunks``), so a thread holds ``BLOCK_N / (32 x
num_warps)`` elements and has their bytes in flight. The config space holds 16-64 elements a
thread; at the same elements a thread, a 2-byte row has half the bytes of a 4-byte one in flight
(each element held widened to fp32: benchmarks/results/current/rows_kernels/registers_sm90/).
For each shape: every long-row config of the space, each one's twins at twice and at half the
elements a thread (half and twice the warps), Triton's default through dispatch, torch, and a
copy of the same bytes, timed with ``triton.testing.do_bench`` (L2 flushed, median) in interleaved
rounds. Every kernel's output is checked against torch first, on the benchmark input and on rows
of -inf, +inf and NaN.

    python3 benchmarks/sweep_triton_width.py --ops logsumexp,softmax --dtypes bfloat16 \\
      --shapes 1024x65536,256x262144 --out out/width
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "backends"))

from sweep_harness import race_arguments, race_case, row_case, row_cases, saver, write_race_markdown  # noqa: E402
from sweep_smem_rows import check, edge_rows  # noqa: E402

SHAPES = {"bfloat16": "1024x65536,512x131072,256x262144", "float32": "1024x65536,256x262144"}
LONG_PATHS = ("split", "split_pipe", "chunks")


def per_thread(cfg: dict) -> int:
    return cfg["BLOCK_N"] // (32 * cfg["num_warps"])


def label(cfg: dict) -> str:
    return f"triton {cfg['path']} BN{cfg['BLOCK_N']} w{cfg['num_warps']} ({per_thread(cfg)}/thread)"


def width_configs(configs, op: str, m: int, n: int, dtype) -> list[dict]:
    """The long-row configs of Triton's space for ``(op, m, n, dtype)``, then each one's twins at half
    and twice the warps (twice and half the elements a thread; 1-32 warps, 4-256 elements a
    thread), without repeats, in that order."""
    space = [c for c in configs.config_space(op, m, n, dtype) if c["path"] in LONG_PATHS]
    out = list(space)
    for cfg in space:
        for warps in (cfg["num_warps"] // 2, cfg["num_warps"] * 2):
            twin = dict(cfg, num_warps=warps)
            if 1 <= warps <= 32 and 4 <= per_thread(twin) <= 256 and twin not in out:
                out.append(twin)
    return out


def main(argv: list[str] | None = None) -> None:
    args = race_arguments("logsumexp,softmax", "bfloat16").parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("sweep_triton_width.py times kernels on a GPU: it needs a CUDA device")

    import dispatch
    from dispatch_triton import configs
    from dispatch_triton.launch import prepare

    records = []
    save = saver(args.out, "triton_width", {"command": " ".join(sys.argv), "columns": "op | dtype | M x N"},
                 records, write_race_markdown)
    for op, m, n, dtype in row_cases(args, SHAPES):
        tdt = getattr(torch, dtype)
        x = torch.randn(m, n, device="cuda").to(tdt)
        e = edge_rows(torch, 7, n, tdt, 4096)
        y = torch.empty_like(x)
        tfn = torch.logsumexp if op == "logsumexp" else getattr(torch, op)
        dop = getattr(dispatch, op)
        fns = {"copy": lambda: y.copy_(x), "torch": lambda: tfn(x, -1),
               "triton (default)": lambda: dop(x, -1, backend="triton")}
        check(torch, fns["triton (default)"](), op, x)
        default = configs.default_config(op, m, n, tdt)
        for cfg in width_configs(configs, op, m, n, tdt):
            name = label(cfg) + (" (default)" if cfg == default else "")
            try:
                out_e, run_e = prepare(op, e, tdt, cfg)
                run_e()
                check(torch, out_e, op, e)
                out, run = prepare(op, x, tdt, cfg)
                run()
                check(torch, out, op, x)
            except Exception as exc:  # noqa: BLE001
                print("FAIL", op, m, n, dtype, name, f"{type(exc).__name__}: {exc}"[:400], flush=True)
                continue
            fns[name] = run
        nbytes = (x.numel() + (m if op == "logsumexp" else x.numel())) * x.element_size()
        race_case(fns, args, nbytes, x, *row_case(op, m, n, dtype), records, save)


if __name__ == "__main__":
    main()
