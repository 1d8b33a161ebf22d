"""The tables of this folder's README, from its sweeps' JSON (no GPU needed).

    python3 benchmarks/results/history/2026-12/dec04_smem_norm_backward_first/summary.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, *[".."] * 4, "backends"))


def cases(path):
    out = defaultdict(dict)
    for r in json.load(open(path))["rows"]:
        out[(r["op"], r["dtype"], r["shape"])][r["name"]] = statistics.median(r["us"])
    return out


def default_label(n, dtype, suffix):
    from dispatch_tilelang import smem_norm_backward as SB

    cfg = SB.default_config(n, dtype)
    return (f"tilelang smem c{cfg['cluster']} t{cfg['threads']} tile{cfg['tile_n']}"
            f"{' ahead' if cfg['ahead'] else ''}{suffix} x{cfg['per_sm']}")


def table(path, suffix):
    print("| op | dtype | M x N | copy of the bytes | Triton (dispatch's) | torch eager | TileLang registers "
          "| TileLang smem default | smem best (config) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (op, dtype, shape), v in cases(path).items():
        n = int(shape.split("x")[1])
        copy = v["copy"] * 1.5  # the copy moved x and y; the backward moves x, dy and dx
        smem = {k[len("tilelang smem "):]: u for k, u in v.items() if k.startswith("tilelang smem")}
        best = min(smem, key=smem.get)
        dflt = v.get(default_label(n, dtype, suffix))
        tri = v["triton (dispatch's backward)"]
        cell = (lambda u: "-" if u is None else f"{u:.1f} ({copy / u:.0%}, {u / tri:.2f}x)")
        print(f"| {op} | {dtype} | {shape} | {copy:.1f} | {tri:.1f} ({copy / tri:.0%}) | {v['torch eager']:.1f} "
              f"| {cell(v.get('tilelang registers'))} | {cell(dflt)} | {cell(smem[best])} {best} |")


if __name__ == "__main__":
    print("All configs (sweep_configs):\n")
    table(os.path.join(HERE, "sweep_configs", "smem_norm_backward.json"), "")
    print("\nRegister bounds (sweep_register_bound):\n")
    table(os.path.join(HERE, "sweep_register_bound", "smem_norm_backward.json"), " b1")
