"""bench_launch's arguments: a bad one is refused before anything runs, naming what would work."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmark_scripts import DIR


@pytest.mark.parametrize("argv, says", [
    (["--ops", "softmax", "--dim", "0,2"], "several dims are for logsumexp only"),
    (["--ops", "softmax,sofmax"], "unknown ['sofmax']; choose among softmax, log_softmax, logsumexp"),
    (["--ops", "rms_norm", "--dim", "0"], "the norms run over the last dim"),
    (["--ops", "logsumexp", "--dim", "0:2"], "give a dim (-1) or several dims for logsumexp (0,2)"),
])
def test_a_bad_argument_is_refused_with_what_would_work(argv, says):
    proc = subprocess.run([sys.executable, str(DIR / "bench_launch.py"), *argv],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr[-2000:]
