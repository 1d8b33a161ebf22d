"""Reductions over a dim that is not unit-stride, and strided rows, on the GPU: GB/s and % of copy.

For each layout (dim 0 of a 2-D tensor, dim 1 of (B, C, H, W), a transposed view, rows sliced
out of wider ones), op and dtype, three contenders are timed with dispatch's protocol
(``dispatch.backend.measure``: warm-up, median of repetitions, L2 flushed): torch eager,
``torch.compile`` of the same torch op, and dispatch forced to the Triton backend, with
``dispatch.configure(autotune=True)`` (unless ``--no-tune``) so that its first call sweeps the
kernel's config space; the config it runs is recorded. GB/s counts bytes read plus bytes
written; % of copy is against ``dispatch.ab.measure_copy_bandwidth`` measured in the same run.
Every output is compared with torch's first. Writes ``layouts.json`` and ``layouts.md`` under ``--out``::

    python3 benchmarks/bench_layouts.py --out DIR [--cases dim0_4096x4096,...] [--dtypes bfloat16,float32]
        [--ops softmax,log_softmax,logsumexp] [--no-compile] [--no-tune]
"""

from __future__ import annotations

import argparse
import json
import os

import torch

import dispatch
from dispatch.ab import measure_copy_bandwidth
from dispatch.backend import TuneSettings, measure

# name -> (shape of the tensor allocated, view of it, dim)
CASES = {
    "dim0_4096x4096": ((4096, 4096), lambda t: t, 0),
    "dim1_32x1024x64x64": ((32, 1024, 64, 64), lambda t: t, 1),
    "dim1_64x256x56x56": ((64, 256, 56, 56), lambda t: t, 1),
    "transposed_4096x4096": ((4096, 4096), lambda t: t.t(), -1),
    "dim0_65536x128": ((65536, 128), lambda t: t, 0),
    "rows_16384x4000_of_4096": ((16384, 4096), lambda t: t[:, :4000], -1),
}


def _nbytes(op: str, x: torch.Tensor, out: torch.Tensor) -> int:
    return x.numel() * x.element_size() + out.numel() * out.element_size()


def _contenders(op: str, dim: int, compile_too: bool) -> dict:
    eager = getattr(torch, op)
    found = {"torch": lambda x: eager(x, dim)}
    if compile_too:
        compiled = torch.compile(eager, dynamic=False)
        found["torch.compile"] = lambda x: compiled(x, dim)
    forced = getattr(dispatch, op)
    found["dispatch[triton]"] = lambda x: forced(x, dim, backend="triton")
    return found


def run(cases, dtypes, ops, compile_too: bool, device: torch.device) -> dict:
    settings = TuneSettings()
    copy = measure_copy_bandwidth(device, settings)
    rows = []
    for name in cases:
        shape, view, dim = CASES[name]
        for dtype in dtypes:
            x = view(torch.randn(*shape, device=device, dtype=dtype))
            for op in ops:
                want = getattr(torch, op)(x, dim)
                nbytes = _nbytes(op, x, want)
                for who, fn in _contenders(op, dim, compile_too).items():
                    row = {"case": name, "shape": list(x.shape), "stride": list(x.stride()), "dim": dim,
                           "dtype": str(dtype).removeprefix("torch."), "op": op, "contender": who}
                    try:
                        got = fn(x)  # compiles / tunes here, before anything is timed
                        err = (got.float() - want.float()).abs().nan_to_num().max().item()
                        timing = measure(lambda: fn(x), device, settings)
                        row.update(median_us=timing.median_us, spread_us=timing.spread_us, max_abs_err=err,
                                   gbps=nbytes / timing.median_us / 1e3)
                        row["pct_of_copy"] = 100.0 * row["gbps"] / copy.gbps
                        if who.startswith("dispatch"):
                            decision = dispatch.explain(op, x, dim, backend="triton").decision
                            row["config"] = dict(decision.config.as_dict()) if decision.config else {}
                            row["config_source"] = decision.config_source
                    except Exception as exc:  # noqa: BLE001 - a contender that fails is reported, the rest run
                        row["error"] = f"{type(exc).__name__}: {exc}"
                    rows.append(row)
                    print(_line(row), flush=True)
            del x
            torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
            "copy_gbps": copy.gbps, "copy_bytes": copy.nbytes, "rows": rows}


def _line(row: dict) -> str:
    head = f"{row['case']:<26} {row['dtype']:<9} {row['op']:<12} {row['contender']:<17}"
    if "error" in row:
        return f"{head} error: {row['error']}"
    return (f"{head} {row['median_us']:10.1f} us {row['gbps']:8.0f} GB/s {row['pct_of_copy']:5.1f}% "
            f"err {row['max_abs_err']:.2g} {row.get('config', '')}")


def markdown(result: dict) -> str:
    lines = [f"# Layouts: {result['device']}, torch {result['torch']}", "",
             f"Copy bandwidth (read + write): {result['copy_gbps']:.0f} GB/s. GB/s = (bytes read + bytes written) / "
             "median time; medians of dispatch.backend.measure (warm-up 25, 50 reps, L2 flushed).", "",
             "| case | shape / stride | dim | dtype | op | contender | us | GB/s | % of copy | max abs err |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        where = f"{'x'.join(map(str, r['shape']))} / {','.join(map(str, r['stride']))}"
        if "error" in r:
            lines.append(f"| {r['case']} | {where} | {r['dim']} | {r['dtype']} | {r['op']} | {r['contender']} | "
                         f"error: {r['error'][:80]} | | | |")
        else:
            who = r["contender"] + (f" {r['config']}" if r.get("config") else "")
            lines.append(f"| {r['case']} | {where} | {r['dim']} | {r['dtype']} | {r['op']} | {who} | "
                         f"{r['median_us']:.1f} | {r['gbps']:.0f} | {r['pct_of_copy']:.1f} | {r['max_abs_err']:.2g} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for layouts.json and layouts.md")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--ops", default="softmax,log_softmax,logsumexp")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--no-tune", action="store_true", help="dispatch runs the default config, untuned")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_layouts needs a CUDA device")
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; known: {', '.join(CASES)}")
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",") if d]
    ops = [o for o in args.ops.split(",") if o]
    dispatch.configure(autotune=not args.no_tune)
    result = run(cases, dtypes, ops, not args.no_compile, torch.device("cuda"))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "layouts.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "layouts.md"), "w") as f:
        f.write(markdown(result))
    print(f"wrote {args.out}/layouts.json and layouts.md")


if __name__ == "__main__":
    main()
