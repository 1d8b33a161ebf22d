"""Each config against its twin in a sweep's JSON (sweep_smem_rows / _norms / _cols): the time of
the form that waits for the cluster first and of the one that copies first, and their ratio.
A twin labelled "... early" copies first (its config waits first); "... synced" waits first.

    python3 pairs.py OUT/smem_rows.json [...]
"""
import json
import statistics
import sys

for f in sys.argv[1:]:
    d = json.load(open(f))
    print(f, d["meta"].get("command"))
    by = {}
    for r in d["rows"]:
        shape = r["shape"] if isinstance(r["shape"], str) else "x".join(map(str, r["shape"])) + f":{r['dim']}"
        by[(r["op"], r["dtype"], shape, r["name"])] = statistics.median(r["us"])
    ratios = []
    for (op, dt, shape, name), us in by.items():
        for suffix, twin_copies_first in ((" early", True), (" synced", False)):
            if not name.endswith(suffix):
                continue
            base = name[:-len(suffix)]
            default = (op, dt, shape, base + " (default)") in by
            b = by.get((op, dt, shape, base)) or by.get((op, dt, shape, base + " (default)"))
            if b is None:
                continue
            waits, copies = (b, us) if twin_copies_first else (us, b)
            ratios.append(copies / waits)
            print(f"{op:12s} {shape:11s} {base:42s} {waits:7.1f} -> {copies:7.1f}  {copies / waits:.3f}"
                  f"{'  DEFAULT' if default else ''}")
    if ratios:
        print("n", len(ratios), "median %.3f min %.3f max %.3f" % (statistics.median(ratios), min(ratios), max(ratios)))
