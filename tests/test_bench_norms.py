"""The norm sweep (benchmarks/bench_norms.py) checks what it times: the forward against torch's
float64 output, the backward's gradients against torch's float64 ones (a run on the CPU, and the
check alone on gradients made wrong on purpose)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from benchmark_scripts import load

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_norms.py"


def _module():
    return load("bench_norms")


def test_cpu_run_checks_every_forward_and_backward_row(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--elements", "4096",
                           "--ops", "rms_norm,layer_norm", "--dtypes", "float32", "--no-compile", "--backends", "torch",
                           "--out", str(tmp_path)], check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads((tmp_path / "norms_sweep.json").read_text())["rows"]
    directions = {(r["op"], r["M"], r["N"]): set() for r in rows}
    for r in rows:
        assert "error" not in r, r
        assert r["check"] == "ok", r
        directions[(r["op"], r["M"], r["N"])].add(r["direction"])
    assert all(d == {"forward", "backward"} for d in directions.values()), directions
    assert "WRONG" not in (tmp_path / "norms_sweep.md").read_text()


def test_gradient_check_passes_torch_and_names_a_wrong_gradient():
    bench = _module()
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(64, 512, generator=g), torch.randn(512, generator=g), torch.randn(512, generator=g)
    dy = torch.randn(64, 512, generator=g)
    for dtype in (torch.float32, torch.bfloat16):
        args = (x.to(dtype), [512], w.to(dtype), b.to(dtype))
        ref = bench.reference_grads("layer_norm", args, {}, dy)
        leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
        grads = torch.autograd.grad(F.layer_norm(*leaves), [leaves[0], leaves[2], leaves[3]], dy.to(dtype))
        assert bench.grads_check(grads, ref, dtype) == "ok"
        dx = grads[0].clone()
        dx[7] *= 1.2  # one row's partial sums wrong: most of its values off by a fifth
        why = bench.grads_check((dx, grads[1], grads[2]), ref, dtype)
        assert why.startswith("dinput: ") and "of 32768" in why, why  # the count is over the whole gradient
        dbias = grads[2].clone()
        dbias[3] += ref[2].abs().max() * 0.1
        assert bench.grads_check((grads[0], grads[1], dbias), ref, dtype).startswith("dbias: ")
