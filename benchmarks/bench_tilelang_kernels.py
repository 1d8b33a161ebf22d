"""Check and benchmark the TileLang row kernels on a CUDA GPU (run on the device machine).

Three sections, each in its own child process with its own time limit (a hung kernel costs
that section, not the run), each writing JSON as it goes:

* ``check``  -- every op on fp32/bf16 (fp16 on the whole-row family) through every kernel family
  (whole row; cluster-split read once; cluster-split looped; one CTA looped) on rows holding
  torch's edge cases, against torch.
* ``native`` -- TileLang's own autotuner on the GPU: seeded without ``do_not_specialize`` (the
  skip path: config None), then ``native_tune.tune_native`` (seeded + do_not_specialize): a
  config and a latency.
* ``bench``  -- for each dtype and row length N (M = numel / N): every kernel family tuned with
  ``tune_native`` (each candidate checked against torch by TileLang), then every candidate, the
  default config, the tuned winner, ``torch.softmax`` and a device copy of the same bytes timed
  with ``triton.testing.do_bench`` (median, L2 flushed). GB/s = 2 * numel * bytes / time.

Usage (device machine, from the repo root, TileLang on PYTHONPATH)::

    python benchmarks/bench_tilelang_kernels.py --out "$OUT" --budget 200

Then ``--report DIR`` turns the JSON in DIR into the markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

COPY_TBPS_REFERENCE = 4.24  # H200 device-to-device copy, DESIGN.md


def _dump(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


def _edge_rows(torch, m: int, n: int, dtype, seg: int):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, n, generator=g) * 3
    inf = float("inf")
    x[0] = -inf
    x[1, n // 3] = inf
    x[2, n // 2] = float("nan")
    x[3, : min(n - 1, seg + 7)] = -inf  # the first CTA's / tile's whole share is -inf
    x[4, n // 2:] = -inf
    x[5] *= 40
    x[6] = -inf
    x[6, n - 1] = 1.0
    return x.to(dtype).cuda()


def _reference(torch, op, x, out_dtype):
    xf = x.float()
    y = torch.logsumexp(xf, -1) if op == "logsumexp" else getattr(torch, op)(xf, -1)
    return y.to(out_dtype)


def check_cases() -> list[tuple]:
    """(family, op, n_cols, in_dtype, out_dtype, config) for every kernel family the check section runs."""
    from dispatch_tilelang import availability as A

    cases = []
    families = [
        ("row", 1000, {"block_m": 4, "threads": 128, "tile_n": 0, "cluster": 1}),
        ("row_multiwarp", 4096, {"block_m": 2, "threads": 256, "tile_n": 0, "cluster": 1}),
        ("cluster_once", 16000, {"block_m": 1, "threads": 256, "tile_n": 4096, "cluster": 4}),
        ("cluster_2rows", 16000, {"block_m": 2, "threads": 256, "tile_n": 4096, "cluster": 4}),
        ("cluster_looped", 40000, {"block_m": 1, "threads": 128, "tile_n": 2048, "cluster": 4}),
        ("looped", 5000, {"block_m": 1, "threads": 128, "tile_n": 1024, "cluster": 1}),
    ]
    for name, n, cfg in families:
        for op in A.OPS:
            for dt in ("float32", "bfloat16") + (("float16",) if name == "row" else ()):
                cases.append((name, op, n, dt, dt, cfg))
    cases.append(("row", "softmax", 1000, "bfloat16", "float32", families[0][2]))
    return cases


def section_check(args) -> dict:
    import torch

    from dispatch_tilelang import build as B

    cases = check_cases()
    out = {"cases": []}
    t0 = time.time()

    def build(case):
        name, op, n, i, o, cfg = case
        try:
            return case, B.build(op, 7, n, i, o, cfg, "cuda"), None
        except Exception as exc:  # noqa: BLE001
            return case, None, f"{type(exc).__name__}: {exc}"[-2000:]

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        built = list(pool.map(build, cases))
    out["compile_seconds"] = time.time() - t0
    for case, k, err in built:
        name, op, n, i, o, cfg = case
        rec = {"family": name, "op": op, "n_cols": n, "in": i, "out": o, "config": cfg}
        if err:
            rec.update(ok=False, error=err)
        else:
            try:
                for m in (7, 1, 33):
                    tdt = getattr(torch, i)
                    seg = cfg["tile_n"] or n
                    x = _edge_rows(torch, max(m, 7), n, tdt, seg)[:m].contiguous()
                    y = k(x)
                    torch.cuda.synchronize()
                    want = _reference(torch, op, x, getattr(torch, o))
                    tol = {"float32": (1e-5, 1e-5), "float16": (2e-3, 1e-3), "bfloat16": (1.6e-2, 1e-2)}[o]
                    torch.testing.assert_close(y, want, rtol=tol[0], atol=tol[1], equal_nan=True)
                    assert torch.equal(torch.isnan(y), torch.isnan(want))
                rec["ok"] = True
            except Exception as exc:  # noqa: BLE001
                rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[-2000:])
        out["cases"].append(rec)
        print(("PASS" if rec["ok"] else "FAIL"), name, op, n, i, o, rec.get("error", "")[:300], flush=True)
    out["passed"] = sum(c["ok"] for c in out["cases"])
    out["total"] = len(out["cases"])
    return out


def section_native(args) -> dict:
    import logging

    import torch
    from tilelang.autotuner import autotune, set_autotune_inputs

    from dispatch.backend import seed_kwargs, strip_build_keys
    from dispatch_tilelang import build as B, configs as C
    from dispatch_tilelang import native_tune as NT

    op, m, n, dt = "softmax", 4096, 4096, "bfloat16"
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    space = C.config_space(op, m, n, dt, "cuda")
    family = C.families(space, "cuda")[(("cluster", 1), ("tile_n", 0))]
    default = C.default_config(op, m, n, dt, "cuda")
    program = B.jit_program(op, n, dt, dt, "cuda", {"tile_n": 0, "cluster": 1})
    seeds = seed_kwargs(program, default, C.TUNABLES["cuda"], C.ALIASES)
    out = {"shape": [m, n], "dtype": dt, "family_configs": family, "seeds": seeds}

    records = []

    class Grab(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    tl_logger = NT._tuner_logger()
    tl_logger.addHandler(Grab())
    jit_cfgs = [strip_build_keys(c, program, C.ALIASES) for c in family]
    skip = autotune(configs=jit_cfgs, warmup=25, rep=50)(program)
    with set_autotune_inputs([x]):
        k = skip(**seeds)
    out["seeded_without_do_not_specialize"] = {
        "config": k.config, "latency": k.latency,
        "warning": [r for r in records if "already provided" in r],
    }
    t0 = time.time()
    best, latency = NT.tune_native(program, family, default, C.TUNABLES["cuda"], C.ALIASES, 25, 50, inputs=[x],
                                   ref_prog=lambda a: torch.softmax(a.float(), -1).to(a.dtype))
    out["tune_native"] = {"config": best, "latency_ms": latency, "seconds": time.time() - t0}
    print("NATIVE", json.dumps(out, default=str), flush=True)
    return out


def section_bench(args) -> dict:
    import torch
    from triton.testing import do_bench

    from dispatch_tilelang import build as B, configs as C
    from dispatch_tilelang.native_tune import tune_native

    deadline = time.time() + args.budget
    out = {"device": torch.cuda.get_device_name(), "numel": args.numel, "rows": []}
    path = os.path.join(args.out, "bench.json")

    def bench(fn):
        return do_bench(fn, return_mode="median")

    for dt in args.dtypes.split(","):
        tdt = getattr(torch, dt)
        nbytes = torch.tensor([], dtype=tdt).element_size()
        for n in map(int, args.ns.split(",")):
            if time.time() > deadline:
                out.setdefault("skipped", []).append([dt, n])
                continue
            m = args.numel // n
            x = torch.randn(m, n, device="cuda", dtype=tdt)
            moved = 2 * m * n * nbytes
            gbps = lambda ms: moved / (ms * 1e-3) / 1e9  # noqa: E731
            row = {"dtype": dt, "n_cols": n, "n_rows": m, "families": {}, "configs": []}
            space = C.config_space("softmax", m, n, dt, "cuda")
            default = space[0]
            ref = torch.softmax(x.float(), -1).to(tdt)
            t_fam = time.time()
            for key, group in C.families(space, "cuda").items():
                program = B.jit_program("softmax", n, dt, dt, "cuda", dict(key))
                try:
                    best, lat = tune_native(program, group, default, C.TUNABLES["cuda"], C.ALIASES, 25, 50, inputs=[x],
                                            ref_prog=lambda a: torch.softmax(a.float(), -1).to(a.dtype))
                    row["families"][str(dict(key))] = {"config": best, "native_ms": lat}
                except Exception as exc:  # noqa: BLE001
                    row["families"][str(dict(key))] = {"error": f"{type(exc).__name__}: {exc}"[-1500:]}
            row["tune_seconds"] = time.time() - t_fam
            for cfg in space:
                rec = {"config": cfg}
                try:
                    k = B.build("softmax", m, n, dt, dt, cfg, "cuda")
                    y = k(x)
                    torch.testing.assert_close(y, ref, rtol=1.6e-2, atol=1e-4)
                    ms = bench(lambda: k(x))
                    rec.update(ms=ms, gbps=gbps(ms))
                except Exception as exc:  # noqa: BLE001
                    rec["error"] = f"{type(exc).__name__}: {exc}"[-800:]
                row["configs"].append(rec)
            timed = [r for r in row["configs"] if "ms" in r]
            tuned = [f for f in row["families"].values() if "native_ms" in f]
            if tuned:
                win = min(tuned, key=lambda f: f["native_ms"])["config"]
                row["tuned_config"] = win
                row["tuned"] = next((r for r in timed if r["config"] == win), None)
            row["default"] = next((r for r in timed if r["config"] == default), None)
            row["best_measured"] = min(timed, key=lambda r: r["ms"]) if timed else None
            t_ms = bench(lambda: torch.softmax(x, -1))
            row["torch_softmax"] = {"ms": t_ms, "gbps": gbps(t_ms)}
            buf = torch.empty_like(x)
            c_ms = bench(lambda: buf.copy_(x))
            row["copy"] = {"ms": c_ms, "gbps": gbps(c_ms)}
            # the other two ops with their default configs
            for op in ("log_softmax", "logsumexp"):
                try:
                    cfg = C.default_config(op, m, n, dt, "cuda")
                    k = B.build(op, m, n, dt, dt, cfg, "cuda")
                    torch.testing.assert_close(k(x), _reference(torch, op, x, tdt), rtol=1.6e-2, atol=2e-2)
                    ms = bench(lambda: k(x))
                    op_moved = (m * n + (m if op == "logsumexp" else m * n)) * nbytes
                    t_op = bench((lambda: torch.log_softmax(x, -1)) if op == "log_softmax" else (lambda: torch.logsumexp(x, -1)))
                    row[op] = {"config": cfg, "ms": ms, "gbps": op_moved / (ms * 1e-3) / 1e9, "torch_ms": t_op,
                               "torch_gbps": op_moved / (t_op * 1e-3) / 1e9}
                except Exception as exc:  # noqa: BLE001
                    row[op] = {"error": f"{type(exc).__name__}: {exc}"[-800:]}
            out["rows"].append(row)
            b = row.get("best_measured") or {}
            print(f"BENCH {dt} N={n} M={m} best={b.get('gbps', 0):.0f} GB/s {b.get('config')} "
                  f"tuned={((row.get('tuned') or {}).get('gbps') or 0):.0f} default={((row.get('default') or {}).get('gbps') or 0):.0f} "
                  f"torch={row['torch_softmax']['gbps']:.0f} copy={row['copy']['gbps']:.0f} tune={row['tune_seconds']:.0f}s", flush=True)
            _dump(path, out)
            x = ref = buf = None  # free the shape's memory before the next one
            torch.cuda.empty_cache()
    return out


# Candidates timed by the "measure" section (no tuning). The H200 run of 2026-11-29 also timed
# cluster-16 and packed-bf16 variants and an early-arrive cluster barrier; those produced wrong
# rows (see benchmarks/results/history/2026-11/tilelang_kernels_h200.md) and are gone from the kernels.
def _c(bm, th, tile=0, cl=1):
    return {"block_m": bm, "threads": th, "tile_n": tile, "cluster": cl}


MEASURE = {
    ("float32", 1024): [_c(8, 256), _c(2, 128), _c(4, 128), _c(1, 128)],
    ("float32", 4096): [_c(2, 256), _c(1, 128), _c(1, 256)],
    ("float32", 16384): [_c(1, 512), _c(1, 1024), _c(1, 256, 8192, 2)],
    ("float32", 65536): [_c(1, 256, 8192, 8), _c(1, 512, 16384, 4), _c(1, 256, 4096, 8)],
    ("float32", 262144): [_c(1, 512, 8192, 8), _c(1, 1024, 32768, 8), _c(1, 256, 4096, 8)],
}


def section_measure(args) -> dict:
    import torch
    from triton.testing import do_bench

    from dispatch_tilelang import build as B, configs as C

    out = {"device": torch.cuda.get_device_name(), "numel": args.numel, "rows": []}
    jobs = [(dt, n, cfg) for (dt, n), cfgs in MEASURE.items() for cfg in cfgs]
    jobs += [(dt, n, ("log_softmax" if i == 0 else "logsumexp")) for dt, n in MEASURE if dt == "float32" for i in range(2)]

    def build(job):
        dt, n, cfg = job
        m = args.numel // n
        try:
            if isinstance(cfg, str):
                return job, B.build(cfg, m, n, dt, dt, C.default_config(cfg, m, n, dt, "cuda"), "cuda"), None
            return job, B.build("softmax", m, n, dt, dt, cfg, "cuda"), None
        except Exception as exc:  # noqa: BLE001
            return job, None, f"{type(exc).__name__}: {exc}"[-800:]

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        built = {(j[0], j[1], json.dumps(j[2], sort_keys=True)): (k, e) for j, k, e in pool.map(build, jobs)}
    out["compile_seconds"] = time.time() - t0
    for (dt, n), cfgs in MEASURE.items():
        tdt = getattr(torch, dt)
        nbytes = torch.tensor([], dtype=tdt).element_size()
        m = args.numel // n
        x = torch.randn(m, n, device="cuda", dtype=tdt)
        moved = 2 * m * n * nbytes
        row = {"dtype": dt, "n_cols": n, "n_rows": m, "configs": []}
        ref = torch.softmax(x.float(), -1).to(tdt)
        for cfg in cfgs:
            k, err = built[(dt, n, json.dumps(cfg, sort_keys=True))]
            rec = {"config": cfg}
            if err:
                rec["error"] = err
            else:
                try:
                    torch.testing.assert_close(k(x), ref, rtol=1.6e-2, atol=1e-4)
                    ms = do_bench(lambda: k(x), return_mode="median")
                    rec.update(ms=ms, gbps=moved / (ms * 1e-3) / 1e9)
                except Exception as exc:  # noqa: BLE001
                    rec["error"] = f"{type(exc).__name__}: {exc}"[-800:]
            row["configs"].append(rec)
        timed = [r for r in row["configs"] if "ms" in r]
        row["best_measured"] = min(timed, key=lambda r: r["ms"]) if timed else None
        t_ms = do_bench(lambda: torch.softmax(x, -1), return_mode="median")
        row["torch_softmax"] = {"ms": t_ms, "gbps": moved / (t_ms * 1e-3) / 1e9}
        buf = torch.empty_like(x)
        c_ms = do_bench(lambda: buf.copy_(x), return_mode="median")
        row["copy"] = {"ms": c_ms, "gbps": moved / (c_ms * 1e-3) / 1e9}
        for op in ("log_softmax", "logsumexp"):
            k, err = built.get((dt, n, json.dumps(op)), (None, "not built"))
            if k is None:
                continue
            try:
                torch.testing.assert_close(k(x), _reference(torch, op, x, tdt), rtol=1e-4, atol=1e-4)
                ms = do_bench(lambda: k(x), return_mode="median")
                t_op = do_bench((lambda: torch.log_softmax(x, -1)) if op == "log_softmax" else (lambda: torch.logsumexp(x, -1)),
                                return_mode="median")
                op_moved = (m * n + (m if op == "logsumexp" else m * n)) * nbytes
                row[op] = {"config": k.config, "ms": ms, "gbps": op_moved / (ms * 1e-3) / 1e9, "torch_ms": t_op,
                           "torch_gbps": op_moved / (t_op * 1e-3) / 1e9}
            except Exception as exc:  # noqa: BLE001
                row[op] = {"error": f"{type(exc).__name__}: {exc}"[-800:]}
        out["rows"].append(row)
        b = row["best_measured"] or {}
        print(f"MEASURE {dt} N={n} best={b.get('gbps', 0):.0f} {b.get('config')} torch={row['torch_softmax']['gbps']:.0f} "
              f"copy={row['copy']['gbps']:.0f} | " + ", ".join(
                  f"{c['config']['block_m']}/{c['config']['threads']}/{c['config']['tile_n']}/{c['config']['cluster']}="
                  + (f"{c['gbps']:.0f}" if "gbps" in c else "ERR:" + c.get("error", "")[:120]) for c in row["configs"]), flush=True)
        _dump(os.path.join(args.out, "measure.json"), out)
        x = ref = buf = None
        torch.cuda.empty_cache()
    return out


SECTIONS = {"check": section_check, "native": section_native, "bench": section_bench, "measure": section_measure}


def run_child(name: str, args) -> None:
    path = os.path.join(args.out, f"{name}.json")
    try:
        result = SECTIONS[name](args)
    except Exception:  # noqa: BLE001
        result = {"error": traceback.format_exc()[-4000:]}
        print(f"SECTION {name} FAILED\n{result['error']}", flush=True)
    _dump(path, result)


def report(result_dir: str, command: str) -> str:
    """Markdown for the JSON written by a run."""
    def load(name):
        p = os.path.join(result_dir, f"{name}.json")
        return json.load(open(p)) if os.path.exists(p) else None

    bench, check, native = load("bench"), load("check"), load("native")
    lines = ["# TileLang row kernels on H200", "", "Command (device machine, repo root):", "", "```", command, "```", ""]
    if bench and "rows" in bench:
        lines += [f"Device: {bench.get('device')}; numel per shape {bench['numel']:,} (M = numel / N); "
                  "GB/s = 2 x numel x bytes / time; times: `triton.testing.do_bench` medians (L2 flushed). "
                  f"Copy reference in DESIGN.md: {COPY_TBPS_REFERENCE} TB/s.", "",
                  "| dtype | N | M | TileLang tuned GB/s (config) | % of copy | TileLang default GB/s | best candidate GB/s | torch.softmax GB/s | copy GB/s | tune s |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in bench["rows"]:
            tuned, dflt, best = r.get("tuned") or {}, r.get("default") or {}, r.get("best_measured") or {}
            cfg = tuned.get("config") or r.get("tuned_config")
            cfg_s = "" if not cfg else f"bm={cfg['block_m']} th={cfg['threads']} tile_n={cfg['tile_n']} cl={cfg['cluster']}"
            pct = 100 * tuned.get("gbps", 0) / r["copy"]["gbps"] if tuned else 0
            lines.append(f"| {r['dtype']} | {r['n_cols']} | {r['n_rows']} | {tuned.get('gbps', 0):.0f} ({cfg_s}) | {pct:.0f}% | "
                         f"{dflt.get('gbps', 0):.0f} | {best.get('gbps', 0):.0f} | {r['torch_softmax']['gbps']:.0f} | "
                         f"{r['copy']['gbps']:.0f} | {r.get('tune_seconds', 0):.0f} |")
        lines += ["", "log_softmax / logsumexp, default configs (GB/s counts the bytes each op moves):", "",
                  "| dtype | N | log_softmax GB/s | torch | logsumexp GB/s | torch |", "|---|---|---|---|---|---|"]
        for r in bench["rows"]:
            ls, le = r.get("log_softmax", {}), r.get("logsumexp", {})
            lines.append(f"| {r['dtype']} | {r['n_cols']} | {ls.get('gbps', 0):.0f} | {ls.get('torch_gbps', 0):.0f} | "
                         f"{le.get('gbps', 0):.0f} | {le.get('torch_gbps', 0):.0f} |")
        lines += ["", "Every candidate (GB/s):", ""]
        for r in bench["rows"]:
            cells = ", ".join(
                f"{c['config']['block_m']}/{c['config']['threads']}/{c['config']['tile_n']}/{c['config']['cluster']}: "
                + (f"{c['gbps']:.0f}" if "gbps" in c else "ERR") for c in r["configs"])
            lines.append(f"- {r['dtype']} N={r['n_cols']} (block_m/threads/tile_n/cluster): {cells}")
        if bench.get("skipped"):
            lines += ["", f"Skipped for time: {bench['skipped']}"]
    if native:
        lines += ["", "## Native autotune on the GPU", "", "```", json.dumps(native, indent=1, default=str)[:3000], "```"]
    if check:
        lines += ["", "## Correctness vs torch on CUDA", "",
                  f"{check.get('passed')}/{check.get('total')} cases passed (compile {check.get('compile_seconds', 0):.0f} s)."]
        for c in check.get("cases", []):
            if not c["ok"]:
                lines.append(f"- FAIL {c['family']} {c['op']} N={c['n_cols']} {c['in']}->{c['out']}: {c.get('error', '')[:300]}")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results/tilelang")
    p.add_argument("--sections", default="check,native,bench")
    p.add_argument("--budget", type=float, default=200.0, help="seconds for the bench section to start new shapes")
    p.add_argument("--section-timeout", type=float, default=150.0)
    p.add_argument("--ns", default="1024,4096,16384,65536,262144")
    p.add_argument("--dtypes", default="bfloat16,float32")
    p.add_argument("--numel", type=int, default=64 << 20)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--report", default=None, help="write markdown for the JSON in this directory and exit")
    p.add_argument("--command", default="", help="the command line to quote in the report")
    args = p.parse_args()
    if args.report:
        sys.stdout.write(report(args.report, args.command))
        return 0
    os.makedirs(args.out, exist_ok=True)
    if args.child:
        run_child(args.child, args)
        return 0
    for name in args.sections.split(","):
        t0 = time.time()
        timeout = args.section_timeout + (args.budget if name == "bench" else 0)
        cmd = [sys.executable, __file__, "--child", name] + [a for a in sys.argv[1:] if a != "--child"]
        try:
            subprocess.run(cmd, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"SECTION {name} TIMED OUT after {timeout:.0f} s", flush=True)
        print(f"SECTION {name} done in {time.time() - t0:.0f} s", flush=True)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(report(args.out, " ".join(sys.argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
