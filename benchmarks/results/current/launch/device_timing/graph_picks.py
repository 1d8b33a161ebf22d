"""Device time under CUDA-graph replay of dispatch's picks, wall-raced and device-raced, against
torch.compile and the fastest backend forced, from ``launch.json`` in this folder (no GPU needed):
``python3 graph_picks.py`` prints a Markdown table and a summary line."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent


def main() -> None:
    rows = json.loads((HERE / "launch.json").read_text())["rows"]
    print("| op | shape | torch.compile | pick (wall races) | pick (device races) | fastest backend forced |")
    print("|---|---|---|---|---|---|")
    under, ratios = 0, []
    for r in rows:
        g = r["graph_us"]
        forced = {k: v for k, v in g.items() if k.startswith("dispatch[")}
        best = min(forced, key=forced.get)
        dev = g["dispatch (pick, device timing)"]
        under += dev < g["torch.compile"]
        ratios.append(dev / forced[best])
        shape = "x".join(map(str, r["shape"]))
        print(f"| {r['op']} | {shape} | {g['torch.compile']:.1f} | {g['dispatch (pick)']:.1f} | **{dev:.1f}** | "
              f"{forced[best]:.1f} ({best[9:-1]}) |")
    print(f"\ndevice-raced picks below torch.compile's device time: {under} of {len(rows)}; "
          f"at most {max(ratios):.2f}x the fastest backend forced (median {sorted(ratios)[len(ratios) // 2]:.2f}x)")


if __name__ == "__main__":
    main()
