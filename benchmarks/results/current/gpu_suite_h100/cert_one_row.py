import torch
from dispatch_pytest.cases import Case
from dispatch_pytest.conformance import certify
cases = [Case("logsumexp", dt, (1, n)) for dt in (torch.float32, torch.float16, torch.bfloat16) for n in (65536, 262144)]
report = certify("triton", cases)
print(report)
raise SystemExit(1 if report.failed else 0)
