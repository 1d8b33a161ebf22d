"""benchmarks/profile_norm_coop.py: its variants run the one-launch norm forward under the
interpreter, the shipped one matching torch, the stripped ones reporting how far they are off."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "profile_norm_coop.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--dtype", "float32", "--shape", "3x200",
                           "--block-n", "64", "--warps", "1", "--launches", "1", *args],
                          capture_output=True, text=True, env=env, timeout=300)


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


def test_every_piece_taken_out_still_runs_and_says_it_is_wrong():
    # no-shift includes every variant before it: one word a chunk, so no mean is taken out
    done = _run("--op", "layer_norm", "--variant", "no-shift", "--no-bias")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no-shift no-bias" in done.stdout
    assert _error(done.stdout) > 1e-2


def test_unknown_variant_is_refused_with_the_choices():
    done = _run("--variant", "fast")
    assert done.returncode == 2
    assert "no-recheck" in done.stderr and "fast" in done.stderr
