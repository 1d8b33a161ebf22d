"""bench_launch's arguments: a bad one is refused before anything runs, naming what would work."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmark_scripts import DIR, load


@pytest.mark.parametrize("argv, says", [
    (["--ops", "softmax", "--dim", "0,2"], "several dims are for logsumexp only"),
    (["--ops", "softmax,sofmax"], "unknown ['sofmax']; choose among softmax, log_softmax, logsumexp"),
    (["--ops", "rms_norm", "--dim", "0"], "the norms run over the last dim"),
    (["--ops", "logsumexp", "--dim", "0:2"], "give a dim (-1) or several dims for logsumexp (0,2)"),
    (["--ops", "logsumexp", "--triton-twin", "num_stages"], "expected KEY=VALUE[,KEY=VALUE], e.g. num_stages=3"),
    (["--ops", "logsumexp", "--triton-twin", "maxnreg=80,"], "expected KEY=VALUE[,KEY=VALUE]"),
    (["--ops", "rms_norm", "--triton-twin", "maxnreg=80"], "--triton-twin times the softmax family's row kernel"),
    (["--ops", "softmax", "--shapes", "8x16x32", "--triton-twin", "maxnreg=80"], "2-D --shapes"),
])
def test_a_bad_argument_is_refused_with_what_would_work(argv, says):
    proc = subprocess.run([sys.executable, str(DIR / "bench_launch.py"), *argv],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr[-2000:]


def test_a_triton_twin_changes_the_shapes_default_config_and_reports_a_refused_one():
    """The twins run through the launcher a resolved call uses (the interpreter here): the default
    config for the shape, the same with the keys changed, and a twin the launcher refuses raises when
    called, so the row reports it rather than the run stopping."""
    pytest.importorskip("triton")
    import torch
    from dispatch_triton import configs

    bench_launch = load("bench_launch")

    assert bench_launch.parse_twin("num_stages=3, maxnreg=64,path=chunks") == {
        "num_stages": 3, "maxnreg": 64, "path": "chunks"}
    x = torch.randn(4, 40000)
    twins = bench_launch.triton_twins("logsumexp", x, ["path=chunks,num_stages=2", "maxnreg=8"])
    assert list(twins) == ["triton default", "triton path=chunks,num_stages=2", "triton maxnreg=8"]
    want = torch.logsumexp(x, -1)
    assert torch.allclose(twins["triton default"](x, -1), want, atol=1e-4)
    staged = twins["triton path=chunks,num_stages=2"]
    assert torch.allclose(staged(x, -1), want, atol=1e-4)
    assert staged.__kwdefaults__["run"].launcher.config["path"] == "chunks"  # the launcher it runs
    assert staged.__kwdefaults__["run"].launcher.config["num_stages"] == 2
    with pytest.raises(ValueError, match="maxnreg must be an int from 24 to 255"):
        twins["triton maxnreg=8"](x, -1)
    assert configs.default_config("logsumexp", 4, 40000, x.dtype)["num_stages"] == 1  # the twin's change is its own
