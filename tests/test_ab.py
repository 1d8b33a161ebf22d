"""dispatch.ab: real A/B runs on the CPU (torch, plus whatever else is installed), the GB/s
arithmetic, parity failures of a deliberately wrong backend, refusals, the files and the CLI."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import types

import pytest
import torch

import dispatch
from dispatch import BackendInfo, Verdict
from dispatch.ab import BackendResult, Comparison, bytes_moved, compare, gbps, load
from dispatch.autotune import Config, TuneSpace
from dispatch.cli import main
from dispatch.errors import UnknownBackendError

FAST = dict(warmup=2, rep=5, copy_bytes=4 << 20, device="cpu")  # CPU even where a GPU is


def make_backend(name: str, fault: str | None = None, dtypes=(torch.float32,), events: list | None = None,
                 tunable: bool = False):
    """A plugin serving every op from torch primitives; ``fault``: "wrong" (x1.1), "raise"."""
    plugin = types.SimpleNamespace()

    @dispatch.hookimpl
    def dispatch_backend_info():
        return BackendInfo(name=name, version="1.0", ops=("softmax", "log_softmax", "logsumexp"), priority={"cpu": -1})

    @dispatch.hookimpl
    def dispatch_check(op, spec):
        if spec.dtype not in dtypes:
            return Verdict.no(f"dtype {spec.dtype} not served; only {', '.join(map(str, dtypes))}")
        return Verdict.yes()

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        dim = spec.dims[0]
        scale = Config.of(config).get("scale", 1)

        def run(x):
            if events is not None:
                events.append(("call", name))
            if fault == "raise":
                raise RuntimeError(f"{name} crashed on purpose")
            xf = x.double() * scale / scale
            out = {"softmax": lambda: torch.softmax(xf, dim), "log_softmax": lambda: torch.log_softmax(xf, dim),
                   "logsumexp": lambda: torch.logsumexp(xf, dim)}[op]().to(spec.out_dtype)
            return out * 1.1 if fault == "wrong" else out
        return run

    hooks = [dispatch_backend_info, dispatch_check, dispatch_kernel]
    if tunable:
        @dispatch.hookimpl
        def dispatch_tune_space(op, spec):
            return TuneSpace(configs=[{"scale": 1}, {"scale": 2}], default={"scale": 1}, tunables=("scale",))
        hooks.append(dispatch_tune_space)
    for fn in hooks:
        setattr(plugin, fn.__name__, fn)
    return plugin


# -- the arithmetic ---------------------------------------------------------------------------------

def test_bytes_moved_counts_one_read_and_one_write():
    assert bytes_moved("softmax", (64, 256), torch.float32) == 2 * 64 * 256 * 4
    assert bytes_moved("log_softmax", (64, 256), torch.bfloat16) == 2 * 64 * 256 * 2
    assert bytes_moved("logsumexp", (64, 256), torch.float16) == 64 * 256 * 2 + 64 * 2  # one value per row
    assert bytes_moved("logsumexp", (8, 5, 3), torch.float32, dim=1) == 8 * 5 * 3 * 4 + 8 * 3 * 4
    assert bytes_moved("softmax", (0, 16), torch.float32) == 0
    assert gbps(2_000, 1.0) == pytest.approx(2.0)  # 2 kB in 1 us = 2 GB/s
    assert gbps(10, 0.0) is None and gbps(10, None) is None


# -- real runs ----------------------------------------------------------------------------------------

def test_every_installed_backend_on_a_real_cpu_run():
    run = compare("softmax", shapes=["16x256"], dtypes=[torch.float32], backends=None, **FAST)
    assert set(run.backends) == set(dispatch.backends())  # torch first, as the baseline
    assert run.backends[0] == "torch"
    assert run.device == "cpu" and run.copy.gbps > 0 and run.copy.nbytes == 4 << 20
    torch_result = run.result("torch", "16x256", "float32")
    assert torch_result.status == "pass" and torch_result.via == "op" and torch_result.speedup == 1.0
    for r in run.results:
        assert r.status in ("pass", "refused"), r  # installed backends are right or say why not
        if r.status == "refused":
            assert r.reason and r.median_us is None
        else:
            assert r.median_us > 0 and r.reps == 5 and r.max_abs_err <= r.atol + r.rtol


@pytest.mark.parametrize("op, dtype", [("softmax", torch.bfloat16), ("logsumexp", torch.float16)])
def test_gbps_is_bytes_over_the_median(op, dtype):
    run = compare(op, shapes=[(32, 300)], dtypes=[dtype], backends="torch", **FAST)
    r = run.result("torch", (32, 300), dtype)
    out_numel = 32 if op == "logsumexp" else 32 * 300
    assert r.bytes_moved == 32 * 300 * dtype.itemsize + out_numel * dtype.itemsize
    assert r.gbps == pytest.approx(r.bytes_moved / (r.median_us * 1e-6) / 1e9)
    assert r.pct_of_copy == pytest.approx(100 * r.gbps / run.copy.gbps)
    assert run.copy.gbps == pytest.approx(2 * run.copy.nbytes / (run.copy.median_us * 1e-6) / 1e9)
    assert (r.rtol, r.atol) == dispatch.tolerance.tolerance(dtype)
    assert r.status == "pass" and r.rows == 32 and r.row_length == 300


def test_wrong_raising_and_refusing_backends_are_reported_not_raised():
    dispatch.register(make_backend("wrong", fault="wrong"), name="wrong")
    dispatch.register(make_backend("crashy", fault="raise"), name="crashy")
    dispatch.register(make_backend("picky", dtypes=(torch.float64,)), name="picky")
    run = compare("log_softmax", shapes=["8x64"], dtypes=["float32"], backends="wrong,crashy,picky", **FAST)
    assert run.backends == ("torch", "wrong", "crashy", "picky")  # the baseline joins
    wrong, crashy, picky = (run.result(n, "8x64", "float32") for n in ("wrong", "crashy", "picky"))
    assert wrong.status == "fail" and not wrong.passed
    assert wrong.max_rel_err == pytest.approx(0.1, rel=1e-3) and "outside rtol" in wrong.reason
    assert wrong.via == "kernel" and wrong.median_us > 0 and wrong.speedup is not None  # still timed
    assert crashy.status == "error" and "crashed on purpose" in crashy.reason and crashy.median_us is None
    assert picky.status == "refused" and "only torch.float64" in picky.reason and picky.gbps is None
    assert not run.ok
    assert run.result("torch", "8x64", "float32").passed


def test_protocol_warms_everything_before_timing_anything(monkeypatch):
    import dispatch.ab._run as harness

    events: list = []
    dispatch.register(make_backend("alpha", events=events), name="alpha")
    dispatch.register(make_backend("beta", events=events), name="beta")
    real_measure = harness.measure
    monkeypatch.setattr(harness, "measure", lambda fn, *a, **k: (events.append(("measure",)), real_measure(
        fn, *a, **k))[1])
    progress: list = []
    run = compare("softmax", shapes=["4x32", "2x64"], backends=["alpha", "beta"], baseline=None,
                  progress=lambda done, total, what: progress.append((done, total, what)), **FAST)
    first_timing = events.index(("measure",))
    assert {e for e in events[:first_timing]} == {("call", "alpha"), ("call", "beta")}
    assert events[:first_timing].count(("call", "alpha")) == 4  # a first call per case, untimed (checked: run twice)
    assert run.baseline is None and all(r.speedup is None for r in run.results)
    assert progress[-1][0] == progress[-1][1] == 2 * 2 * 2 + 1


def test_tune_first_then_the_config_used_is_recorded():
    dispatch.register(make_backend("knobs", tunable=True), name="knobs")
    plain = compare("softmax", shapes=["4x32"], backends="knobs", **FAST)
    assert plain.result("knobs", "4x32", "float32").config == Config.of(scale=1)
    assert plain.result("knobs", "4x32", "float32").config_source == "default config"
    tuned = compare("softmax", shapes=["4x32"], backends="knobs", tune=True, **FAST)
    r = tuned.result("knobs", "4x32", "float32")
    assert tuned.tuned and r.config_source == "tune cache" and r.config in (Config.of(scale=1), Config.of(scale=2))
    assert dispatch.explain("softmax", torch.zeros(4, 32), -1, backend="knobs").decision.config == r.config


def test_unknown_and_unloadable_backends(monkeypatch):
    with pytest.raises(UnknownBackendError, match="'nosuch'"):
        compare("softmax", shapes=["4x8"], backends="nosuch", **FAST)
    from dispatch import _plugins

    failure = dispatch.LoadFailure("ghost", "entry point 'ghost'", "ImportError: no module named ghost_dsl")
    monkeypatch.setattr(_plugins, "load_failures", lambda: (failure,))
    run = compare("softmax", shapes=["4x8"], backends="ghost", **FAST)
    ghost = run.result("ghost", "4x8", "float32")
    assert ghost.status == "refused" and "ghost_dsl" in ghost.reason and run.ok
    with pytest.raises(ValueError, match="'op' must be a declared op, one of"):
        compare("softmin", shapes=["4x8"])


# -- files ----------------------------------------------------------------------------------------------

def test_json_csv_markdown_and_plot_are_written_and_readable(tmp_path):
    dispatch.register(make_backend("wrong", fault="wrong"), name="wrong")
    run = compare(["softmax", "logsumexp"], shapes=["8x64", "4x512"], dtypes=["float32"], backends="wrong", **FAST)
    run.to_json(tmp_path / "ab.json")
    back = load(tmp_path / "ab.json")
    assert isinstance(back, Comparison) and back == run
    assert json.loads((tmp_path / "ab.json").read_text())["copy"]["gbps"] == pytest.approx(run.copy.gbps)

    run.to_csv(tmp_path / "ab.csv")
    with open(tmp_path / "ab.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(run.results) == 2 * 2 * 2
    assert {r["status"] for r in rows} == {"pass", "fail"}
    first = rows[0]
    assert float(first["gbps"]) == pytest.approx(int(first["bytes_moved"]) / float(first["median_us"]) / 1e3)

    md = run.to_markdown(tmp_path / "ab.md")
    assert md.count("\n| ") == 1 + len(run.results) and "copy bandwidth" in md

    run.plot(tmp_path / "ab.png")
    import matplotlib.image

    image = matplotlib.image.imread(tmp_path / "ab.png")
    assert image.ndim == 3 and image.shape[1] > 800  # two panels (softmax, logsumexp) side by side


def test_result_rows_round_trip():
    r = BackendResult(op="softmax", shape="4x8", dtype="bfloat16", backend="torch", status="refused", reason="x")
    assert BackendResult.from_row(r.as_row()) == r
    with pytest.raises(ValueError):
        BackendResult(op="softmax", shape="4x8", dtype="bfloat16", backend="torch", status="maybe")


# -- the command line -----------------------------------------------------------------------------------

def test_cli_writes_files_and_exit_codes(tmp_path, capsys):
    args = ["ab", "softmax", "--shape", "8x64", "--shape", "2x128", "--dtype", "float32", "--dtype", "bfloat16",
            "--backends", "torch", "--warmup", "1", "--rep", "3", "--device", "cpu", "-q"]
    files = ["--json", str(tmp_path / "a.json"), "--csv", str(tmp_path / "a.csv"), "--plot", str(tmp_path / "a.png"),
             "--markdown", str(tmp_path / "a.md")]
    assert main(args + files) == 0
    out = capsys.readouterr().out
    assert "8x64" in out and "bfloat16" in out and "pass" in out
    assert len(load(tmp_path / "a.json").results) == 4
    assert all((tmp_path / f"a.{ext}").stat().st_size > 0 for ext in ("csv", "png", "md"))

    dispatch.register(make_backend("wrong", fault="wrong"), name="wrong")
    assert main(["ab", "softmax", "--shape", "8x64", "--backends", "torch,wrong", "--rep", "2", "--device", "cpu",
                 "-q"]) == 1
    assert "failed or raised" in capsys.readouterr().out
    assert main(["ab", "softmax", "--shape", "8x64", "--backends", "nosuch", "-q"]) == 2
    assert "not loaded" in capsys.readouterr().err
    for flag, path in (("--json", tmp_path / "missing" / "a.json"), ("--plot", tmp_path),
                       ("--plot", tmp_path / "a.txt")):  # a suffix with no plot format
        assert main(args + [flag, str(path)]) == 2  # said before the run, which then does not start
        said = capsys.readouterr()
        assert f"error: {flag} {path}" in said.err and "8x64" not in said.out
    assert ".png" in said.err and not (tmp_path / "a.txt").exists()
    with pytest.raises(SystemExit) as exc:
        main(["ab", "softmax", "--shape", "8by64"])
    assert exc.value.code == 2


def test_cli_passes_softmax_its_own_dtype_argument(capsys):
    # softmax's dtype= (the output's) is named like the input's --dtype: --arg dtype=float32 reaches the op
    from dispatch.cli import parse_arg

    assert parse_arg("dtype=float32") == ("dtype", torch.float32)
    assert parse_arg("dtype=torch.bfloat16") == ("dtype", torch.bfloat16)
    assert parse_arg("mode=fast") == ("mode", "fast")
    assert main(["explain", "softmax", "--shape", "4x32", "--dtype", "bfloat16", "--arg", "dtype=float32",
                 "--device", "cpu"]) == 0
    assert "softmax(4x32 bfloat16->float32" in capsys.readouterr().out
    assert main(["ab", "log_softmax", "--shape", "4x32", "--dtype", "bfloat16", "--arg", "dtype=float32",
                 "--backends", "torch", "--warmup", "1", "--rep", "2", "--device", "cpu"]) == 0
    assert "pass" in capsys.readouterr().out


@pytest.mark.parametrize("device", [
    "auto",  # the GPU where there is one, else the CPU
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")),
])
def test_demo_runs_end_to_end(tmp_path, device):
    env = {**os.environ, "DISPATCH_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "dispatch", "demo", "--out", str(tmp_path / "demo"),
                           "--device", device, "--warmup", "1", "--rep", "2", "-q"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-> torch" in proc.stdout and "A/B took" in proc.stdout
    for op in ("softmax", "log_softmax", "logsumexp", "rms_norm", "layer_norm"):  # the tour calls each op
        assert f"  {op} " in proc.stdout, op
    for name in ("ab.json", "ab.csv", "ab.md", "ab.png"):
        assert (tmp_path / "demo" / name).stat().st_size > 0
    run = load(tmp_path / "demo" / "ab.json")
    gpu = torch.cuda.is_available()
    assert {r.shape for r in run.results} == ({(4096, 4096), (8, 32000)} if gpu else {(64, 256), (16, 2048)})
    assert run.device.split(":")[0] == ("cuda" if gpu else "cpu")
    assert "torch" in run.backends
    if gpu:  # the tour's bfloat16 rows on the GPU go to a kernel backend, not torch
        assert re.search(r"softmax +4096x4096 bfloat16 dim=-1 +-> (triton|tilelang) ", proc.stdout), proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a CUDA device")
def test_demo_on_cuda_without_a_gpu_is_refused_naming_the_option(tmp_path, capsys):
    from dispatch.cli import main

    assert main(["demo", "--device", "cuda", "--out", str(tmp_path / "demo"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "--device 'cuda': " in err and "use cpu (or auto)" in err  # (the CLI's one --device check)
    assert not (tmp_path / "demo").exists()  # refused before any work


def test_demo_and_tune_refuse_bad_options_before_any_work(tmp_path, capsys, monkeypatch):
    from dispatch.cli import main

    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    assert main(["demo", "--threads", "-3", "--out", str(tmp_path / "a")]) == 2
    assert "--threads must be >= 0 (0: torch's default; got -3)" in capsys.readouterr().err
    assert torch.get_num_threads() == threads
    assert main(["demo", "--warmup", "0", "--out", str(tmp_path / "a")]) == 2
    assert "--warmup must be >= 1 (got 0)" in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the folder would go: nothing can be written under it
    assert main(["demo", "--out", str(blocked / "demo"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "cannot write there" in err and "A/B took" not in err
    assert main(["tune", "softmax", "--shape", "4x8", "--device", "cpu", "--backends", ""]) == 2
    assert "backends='' names no backend" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.json"))  # nothing tuned


# -- sweeps of many rows: shards, resume, merge, interleaved rounds, table and plot ------------------

SWEEP_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                            "bench_softmax.py")


def sweep_row(op="softmax", dtype="bfloat16", m=64, n=256, us=10.0, nbytes=4000, ok=True, **extra) -> dict:
    """A measured row as a sweep writes it: dispatch and torch timed, torch the slower."""
    res = {"dispatch": {"ok": ok, "error": None, "us": us, "spread_us": 0.1, "gbs": nbytes / us / 1e3,
                        "pct_copy": 50.0, "rounds_us": [us]},
           "torch": {"ok": True, "error": None, "us": 2 * us, "spread_us": 0.2, "gbs": nbytes / (2 * us) / 1e3,
                     "pct_copy": 25.0, "rounds_us": [2 * us]}}
    return {"op": op, "dtype": dtype, "M": m, "N": n, "bytes": nbytes, "results": res, "pick": "torch",
            "best_backend": "torch", "best_gbs": nbytes / (2 * us) / 1e3, "tune_s": 1.0, **extra}


def test_shards_cover_every_case_once_and_bad_shards_name_the_value():
    from dispatch.ab import parse_shard, take_shard

    cases = [("softmax", "float32", m, 8) for m in range(7)]
    shards = [take_shard(cases, f"{i}/3") for i in range(3)]
    assert sorted(c for s in shards for c in s) == sorted(cases)
    assert all(s for s in shards) and take_shard(cases, (0, 1)) == cases
    for bad in ("3/3", "-1/2", "1", "a/b", "1/0"):
        with pytest.raises(ValueError, match=f"shard.*i/k.*{bad}"):
            parse_shard(bad)


def test_resume_measures_only_the_missing_cases_and_a_broken_file_is_named(tmp_path):
    from dispatch.ab import load_sweep, pending, save_sweep

    done = [sweep_row(m=1), sweep_row(m=3)]
    path = save_sweep(tmp_path / "s.json", {"command": "first"}, done)
    cases = [("softmax", "bfloat16", m, 256) for m in range(5)]
    assert pending(cases, load_sweep(path)["rows"]) == [cases[0], cases[2], cases[4]]
    (tmp_path / "broken.json").write_text('{"meta": {}, "rows": [')
    with pytest.raises(ValueError, match="broken.json"):
        load_sweep(tmp_path / "broken.json")
    (tmp_path / "other.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="'meta'.*'rows'"):
        load_sweep(tmp_path / "other.json")
    (tmp_path / "odd.json").write_text(json.dumps({"meta": {}, "rows": [{"op": "softmax"}, sweep_row()]}))
    with pytest.warns(UserWarning, match="skipped 1 row"):
        assert load_sweep(tmp_path / "odd.json")["rows"] == [sweep_row()]


def test_merge_keeps_the_later_row_of_a_case_and_every_command():
    from dispatch.ab import merge_sweeps

    a = {"meta": {"command": "shard 0", "device": "gpu", "backends": {"torch": {}}},
         "rows": [sweep_row(m=2, us=10.0), sweep_row(m=1)]}
    b = {"meta": {"command": "shard 1", "backends": {"triton": {}}}, "rows": [sweep_row(m=2, us=5.0)]}
    meta, rows = merge_sweeps([a, b], sources=["a.json", "b.json"], order=lambda r: r["M"])
    assert [r["M"] for r in rows] == [1, 2]
    assert rows[1]["results"]["dispatch"]["us"] == 5.0  # the later file's measurement of M=2
    assert meta["command"] == "shard 0 ; shard 1" and meta["merged_from"] == ["a.json", "b.json"]
    assert meta["device"] == "gpu" and set(meta["backends"]) == {"torch", "triton"}
    with pytest.raises(ValueError, match="sweeps"):
        merge_sweeps([])


def test_rounds_interleave_contenders_and_a_raising_one_is_dropped_not_fatal():
    from dispatch.ab import interleaved_rounds, median_round

    calls = []
    timing = types.SimpleNamespace
    fail_at = {"b": 2}

    def measure(fn):
        name = fn()
        calls.append(name)
        if calls.count(name) == fail_at.get(name):
            raise RuntimeError("device lost\nmore")
        return timing(median_us=float(len(calls)))

    runs = {"a": lambda: "a", "b": lambda: "b", "c": lambda: "c"}
    timings, errors = interleaved_rounds(runs, 3, measure)
    assert calls == ["a", "b", "c", "a", "b", "c", "a", "c"]
    assert errors == {"b": "RuntimeError: device lost"} and set(timings) == {"a", "c"}
    assert [t.median_us for t in timings["a"]] == [1.0, 4.0, 7.0]
    assert median_round([timing(median_us=v) for v in (9.0, 1.0, 5.0)]).median_us == 5.0
    with pytest.raises(ValueError, match="rounds"):
        interleaved_rounds(runs, 0, measure)


def test_sweep_table_shows_gbs_or_time_per_call_and_flags_wrong_results(tmp_path):
    from dispatch.ab import plot_sweep, sweep_markdown

    rows = [sweep_row(m=64, n=256, us=10.0, nbytes=64 * 256 * 4), sweep_row(m=1, n=256, us=3.0, ok=False),
            sweep_row(op="logsumexp", m=64, n=256, us=20.0, nbytes=64 * 256 * 2 + 64 * 2)]
    text = sweep_markdown({"device": "dev", "copy_gbs": 100.0, "command": "cmd"}, rows, ["dispatch", "torch"],
                          per_call_rows=[1], path=tmp_path / "t.md")
    assert (tmp_path / "t.md").read_text() == text
    lines = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in text.splitlines() if "|" in line}
    assert f"{64 * 256 * 4 / 10.0 / 1e3:.0f} (50%)" in lines[("softmax", "bfloat16", "64x256")]
    assert "3.0 us WRONG" in lines[("softmax", "bfloat16", "1x256")]  # launch-bound: time per call
    assert "- softmax: **2.00x** over 2 shapes" in text and "- all ops: **2.00x** over 3 shapes" in text
    assert lines[("softmax", "bfloat16", "64x256")].rstrip(" |").endswith("race 1.0 s")  # raced by its first call
    shipped = sweep_markdown({}, [sweep_row(pick_source="shipped table")], ["dispatch", "torch"])
    assert [line for line in shipped.splitlines() if "64x256" in line][0].rstrip(" |").endswith("table")
    png = plot_sweep(tmp_path / "t.png", {"copy_gbs": 100.0}, rows, per_call_rows=[1])
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_sweep_script_merges_shards_and_rejects_a_bad_shard(tmp_path):
    for i, m in enumerate((1, 2)):
        (tmp_path / f"s{i}.json").write_text(json.dumps({"meta": {"command": f"shard {i}", "device": "dev",
                                                                  "copy_gbs": 100.0, "torch": "x",
                                                                  "backends": {"torch": {}}},
                                                         "rows": [sweep_row(m=m * 64)]}))
    files = f"{tmp_path / 's0.json'},{tmp_path / 's1.json'}"
    proc = subprocess.run([sys.executable, SWEEP_SCRIPT, "--merge", files, "--out", str(tmp_path / "all")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    merged = json.loads((tmp_path / "all" / "softmax_sweep.json").read_text())
    assert sorted(r["M"] for r in merged["rows"]) == [64, 128]
    assert merged["meta"]["command"] == "shard 0 ; shard 1"
    assert "64x256" in (tmp_path / "all" / "softmax_sweep.md").read_text()
    assert (tmp_path / "all" / "softmax_sweep.png").stat().st_size > 0
    proc = subprocess.run([sys.executable, SWEEP_SCRIPT, "--shard", "2/2", "--out", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "'2/2'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "none").exists()



def test_sweep_script_resume_keeps_the_rows_and_measures_only_missing_cases(tmp_path):
    # --quick at 4096 elements: N = 1024, 16384, 262144 (M*N = 4096, M >= 1), then 1x4096 and 32x4096
    done = [sweep_row(op="softmax", dtype="float32", m=m, n=n)
            for m, n in ((4, 1024), (1, 16384), (1, 262144), (1, 4096), (32, 4096))]
    (tmp_path / "softmax_sweep.json").write_text(json.dumps({"meta": {"command": "before"}, "rows": done}))
    env = {**os.environ, "DISPATCH_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, SWEEP_SCRIPT, "--device", "cpu", "--quick", "--ops", "softmax",
                           "--dtypes", "float32", "--elements", "4096", "--compile", "", "--resume",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "resuming: 5 rows" in proc.stdout
    assert json.loads((tmp_path / "softmax_sweep.json").read_text())["rows"] == done  # nothing re-measured

# -- the GPU (runs on the device machine) --------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_run_flushes_l2_and_measures_the_copy_ceiling():
    run = compare("softmax", shapes=["4096x4096"], dtypes=["bfloat16"], backends=None, device="cuda")
    assert run.device == f"cuda:{torch.cuda.current_device()}" and run.flush_l2
    assert run.copy.gbps > 500  # an H200 copies ~4 TB/s; anything near this is a broken timer
    torch_result = run.result("torch", "4096x4096", "bfloat16")
    assert torch_result.passed and 1 < torch_result.pct_of_copy < 120
    assert all(r.status in ("pass", "refused") for r in run.results), [r for r in run.results if not r.passed]


def test_torchs_own_low_precision_rounding_is_the_floor_not_a_failure():
    """torch's bf16/fp16 log_softmax on the CPU rounds twice and misses the dtype tolerance on a few
    values; every backend is judged by the rule torch itself meets, so it passes, and a backend
    further off than torch still fails."""
    run = compare("log_softmax", shapes=["8x128"], dtypes=["bfloat16", "float16"], backends="torch", warmup=1, rep=2,
                  copy_bytes=1 << 20)
    for result in run.results:
        assert result.status == "pass", result.reason
        assert "no further from the exact result than torch's own" in result.reason or not result.reason
    assert run.ok


def test_norm_results_count_their_rows_and_bytes_from_normalized_shape():
    # the input (8x4x64 fp32) read once, weight and bias (4x64) read once, the output written once
    want = (2 * 8 * 4 * 64 + 2 * 4 * 64) * 4
    assert bytes_moved("layer_norm", (8, 4, 64), torch.float32, normalized_shape=[4, 64]) == want
    assert bytes_moved("rms_norm", (8, 64), torch.float32, weight=False) == 2 * 8 * 64 * 4
    run = compare("layer_norm", shapes=[(8, 4, 64)], backends="torch", warmup=1, rep=2, device="cpu",
                  options={"normalized_shape": [4, 64]})
    (r,) = run.results
    assert (r.rows, r.row_length, r.bytes_moved) == (8, 256, want)
    assert BackendResult.from_row(r.as_row()).row_length == 256


def test_arguments_no_compared_op_takes_are_an_error_not_ignored(capsys):
    with pytest.raises(ValueError, match="'epz' is an argument of none of rms_norm"):
        compare("rms_norm", shapes=[(4, 16)], backends="torch", warmup=1, rep=1, device="cpu", options={"epz": 5})
    assert main(["ab", "rms_norm", "--shape", "4x16", "--arg", "epz=5", "--device", "cpu", "-q"]) == 2
    assert main(["ab", "rms_norm", "--shape", "4x16", "--dim", "0", "--device", "cpu", "-q"]) == 2
    assert main(["ab", "rms_norm", "--shape", "4x16", "--threads", "0", "--device", "cpu", "-q"]) == 2
    err = capsys.readouterr().err
    assert "epz" in err and "--dim 0: none of rms_norm takes a dim" in err and "--threads must be >= 1" in err
    with pytest.raises(ValueError, match="'dim' is an argument of none of rms_norm"):
        compare("rms_norm", shapes=[(4, 16)], backends="torch", warmup=1, rep=1, device="cpu", dim=0)
    for command in ("explain", "tune"):
        assert main([command, "rms_norm", "--shape", "4x16", "--dim", "0", "--device", "cpu"]) == 2
        assert "--dim 0: rms_norm takes no dim; it takes " in capsys.readouterr().err


def test_a_comparison_of_no_op_or_of_two_dims_is_an_error_and_options_dim_is_the_dim(capsys):
    with pytest.raises(ValueError, match="'op' must name at least one op"):
        compare([], shapes=["4x8"], backends="torch", warmup=1, rep=1, device="cpu")
    with pytest.raises(ValueError, match="dim is given twice: dim=1 and options=.'dim': 0."):
        compare("softmax", shapes=["4x8"], backends="torch", warmup=1, rep=1, device="cpu", dim=1, options={"dim": 0})
    run = compare("softmax", shapes=["4x8"], backends="torch", warmup=1, rep=1, device="cpu", options={"dim": 0})
    assert [r["dim"] for r in run.rows()] == [0]  # not the default -1
    for command in (["ab"], ["explain"]):
        assert main([*command, "softmax", "--shape", "4x8", "--dim", "1", "--arg", "dim=0", "--device", "cpu"]) == 2
        assert "--dim 1 and --arg dim=0 both give the dim: give one" in capsys.readouterr().err


def test_numpys_axis_and_keepdims_are_options_and_arguments_of_the_command_line(capsys, tmp_path):
    run = compare("logsumexp", shapes=["4x8"], backends="torch", warmup=1, rep=1, device="cpu",
                  options={"axis": 0, "keepdims": True})
    (row,) = run.rows()
    assert row["dim"] == 0 and row["rows"] == 8 and row["status"] == "pass", row
    with pytest.raises(ValueError, match="options: 'dim' and its alias 'axis' are both given; give one"):
        compare("softmax", shapes=["4x8"], backends="torch", warmup=1, rep=1, device="cpu",
                options={"axis": 0, "dim": 1})
    out = tmp_path / "ab.json"
    assert main(["ab", "softmax", "--shape", "4x8", "--arg", "axis=0", "--backends", "torch", "--warmup", "1",
                 "--rep", "1", "--device", "cpu", "-q", "--json", str(out)]) == 0
    assert [r["dim"] for r in json.loads(out.read_text())["results"]] == [0]
    assert main(["explain", "logsumexp", "--shape", "4x8", "--arg", "axis=1", "--arg", "keepdims=True",
                 "--device", "cpu"]) == 0
    assert "logsumexp(4x8 float32, dims=[1], keepdim=True, cpu)" in capsys.readouterr().out
    assert main(["explain", "softmax", "--shape", "4x8", "--dim", "1", "--arg", "axis=0", "--device", "cpu"]) == 2
    assert "--dim 1 and --arg axis=0 both give the dim: give one" in capsys.readouterr().err


def test_several_dims_on_the_command_line_reach_logsumexp_and_a_bad_list_is_refused(capsys, tmp_path):
    out = tmp_path / "ab.json"
    assert main(["ab", "logsumexp", "--shape", "4x6x8", "--dim", "0,2", "--backends", "torch", "--warmup", "1",
                 "--rep", "1", "--device", "cpu", "-q", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert row["dim"] == [0, 2] and row["status"] == "pass", row
    assert main(["explain", "logsumexp", "--shape", "4x6x8", "--dim", "0,2", "--device", "cpu"]) == 0
    assert "dims=[0, 2]" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["explain", "logsumexp", "--shape", "4x6x8", "--dim", "0:2", "--device", "cpu"])
    assert "--dim must be a dim like -1, or several like 0,2 for logsumexp (got '0:2')" in capsys.readouterr().err
    assert main(["explain", "softmax", "--shape", "4x6x8", "--dim", "0,2", "--device", "cpu"]) == 2
    assert "softmax on --shape 4x6x8 --dim (0, 2): " in capsys.readouterr().err  # torch's: dim must be an int


def test_a_call_only_torchs_kernel_refuses_is_a_user_error_not_an_internal_one(capsys):
    assert main(["ab", "softmax", "--shape", "4x8", "--arg", "dtype=int32", "--device", "cpu", "-q"]) == 2
    err = capsys.readouterr().err
    assert "torch's op refuses it: " in err and "not implemented for 'Int'" in err and "unexpected" not in err, err
    with pytest.raises(ValueError, match="softmax on 4x8 float32 .*torch's op refuses it"):
        compare("softmax", shapes=["4x8"], backends="torch", warmup=1, rep=1, device="cpu",
                options={"dtype": torch.int32})


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
@pytest.mark.parametrize("argv,said", [
    (["explain", "softmax", "--shape", "4x16", "--device", "cuda"], "error: --device 'cuda': "),
    (["tune", "softmax", "--shape", "4x16", "--device", "cuda:1"], "error: --device 'cuda:1': "),
    (["ab", "softmax", "--shape", "4x16", "--device", "cuda", "-q"], "error: --device 'cuda': "),
    (["explain", "softmax", "--shape", "4x16", "--device", "tpu"], "error: --device 'tpu' is not a device torch knows"),
    (["explain", "rms_norm", "--shape", "4x16", "--arg", "normalized_shape=[17]"],
     "rms_norm on --shape 4x16 --arg normalized_shape=[17]: Given normalized_shape=[17]"),
    (["explain", "rms_norm", "--shape", "4x16", "--arg", "normalized_shape=16"],
     "'normalized_shape' of a sample is a list of ints, the input's last dims (got 16); on the command line "
     "--arg normalized_shape=[16]"),
    (["explain", "softmax", "--shape", "4x16", "--dim", "5"],
     "softmax on --shape 4x16 --dim 5: Dimension out of range"),
    (["explain", "softmax", "--shape", "100000x100000"], "input would take 37.3 GiB"),
], ids=["cuda", "cuda-index", "ab-cuda", "unknown-device", "normalized-shape", "normalized-shape-int", "dim", "huge"])
def test_cli_user_errors_are_one_line_and_no_internal_error(argv, said, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "unexpected" not in err and len(err.strip().splitlines()) == 1, err


def test_a_backend_that_raises_while_timed_is_an_error_row_and_the_run_goes_on():
    import chunked_backend

    dispatch.register(chunked_backend.make("later", fault="raise later"), name="later")  # its first call passes
    run = compare("softmax", shapes=["8x64", "4x128"], dtypes=["float32"], backends="torch,later", **FAST)
    later = [r for r in run.results if r.backend == "later"]
    assert later and all(r.status == "error" and "raised while it was timed" in r.reason for r in later)
    assert all(r.status == "pass" and r.median_us for r in run.results if r.backend == "torch")
    assert not run.ok


def test_a_backend_that_cant_be_tuned_is_still_checked_and_timed_untuned():
    import chunked_backend

    dispatch.register(chunked_backend.make("w", fault="wrong"), name="w")  # every config 10% off
    run = compare("softmax", shapes=["8x64"], dtypes=["float32"], backends="torch,w", tune=True, **FAST)
    w = run.result("w", "8x64", "float32")
    assert w.status == "fail" and w.median_us and "max abs err" in w.reason
    assert "tuning failed (TuneError:" in w.reason and "every candidate failed: " in w.reason  # what failed, too


def test_a_result_with_nan_where_the_reference_has_none_has_no_finite_error():
    import chunked_backend

    dispatch.register(chunked_backend.make("nans", fault="nan"), name="nans")
    run = compare("softmax", shapes=["8x64"], dtypes=["float32"], backends="torch,nans", **FAST)
    nans = run.result("nans", "8x64", "float32")
    assert nans.status == "fail" and nans.max_abs_err == float("inf") and nans.max_rel_err == float("inf")
    assert _json_keeps_infinite_error(run)


def _json_keeps_infinite_error(run) -> bool:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ab.json")
        run.to_json(path)
        again = load(path).result("nans", "8x64", "float32")
    return again.max_abs_err == float("inf")


def test_loading_a_file_that_is_not_a_runs_json_names_it(tmp_path):
    run = compare("softmax", shapes=["8x64"], dtypes=["float32"], backends="torch", **FAST)
    run.to_csv(tmp_path / "ab.csv")
    (tmp_path / "other.json").write_text('{"rows": []}')
    for name in ("ab.csv", "other.json", "missing.json"):
        with pytest.raises(ValueError, match=f"A/B run '{tmp_path / name}' .*to_json"):
            load(tmp_path / name)


def test_arguments_the_op_refuses_are_a_one_line_user_error(capsys):
    argv = ["ab", "rms_norm", "--shape", "8x64", "--arg", "normalized_shape=[4,64]", "--device", "cpu", "-q"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: rms_norm on 8x64 float32") and "expected input with shape" in err
    assert "unexpected" not in err


@pytest.mark.parametrize("bad,said", [
    ({"tune": "no"}, "'tune' must be True or False (got 'no')"),
    ({"flush_l2": "no"}, "'flush_l2' must be True or False"),
    ({"warmup": "5"}, "'warmup' must be an int (got '5')"),
    ({"rep": 2.5}, "'rep' must be an int (got 2.5)"),
    ({"copy_bytes": 0}, "'copy_bytes' must be a positive int"),
    ({"progress": "yes"}, "'progress' must be True, False or a callable"),
    ({"options": [("dim", 0)]}, "'options' must be a dict"),
], ids=["tune", "flush_l2", "warmup", "rep", "copy_bytes", "progress", "options"])
def test_compare_names_a_bad_plain_argument_before_running_anything(bad, said):
    with pytest.raises((TypeError, ValueError)) as info:
        compare("softmax", shapes=["4x8"], backends="torch", device="cpu", **{"warmup": 1, "rep": 1, **bad})
    assert said in str(info.value)


@pytest.mark.parametrize("bad,said", [
    ({"op": 3}, "'op' must be an op name or a list of them, like 'softmax'"),
    ({"op": ["softmax", 3]}, "'op' must hold op names, str (got 3 in ['softmax', 3])"),
    ({"shapes": (4, 8)}, "'shapes' must be a list of shapes, like [(4096, 4096)] or ['64x256'] (got (4, 8); "
                         "for one shape: [(4, 8)])"),
    ({"shapes": "4x8"}, "for one shape: ['4x8']"),  # (not the shapes '4', 'x' and '8')
    ({"shapes": 5}, "'shapes' must be a list of shapes"),
    ({"shapes": ["4x-8"]}, "'shape' must be whole sizes >= 0, like (64, 256) or '64x256' (got '4x-8')"),
    ({"shapes": [(4, 8.0)]}, "'shape' must be whole sizes >= 0"),
    ({"dtypes": torch.float32}, "'dtypes' must be a list of dtypes, like [torch.bfloat16] or ['float32'] "
                                "(got torch.float32; for one dtype: [torch.float32])"),
    ({"backends": [3]}, "'backends' must hold backend names, str (got 3 in [3])"),
    ({"backends": 3}, "'backends' must be backend names"),
], ids=["op", "op item", "one shape", "shape str", "shapes int", "negative", "float size", "one dtype",
        "backend item", "backends int"])
def test_compare_names_a_wrongly_typed_case_argument(bad, said):
    args = {"op": "softmax", "shapes": ["4x8"], "backends": "torch", **bad}
    with pytest.raises((TypeError, ValueError)) as info:
        compare(args.pop("op"), device="cpu", warmup=1, rep=1, **args)
    assert said in str(info.value)


def test_a_run_keeps_the_ops_arguments_it_was_given_in_every_output(tmp_path):
    run = compare("logsumexp", shapes=[(4, 16)], backends=["torch"], device="cpu", warmup=1, rep=2,
                  options={"keepdim": True})
    assert dict(run.options) == {"dim": -1, "keepdim": True}
    assert json.loads(run.to_json())["options"] == {"dim": -1, "keepdim": True}
    run.to_json(tmp_path / "run.json")
    assert dict(load(tmp_path / "run.json").options) == {"dim": -1, "keepdim": True}
    rows = list(csv.DictReader(run.to_csv().splitlines()))
    assert json.loads(rows[0]["options"]) == {"dim": -1, "keepdim": True}
    assert "keepdim=True" in run.to_markdown()
    norm = compare("rms_norm", shapes=[(4, 16)], backends=["torch"], device="cpu", warmup=1, rep=2,
                   options={"eps": 1e-3})
    assert dict(norm.options) == {"eps": 1e-3}  # (no dim: rms_norm takes none)


def test_a_shape_dtype_or_op_named_twice_is_one_case():
    run = compare(["softmax", "softmax"], shapes=[(4, 16), "4x16"], dtypes=["float32", torch.float32],
                  backends=["torch"], device="cpu", warmup=1, rep=2)
    assert len(run.results) == 1 and run.results[0].speedup == pytest.approx(1.0)


def test_an_empty_backend_list_is_refused_not_a_run_of_the_baseline_alone(capsys):
    with pytest.raises(ValueError, match="'backends' must name at least one backend"):
        compare("softmax", shapes=[(4, 16)], backends=[], device="cpu")
    for empty in ("", ","):
        assert main(["ab", "softmax", "--shape", "4x16", "--device", "cpu", "--backends", empty, "-q"]) == 2
        assert "'backends' must name at least one backend" in capsys.readouterr().err


def test_a_dtype_torchs_op_refuses_and_a_dim_out_of_range_say_which_case(capsys):
    with pytest.raises(ValueError, match=r"softmax on 4x16 float8_e4m3fn.*torch's op refuses it"):
        compare("softmax", shapes=[(4, 16)], dtypes=[torch.float8_e4m3fn], backends=["torch"], device="cpu")
    with pytest.raises(SystemExit):  # the CLI takes the dtypes an op can serve
        main(["ab", "softmax", "--shape", "4x16", "--dtype", "float8_e4m3fn"])
    assert "--dtype must be a floating dtype" in capsys.readouterr().err
    assert main(["ab", "softmax", "--shape", "4x16", "--shape", "8", "--dim", "1", "--device", "cpu", "-q",
                 "--backends", "torch", "--rep", "2", "--warmup", "1"]) == 2
    assert "softmax on 8 float32" in capsys.readouterr().err


def test_the_plot_written_is_the_file_said_and_two_outputs_may_not_share_a_file(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    args = ["ab", "softmax", "--shape", "4x16", "--device", "cpu", "--backends", "torch", "--rep", "2",
            "--warmup", "1", "-q"]
    assert main(args + ["--plot", str(tmp_path / "noext")]) == 0
    assert f"wrote {tmp_path / 'noext.png'}" in capsys.readouterr().out and (tmp_path / "noext.png").exists()
    assert main(args + ["--json", str(tmp_path / "r"), "--csv", str(tmp_path / "r")]) == 2
    assert "--json and --csv name one file" in capsys.readouterr().err and not (tmp_path / "r").exists()
