"""How long a full tune of one (op, dtype, shape bucket) over all backends takes, from cold caches.

Each case runs in a fresh process with empty dispatch, TileLang and Triton caches (what a new
machine pays): the call races every backend (each tunes its space, natively where it can) and
the per-backend tune seconds come from ``dispatch.explain``.

    python benchmarks/bench_tune_time.py --cases softmax:bfloat16:16384x4096,softmax:bfloat16:1024x65536
    python benchmarks/bench_tune_time.py --tilelang-group-compile 0   # TileLang one module per candidate
Prints one JSON line per case (and appends them to --json when given).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
import torch
op, dtype, m, n, group = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if group != "default":
    import functools
    import dispatch_tilelang.native_tune as nt
    nt.tune_native = functools.partial(nt.tune_native, group_compile=group == "1")
import dispatch
dispatch.configure(autotune=True, policy="measured")
x = (torch.randn(m, n, device="cuda") * 4).to(getattr(torch, dtype))
start = time.perf_counter()
getattr(dispatch, op)(x, -1)
torch.cuda.synchronize()
total = time.perf_counter() - start
d = dispatch.explain(op, x, -1).decision
print("RESULT " + json.dumps({"op": op, "dtype": dtype, "M": m, "N": n, "tilelang_group_compile": group,
      "total_s": total, "pick": d.backend,
      "backends": {c.name: {"tune_s": c.tune_s, "us": c.latency_us, "config": c.config.as_dict() if c.config else None,
                            "note": c.note} for c in d.candidates}}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="softmax:bfloat16:16384x4096,softmax:bfloat16:1024x65536",
                    help="op:dtype:MxN,...")
    ap.add_argument("--tilelang-group-compile", default="default", choices=["default", "0", "1"])
    ap.add_argument("--json", default="")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    rc = 0
    for case in a.cases.split(","):
        op, dtype, shape = case.split(":")
        m, n = (int(v) for v in shape.split("x"))
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, DISPATCH_CACHE_DIR=f"{tmp}/dispatch", TILELANG_CACHE_DIR=f"{tmp}/tilelang",
                       TRITON_CACHE_DIR=f"{tmp}/triton")
            start = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, "-c", CHILD, op, dtype, str(m), str(n), a.tilelang_group_compile],
                                      env=env, capture_output=True, text=True, timeout=a.timeout)
                out = proc.stdout + proc.stderr
            except subprocess.TimeoutExpired:
                out, proc = "", None
            wall = time.perf_counter() - start
        line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            rc = 1
            rec = {"case": case, "error": "timed out" if proc is None else out[-1500:], "process_s": wall}
        else:
            rec = json.loads(line[len("RESULT "):])
            rec["process_s"] = wall
        print(json.dumps(rec), flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(rec) + "\n")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
