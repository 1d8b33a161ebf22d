"""Where the time of a strided reduction goes: each kernel of the Triton strided launcher, timed alone.

For each case, op, dtype and config, the launcher's run is timed as a whole (dispatch's measure:
L2 flushed before each call, events around it) and under torch's profiler, which gives each kernel
it launches (partials, finish, the output's allocation) its own device time, averaged over the
profiled calls (the L2 flushed before each call there too). Usage (a GPU):

    python3 benchmarks/profile_strided.py --out DIR [--cases dim0_4096x4096] [--ops logsumexp]
        [--dtypes bfloat16] [--config default] [--config "I256 R8 w1 s32 EVEN PREFETCH FAST_EXP"] ...

A config is ``default`` (the launcher's pick with tuning off, to which more words may add) or the sweep's label
(``benchmarks/sweep_strided_configs.py``): ``I<BLOCK_I> R<BLOCK_R> w<num_warps> s<SPLIT_R>``, then
the flags that are on, and ``st<n>`` for ``num_stages``. Writes ``profile.json`` and ``profile.md`` under ``--out``
(after each case and op).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from dispatch.ab import measure_copy_bandwidth
from dispatch.backend import TuneSettings, measure
from dispatch_triton import strided as S

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_strided_configs import CASES, label  # noqa: E402

_FIELDS = {"I": "BLOCK_I", "R": "BLOCK_R", "w": "num_warps", "s": "SPLIT_R"}


def parse_config(text: str, p: S.StridedPlan, device: torch.device, itemsize: int) -> dict:
    """A sweep label (``I256 R8 w1 s32 EVEN PREFETCH``) as a config dict; ``default`` stands for
    the default config's words (``default KEEP_X``: the default with ``KEEP_X``)."""
    cfg: dict = {}
    for word in text.split():
        if word == "default":
            cfg.update(S.default_config(p, device, itemsize))
        elif word in S.VARIANTS:
            cfg[word] = 1
        elif word.startswith("st") and word[2:].isdigit():
            cfg["num_stages"] = int(word[2:])
        elif word.startswith("T") and word[1:].isdigit():
            cfg["TAIL"] = int(word[1:])
        elif word[:1] in _FIELDS and word[1:].isdigit():
            cfg[_FIELDS[word[:1]]] = int(word[1:])
        else:
            raise SystemExit(f"--config {text!r}: unknown word {word!r} (want I<n> R<n> w<n> s<n> st<n> T<n> or one of "
                             f"{', '.join(S.VARIANTS)})")
    return cfg


