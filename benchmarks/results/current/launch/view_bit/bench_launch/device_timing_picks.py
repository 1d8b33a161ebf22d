"""What the backends' cards pick for a CUDA call with no race of its own, under each timing, next to
the device time each backend took in ``launch.json`` (CUDA-graph replay). Runs anywhere: the cards'
estimates need no GPU.

    python3 benchmarks/results/current/launch/view_bit/bench_launch/device_timing_picks.py
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import torch

from dispatch import _opdecl, _plugins
from dispatch._select import by_estimated_cost

HERE = Path(__file__).resolve().parent


def main() -> None:
    rows = json.loads((HERE / "launch.json").read_text())["rows"]
    registry = _plugins.registry()
    backends = [registry.backends[n] for n in ("torch", "triton", "tilelang")]
    print("op shape | pick by the cards, wall / device timing | device us under replay: "
          "torch.compile, dispatch's pick (shipped tables), the cards' device pick, the fastest backend")
    for row in rows:
        decl = _opdecl.get(row["op"])
        x = torch.empty(*row["shape"], dtype=getattr(torch, row["dtype"]))
        spec = decl.spec(decl.bind(x, -1))
        spec = attrs.evolve(spec, tensors=[attrs.evolve(t, device=torch.device("cuda", 0)) for t in spec.tensors])
        picks = [by_estimated_cost(backends, spec, timing)[0][0].name for timing in ("wall", "device")]
        g = row["graph_us"]
        best = min((v, k[len("dispatch["):-1]) for k, v in g.items() if k.startswith("dispatch["))
        print(f"{row['op']} {row['shape'][0]}x{row['shape'][1]} | {picks[0]} / {picks[1]} | "
              f"{g['torch.compile']:.1f}, {g['dispatch (pick)']:.1f} ({row['pick']}), "
              f"{g[f'dispatch[{picks[1]}]']:.1f} ({picks[1]}), {best[0]:.1f} ({best[1]})")


if __name__ == "__main__":
    main()
