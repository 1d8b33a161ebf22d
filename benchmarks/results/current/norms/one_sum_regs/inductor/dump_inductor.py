import os, sys, torch, torch.nn.functional as F
from torch._inductor.utils import run_and_get_code
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for op in ("rms_norm", "layer_norm"):
    for m, n in ((16384, 1024), (4096, 4096), (1024, 16384)):
        x = torch.randn(m, n, device="cuda")
        w = torch.randn(n, device="cuda")
        b = torch.randn(n, device="cuda")
        if op == "rms_norm":
            f = torch.compile(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-5), dynamic=False)
            args = (x, w)
        else:
            f = torch.compile(lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), dynamic=False)
            args = (x, w, b)
        _, code = run_and_get_code(f, *args)
        open(f"{out}/{op}_fp32_{m}x{n}.py", "w").write("\n\n#####\n\n".join(code))
        torch._dynamo.reset()
print("dumped")
