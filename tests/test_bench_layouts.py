"""The layouts benchmark (benchmarks/bench_layouts.py) in its CPU smoke mode: rows, checks, table and plot."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dispatch
from benchmark_scripts import load

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_layouts.py"
CONTENDERS = {"torch", "dispatch", "dispatch[triton]", "dispatch[tilelang]"}


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--no-compile", *args],
                          check=False, capture_output=True, text=True, timeout=300)


def test_smoke_run_writes_a_checked_row_per_case_op_and_contender(tmp_path):
    proc = _bench("--families", "few long rows,odd N,several dims", "--cases", "rows_4x50257,rows_1000x4099,"
                  "dims12_64x512x512,dim0_4096x4096", "--dtypes", "float32", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "layouts.json").read_text())
    assert result["launch_us"] > 0 and result["copy_gbps"] > 0
    rows = result["rows"]
    # dim0_4096x4096 is not in the families asked for; several dims: logsumexp only
    expected = {(case, op, who) for case in ("rows_4x50257", "rows_1000x4099")
                for op in ("softmax", "log_softmax", "logsumexp") for who in CONTENDERS}
    expected |= {("dims12_64x512x512", "logsumexp", who) for who in CONTENDERS}
    assert sorted((r["case"], r["op"], r["contender"]) for r in rows) == sorted(expected)
    assert {r["family"] for r in rows} == {"few long rows", "odd N", "several dims"}
    for r in rows:
        assert r["launch_floor_us"] > result["launch_us"]
        if r["contender"] == "dispatch[tilelang]" and "error" in r:
            continue  # a contender that raises is recorded with its error
        assert "error" not in r, r
        assert "mismatch" not in r and r["max_abs_err"] <= 1e-4, r
        assert r["vs_floor"] == pytest.approx(r["median_us"] / r["launch_floor_us"])
        if r["contender"].startswith("dispatch"):
            assert r["backend"] in dispatch.backends(), r
        if r["contender"] == "dispatch[triton]":
            assert r["backend"] == "triton"
    text = (tmp_path / "layouts.md").read_text()
    assert "dispatch's pick against the faster of torch eager and torch.compile" in text
    assert all(f"## {family}\n" in text for family in ("few long rows", "odd N", "several dims"))
    assert "| rows_1000x4099 | log_softmax | float32 |" in text
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "layouts.png").stat().st_size > 0


def test_an_unknown_family_is_named_with_the_known_ones(tmp_path):
    proc = _bench("--families", "huge rows", "--out", str(tmp_path))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert ("--families: unknown ['huge rows']; known: dim != -1, strided rows, few long rows, long rows, odd N"
            in proc.stderr)
    assert not any(tmp_path.iterdir())


def test_a_run_stopped_early_has_saved_every_case_it_finished():
    import torch

    from dispatch.backend import TuneSettings

    module = load("bench_layouts")
    saved = []

    class Stopped(Exception):
        pass

    def save(result):  # stops the run at its first save, as a time limit would after one case
        saved.append(json.loads(json.dumps(result)))
        raise Stopped

    with pytest.raises(Stopped):
        module.run(["rows_4x50257", "rows_1000x4099"], [torch.float32], ["logsumexp"], False, torch.device("cpu"),
                   TuneSettings(warmup=1, rep=3, host_bound=False), True, save)
    (first,) = saved
    assert {(r["case"], r["contender"]) for r in first["rows"]} == {("rows_4x50257", who) for who in CONTENDERS}
    assert first["copy_gbps"] > 0 and first["wall_s"] > 0


def test_device_timing_adds_the_pick_made_in_a_device_timing_block(tmp_path):
    proc = _bench("--cases", "rows_4x50257", "--dtypes", "float32", "--ops", "softmax", "--device-timing",
                  "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads((tmp_path / "layouts.json").read_text())["rows"]
    module = load("bench_layouts")
    assert sorted(r["contender"] for r in rows) == sorted(CONTENDERS | {module.DEVICE_PICK})
    device = next(r for r in rows if r["contender"] == module.DEVICE_PICK)
    assert "error" not in device and "mismatch" not in device and device["backend"] in dispatch.backends()
    text = (tmp_path / "layouts.md").read_text()
    assert "| device timing (backend) us | ratio | x floor |" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| rows_4x50257 | softmax | float32 |"))
    assert f"{device['median_us']:.1f} ({device['backend']})" in line


def test_the_device_timing_contender_is_resolved_under_device_timing():
    import torch

    module = load("bench_layouts")
    x = torch.randn(4, 8)
    with module._scope(module.DEVICE_PICK):
        assert dispatch.explain("softmax", x, -1).timing == "device"
    with module._scope("dispatch"):
        assert dispatch.explain("softmax", x, -1).timing == dispatch.settings().timing
