"""Triton's norm forward under torch.autocast: every config of a call that reads bfloat16 and writes
float32, timed against torch's autocast call and torch.compile's, on one GPU.

For each case (op, M x N): a bfloat16 input, float32 weight (and bias: a model's parameters), the
result in float32 (what ``dispatch`` runs for ``torch.autocast("cuda", dtype=torch.bfloat16)``).
The candidates are every config of ``dispatch_triton.norms.config_space`` for the bfloat16 call,
for the float32 call and for the call itself (``out_dtype=torch.float32``), and for rows of up to
16384 a grid of one-pass tiles (1, 2 or 4 rows a tile of at most 16384 elements, warps,
persistent programs a multiprocessor, the weight loaded for each tile). Each is built with
``NormLauncher(..., out_dtype=torch.float32)``, checked against torch's float32 op on the same
input and timed with ``triton.testing.do_bench`` (L2 flushed, median of 100); torch eager
(``F.layer_norm(x.float(), ...)``) and torch.compile of the same function are timed the same way.

    python3 configs.py OUT                          # the cases of the results page
    python3 configs.py OUT --cases 512x32768,64x262144 --op layer_norm
    TRITON_INTERPRET=1 python3 configs.py OUT --device cpu   # a smoke run: tiny shapes, no timing

Writes OUT/configs.json (every config's time and error) and prints a line a case.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os

import torch
import torch.nn.functional as F

CASES = [("layer_norm", 4096, 4096), ("layer_norm", 16384, 4096), ("rms_norm", 4096, 4096),
         ("layer_norm", 1024, 16384), ("layer_norm", 8192, 2048), ("rms_norm", 1024, 16384),
         ("layer_norm", 256, 65536)]
CPU_CASES = [("layer_norm", 4, 64), ("rms_norm", 2, 5000)]
EPS = {"layer_norm": 1e-5, "rms_norm": 1e-6}


def candidates(tn, op: str, m: int, n: int, device: torch.device) -> list[dict]:
    """The configs timed for one case, each once: the call's own space first."""
    out: list[dict] = []
    for dtype, out_dtype in ((torch.bfloat16, torch.float32), (torch.bfloat16, None), (torch.float32, None)):
        for c in tn.config_space(m, n, dtype, device, op, out_dtype):
            if c not in out:
                out.append(c)
    if n <= 16384:
        for rows, warps, persist in itertools.product((1, 2, 4), (4, 8, 16, 32), (0, 1, 2)):
            if rows * n > 16384 or (persist and warps * persist > 32):
                continue
            for extra in ({}, {"WB_EACH": 1}) if persist == 2 else ({},):
                c = tn._cfg(max(tn._np2(n), 16), rows, 1, warps, 1, persist, **extra)
                if c not in out:
                    out.append(c)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--cases", default=None, help="MxN,MxN,... (with --op); default: the results page's cases")
    ap.add_argument("--op", default="layer_norm", choices=sorted(EPS))
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import triton

    from dispatch_triton import norms as tn

    device = torch.device(args.device)
    timed = device.type == "cuda"
    if args.cases:
        cases = [(args.op, int(a), int(b)) for a, b in (c.split("x") for c in args.cases.split(","))]
    else:
        cases = CASES if timed else CPU_CASES

    def bench(fn) -> float:
        if not timed:
            fn()
            return 0.0
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1000

    os.makedirs(args.out, exist_ok=True)
    results = []
    for op, m, n in cases:
        torch.manual_seed(0)
        x = torch.randn(m, n, device=device, dtype=torch.bfloat16)
        w, b = torch.randn(n, device=device), torch.randn(n, device=device)
        params = (w, b) if op == "layer_norm" else (w,)
        fn = getattr(F, op)

        def eager(x, *p, fn=fn, n=n, eps=EPS[op]):
            return fn(x.float(), (n,), *p, eps=eps)

        ref = eager(x, *params)
        row = {"op": op, "shape": f"{m}x{n}", "torch": bench(lambda: eager(x, *params)), "configs": []}
        if timed:
            compiled = torch.compile(eager)
            compiled(x, *params)
            row["compile"] = bench(lambda: compiled(x, *params))
        defaults = {"default": tn.default_config(m, n, torch.bfloat16, device, op, torch.float32),
                    "bf16_default": tn.default_config(m, n, torch.bfloat16, device, op),
                    "fp32_default": tn.default_config(m, n, torch.float32, device, op)}
        for c in candidates(tn, op, m, n, device):
            entry = {"config": c, **{k: c == d for k, d in defaults.items()}}
            try:
                launcher = tn.NormLauncher(op, m, n, torch.bfloat16, n, device, c, EPS[op], True,
                                           op == "layer_norm", (m, n), out_dtype=torch.float32)
                y = launcher.run(x, *params)
                entry["err"] = (y - ref).abs().max().item()
                entry["us"] = bench(lambda: launcher.run(x, *params))
            except Exception as e:  # a config this device can't hold: recorded, not timed
                entry["error"] = repr(e)[:300]
            row["configs"].append(entry)
        ok = [e for e in row["configs"] if "us" in e]
        best = min(ok, key=lambda e: e["us"])
        default = next(e for e in ok if e["default"])
        print(f"{op} {m}x{n}: torch {row['torch']:.1f} compile {row.get('compile', float('nan')):.1f} | default "
              f"{default['us']:.1f} {default['config']} | best {best['us']:.1f} {best['config']} err {best['err']:.2e}",
              flush=True)
        results.append(row)
        with open(os.path.join(args.out, "configs.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
