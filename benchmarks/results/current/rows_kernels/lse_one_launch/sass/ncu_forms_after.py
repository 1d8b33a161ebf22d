import sys, torch
sys.path.insert(0, "benchmarks")
import dispatch, sweep_lse_forms as f
x = (torch.randn(1024, 65536, device="cuda") * 3).to(torch.bfloat16)
dispatch.logsumexp(x, -1, backend="triton")
for form in ("twopass", "unpack"):
    run, _ = f.form_call(x, form, 4096, 2, 8); run()
torch.cuda.synchronize()
