"""Where a 2-byte logsumexp's time goes: forms of one chunk's (max, sum of exp) raced on a GPU.

logsumexp reads each element once and writes one value a row. In bf16 it has held about 3.0 TB/s on
an H200 at every row length (72-79% of a copy there) while fp32 reaches 3.6-4.0: a 2-byte element
costs the kernel as much work as a 4-byte one, for half the bytes. This script times, in one
persistent kernel that walks every chunk of every row (the next chunk loading while one is reduced,
as Triton's ``chunks`` path does; rows a whole number of chunks), what a chunk costs in each form:

- ``read``: the sum of the chunk's values (a load and a convert an element: the floor)
- ``max``: the chunk's max only
- ``twopass``: the max, then the sum of ``exp2(x * log2e - max * log2e)`` (one ``ex2.approx`` an
  element): the form the shipped kernel takes
- ``group``: the max of each thread's group of ``G`` elements (one 16-byte load), the exps about the
  group's max, and the groups' sums rescaled by one exp a group: no wait for the chunk's max before
  the exps
- ``unpack``: ``twopass`` with each pair of bf16 widened to fp32 by one shift and one mask (inline PTX)
- ``packed``: ``twopass`` with two exps in one ``ex2.approx.ftz.bf16x2`` (their arguments rounded to
  bf16: checked against torch below, for the record)
- ``staged``: ``twopass`` with no chunk held in registers while the next one loads: Triton's software
  pipeliner (``tl.range(..., num_stages=S)``, each of ``--stages``) copies the next ``S - 1`` chunks
  into shared memory with ``cp.async`` while one is reduced. Compiled for sm_90 by Triton 3.6, a thread
  keeps 80 registers at 4096 x 2 from 1 to 6 stages, so an SM holds 192-216 KB of 2-byte chunks in
  flight at 3-4 stages where the shipped register-held kernel holds 64 KB (at most 96 KB at any of
  its configs). Its programs an SM are capped at what the stages' shared memory lets an SM hold.

next to dispatch's logsumexp on Triton and TileLang (``--paths``: also every config of Triton's
``split`` and ``chunks`` paths, each ``chunks`` config also staged at each of ``--stages``),
``torch.amax`` (a read-only reduction of the
same bytes) and a copy. ``--timer flush`` clears the L2 before each call (memory-bound figures);
``--timer graph`` replays calls back to back with no flush, so an input that fits the L2 shows each
form's compute ceiling in elements a second. Every form's logsumexp (its partials merged on the
host) is checked against torch in float64 first.

    python3 benchmarks/sweep_lse_forms.py --out OUT --shapes 1024x65536,256x262144,4096x16384
    python3 benchmarks/sweep_lse_forms.py --out OUT --timer graph --shapes 64x65536,256x16384
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import torch
import triton
import triton.language as tl

import dispatch
from dispatch_triton.launch import SM_SMEM
from dispatch_triton.lse_chunks import _lse_chunk_load
from dispatch_triton.row_math import _exp2_fast
from sweep_harness import race_table, write_race_markdown

LOG2E = 1.4426950408889634
FORMS = {"read": 0, "max": 1, "twopass": 2, "group": 3, "packed": 4, "unpack": 5, "staged": 6}
_INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")  # tl.exp2 there: no inline PTX


@triton.jit
def _ex2(v):
    if _INTERPRETED:
        return tl.exp2(v)
    return _exp2_fast(v)


@triton.jit
def _ex2_bf16x2(v):
    if _INTERPRETED:
        return tl.exp2(v.to(tl.float32)).to(tl.bfloat16)
    return tl.inline_asm_elementwise("ex2.approx.ftz.bf16x2 $0, $1;", "=r,r", [v], dtype=tl.bfloat16,
                                     is_pure=True, pack=2)


@triton.jit
def _widen_bf16x2(v):
    if _INTERPRETED:
        return v.to(tl.float32)
    return tl.inline_asm_elementwise("shl.b32 $0, $2, 16;\n\tand.b32 $1, $2, 0xffff0000;", "=r,=r,r", [v],
                                     dtype=tl.float32, is_pure=True, pack=2)


@triton.jit
def _chunk_ms(xr, FORM: tl.constexpr, BLOCK_N: tl.constexpr, G: tl.constexpr):
    if FORM == 5:
        x = _widen_bf16x2(xr)
    else:
        x = xr.to(tl.float32)
    L: tl.constexpr = 1.4426950408889634
    if FORM == 0:
        m = tl.max(x, 0) * 0.0
        s = tl.sum(x, 0)
    elif FORM == 1:
        m = tl.max(x, 0)
        s = m * 0.0
    elif FORM == 2 or FORM == 5:
        m = tl.max(x, 0)
        me = tl.where(tl.abs(m) == float("inf"), 0.0, m)
        s = tl.sum(_ex2(x * L - me * L), 0)
    elif FORM == 3:
        xg = tl.reshape(x, [BLOCK_N // G, G])
        gm = tl.max(xg, 1)
        ge = tl.where(tl.abs(gm) == float("inf"), 0.0, gm)
        sg = tl.sum(_ex2(xg * L - ge[:, None] * L), 1)
        m = tl.max(gm, 0)
        me = tl.where(tl.abs(m) == float("inf"), 0.0, m)
        s = tl.sum(tl.where(sg == 0.0, 0.0, sg * _ex2(ge * L - me * L)), 0)
    else:
        m = tl.max(x, 0)
        me = tl.where(tl.abs(m) == float("inf"), 0.0, m)
        s = tl.sum(_ex2_bf16x2((x * L - me * L).to(tl.bfloat16)).to(tl.float32), 0)
    return m, s


@triton.jit
def _lse_forms(x_ptr, ws_ptr, total, n_split, N, stride, FORM: tl.constexpr, BLOCK_N: tl.constexpr,
               G: tl.constexpr):
    # persistent programs over every chunk of every row (program p: chunks p, p + P, ...), the next
    # chunk loading while this one is reduced, each loaded as the shipped ``chunks`` path loads a
    # whole chunk (EVEN); each chunk's (max, sum) to the workspace
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    xr, _ = _lse_chunk_load(x_ptr, pid.to(tl.int64), n_split, total, N, stride, 0, 1, BLOCK_N, 8)
    for t0 in range(pid, total, nprog):
        t = tl.cast(t0, tl.int64)
        xn, _ = _lse_chunk_load(x_ptr, t + nprog, n_split, total, N, stride, 0, 1, BLOCK_N, 8)
        m, s = _chunk_ms(xr, FORM, BLOCK_N, G)
        tl.store(ws_ptr + t * 2, m)
        tl.store(ws_ptr + t * 2 + 1, s)
        xr = xn


@triton.jit
def _lse_staged(x_ptr, ws_ptr, total, n_split, stride, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    # ``twopass`` over every chunk of every row (program p: chunks p, p + P, ...), the next STAGES - 1
    # chunks copied into shared memory by Triton's pipeliner while this one is reduced
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    for t0 in tl.range(pid, total, nprog, num_stages=STAGES):
        t = tl.cast(t0, tl.int64)
        xr = tl.load(x_ptr + (t // n_split) * stride + (t % n_split) * BLOCK_N + cols, eviction_policy="evict_first")
        m, s = _chunk_ms(xr, 2, BLOCK_N, 1)
        tl.store(ws_ptr + t * 2, m)
        tl.store(ws_ptr + t * 2 + 1, s)


def staged_per_sm(per_sm: int, block_n: int, stages: int, elem_bytes: int) -> int:
    """``per_sm`` capped at the programs whose ``stages - 1`` chunks in shared memory an SM holds
    (a persistent program that is not resident would only start when another ends)."""
    return max(1, min(per_sm, SM_SMEM // (max(stages - 1, 1) * block_n * elem_bytes + 1024)))


def form_call(x: torch.Tensor, form: str, block_n: int, warps: int, per_sm: int, stages: int = 3):
    """A callable running one form over ``x`` (M x N, rows dense), and the function that merges its
    partials into the rows' logsumexp (the merge is for checking, not timed). ``stages``: the
    ``staged`` form's."""
    m, n = x.shape
    if n % block_n:
        raise ValueError(f"rows of {n} are not a whole number of {block_n}-element chunks")
    n_split = n // block_n
    total = m * n_split
    ws = torch.empty(total * 2, device=x.device, dtype=torch.float32)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 2
    if form == "staged":
        per_sm = staged_per_sm(per_sm, block_n, stages, x.element_size())
    grid = (min(total, sms * per_sm),)
    g = 16 // x.element_size()

    def run():
        if form == "staged":
            _lse_staged[grid](x, ws, total, n_split, x.stride(0), BLOCK_N=block_n, STAGES=stages, num_warps=warps)
        else:
            _lse_forms[grid](x, ws, total, n_split, n, x.stride(0), FORM=FORMS[form], BLOCK_N=block_n, G=g,
                             num_warps=warps)
        return ws

    def merged():
        p = run().view(m, n_split, 2).double()
        pm, ps = p[..., 0], p[..., 1]
        big = pm.amax(1)
        return big + torch.log((ps * torch.exp(pm - big[:, None])).sum(1))

    return run, merged


