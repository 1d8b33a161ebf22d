"""benchmarks/profile_norm_coop.py: its variants run the one-launch norm forward (on the GPU when
there is one, else under the interpreter), the shipped one matching torch, the stripped ones
reporting how far they are off."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "profile_norm_coop.py"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ENV = dict(os.environ, **({} if DEVICE == "cuda" else {"TRITON_INTERPRET": "1"}))


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--device", DEVICE, "--dtype", "float32", "--shape", "3x200",
                           "--block-n", "64", "--warps", "1", "--launches", "1", *args],
                          capture_output=True, text=True, env=ENV, timeout=300)


def _error(out: str) -> float:
    found = re.search(r"error ([0-9.e+-]+)", out)
    assert found, out
    return float(found.group(1))


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_shipped_kernel_matches_torch(op):
    done = _run("--op", op)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{op} float32 3x200 base" in done.stdout
    assert _error(done.stdout) < 1e-4


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_one_merger_alternative_matches_torch(op):
    # a correct alternative to the shipped exchange: one program a row merges, the others wait
    done = _run("--op", op, "--variant", "one-merger")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{op} float32 3x200 one-merger" in done.stdout
    assert _error(done.stdout) < 1e-4


_HARD_ROWS = """
import sys, torch
sys.path.insert(0, {bench!r})
import profile_norm_coop as P
P.use_variant({variant!r})  # in this process only: it replaces the kernel's exchange
from dispatch_triton import norms as NT
cfg = dict(BLOCK_N=16, ROWS=1, SPLIT=1, PERSIST=0, num_warps=1, num_stages=1, COOP=1)
dev = torch.device({device!r})
g = torch.Generator().manual_seed(9)
wide = 1000 + 0.01 * torch.randn(3, 200, generator=g)  # rows far from zero: strided slices of a wider tensor
x, w = wide[:, 10:110].to(dev), torch.randn(100, generator=g).to(dev)
y = NT.NormLauncher("layer_norm", 3, 100, torch.float32, 200, dev, cfg, 1e-6, True, False,
                    (3, 100)).run(x, w, None)
far = (y.double() - torch.nn.functional.layer_norm(x.double(), (100,), w.double(), None, 1e-6)).abs().max()
x = torch.randn(4, 300, generator=g)
x[:, 0] = x[:, -1] = 3e4  # massive elements at the chunks' first elements
w, b = torch.randn(300, generator=g), torch.randn(300, generator=g)
x, w, b = x.to(dev), w.to(dev), b.to(dev)
y = NT.NormLauncher("layer_norm", 4, 300, torch.float32, 300, dev, dict(cfg, BLOCK_N=64), 1e-5,
                    True, True, (4, 300)).run(x, w, b)
ref = torch.nn.functional.layer_norm(x.double(), (300,), w.double(), b.double(), 1e-5)
own = torch.nn.functional.layer_norm(x, (300,), w, b, 1e-5)
print(float(far), float((y.double() - ref).abs().max()), float((own.double() - ref).abs().max()))
"""


ONE_MERGER_ON_GPU = pytest.mark.xfail(DEVICE == "cuda", strict=False, reason=(
    "on an H200 the one-merger forward (a dropped alternative) is wrong on 3 rows of 100 in chunks of "
    "16 at one warp (error 6.6; right at 64x262144 and under the interpreter): not found"))


ABSOLUTE_SUMS = pytest.mark.xfail(strict=True, reason=(
    "chunk-head and two-pass publish each chunk's sum of x, not of x less the row's shift: on rows "
    "at 1000 with a spread of 0.01 the chunks' means keep too few digits (error 1.4e-2): not shipped"))


ZERO_SHIFT = pytest.mark.xfail(strict=True, reason=(
    "zero-shift sums x itself: rows at 1000 with a spread of 0.01 lose their digits as absolute sums do"))


@pytest.mark.parametrize("variant", [pytest.param("one-merger", marks=ONE_MERGER_ON_GPU),
                                     pytest.param("chunk-head", marks=ABSOLUTE_SUMS),
                                     pytest.param("two-pass", marks=ABSOLUTE_SUMS),
                                     pytest.param("zero-shift", marks=ZERO_SHIFT), "first-shift"])
def test_alternative_exchanges_keep_rows_far_from_zero_and_massive_elements_exact(variant):
    code = _HARD_ROWS.format(bench=str(SCRIPT.parent), device=DEVICE, variant=variant)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    far, massive, torch_own = (float(v) for v in done.stdout.split()[-3:])
    assert far < 1e-4
    assert massive <= 2 * torch_own + 1e-6


def test_every_piece_taken_out_still_runs_and_says_it_is_wrong():
    # no-shift includes every variant before it: one word a chunk, so no mean is taken out
    done = _run("--op", "layer_norm", "--variant", "no-shift", "--no-bias")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no-shift no-bias" in done.stdout
    assert _error(done.stdout) > 1e-2


def test_a_stripped_variant_of_rms_norm_is_refused():
    # rms_norm publishes one word a chunk: a variant that reads layer_norm's two would wait forever
    done = _run("--op", "rms_norm", "--variant", "sum-merge")
    assert done.returncode == 2
    assert "--op layer_norm" in done.stderr


def test_unknown_variant_is_refused_with_the_choices():
    done = _run("--variant", "fast")
    assert done.returncode == 2
    assert "no-recheck" in done.stderr and "fast" in done.stderr
