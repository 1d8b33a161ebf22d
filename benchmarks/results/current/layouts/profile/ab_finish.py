"""logsumexp over dim 0, the finish in its own narrow blocks (now) against the partials' blocks
(before), each in its own process, twice, alternating: dispatch.logsumexp(x, 0, backend="triton")
timed with dispatch's measure (L2 flushed; at least the back-to-back rate, as bench_layouts.py).

    python3 benchmarks/results/current/layouts/profile/ab_finish.py
"""

import json
import subprocess
import sys

CASES = {"dim0_4096x4096": (4096, 4096), "dim0_65536x128": (65536, 128)}

CHILD = r'''
import json, sys, torch, dispatch
from dispatch.backend import TuneSettings, measure
from dispatch_triton import strided as S
if sys.argv[1] == "before":  # the finish as before: the partials' blocks and warps
    S.merge_block = lambda p, block_i, device=None: block_i
    S.merge_warps = lambda block_s, block_i: 4
out = {}
for name, shape in json.loads(sys.argv[2]).items():
    x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    dispatch.logsumexp(x, 0, backend="triton")
    dev = torch.device("cuda")
    host = measure(lambda: dispatch.logsumexp(x, 0, backend="triton"), dev,
                   TuneSettings(warmup=25, rep=50, host_bound=True, flush_l2=True)).median_us
    event = measure(lambda: dispatch.logsumexp(x, 0, backend="triton"), dev,
                    TuneSettings(warmup=25, rep=50, host_bound=False, flush_l2=True)).median_us
    out[name] = dict(host_bound_us=host, event_us=event)
print(json.dumps(out))
'''

rows = []
for rnd in range(2):
    for which in ("before", "now"):
        res = subprocess.run([sys.executable, "-c", CHILD, which, json.dumps(CASES)], capture_output=True, text=True)
        if res.returncode:
            print(res.stderr[-2000:])
            continue
        got = json.loads(res.stdout.strip().splitlines()[-1])
        for name, t in got.items():
            rows.append(dict(round=rnd, finish=which, case=name, **t))
            print(f"round {rnd} {which:6s} {name:16s} host-bound {t['host_bound_us']:.1f} us  events {t['event_us']:.1f} us",
                  flush=True)