def path_calls(x: torch.Tensor, stages) -> dict:
    """``{label: (out, launch)}``: Triton's logsumexp over ``x`` at every config of its ``split`` and
    ``chunks`` paths in the config space, and each ``chunks`` config again staged at each of
    ``stages`` (its ``num_stages``)."""
    from dispatch_triton import configs, launch as tlaunch

    stages = list(stages)
    out = {}
    for c in configs.config_space("logsumexp", x.shape[0], x.shape[1], x.dtype):
        if c["path"] not in ("split", "chunks"):
            continue
        twins = [dict(c, num_stages=st) for st in stages] if c["path"] == "chunks" and c["num_stages"] == 1 else []
        for cfg in [c] + twins:
            label = f"triton {cfg['path']} {cfg['BLOCK_N']}x{cfg['num_warps']}" + (
                f" staged{cfg['num_stages']}" if cfg["num_stages"] > 1 else "")
            out[label] = tlaunch.prepare("logsumexp", x, x.dtype, cfg)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="1024x65536,256x262144,4096x16384")
    ap.add_argument("--dtypes", default="bfloat16")
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--configs", default="4096x2x16,4096x2x32,8192x4x8,2048x1x32",
                    help="BLOCK_N x warps x programs an SM, comma-separated")
    ap.add_argument("--stages", default="3,4", help="the staged form's stages, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timer", choices=("flush", "graph"), default="flush")
    ap.add_argument("--backends", default="triton,tilelang", help="dispatch's backends to race (forced by name)")
    ap.add_argument("--paths", action="store_true",
                    help="race every config of Triton's split and chunks paths too, each chunks config also staged "
                         "(num_stages: each of --stages)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    from dispatch_triton import launch as tlaunch

    rows, meta = [], {"columns": "case", "timer": args.timer, "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__, "triton": triton.__version__, "dispatch_triton": tlaunch.__file__}
    print(meta, flush=True)
    for dtype in args.dtypes.split(","):
        dt = getattr(torch, dtype)
        for shape in args.shapes.split(","):
            m, n = map(int, shape.split("x"))
            x = (torch.randn(m, n, device="cuda") * 3).to(dt)
            ref = torch.logsumexp(x.double(), -1)
            fns = {"copy": lambda x=x: x.clone(), "torch.amax (read-only)": lambda x=x: torch.amax(x, -1),
                   "torch.logsumexp": lambda x=x: torch.logsumexp(x, -1)}
            for name in [b for b in args.backends.split(",") if b]:
                try:
                    got = dispatch.logsumexp(x, -1, backend=name)
                    err = (got.double() - ref).abs().max().item()
                    fns[f"dispatch {name}"] = lambda x=x, name=name: dispatch.logsumexp(x, -1, backend=name)
                    print(f"{dtype} {shape} dispatch {name}: max error {err:.3g}", flush=True)
                except Exception as exc:  # noqa: BLE001 - a backend that refuses is said and left out
                    print(f"{dtype} {shape} dispatch {name}: {type(exc).__name__}: {exc}"[:300], flush=True)
            if args.paths:
                for label, (got, launch) in path_calls(x, map(int, args.stages.split(","))).items():
                    launch()
                    err = (got.double() - ref).abs().max().item()
                    print(f"{dtype} {shape} {label}: max error {err:.3g}", flush=True)
                    fns[label] = launch
            for form in [f for f in args.forms.split(",") if f]:
                if form in ("packed", "unpack") and dt != torch.bfloat16:
                    continue
                for cfg in args.configs.split(","):
                    bn, w, per = map(int, cfg.split("x"))
                    for stages in map(int, args.stages.split(",")) if form == "staged" else [0]:
                        label = f"{form}{stages or ''} {cfg}"
                        run, merged = form_call(x, form, bn, w, per, stages)
                        if form not in ("read", "max"):
                            err = (merged() - ref).abs().max().item()
                            print(f"{dtype} {shape} {label}: max error {err:.3g}", flush=True)
                            if not math.isfinite(err) or err > 0.05:
                                print("  -> wrong, not timed", flush=True)
                                continue
                        fns[label] = run
            nbytes = x.numel() * x.element_size()
            case = {"case": f"logsumexp {dtype} {shape}"}
            got = race_table(fns, args.rounds, nbytes, 2 * nbytes, case, case["case"], timer=args.timer)
            for r in got:
                print(r["line"], flush=True)
                r["melem_per_us"] = x.numel() / (sorted(r["us"])[len(r["us"]) // 2]) / 1e6
            rows += got
    write_race_markdown(out / f"lse_forms_{args.timer}.md", meta, rows)
    (out / f"lse_forms_{args.timer}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
