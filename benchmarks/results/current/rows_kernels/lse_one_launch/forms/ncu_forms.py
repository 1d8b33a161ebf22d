"""ncu of dispatch's Triton logsumexp and three forms of sweep_lse_forms.py: python3 ncu_forms.py bfloat16 1024x65536"""
import sys, torch, triton
sys.path.insert(0, "benchmarks")
import dispatch, sweep_lse_forms as f
dt = getattr(torch, sys.argv[1]); m, n = map(int, sys.argv[2].split("x"))
x = (torch.randn(m, n, device="cuda") * 3).to(dt)
dispatch.logsumexp(x, -1, backend="triton")
for form, cfg in (("twopass", "4096x2x16"), ("group", "4096x2x16"), ("read", "4096x2x16")):
    bn, w, per = map(int, cfg.split("x"))
    run, _ = f.form_call(x, form, bn, w, per); run()
torch.cuda.synchronize()
