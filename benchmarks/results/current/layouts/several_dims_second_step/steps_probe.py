"""Device time of logsumexp's steps over dims that don't collapse (Triton): the whole call, the first
step alone, the second step under every config of its tune space (the 12 fastest printed), and the
two steps chained with the three fastest and with the default. On a machine without a GPU: one
tiny case under the Triton interpreter (a smoke run; set TRITON_INTERPRET=1).

    python3 benchmarks/results/current/layouts/several_dims_second_step/steps_probe.py
"""
import torch

import dispatch
from dispatch.backend import TuneSettings, measure
from dispatch_triton.strided_steps import step_plan, StepLauncher
from dispatch_triton.strided import StridedLauncher
from dispatch_triton import strided_configs as sc

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
S = TuneSettings()
CASES = [((8, 4, 64), (0, 2))] if dev.type == "cpu" else [
    ((512, 64, 512), (0, 2)), ((4096, 64, 128), (0, 2)), ((16, 64, 32, 256), (1, 3))]
for shape, dims in CASES:
    for dt in (torch.bfloat16, torch.float32):
        x = torch.randn(shape, device=dev, dtype=dt)
        ref = torch.logsumexp(x.double(), dims).to(dt)
        whole = measure(lambda: dispatch.logsumexp(x, dims, backend="triton"), dev, S).median_us
        tc = measure(lambda: torch.logsumexp(x, dims), dev, S).median_us
        sp = step_plan(x.shape, x.stride(), dims)
        out_shape = ref.shape
        sl = StepLauncher(sp, dt, dt, out_shape, dev, None)
        l1 = sl.launchers[0]
        inter = l1.run(x)
        t1 = measure(lambda: l1.run(x), dev, S).median_us
        st2 = sp.steps[1]
        print(f"{shape} {dims} {str(dt)[6:]}: whole {whole:.1f} us (torch {tc:.1f}); step1 {t1:.1f}; "
              f"step2 plan {st2.plan}", flush=True)
        rows = []
        for cfg in sc.config_space(st2.plan, dev, 4):
            try:
                l2 = StridedLauncher("logsumexp", st2.plan, dt, tuple(out_shape), dev, cfg)
                y = l2.run(inter)
                ok = torch.allclose(y.double(), ref.double(), rtol=2e-2, atol=2e-2)
                t2 = measure(lambda: l2.run(inter), dev, S).median_us
                rows.append((t2, ok, cfg))
            except Exception as e:
                rows.append((float("inf"), False, f"{cfg} {type(e).__name__}: {str(e)[:120]}"))
        d = sc.default_config(st2.plan, dev, 4)
        for t2, ok, cfg in sorted(rows, key=lambda r: r[0])[:12]:
            print(f"   step2 {t2:7.1f} {'ok' if ok else 'BAD'} {'(default) ' if cfg == d else ''}{cfg}", flush=True)
        print("   default step2:", [f"{r[0]:.1f}" for r in rows if r[2] == d], flush=True)
        best = [r for r in sorted(rows, key=lambda r: r[0]) if r[1]][:3]
        for _, _, cfg in best + [r for r in rows if r[2] == d]:
            l2 = StridedLauncher("logsumexp", st2.plan, dt, tuple(out_shape), dev, cfg)
            chain = measure(lambda: l2.run(l1.run(x)), dev, S).median_us
            print(f"   chain step1+step2 {chain:7.1f} {'(default) ' if cfg == d else ''}{cfg}", flush=True)
