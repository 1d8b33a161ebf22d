"""Column sums of the norm backward's partials: kernel times inside real backwards (torch.profiler),
and the column-sum kernel alone under other tile shapes, its partials fresh in L2 (just written)."""
import sys
import statistics
import torch
sys.path.insert(0, "benchmarks")  # run from the repository root
from sweep_harness import row_stats  # noqa: E402
from dispatch_triton import norm_backward as NB  # noqa: E402
from dispatch_triton.norm_backward_kernels import _column_sum  # noqa: E402

dev = torch.device("cuda")
flush = torch.empty(256 << 20, dtype=torch.int8, device=dev)
print("== kernel times inside the backward (us, mean of 20 calls, L2 flushed before each)")
for op in ("rms_norm", "layer_norm"):
    for dtype in (torch.bfloat16, torch.float32):
        for m, n in ((16384, 1024), (8192, 2048), (4096, 4096), (2048, 8192), (1024, 16384), (256, 65536)):
            x = torch.randn(m, n, device=dev, dtype=dtype)
            dy = torch.randn_like(x)
            w = torch.randn(n, device=dev, dtype=dtype)
            b = torch.randn(n, device=dev, dtype=dtype)
            layer = op == "layer_norm"
            bw = NB.make_backward(op, m, n, dtype, n, 1e-5, True, layer)
            args = (dy, x, w) + ((b,) if layer else ()) + (x,)
            if hasattr(bw, "saves"):
                args += (row_stats(op, x, 1e-5),)
            for _ in range(3):
                bw(*args)
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    flush.zero_()
                    bw(*args)
                torch.cuda.synchronize()
            times = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA and ("norm" in e.name or "column" in e.name):
                    times.setdefault(e.name, []).append(e.device_time)
            plan = NB.backward_plan(m, n, dtype, dev)
            g = plan.get("G", plan.get("GR"))
            print(f"{op:10s} {str(dtype)[6:]:8s} {m}x{n}: G={g} " +
                  ", ".join(f"{k} {statistics.mean(v):.1f}" for k, v in times.items()), flush=True)

print("== the column-sum kernel alone, partials just written (us, median of 50)")
def np2(v):
    return 1 << (v - 1).bit_length()
for g, n in ((528, 1024), (528, 2048), (264, 4096), (264, 8192), (66, 16384), (16, 65536)):
    for k in (1, 2):
        p = torch.randn(k * g * n, device=dev)
        outs = [torch.empty(n, device=dev, dtype=torch.bfloat16) for _ in range(k)]
        res = []
        for bn, bg, warps in ((32, 128, 4), (16, 128, 4), (16, 256, 4), (16, 512, 8), (32, 512, 8), (64, 64, 4),
                              (8, 512, 4), (32, 256, 8), (128, 32, 4), (256, 16, 4)):
            bgx = min(bg, np2(g))
            grid = (-(-n // bn), k)
            def call():
                _column_sum[grid](p, outs[0], outs[-1], g, n, BLOCK_G=bgx, BLOCK_N=bn, num_warps=warps, num_stages=1)
            call()
            ref = p.view(k, g, n).sum(1)
            assert torch.allclose(outs[0].float(), ref[0].bfloat16().float(), rtol=2e-2, atol=1e-1)
            ts = []
            for _ in range(50):
                torch.cuda._sleep(200000)  # the GPU busy while the host queues the rest
                p.mul_(1.0)  # the partials written, in L2
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); call(); e.record()
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e) * 1e3)
            res.append((statistics.median(ts), f"bn{bn} bg{bgx} w{warps}"))
        res.sort()
        print(f"G={g} N={n} k={k}: " + ", ".join(f"{lab} {t:.2f}" for t, lab in res[:6]) +
              f" | default {[t for t, lab in res if lab.startswith('bn32 bg' + str(min(128, np2(g))) + ' w4')][0]:.2f}",
              flush=True)
