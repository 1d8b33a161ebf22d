"""Does a training call of Triton's layer_norm wait on the GPU? The CUDA runtime calls of 30 eager
steps (op + autograd.grad) under torch.profiler, and the step's wall time back to back against
the same steps with the host's work only (forward and backward launched, device idle-waiting
excluded): any cudaStreamSynchronize / cudaDeviceSynchronize / cudaMemcpy(DtoH) / cudaFree /
cudaEventSynchronize listed here is a wait of the host on the device."""
import os
import sys
import time
import torch
import dispatch
from torch.profiler import profile, ProfilerActivity

dev = os.environ.get("DEV", "cuda")
dt = torch.bfloat16


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


for spec in sys.argv[1].split(","):
    op, shape = spec.split(":")
    m, n = (int(v) for v in shape.split("x"))
    x = torch.randn(m, n, device=dev, dtype=dt, requires_grad=True)
    w = torch.randn(n, device=dev, dtype=dt, requires_grad=True)
    b = torch.randn(n, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(m, n, device=dev, dtype=dt)
    for backend in os.environ.get("BACKENDS", "triton,torch").split(","):
        def step():
            if op == "layer_norm":
                y = dispatch.layer_norm(x, (n,), w, b, backend=backend)
                return torch.autograd.grad(y, [x, w, b], dy)
            y = dispatch.rms_norm(x, (n,), w, backend=backend)
            return torch.autograd.grad(y, [x, w], dy)
        for _ in range(30):
            step()
        sync()
        walls = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(50):
                step()
            sync()
            walls.append((time.perf_counter() - t0) / 50 * 1e6)
        walls.sort()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(30):
                step()
            sync()
        rt = {}
        kern = {}
        for e in prof.events():
            name = e.name
            if name.startswith("cuda") or name.startswith("cu"):
                rt.setdefault(name, [0, 0.0])
                rt[name][0] += 1
                rt[name][1] += e.cpu_time_total
            if e.device_type == torch.autograd.DeviceType.CUDA:
                kern.setdefault(name[:60], [0, 0.0])
                kern[name[:60]][0] += 1
                kern[name[:60]][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        print(f"== {op} {m}x{n} {backend}: step wall {walls[3]:.1f} us (min {walls[0]:.1f})", flush=True)
        for name, (cnt, us) in sorted(rt.items(), key=lambda kv: -kv[1][1]):
            print(f"   runtime {name:40s} {cnt / 30:5.1f}/step {us / 30:8.1f} us/step", flush=True)
        for name, (cnt, us) in sorted(kern.items(), key=lambda kv: -kv[1][1])[:8]:
            print(f"   kernel  {name:60s} {cnt / 30:5.1f}/step {us / 30:8.1f} us/step", flush=True)
