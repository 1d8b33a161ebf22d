"""Shipped decisions against a fresh tune: does a new user, tuning off, get what tuning would give?

For each case (default: the shapes and ops the shipped H200 table was made from, bf16; rms_norm and
layer_norm are called with a weight, and a bias, as ``python -m dispatch tune`` calls them), two
fresh processes, each with its own empty decision cache:

``shipped``
    Tuning off (the default). The first call resolves; ``explain`` says where the decision came
    from (``shipped table`` expected); the call is then timed.
``tuned``
    Tuning on and no shipped tables (``DISPATCH_TABLES_DIR`` an empty folder; with tuning on a
    shipped decision would still answer first). The first call races every backend (its seconds
    are recorded); the call is timed.
``cards`` (in place of ``tuned`` with ``--against cards``)
    Tuning off and no shipped tables: what a user got before the tables, the backends' cost
    cards' pick and its default config. The ratio then says what the tables buy.

Timing is the protocol's (:func:`dispatch.autotune.measure`): CUDA events with L2 flushed between
repetitions, and, for a call whose host side outlasts its kernel, its back-to-back rate. Each
call is timed in ``--rounds`` rounds, the cases taking turns, and the median round kept. Writes
``shipped.json`` and ``shipped.md`` under ``--out``::

    python3 benchmarks/bench_shipped.py --out DIR [--cases op:dtype:MxN,...] [--rounds 3] [--against cards]
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

SWEEP = ("262144x256", "65536x1024", "16384x4096", "4096x16384", "1024x65536", "256x262144", "1x4096", "32x4096")
DEFAULT_CASES = ",".join(f"{op}:bfloat16:{s}" for op in ("softmax", "log_softmax", "logsumexp") for s in SWEEP)


def call_args(op: str, dtype, shape: tuple[int, ...], device: str = "cuda") -> tuple:
    """The arguments of a case's call: the softmax family over the last dim of ``randn * 4``; any
    other op (rms_norm, layer_norm: with weight, and bias) as ``python -m dispatch tune`` makes it
    (the op's sample factory), so that the call meets the table's key."""
    import torch

    if op in ("softmax", "log_softmax", "logsumexp"):
        return ((torch.randn(*shape, device=device) * 4).to(dtype), -1)
    from dispatch.ab import make_call

    args, kwargs = make_call(op, shape, dtype, torch.device(device))
    if kwargs:
        raise ValueError(f"{op}: its sample call takes keyword arguments {sorted(kwargs)}; bench_shipped passes "
                         "positional ones only")
    return tuple(args)


def child(phase: str, cases: list[str], rounds: int) -> None:
    import torch

    import dispatch
    from dispatch.autotune import TuneSettings, measure

    dispatch.configure(autotune=phase == "tuned")
    calls, out = [], {}
    for case in cases:
        op, dtype, shape = case.split(":")
        args = call_args(op, getattr(torch, dtype), tuple(int(v) for v in shape.split("x")))
        fn = getattr(dispatch, op)
        start = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - start
        d = dispatch.explain(op, *args).decision
        out[case] = {"backend": d.backend, "config": d.config.as_dict(), "source": d.config_source,
                     "reason": d.reason[:300], "first_call_s": round(first_s, 3), "samples_us": []}
        calls.append((case, lambda fn=fn, args=args: fn(*args)))
    settings = TuneSettings(warmup=25, rep=100)
    for _ in range(rounds):
        for case, call in calls:
            out[case]["samples_us"].append(measure(call, torch.device("cuda"), settings).median_us)
    for rec in out.values():
        rec["us"] = statistics.median(rec["samples_us"])
    print("RESULT " + json.dumps(out), flush=True)


def run_phase(phase: str, cases: str, rounds: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, DISPATCH_CACHE_DIR=f"{tmp}/dispatch")
        if phase in ("tuned", "cards"):  # no shipped decisions (with tuning on they would still answer first)
            os.makedirs(f"{tmp}/no-tables")
            env["DISPATCH_TABLES_DIR"] = f"{tmp}/no-tables"
        proc = subprocess.run([sys.executable, __file__, "--child", phase, "--cases", cases, "--rounds", str(rounds)],
                              env=env, capture_output=True, text=True, timeout=timeout)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{phase} phase failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT_CASES, help="op:dtype:MxN,...")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--against", choices=("tuned", "cards"), default="tuned",
                    help="the other phase: a fresh race (tuned) or tuning off without the tables (cards)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.cases.split(","), a.rounds)
        return 0
    shipped = run_phase("shipped", a.cases, a.rounds, a.timeout)
    others = run_phase(a.against, a.cases, a.rounds, a.timeout)
    other = "tuned" if a.against == "tuned" else "no table"
    rows, within = [], 0
    for case in a.cases.split(","):
        s, t = shipped[case], others[case]
        same = (s["backend"], s["config"]) == (t["backend"], t["config"])
        ratio = s["us"] / t["us"]
        ok = ratio <= 1.03
        within += ok
        rows.append({"case": case, "shipped": s, "tuned": t, "same_choice": same, "ratio": ratio, "within_3pct": ok})
        print(f"{case:32s} shipped {s['backend']:8s} {s['us']:9.2f} us ({s['source']})  {other} {t['backend']:8s} "
              f"{t['us']:9.2f} us (first call {t['first_call_s']:.1f} s)  ratio {ratio:.3f}"
              f"{'' if ok else '  > 3%'}{'  same choice' if same else ''}", flush=True)
    print(f"{within}/{len(rows)} within 3% of the {other} pick; "
          f"{sum(r['shipped']['source'] == 'shipped table' for r in rows)}/{len(rows)} from the shipped table")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        import torch

        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": a.rounds,
                "against": a.against}
        with open(os.path.join(a.out, "shipped.json"), "w") as f:
            json.dump({**meta, "rows": rows}, f, indent=1)
        against = "tuned (fresh race)" if a.against == "tuned" else "no table (cards)"
        lines = [f"{meta['device']}, torch {meta['torch']}; us per call (median of {a.rounds} rounds)", "",
                 f"| case | shipped (tuning off) | us | {against} | us | first call s | same choice "
                 f"| shipped / {other} |",
                 "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            s, t = r["shipped"], r["tuned"]
            lines.append(f"| {r['case']} | {s['backend']} ({s['source']}) | {s['us']:.2f} | {t['backend']} | "
                         f"{t['us']:.2f} | {t['first_call_s']:.1f} | {'yes' if r['same_choice'] else 'no'} | {r['ratio']:.3f}{'' if r['within_3pct'] else ' (>3%)'} |")
        lines.append("")
        lines.append(f"{within} of {len(rows)} within 3% of the {other} pick.")
        with open(os.path.join(a.out, "shipped.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
