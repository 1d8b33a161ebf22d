"""Kernel device times (torch.profiler, CUPTI) of the smem norm backward, new against old, and host time per call."""
import statistics, sys, time
import torch
from torch.profiler import profile, ProfilerActivity
sys.path.insert(0, "backends")
from dispatch_tilelang import smem_norm_backward as NEW
try:
    from dispatch_tilelang import _old_smem_norm_backward as OLD
except ImportError:
    OLD = None

def cases():
    if sys.argv[1:2] == ["--one"]:
        op, m, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        return [(op, m, n, "bfloat16", None)]
    out = []
    for m, n in ((16384, 1024), (8192, 2048), (4096, 4096), (2048, 8192), (1024, 16384), (512, 32768), (256, 65536),
                 (64, 262144)):
        for op in ("rms_norm", "layer_norm"):
            out.append((op, m, n, "bfloat16", None))
            if n <= 2048:
                for per_sm in (4, 8):
                    cfg = [c for c in NEW.configs(n, "bfloat16") if c["threads"] == 128][0]
                    out.append((op, m, n, "bfloat16", {**cfg, "per_sm": per_sm}))
    for m, n in ((1024, 16384), (256, 65536)):
        for op in ("rms_norm", "layer_norm"):
            out.append((op, m, n, "float32", None))
    return out

def prebuild():
    from concurrent.futures import ThreadPoolExecutor
    jobs = []
    for op, m, n, dtype, cfg in cases():
        for mod in (NEW, OLD):
            if mod is not None:
                jobs.append((mod, op, n, dtype, dict(cfg or mod.default_config(n, dtype))))
    def one(j):
        mod, op, n, dtype, c = j
        try:
            mod.build(op, n, dtype, True, op == "layer_norm", 1e-5, c)
        except Exception as exc:
            print("BUILD FAIL", op, n, dtype, c, exc, flush=True)
    t0 = time.time()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, jobs))
    print(f"built {len(jobs)} in {time.time() - t0:.0f} s", flush=True)

if sys.argv[1:2] != ["--one"]:
    prebuild()
flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
one = sys.argv[1:2] == ["--one"]
for op, m, n, dtype, cfg in cases():
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(m + n)
    x = torch.randn((m, n), generator=g, device="cuda").to(dt)
    dy = torch.randn((m, n), generator=g, device="cuda").to(dt)
    w = (torch.randn(n, generator=g, device="cuda") * 0.5 + 1).to(dt)
    extra = (torch.zeros(n, device="cuda", dtype=dt),) if op == "layer_norm" else ()
    row = []
    for name, mod in (("new", NEW), ("old", OLD)):
        if mod is None or (one and name == "old"):
            continue
        c = dict(cfg or mod.default_config(n, dtype))
        bwd = mod.make(op, m, n, dt, True, op == "layer_norm", 1e-5, c)
        for _ in range(3):
            bwd(dy, x, w, *extra, None)
        torch.cuda.synchronize()
        if one:
            continue
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                flush.zero_()
                bwd(dy, x, w, *extra, None)
            torch.cuda.synchronize()
        ev = [e for e in prof.events() if e.device_type.name == "CUDA"]
        kern = [e.device_time for e in ev if e.name.startswith("main")]
        t0 = time.perf_counter()
        for _ in range(50):
            bwd(dy, x, w, *extra, None)
        torch.cuda.synchronize()
        host = (time.perf_counter() - t0) / 50 * 1e6
        k = statistics.median(kern)
        gbs = 3 * m * n * dt.itemsize / k / 1e3
        row.append(f"{name} kernel {k:7.1f} us {gbs:5.0f} GB/s  back-to-back {host:6.1f} us/call")
    shown = cfg or NEW.default_config(n, dtype)
    label = f"c{shown['cluster']} t{shown['threads']} x{shown['per_sm']}"
    if row:
        print(f"{op:10s} {dtype:8s} {m}x{n} {label:14s} | " + " | ".join(row), flush=True)
