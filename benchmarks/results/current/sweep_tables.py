"""The results page's per-op tables and summary figures from ``softmax_sweep.json`` beside this
script (no GPU needed): ``python3 sweep_tables.py``."""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).parent
BACKENDS = ("tilelang", "torch", "triton")


def cell(r: dict, who: str) -> str:
    res = r["results"][who]
    if not res["ok"]:
        return "failed"
    if r["M"] * r["N"] < 1 << 20:  # launch-bound decode rows: us per call
        return f"{res['us']:.1f} us"
    return f"{res['gbs']:.0f} ({res['pct_copy']:.0f}%)"


def main() -> None:
    rows = json.loads((HERE / "softmax_sweep.json").read_text())["rows"]
    ratios: dict[str, list[float]] = {}
    for key in dict.fromkeys((r["op"], r["dtype"]) for r in rows):
        print(f"\n### {key[0]} {key[1]}\n")
        print("| M x N | dispatch | its pick | best backend | torch | torch.compile | dispatch / faster torch |")
        print("|---|---|---|---|---|---|---|")
        for r in (r for r in rows if (r["op"], r["dtype"]) == key):
            res = r["results"]
            best = min((b for b in BACKENDS if res[b]["ok"]), key=lambda b: res[b]["us"])
            torches = min(res[w]["us"] for w in ("torch", "torch.compile") if res[w]["ok"])
            ratios.setdefault(key[0], []).append(res["torch"]["us"] / res["dispatch"]["us"])
            print(f"| {r['M']}x{r['N']} | {cell(r, 'dispatch')} | {r.get('pick', '?')} | {best} {cell(r, best)} | "
                  f"{cell(r, 'torch')} | {cell(r, 'torch.compile')} | {res['dispatch']['us'] / torches:.2f} |")
    print()
    every = [x for v in ratios.values() for x in v]
    for op, v in ratios.items():
        print(f"{op}: dispatch over torch eager, geometric mean {math.exp(sum(map(math.log, v)) / len(v)):.2f}x "
              f"({len(v)} rows)")
    print(f"all: {math.exp(sum(map(math.log, every)) / len(every)):.2f}x ({len(every)} rows)")


if __name__ == "__main__":
    main()
