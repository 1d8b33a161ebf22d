"""The Triton rms_norm / layer_norm backward under a grid of launch plans, timed on one GPU.

Which plan of each shape comes closest to the copy bandwidth, and how far the default is from it.

For rms_norm (with weight) and layer_norm (with weight and bias), bf16 and fp32, and the shapes
16384x1024, 8192x2048, 4096x4096, 1024x16384, 256x65536 and 64x262144 (``--quick``: 16384x1024,
4096x4096, 256x65536), the backward of ``dispatch_triton.norm_backward.make_backward`` is built once per
plan variant (``make_backward(..., plan=overrides)``, see ``backward_plan``), its gradients
checked against torch's and the backward call alone timed, next to torch eager's backward and to
a copy of the same byte count. Variants (the default plan first, marked; duplicates of an
already listed plan dropped):

* rows held in registers (N <= 8192): tile shapes ``ROWS`` x ``num_warps`` (``ROWS`` 1-8 with
  ``ROWS * BLOCK_N`` <= 16384, 2-32 warps, 4-32 elements a thread; ``--quick``: 8-16), each with
  ``maxnreg`` None / 64 / 128 (those that fit a multiprocessor), the loads of x and dy without the
  evict_first hint (``EVICT`` False), twice the persistent programs (``G``), and with the next
  tile loaded ahead (``PREFETCH``, ``maxnreg`` 64 / 128); the default plan with the same changes.
  ``G`` not given is the programs resident at once (see ``backward_plan``), so a variant with
  more registers a thread also has fewer programs;
* long rows (the default plan: one launch whose programs exchange their sums; then two launches
  over row groups and chunks): ``BLOCK_N`` 2048 / 4096 / 8192 x
  ``num_warps`` 4 / 8 / 16 (4-32 elements a thread), each with the row groups ``GR`` it computes,
  half and twice that, and with the L2 hints (``HINTS``: the first launch's loads evict_last, the
  second's evict_first), the next row loaded ahead (``PREFETCH``), and both; and in one launch whose
  programs exchange their sums (``COOP``), with the row groups that fit and half of them, and at
  128 registers a thread; the default with its column sums taken in the launch by 32-512 of its
  programs (``FINISH``) or by a second launch, and at 80-255 registers a thread.

Timing: ``dispatch.backend.measure`` with CUDA events around each backward call (dx, dweight and
dbias: the main launch(es) and the partials' reduction), the median of ``--rep`` repetitions after
``--warmup``, the L2 flushed (a 256 MB write) before every repetition; the host's back-to-back
rate is not counted (GPU time only). A second timing (``--clean-rep`` repetitions, "clean L2")
flushes by reading 256 MB instead (no dirty lines left for the timed kernel to write back; see
``sweep_harness.clean_us``). Bytes of a case: x and dy read, dx written (M*N each), weight
read and dweight (and dbias) written (N each), in the case's dtype. "% same-size copy": of a copy
moving that many bytes (``dst.copy_(src)`` of half as many), timed the same way; "% large copy":
of ``dispatch.ab.measure_copy_bandwidth`` (512 MB). torch eager: ``torch.autograd.grad`` through a
graph of ``F.rms_norm``/``F.layer_norm`` built once (``retain_graph``). Long rows' backward is
called as a training step calls it: with the rows' statistics that its forward saves (``saves``;
here from torch), unless a plan sets ``SAVED`` False.

Check: each variant's first call's dx, dweight (and dbias) against ``torch.autograd.grad`` of the
fp32 op on the same inputs, each scaled by the reference's largest magnitude, within the dtype's
tolerance (``dispatch.backend.tolerance``); a variant that fails (or fails to build) is listed
with its reason and not timed. Each variant's row also gives the registers a thread of its
kernel(s) and the registers spilled, as the compiled kernels report them.

Compiles: ``--jobs K`` processes (default min(12, CPUs) on a GPU) first run shares of the variants
once (one case's inputs at a time), which leaves their kernels in Triton's on-disk cache; the
timing process then finds them there.

    python3 benchmarks/sweep_norm_backward.py --quick --out DIR    # ~340 plans, ~260 kernels: ~3 minutes on an H200
    python3 benchmarks/sweep_norm_backward.py --out DIR            # every shape, ~980 plans (raise --time-limit)
    python3 benchmarks/sweep_norm_backward.py --device cpu --out DIR   # smoke run: interpreter, tiny shapes
    python3 benchmarks/sweep_norm_backward.py --keys FINISH --shapes 256x65536 --out DIR   # the default, FINISH varied

Writes <out>/norm_backward.json and norm_backward.md (a summary, then a table per case).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1:][:1] == ["cpu"]:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dispatch.backend import measure, mismatch, tolerance  # noqa: E402
from dispatch_triton import norm_backward as NB  # noqa: E402
from dispatch_triton.norm_backward_coop import _norm_bwd_coop  # noqa: E402
from dispatch_triton.norm_backward_kernels import _norm_bwd, _norm_bwd_split, _norm_bwd_sums  # noqa: E402
from sweep_harness import (add_arguments, case_rows, clean_us, device_of, header, row_stats, saver,  # noqa: E402
                           settings_of, spawn_compilers, summary)

OPS = ("rms_norm", "layer_norm")
EPS = 1e-5
SHAPES = ((16384, 1024), (8192, 2048), (4096, 4096), (1024, 16384), (256, 65536), (64, 262144))
QUICK_SHAPES = ((16384, 1024), (4096, 4096), (256, 65536))
# smoke run: rows in registers, and long rows forced on short ones (2 row groups, 64-element chunks)
CPU_SHAPES = ((8, 64, None), (4, 300, (2, 64)))
CPU_VARIANTS = {"rows": [dict(ROWS=1, num_warps=2), dict(EVICT=False, maxnreg=None), dict(PREFETCH=True)],
                "split": [dict(BLOCK_N=128, num_warps=2), dict(GR=1), dict(HINTS=True, PREFETCH=True)]}


def _ept(elements: int, warps: int) -> int:
    return elements // (32 * warps)


def _fits(warps: int, maxnreg: int | None) -> bool:
    """Whether a program of ``warps`` warps at ``maxnreg`` registers a thread fits a multiprocessor."""
    return maxnreg is None or warps * 32 * maxnreg <= 65536


def _rows_variants(plan_of, base: dict, quick: bool) -> list[dict]:
    bn = base["BLOCK_N"]
    lo, hi = (8, 16) if quick else (4, 32)
    out = [dict(maxnreg=r) for r in (None, 128) if _fits(base["num_warps"], r)]
    out += [dict(EVICT=False), dict(G=2 * base["G"]), dict(PREFETCH=True)]
    # the tile loop pipelined by Triton (the next tiles' loads to shared memory), at 128 registers
    # and at fewer (more programs resident)
    out += [dict(STAGES=st, maxnreg=r) for st in (2, 3, 4) for r in (128, 96, 80) if _fits(base["num_warps"], r)]
    # the column sums finished in the launch by the programs that finish last
    out += [dict(FINISH=f) for f in (0, 16, 32, 64, 128, 256) if f <= min(base["G"], bn)]
    out += [dict(FINISH=64, ROWS=r, num_warps=w) for r, w in ((2, 8), (2, 16), (1, 8)) if 64 <= min(base["G"], bn)
            and r * bn <= 16384 and 8 <= _ept(r * bn, w) <= 32]
    for rows in (1, 2, 4, 8):
        for warps in (2, 4, 8, 16, 32):
            if rows * bn > 16384 or not lo <= _ept(rows * bn, warps) <= hi:
                continue
            tile = dict(ROWS=rows, num_warps=warps)
            out += [dict(tile, maxnreg=r) for r in (None, 64, 128) if _fits(warps, r)]
            out += [dict(tile, PREFETCH=True, maxnreg=r) for r in (64, 128) if _fits(warps, r)]
            out += [dict(tile, EVICT=False), dict(tile, G=2 * plan_of(tile)["G"])]
            out += [dict(tile, STAGES=3, maxnreg=r) for r in (128, 96) if _fits(warps, r)]
    return out


def _split_variants(plan_of, base: dict) -> list[dict]:
    # the column sums in the one launch by more or fewer of its programs, or by a second launch
    out = [dict(FINISH=f) for f in (0, 32, 64, 256, 512) if base["COOP"] and f <= base["GR"] * base["S"]]
    # the one launch at fewer or more registers a thread (more or fewer programs resident, so more
    # or fewer row groups)
    out += [dict(maxnreg=r) for r in (80, 96, 104, 128, 160, 168, 192, 255)
            if base["COOP"] and _fits(base["num_warps"], r)]
    for bn in (2048, 4096, 8192):
        for warps in (4, 8, 16):
            if not 4 <= _ept(bn, warps) <= 32:
                continue
            chunk = dict(BLOCK_N=bn, num_warps=warps, COOP=False)  # the two launches (a GPU's default is COOP)
            gr = plan_of(chunk)["GR"]
            out += [chunk] + [dict(chunk, GR=g) for g in (gr // 2, 2 * gr) if g >= 1]
            out += [dict(chunk, HINTS=True), dict(chunk, PREFETCH=True), dict(chunk, HINTS=True, PREFETCH=True)]
            out += [dict(chunk, COOP=True), dict(chunk, COOP=True, GR=max(1, plan_of(chunk)["GR"] // 2)),
                    dict(chunk, COOP=True, maxnreg=128)]
    return out


def _resolved_key(plan: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in plan.items()))


def resolve(op: str, m: int, n: int, dtype: torch.dtype, device: torch.device, split, over: dict | None) -> dict:
    """The backward plan of a case with ``over`` (the gradients the sweep asks for: layer_norm's two)."""
    return NB.backward_plan(m, n, dtype, device, split, over, grads=2 if op == "layer_norm" else 1, op=op)


def variants(m: int, n: int, dtype: torch.dtype, device: torch.device, split, quick: bool,
             op: str = "rms_norm") -> list[dict]:
    """The plan overrides of one case, ``{}`` (the default plan) first; each resolves to a different plan."""
    def plan_of(over):
        return resolve(op, m, n, dtype, device, split, over)

    base = plan_of(None)
    if device.type == "cpu":
        cands = CPU_VARIANTS[base["kind"]]
    elif base["kind"] == "rows":
        cands = _rows_variants(plan_of, base, quick)
    else:
        cands = _split_variants(plan_of, base)
    seen, kept = {_resolved_key(base)}, [{}]
    for over in cands:
        key = _resolved_key(plan_of(over))
        if key not in seen:
            seen.add(key)
            kept.append(over)
    return kept


def label(plan: dict) -> str:
    """A resolved plan in a few words."""
    if plan["kind"] == "rows":
        bits = [f"r{plan['ROWS']}", f"w{plan['num_warps']}", f"G{plan['G']}"]
    else:
        bits = [f"bn{plan['BLOCK_N']}", f"w{plan['num_warps']}", f"GR{plan['GR']}", f"S{plan['S']}"]
    bits.append(f"reg{plan['maxnreg']}" if plan["maxnreg"] else "reg-")
    if not plan.get("EVICT", True):
        bits.append("no-evict")
    if plan.get("PREFETCH"):
        bits.append("prefetch")
    if plan.get("HINTS") and not plan.get("COOP"):
        bits.append("hints")
    if plan.get("COOP"):
        bits.append("coop")
    if plan["num_stages"] != 1:
        bits.append(f"st{plan['num_stages']}")
    if plan.get("FINISH"):
        bits.append(f"finish{plan['FINISH']}")
    if plan.get("STAGES", 1) > 1:
        bits.append(f"stages{plan['STAGES']}")
    return " ".join(bits)


def shapes(args) -> list[tuple[int, int, tuple | None]]:
    if args.device == "cpu":
        return list(CPU_SHAPES)
    if args.shapes:
        return [(int(m), int(n), None) for m, n in (v.split("x") for v in args.shapes.split(","))]
    return [(m, n, None) for m, n in (QUICK_SHAPES if args.quick else SHAPES)]


def plan(args, device) -> list[tuple]:
    """Every (op, dtype, M, N, split, overrides) of the run, case by case (a run cut short keeps whole cases)."""
    jobs, keys = [], {k for k in args.keys.split(",") if k}
    for m, n, split in shapes(args):
        for dt in args.dtypes.split(","):
            for op in args.ops.split(","):
                jobs += [(op, dt, m, n, split, over)
                         for over in variants(m, n, getattr(torch, dt), device, split, args.quick, op)
                         if not keys or set(over) <= keys]
    return jobs


def _inputs(op: str, m: int, n: int, dtype: torch.dtype, device: torch.device) -> dict:
    """x, dy, weight, bias (layer_norm) and the forward's output y, made on the device."""
    g = torch.Generator(device=device).manual_seed(m * 131 + n)
    x = torch.randn((m, n), generator=g, device=device).to(dtype)
    dy = torch.randn((m, n), generator=g, device=device).to(dtype)
    w = (torch.randn(n, generator=g, device=device) * 0.5 + 1).to(dtype)
    b = (torch.randn(n, generator=g, device=device) * 0.5).to(dtype) if op == "layer_norm" else None
    return dict(x=x, dy=dy, w=w, b=b, y=_forward(op, x, w, b).detach())


def _forward(op, x, w, b):
    n = x.shape[-1]
    return F.rms_norm(x, (n,), w, EPS) if op == "rms_norm" else F.layer_norm(x, (n,), w, b, EPS)


def _leaves(inp: dict) -> list[torch.Tensor]:
    return [inp[k] for k in ("x", "w", "b") if inp[k] is not None]


def backward_call(op: str, m: int, n: int, dtype: torch.dtype, split, overrides: dict, inp: dict):
    """``call() -> (dx, dweight[, dbias])``: the Triton backward built with ``overrides`` on ``inp``."""
    backward = NB.make_backward(op, m, n, dtype, n, EPS, True, op == "layer_norm", split=split, plan=overrides)
    args = (inp["dy"], inp["x"], inp["w"]) + ((inp["b"],) if op == "layer_norm" else ()) + (inp["y"],)
    if hasattr(backward, "saves"):  # as a training step calls it: with the statistics its forward saved
        args += (row_stats(op, inp["x"], EPS),)
    return lambda: backward(*args)


def _loaded() -> dict:
    """id -> (kernel name, compiled kernel) of every backward kernel the JIT holds (none under the interpreter)."""
    found = {}
    for fn in (_norm_bwd, _norm_bwd_sums, _norm_bwd_split, _norm_bwd_coop):
        for entry in getattr(fn, "device_caches", {}).values():
            for compiled in entry[0].values():
                found[id(compiled)] = (fn.__name__, compiled)
    return found


def _registers(before: dict) -> str | None:
    """Registers a thread (and spilled ones) of the kernels loaded since ``before`` (:func:`_loaded`):
    "64", "64 (12 spilled)"; the two kernels of long rows named ("sums 40, split 64")."""
    new = [(name, getattr(c, "n_regs", None), getattr(c, "n_spills", None))
           for key, (name, c) in _loaded().items() if key not in before]
    parts = []
    for name, regs, spills in new:
        what = f"{regs}" + (f" ({spills} spilled)" if spills else "")
        parts.append(f"{name.removeprefix('_norm_bwd_')} {what}" if len(new) > 1 else what)
    return ", ".join(parts) or None


def eager_call(op: str, inp: dict):
    """torch eager's backward through a graph built once."""
    leaves = [t.detach().requires_grad_() for t in _leaves(inp)]
    out = _forward(op, leaves[0], leaves[1], leaves[2] if len(leaves) > 2 else None)
    dy = inp["dy"]
    return lambda: torch.autograd.grad(out, leaves, dy, retain_graph=True)


def reference(op: str, inp: dict) -> tuple[torch.Tensor, ...]:
    """The gradients of the fp32 op on the same inputs."""
    return tuple(g.detach() for g in eager_call(op, {k: None if v is None else v.float() for k, v in inp.items()})())


def grad_check(got, ref, dtype: torch.dtype) -> str | None:
    """Why the gradients ``got`` are not ``ref`` (each scaled by the reference's largest magnitude)
    within ``dtype``'s tolerance; None if they are."""
    for name, a, e in zip(("dx", "dweight", "dbias"), got, ref):
        scale = float(e.abs().max().clamp_min(1))
        why = mismatch(a.double() / scale, e.double() / scale, tolerance(dtype))
        if why is not None:
            return f"{name}: {why}"
    return None


def compile_shard(args, device) -> int:
    """Run this shard's variants once (one case's inputs at a time): their kernels land in Triton's disk cache."""
    k, of = (int(v) for v in args.shard.split("/"))
    jobs = plan(args, device)[k::of]
    failed, case, inp = 0, None, None
    for op, dt, m, n, split, over in jobs:
        if (op, dt, m, n) != case:
            case, inp = (op, dt, m, n), None  # the previous case's tensors freed first
            inp = _inputs(op, m, n, getattr(torch, dt), device)
        try:
            backward_call(op, m, n, getattr(torch, dt), split, over, inp)()
            torch.cuda.synchronize(device)
        except Exception as exc:  # noqa: BLE001 - the timed run reports it
            failed += 1
            print(f"compile {case} {over}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
    print(f"compile shard {k}/{of}: {len(jobs) - failed}/{len(jobs)} built", flush=True)
    return 0


def run(args, device, settings, copy_gbs, jobs, rows, save, start: float) -> None:
    cases = list(dict.fromkeys(j[:5] for j in jobs))
    for ci, (op, dt, m, n, split) in enumerate(cases):
        if args.time_limit and time.perf_counter() - start > args.time_limit:
            print(f"time limit ({args.time_limit} s) reached: {len(cases) - ci} case(s) not timed: "
                  f"{[c[:4] for c in cases[ci:]]}", flush=True)
            break
        dtype = getattr(torch, dt)
        esz = torch.empty((), dtype=dtype).element_size()
        nbytes = (3 * m * n + (2 if op == "rms_norm" else 3) * n) * esz
        inp = _inputs(op, m, n, dtype, device)
        ref = reference(op, inp)
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        copy_t = measure(lambda: dst.copy_(src), device, settings)
        same_gbps = nbytes / (copy_t.median_us * 1e-6) / 1e9
        copy_clean = clean_us(lambda: dst.copy_(src), device, args.warmup, args.clean_rep) if args.clean_rep else None
        base = {"op": op, "dtype": dt, "M": m, "N": n, "bytes": nbytes}

        def record(impl, fn, plan=None, overrides=None, default=False, error=None, t=None, clean=None):
            row = dict(base, impl=impl, default=default, plan=plan, overrides=overrides)
            if error is None:
                t = t or measure(fn, device, settings)
                gbps = nbytes / (t.median_us * 1e-6) / 1e9
                row.update(us=t.median_us, spread_us=t.spread_us, gbps=gbps, pct_copy_same=100 * gbps / same_gbps,
                           pct_copy=100 * gbps / copy_gbs)
                if clean is None and args.clean_rep:
                    clean = clean_us(fn, device, args.warmup, args.clean_rep)
                if clean is not None:
                    row["us_clean"] = clean
                    if copy_clean:
                        row["pct_copy_same_clean"] = 100 * copy_clean / clean
            else:
                row["error"] = error
            rows.append(row)
            return row

        record("same-size copy", None, t=copy_t, clean=copy_clean)
        record("torch eager", eager_call(op, inp))
        registers: dict = {}  # the plan less its programs (what a kernel is compiled for) -> registers
        for over in [j[5] for j in jobs if j[:5] == (op, dt, m, n, split)]:
            resolved = resolve(op, m, n, dtype, device, split, over)
            name, dflt = label(resolved), not over
            kernel_key = _resolved_key({k: v for k, v in resolved.items() if k not in ("G", "GR")})
            call, before = None, _loaded()
            try:
                call = backward_call(op, m, n, dtype, split, over, inp)
                why = grad_check(call(), ref, dtype)
            except Exception as exc:  # noqa: BLE001 - a row with its reason
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            registers.setdefault(kernel_key, _registers(before))
            row = record(name, call, resolved, over, dflt, error=f"failed: {why}" if why else None)
            row["registers"] = registers[kernel_key]
        print_case(rows, (op, dt, m, n), f"[{time.perf_counter() - start:6.1f} s] {ci + 1}/{len(cases)}")
        save()
        del inp, ref, src, dst


def _sorted(rows, case) -> list[dict]:
    """A case's rows: the copy and eager, then the variants fastest first (failed ones last)."""
    mine = case_rows(rows, case)
    return ([r for r in mine if not r["plan"]]
            + sorted([r for r in mine if r["plan"]], key=lambda r: r.get("us", float("inf"))))


def print_case(rows, case, head: str) -> None:
    copy, eager, dflt, best = summary(rows, case, "plan")

    def brief(r):
        return f"{r['us']:.1f} us {r['pct_copy_same']:.0f}%" if r and "us" in r else "-"

    print(f"{head} {case[0]} {case[1]} {case[2]}x{case[3]}: copy {copy['us']:.1f} us "
          f"({copy['pct_copy']:.0f}% of large); eager {brief(eager)}; default {brief(dflt)}; best "
          + (f"{best['impl']} {brief(best)} of same-size copy ({best['pct_copy']:.0f}% of large)" if best else "-"),
          flush=True)
    for r in _sorted(rows, case):
        mark = "*" if r["default"] else " "
        if "us" in r:
            clean = f"  clean L2 {r['us_clean']:7.1f} us" if "us_clean" in r else ""
            clean += f"  regs {r['registers']}" if r.get("registers") else ""
            print(f"   {mark} {r['impl']:36} {r['us']:8.1f} us {r['gbps']:6.0f} GB/s {r['pct_copy_same']:5.1f}% same "
                  f"{r['pct_copy']:5.1f}% large{clean}")
        else:
            print(f"   {mark} {r['impl']:36} {r['error'][:100]}")


def write_markdown(path: Path, meta: dict, rows: list[dict]) -> None:
    lines = [f"# Triton norm backward plans on {meta['device']}", "",
             f"Command: `{meta['command']}`", "",
             f"Large-buffer copy {meta['copy_gbs']:.0f} GB/s. Timing: {meta['timing']}. Bytes: x and dy read, dx "
             "written, weight read, dweight (and dbias) written. % same: of a copy moving the same bytes, timed the "
             "same way; % large: of the 512 MB copy. Clean L2: timed again after an L2 flush that reads 256 MB, % "
             "of the same-size copy timed that way. Plans: r ROWS, w num_warps, G persistent programs (GR row "
             "groups, S chunks of bn for long rows), reg maxnreg (-: none), no-evict: x and dy loaded without "
             "evict_first.", "",
             "## Summary", "",
             "| op | dtype | M x N | copy us (% large) | torch eager | default | default plan | best | best plan "
             "| best vs default |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    cases = list(dict.fromkeys((r["op"], r["dtype"], r["M"], r["N"]) for r in rows))

    def cell(r):
        if not r or "us" not in r:
            return "-"
        clean = f"; clean L2 {r['pct_copy_same_clean']:.0f}%" if "pct_copy_same_clean" in r else ""
        return f"{r['us']:.1f} us, {r['gbps']:.0f} GB/s ({r['pct_copy_same']:.0f}% / {r['pct_copy']:.0f}%{clean})"

    for case in cases:
        copy, eager, dflt, best = summary(rows, case, "plan")
        gain = f"{dflt['us'] / best['us']:.2f}x" if dflt and best and "us" in dflt else "-"
        lines.append(f"| {case[0]} | {case[1]} | {case[2]}x{case[3]} | {copy['us']:.1f} ({copy['pct_copy']:.0f}%) "
                     f"| {cell(eager)} | {cell(dflt)} | {dflt['impl'] if dflt else '-'} | {cell(best)} "
                     f"| {best['impl'] if best else '-'} | {gain} |")
    lines += ["", "Cells: us, GB/s (% of same-size copy / % of large copy; % of same-size copy with a clean L2). "
              "Best: the fastest plan whose gradients matched torch's.", ""]
    for case in cases:
        lines += [f"## {case[0]} {case[1]} {case[2]}x{case[3]}", "",
                  "| plan | overrides | us | GB/s | % same | % large | us, clean L2 | % same, clean L2 | registers |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in _sorted(rows, case):
            name = r["impl"] + (" **(default)**" if r["default"] else "")
            over = json.dumps(r["overrides"]) if r["overrides"] else ""
            if "us" in r:
                clean = f"{r['us_clean']:.1f}" if "us_clean" in r else "-"
                pclean = f"{r['pct_copy_same_clean']:.1f}" if "pct_copy_same_clean" in r else "-"
                lines.append(f"| {name} | {over} | {r['us']:.1f} | {r['gbps']:.0f} | {r['pct_copy_same']:.1f} "
                             f"| {r['pct_copy']:.1f} | {clean} | {pclean} | {r.get('registers') or '-'} |")
            else:
                lines.append(f"| {name} | {over} | {r['error'][:120]} | | | | | | {r.get('registers') or '-'} |")
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--shapes", default="", help="MxN,... in place of the default shapes (e.g. 256x65536)")
    parser.add_argument("--quick", action="store_true", help="three shapes and a smaller grid per shape")
    parser.add_argument("--keys", default="",
                        help="K1,K2,...: only the variants that override these plan keys alone (and the default)")
    add_arguments(parser, "benchmarks/results/norm_backward")
    args = parser.parse_args()
    device = device_of(args)
    if device is None:
        return 2
    if args.compile_only:
        return compile_shard(args, device)
    settings = settings_of(args)
    t0 = time.perf_counter()
    jobs = plan(args, device)
    print(f"{len(jobs)} plans over {len(dict.fromkeys(j[:4] for j in jobs))} cases; compiling", flush=True)
    if device.type == "cuda" and args.jobs > 0:  # the interpreter compiles nothing
        spawn_compilers(args, __file__)
    meta = header(args, device, settings)
    rows: list[dict] = []
    save = saver(args.out, "norm_backward", meta, rows, write_markdown)
    run(args, device, settings, meta["copy_gbs"], jobs, rows, save, t0)
    save()
    print(f"[{time.perf_counter() - t0:6.1f} s] wrote {args.out}/norm_backward.json, .md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
