"""How long a full tune of one (op, dtype, shape bucket) over all backends takes, from cold caches.

Each case runs in a fresh process with empty dispatch, TileLang and Triton caches (what a new
machine pays; the imports of torch, dispatch and the DSLs are timed apart, as ``startup_s``):
the call (``total_s``) races every backend (each compiles its candidates, all backends at once,
then each times its own) and the per-backend seconds, split into compiling and timing, come from
``dispatch.explain`` and the tune entries the race left in the cache.

    python benchmarks/bench_tune_time.py --cases softmax:bfloat16:16384x4096,softmax:bfloat16:8x32x1024x1024
    python benchmarks/bench_tune_time.py --cases sweep --budget-s 320 --timeout 45 --json tune_time.jsonl
    python benchmarks/bench_tune_time.py --native    # the DSLs' own autotuners (Triton's, TileLang's) instead
    python benchmarks/bench_tune_time.py --native --tilelang-group-compile 0   # TileLang one module per candidate

A shape is ``MxN`` or any ``AxBx...`` (the op reduces the last dim). ``--cases sweep`` is every op
of the softmax family in bfloat16 at the shapes of the shipped H200 table and the attention-score
shape 8x32x1024x1024. Prints one JSON line per case (with --json: appended to that file, and a
short line printed instead) and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SWEEP_SHAPES = ("8x32x1024x1024", "262144x256", "65536x1024", "16384x4096", "4096x16384", "1024x65536", "256x262144",
                "1x4096", "32x4096")
SWEEP = ",".join(f"{op}:bfloat16:{shape}" for shape in SWEEP_SHAPES for op in ("softmax", "log_softmax", "logsumexp"))

CHILD = r"""
import json, logging, sys, time
start_import = time.perf_counter()
import torch
op, dtype, shape, group, device = sys.argv[1], sys.argv[2], [int(v) for v in sys.argv[3].split("x")], sys.argv[4], sys.argv[5]
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
if group != "default":
    import functools
    import dispatch_tilelang.native_tune as nt
    nt.tune_native = functools.partial(nt.tune_native, group_compile=group == "1")
import dispatch
lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append(f"{time.perf_counter() - start:7.2f} s  {record.getMessage()}")
log = logging.getLogger("dispatch.tune")
log.setLevel(logging.INFO)
log.addHandler(Keep())
dispatch.configure(autotune=True, policy="measured")
x = (torch.randn(*shape, device=device) * 4).to(getattr(torch, dtype))
dispatch.backends()  # backends loaded and their DSLs imported before the clock starts (startup_s)
import importlib
for module in ("triton", "tilelang", "dispatch_triton.launch", "dispatch_tilelang.build"):
    try:
        importlib.import_module(module)
    except Exception:
        pass
sync()
import_s = time.perf_counter() - start_import
start = time.perf_counter()
getattr(dispatch, op)(x, -1)
sync()
total = time.perf_counter() - start
d = dispatch.explain(op, x, -1).decision
tunes = {}
for key, value in dispatch.autotune.default_cache().entries():
    if key.get("kind") == "tune":
        reps = [t.get("reps", 0) for t in value.get("timings", [])]
        tunes[key["backend"]] = {"compile_s": value.get("compile_s"), "timing_s": value.get("timing_s"),
                                 "timed": len(reps), "stopped_early": sum(1 for r in reps if 0 < r < max(reps)),
                                 "failed": [f["reason"][:200] for f in value.get("failures", [])],
                                 "source": value.get("source")}
print("RESULT " + json.dumps({"op": op, "dtype": dtype, "shape": sys.argv[3], "tilelang_group_compile": group,
      "total_s": total, "startup_s": import_s, "pick": d.backend,
      "backends": {c.name: {"tune_s": c.tune_s, "compile_s": c.compile_s, "timing_s": c.timing_s, "us": c.latency_us,
                            "config": c.config.as_dict() if c.config else None, "note": c.note,
                            **tunes.get(c.name, {})} for c in d.candidates},
      "log": lines}))
"""


def _brief(case: str, rec: dict) -> str:
    """One short line for a case (the whole record goes to --json)."""
    if "total_s" not in rec:
        return f"{case}: {rec.get('skipped') or 'ERROR ' + str(rec.get('error', ''))[-300:]}"
    parts = []
    for name, b in rec["backends"].items():
        if b.get("tune_s") is None:
            if b.get("note"):
                parts.append(f"{name} failed: {b['note'][:80]}")
            continue
        split = f" = compile {b['compile_s']:.1f} + timing {b['timing_s']:.1f}" if b.get("compile_s") is not None else ""
        extra = f", {b.get('timed', 0)} timed, {b.get('stopped_early', 0)} stopped early"
        extra += f", {len(b['failed'])} failed" if b.get("failed") else ""
        parts.append(f"{name} {b['tune_s']:.1f} s{split}{extra} -> {b['us']:.1f} us")
    return (f"{case}: tune {rec['total_s']:.1f} s (startup {rec['startup_s']:.1f} s, process {rec['process_s']:.1f} s), "
            f"pick {rec['pick']} | " + " | ".join(parts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="softmax:bfloat16:16384x4096,softmax:bfloat16:1024x65536",
                    help="op:dtype:shape,... or 'sweep'")
    ap.add_argument("--tilelang-group-compile", default="default", choices=["default", "0", "1"],
                    help="with --native: TileLang's grouped compile on/off")
    ap.add_argument("--native", action="store_true",
                    help="tune with Triton's and TileLang's own autotuners (as before the compile-ahead sweep)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu (a smoke test: Triton's interpreter, TileLang's C)")
    ap.add_argument("--json", default="")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per case")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no case once this many seconds have passed (0: run them all)")
    a = ap.parse_args()
    cases = SWEEP if a.cases == "sweep" else a.cases
    rc = 0
    records = []
    began = time.perf_counter()
    for case in cases.split(","):
        if a.budget_s and time.perf_counter() - began > a.budget_s:
            rec = {"case": case, "skipped": f"over the --budget-s of {a.budget_s:.0f} s"}
            print(json.dumps(rec), flush=True)
            rc = 1
            continue
        op, dtype, shape = case.split(":")
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, DISPATCH_CACHE_DIR=f"{tmp}/dispatch", TILELANG_CACHE_DIR=f"{tmp}/tilelang",
                       TRITON_CACHE_DIR=f"{tmp}/triton",
                       DISPATCH_TABLES_DIR=f"{tmp}/tables")  # no shipped decision: the call races
            if a.device == "cpu":
                env.setdefault("TRITON_INTERPRET", "1")
            if a.native:
                env.update(DISPATCH_TRITON_NATIVE_AUTOTUNE="1", DISPATCH_TILELANG_NATIVE_AUTOTUNE="1")
            start = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, "-c", CHILD, op, dtype, shape, a.tilelang_group_compile,
                                       a.device],
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
            records.append(rec)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(_brief(case, rec), flush=True)
        else:
            print(json.dumps(rec), flush=True)
    if records:
        totals = [r["total_s"] for r in records]
        over = [f"{r['op']}:{r['shape']} {r['total_s']:.1f} s" for r in records if r["total_s"] > 10]
        print(f"# {len(records)} case(s): tune median {statistics.median(totals):.1f} s, max {max(totals):.1f} s; "
              f"over 10 s: {', '.join(over) or 'none'}; all cases {time.perf_counter() - began:.0f} s", flush=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
