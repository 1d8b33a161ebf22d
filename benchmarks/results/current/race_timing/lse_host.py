"""Host cost of logsumexp vs softmax on Triton, layer by layer, interleaved rounds."""
import cProfile, pstats, io, sys, time, statistics
import torch
import dispatch
sys.path.insert(0, "benchmarks")
from profile_call import per_call
from dispatch_triton import launch as L
from dispatch_triton.configs import default_config
dev = torch.device("cuda")
for shape in [(1, 4096), (1, 32768), (4, 50257)]:
    M, N = shape
    x = torch.randn(shape, device=dev, dtype=torch.bfloat16)
    sm_cfg = default_config("softmax", M, N, x.dtype); lse_cfg = default_config("logsumexp", M, N, x.dtype)
    sm = L.Launcher("softmax", M, N, x.dtype, x.dtype, N, dev, sm_cfg, like_input=True)
    lse = L.Launcher("logsumexp", M, N, x.dtype, x.dtype, N, dev, lse_cfg)
    so, lo = sm.run(x), lse.run(x); sm.run(x); lse.run(x)
    c = {
      "empty_like(x)": lambda: torch.empty_like(x),
      "empty(M, dtype, device)": lambda: torch.empty(M, dtype=x.dtype, device=dev),
      "x.new_empty((M,))": lambda: x.new_empty((M,)),
      "softmax launch": lambda: sm.launch(x, so),
      "lse launch": lambda: lse.launch(x, lo),
      "softmax run": lambda: sm.run(x),
      "lse run": lambda: lse.run(x),
      "dispatch.softmax[triton]": lambda: dispatch.softmax(x, -1, backend="triton"),
      "dispatch.logsumexp[triton]": lambda: dispatch.logsumexp(x, -1, backend="triton"),
      "dispatch.softmax": lambda: dispatch.softmax(x, -1),
      "dispatch.logsumexp": lambda: dispatch.logsumexp(x, -1),
      "torch.softmax": lambda: torch.softmax(x, -1),
    }
    for f in c.values(): f()
    res = {k: [] for k in c}
    for r in range(9):
        for k, f in c.items():
            res[k].append(per_call(f, 200, 1, synced=False))
    print(f"{M}x{N} sm={sm_cfg['path']}/{sm_cfg['BLOCK_N']} lse={lse_cfg['path']}/{lse_cfg['BLOCK_N']} host us (median of 9 interleaved rounds):")
    for k, v in res.items():
        print(f"  {k:30s} {statistics.median(v):6.2f}  [{min(v):.2f}..{max(v):.2f}]")
    for name, f in [("logsumexp[triton]", c["dispatch.logsumexp[triton]"]), ("softmax[triton]", c["dispatch.softmax[triton]"])]:
        pr = cProfile.Profile(); pr.enable()
        for _ in range(3000): f()
        pr.disable(); torch.cuda.synchronize()
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(10)
        print(f"--- cProfile {name} {M}x{N}"); print("\n".join(l for l in s.getvalue().splitlines() if l.strip())[:2500])