def kernel_times(run, x: torch.Tensor, flush: torch.Tensor, calls: int, how: str = "zero") -> dict[str, float]:
    """Device us per call of each kernel ``run(x)`` launches (the flush's own kernel left out).

    ``how`` the L2 flush before each call: ``zero`` writes a 256 MB buffer, as dispatch's measure
    does (the L2 is left full of lines that must be written back before they are replaced);
    ``read`` reads it (the L2 is left full of clean lines)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        run(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if how == "zero":
                flush.zero_()
            else:
                flush.max()
            run(x)
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for ev in prof.key_averages():
        total = getattr(ev, "device_time_total", None)
        if total is None:
            total = getattr(ev, "cuda_time_total", 0.0)
        if total <= 0 or ev.count < calls:
            continue
        if any(w in ev.key for w in ("FillFunctor", "reduce_kernel")):  # the flush (zero_ or max)
            continue
        name = ev.key if len(ev.key) < 60 else ev.key[:57] + "..."
        out[name] = out.get(name, 0.0) + total / calls
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", default="dim0_4096x4096", help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--ops", default="logsumexp")
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--config", action="append", help="repeatable; default: 'default'")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls per config")
    parser.add_argument("--flush", default="zero", choices=("zero", "read", "both"),
                        help="the L2 flush before each profiled call: zero (a write, as measure), read, both")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("profile_strided.py needs a CUDA device")
    device = torch.device("cuda")
    settings = TuneSettings(warmup=10, rep=40, host_bound=False, flush_l2=True)
    copy = measure_copy_bandwidth(device, settings).gbps
    flush = torch.empty(256 << 20, dtype=torch.int8, device=device)
    rows, lines = [], [f"# Strided kernels, one at a time: {torch.cuda.get_device_name()}", "",
                       f"Copy bandwidth (read + write): {copy:.0f} GB/s. us per call: the whole run "
                       "(measure, L2 flushed) and each kernel's device time (profiler, L2 flushed).", ""]
    print(f"copy bandwidth {copy:.0f} GB/s", flush=True)
    os.makedirs(args.out, exist_ok=True)

    def write() -> None:  # after each case and op: a run stopped early keeps what it timed
        with open(os.path.join(args.out, "profile.json"), "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), copy_gbps=copy, rows=rows), f, indent=1)
        with open(os.path.join(args.out, "profile.md"), "w") as f:
            f.write("\n".join(lines) + "\n")

    for name in [c for c in args.cases.split(",") if c]:
        shape, view, dim = CASES[name]
        for dtype in [getattr(torch, d) for d in args.dtypes.split(",") if d]:
            x = view(torch.randn(*shape, device=device, dtype=dtype))
            d = dim % x.dim()
            for op in [o for o in args.ops.split(",") if o]:
                p = S.plan(op, x.shape, x.stride(), (d,))
                want = getattr(torch, op)(x, d)
                nbytes = (x.numel() + want.numel()) * x.element_size()
                lines += [f"## {name} {str(dtype).replace('torch.', '')} {op}", "",
                          "| config | us | % of copy | kernels (us each) |", "|---|---|---|---|"]
                dst = torch.empty(x.numel(), dtype=x.dtype, device=device)
                flat = x.contiguous().view(-1) if not x.is_contiguous() else x.view(-1)
                ref = {}
                for how in ("zero", "read") if args.flush == "both" else (args.flush,):
                    ref.update({f"copy of x's bytes ({how} flush)": sum(
                        kernel_times(lambda t: dst.copy_(t), flat, flush, args.calls, how).values())})
                ks = "; ".join(f"{k} {v:.1f}" for k, v in ref.items())
                print(f"{name} {dtype} {op}: {ks}", flush=True)
                lines.append(f"| (reference) | | | {ks} |")
                for text in args.config or ["default"]:
                    cfg = parse_config(text, p, device, x.element_size())
                    try:
                        launcher = S.StridedLauncher(op, p, want.dtype, want.shape, device, cfg)
                        got = launcher.run(x)
                        err = (got.float() - want.float()).abs().max().item()
                        t = measure(lambda: launcher.run(x), device, settings).median_us
                        kern = {}
                        for how in ("zero", "read") if args.flush == "both" else (args.flush,):
                            tag = "" if args.flush != "both" else f" ({how} flush)"
                            kern.update({k + tag: v for k, v in
                                         kernel_times(launcher.run, x, flush, args.calls, how).items()})
                    except Exception as exc:  # noqa: BLE001 - a config the launcher refuses is reported
                        print(f"{name} {op} {text}: {type(exc).__name__}: {exc}", flush=True)
                        continue
                    pct = nbytes / (t * 1e-6) / 1e9 / copy * 100
                    row = dict(case=name, dtype=str(dtype), op=op, config=label(cfg), us=t, pct_copy=pct,
                               kernels=kern, max_abs_err=err, grid=[k.grid for k in launcher.direct])
                    rows.append(row)
                    ks = "; ".join(f"{k} {v:.1f}" for k, v in kern.items())
                    lines.append(f"| {label(cfg)} | {t:.1f} | {pct:.0f}% | {ks} |")
                    print(f"{name} {dtype} {op} {label(cfg)}: {t:.1f} us ({pct:.0f}% of copy) err {err:.2g} | {ks}",
                          flush=True)
                lines.append("")
                write()
    write()


if __name__ == "__main__":
    main()
