"""The persistent cache: survives processes, concurrent writers and corruption; never runs code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import dispatch
from dispatch.autotune import CacheWarning, DecisionCache, default_cache

HERE = os.path.dirname(__file__)

_TUNE_SCRIPT = textwrap.dedent("""
    import sys, torch, dispatch
    sys.path.insert(0, {here!r})
    import chunked_backend
    from dispatch.autotune import measurement_count
    dispatch.register(chunked_backend.make("chunked", priority=200))
    dispatch.configure(autotune=True, allow=["torch", "chunked"])
    x = torch.randn(16, 256)
    torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    d = dispatch.explain("softmax", x).decision
    print(measurement_count(), d.backend, d.cached)
""")


def _run_tuning_process(cache_dir) -> list[str]:
    env = {**os.environ, "DISPATCH_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", _TUNE_SCRIPT.format(here=HERE)], capture_output=True, text=True,
                         env=env, check=True).stdout
    return out.split()


def test_a_second_process_with_a_warm_cache_benchmarks_nothing(tmp_path):
    cold = _run_tuning_process(tmp_path)
    warm = _run_tuning_process(tmp_path)
    assert int(cold[0]) == 4 and cold[2] == "False"  # torch: 1 config, chunked: 3
    assert int(warm[0]) == 0 and warm[2] == "True" and warm[1] == cold[1]


def test_two_processes_tuning_the_same_key_at_once_leave_one_valid_file(tmp_path):
    env = {**os.environ, "DISPATCH_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _TUNE_SCRIPT.format(here=HERE)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    cache = DecisionCache(tmp_path)
    entries = list(cache.entries())
    kinds = sorted(k["kind"] for k, _ in entries)
    assert kinds == ["decision", "tune", "tune"]  # one decision, one tune per backend, all readable
    assert not [p for p in (tmp_path / "v1").iterdir() if p.name.startswith(".tmp-")]


def test_a_truncated_cache_file_is_survived_and_rewritten():
    dispatch.register(__import__("chunked_backend").make("chunked", priority=200))
    dispatch.configure(autotune=True, allow=["torch", "chunked"])
    x = torch.randn(8, 64)
    dispatch.softmax(x)
    cache = default_cache()
    paths = sorted((cache.entries_dir).glob("*.json"))
    assert paths
    for path in paths:
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
    cache.forget_memo()
    from dispatch._dispatcher import DISPATCHER
    DISPATCHER.reset()
    with pytest.warns(CacheWarning, match="ignoring cache file"):
        out = dispatch.softmax(x)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    for path in paths:
        json.loads(path.read_text())  # rewritten whole


def test_an_entry_of_another_key_or_schema_is_ignored(tmp_path):
    cache = DecisionCache(tmp_path)
    key = {"kind": "decision", "op": "softmax"}
    path = cache.put(key, {"backend": "torch"})
    data = json.loads(path.read_text())
    data["schema"] = 99
    path.write_text(json.dumps(data))
    fresh = DecisionCache(tmp_path)
    with pytest.warns(CacheWarning, match="schema 99"):
        assert fresh.get(key) is None
    data["schema"] = 1
    data["key"] = {"kind": "decision", "op": "log_softmax"}
    path.write_text(json.dumps(data))
    with pytest.warns(CacheWarning, match="another key"):
        assert DecisionCache(tmp_path).get(key) is None


def test_export_and_import_round_trip_and_malformed_imports_are_rejected(tmp_path):
    src = DecisionCache(tmp_path / "a")
    src.put({"kind": "decision", "op": "softmax"}, {"backend": "torch"})
    src.put({"kind": "tune", "op": "softmax"}, {"config": {"BLOCK": 64}, "latency_us": 3.0})
    assert src.export(tmp_path / "export.json") == 2
    dst = DecisionCache(tmp_path / "b")
    report = dst.import_(tmp_path / "export.json")
    assert (report.imported, report.rejected) == (2, ())
    assert dst.get({"kind": "decision", "op": "softmax"}) == {"backend": "torch"}
    # a pickle (or any non-JSON) is rejected whole, never loaded
    import pickle
    (tmp_path / "evil.json").write_bytes(pickle.dumps({"x": 1}))
    with pytest.warns(CacheWarning, match="rejected cache import"):
        report = dst.import_(tmp_path / "evil.json")
    assert report.imported == 0 and len(report.rejected) == 1
    (tmp_path / "partly.json").write_text(json.dumps({"schema": 1, "entries": [
        {"key": {"kind": "decision", "op": "softmax"}, "value": {"backend": "torch"}},
        {"key": {"op": 3}, "value": {}}, "junk"]}))
    with pytest.warns(CacheWarning, match="rejected entry"):
        report = dst.import_(tmp_path / "partly.json")
    assert report.imported == 1 and [which for which, _ in report.rejected] == ["entry 1", "entry 2"]


def test_cache_cli_show_clear_export_import(tmp_path):
    env = {**os.environ, "DISPATCH_CACHE_DIR": str(tmp_path / "c")}
    DecisionCache(tmp_path / "c").put({"kind": "decision", "op": "softmax", "dtype": "float32"}, {"backend": "torch"})

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "dispatch", "cache", *args], capture_output=True, text=True,
                              env=env)

    shown = cli("show")
    assert shown.returncode == 0 and "1 entries" in shown.stdout and "softmax" in shown.stdout
    assert cli("export", str(tmp_path / "e.json")).returncode == 0
    assert "removed 1" in cli("clear").stdout
    assert "imported 1" in cli("import", str(tmp_path / "e.json")).stdout
    bad = cli("export")
    assert bad.returncode == 2 and "needs a FILE" in bad.stderr


def test_cache_dir_defaults_to_the_user_cache_dir(monkeypatch):
    monkeypatch.delenv("DISPATCH_CACHE_DIR")
    from dispatch.autotune import default_cache_dir
    assert default_cache_dir().name == "dispatch"


def test_a_blank_cache_dir_is_warned_of_and_the_default_taken(monkeypatch, tmp_path):
    from dispatch.autotune import CacheWarning, default_cache_dir

    monkeypatch.delenv("DISPATCH_CACHE_DIR")
    default = default_cache_dir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DISPATCH_CACHE_DIR", "  ")
    with pytest.warns(CacheWarning, match="DISPATCH_CACHE_DIR='  ' is blank"):
        assert default_cache_dir() == default  # not a folder named "  " wherever the process runs
    assert list(tmp_path.iterdir()) == []


# -- every entry is checked against the schema --------------------------------------------------

def _race_once(shape=(8, 64)):
    """A raced decision for softmax on ``shape`` (chunked vs torch) and the files it left."""
    import chunked_backend

    dispatch.register(chunked_backend.make("chunked", priority=200))
    dispatch.configure(autotune=True, allow=["torch", "chunked"])
    x = torch.randn(*shape)
    dispatch.softmax(x)
    cache = default_cache()
    files = {}
    for path in sorted(cache.entries_dir.glob("*.json")):
        data = json.loads(path.read_text())
        files[data["key"]["kind"] + ":" + data["key"].get("backend", "")] = path
    return x, cache, files


def _again(cache):
    """Forget what this process knows, as a new process would."""
    from dispatch._dispatcher import DISPATCHER

    cache.forget_memo()
    DISPATCHER.reset()


def _rewrite_value(path, value):
    data = json.loads(path.read_text())
    data["value"] = value
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("value", [
    {"backend": ["torch"]},
    {"backend": "chunked", "config": "x"},
    {"backend": "chunked", "config": {"chunk": [8]}},
    {"backend": "chunked", "timings": {"chunked": "fast"}},
    {"backend": "chunked", "timings": {"chunked": float("nan")}},
    {"backend": "chunked", "spread_us": True},
    {"backend": "chunked", "spread_us": 10 ** 400},
    "deep",
], ids=["backend-list", "config-str", "config-nested", "timing-str", "timing-nan", "spread-bool", "spread-huge-int",
        "deep-nesting"])
def test_a_decision_entry_of_the_wrong_shape_is_skipped_once_and_rewritten(value):
    x, cache, files = _race_once()
    path = files["decision:"]
    if value == "deep":
        path.write_text('{"schema": 1, "key": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        _rewrite_value(path, value)
    _again(cache)
    with pytest.warns(CacheWarning) as caught:
        out = dispatch.softmax(x)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    assert [str(w.message) for w in caught if str(path) in str(w.message)] and len(caught) == 1
    assert list(cache.rejected) == [str(path)]
    rewritten = json.loads(path.read_text())["value"]
    assert rewritten["backend"] in ("torch", "chunked") and isinstance(rewritten["timings"]["torch"], float)


@pytest.mark.parametrize("value", [
    {"config": "x", "latency_us": 1.0},
    {"config": {"chunk": 8}, "latency_us": "slow"},
    {"config": {"chunk": 8}, "latency_us": -1.0},
    {"config": {"chunk": 8}, "latency_us": 10 ** 400},
    {"config": {"chunk": 8}, "latency_us": 1.0, "timings": [{"config": {"chunk": 8}, "median_us": "x"}]},
    {"config": {"chunk": 8}, "latency_us": 1.0, "failures": [{"config": {"chunk": 8}}]},
], ids=["config-str", "latency-str", "latency-negative", "latency-huge-int", "timing-str", "failure-without-reason"])
def test_a_tune_entry_of_the_wrong_shape_is_skipped_with_a_warning_and_retuned(value):
    x, cache, files = _race_once()
    files["decision:"].unlink()
    _rewrite_value(files["tune:chunked"], value)
    _again(cache)
    with pytest.warns(CacheWarning, match="ignoring cache file") as caught:
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    assert len(caught) == 1
    assert json.loads(files["tune:chunked"].read_text())["value"]["config"]["chunk"] in (8, 64, 1024)


def test_a_bad_entry_warns_once_however_often_it_is_read(tmp_path):
    cache = DecisionCache(tmp_path)
    key = {"kind": "decision", "op": "softmax"}
    path = cache.put(key, {"backend": "torch"})
    _rewrite_value(path, {"backend": 3})
    fresh = DecisionCache(tmp_path)
    with pytest.warns(CacheWarning) as caught:
        assert fresh.get(key) is None and fresh.get(key) is None and list(fresh.entries()) == []
    assert len(caught) == 1 and "'backend' must be a non-empty str (got 3)" in str(caught[0].message)
    assert fresh.rejected == {str(path): "EntryError: 'backend' must be a non-empty str (got 3)"}


def test_writing_an_entry_that_breaks_the_schema_is_a_bug_of_the_caller(tmp_path):
    from dispatch.autotune.entries import EntryError

    with pytest.raises(EntryError, match="'latency_us' must be a finite number"):
        DecisionCache(tmp_path).put({"kind": "tune", "op": "softmax"}, {"config": {}, "latency_us": None})


# -- import checks: schema, device, versions --------------------------------------------------

def _export_file(path, entries):
    path.write_text(json.dumps({"schema": 1, "entries": [{"key": k, "value": v} for k, v in entries]}))
    return path


def test_import_reports_each_rejected_entry_and_never_overwrites_a_good_local_one(tmp_path):
    from dispatch.autotune.fleet import Machine

    here = Machine("cpu:x86_64", None, {})
    key = {"kind": "decision", "op": "softmax", "device": "cpu:x86_64"}
    cache = DecisionCache(tmp_path / "c")
    cache.put(key, {"backend": "torch"})
    other = {**key, "op": "log_softmax"}
    file = _export_file(tmp_path / "in.json", [(key, {"backend": ["chunked"]}), (other, {"backend": "chunked"}),
                                               ({"kind": "nonsense"}, {"backend": "x"})])
    with pytest.warns(CacheWarning, match="rejected entry"):
        report = cache.import_(file, here)
    assert report.imported == 1 and len(report.rejected) == 2
    assert str(report).startswith("imported 1, rejected 2: entry 0: 'backend' must be a non-empty str")
    assert "entry 2: 'key.kind' must be one of decision, tune" in str(report)
    assert DecisionCache(tmp_path / "c").get(key) == {"backend": "torch"}
    assert DecisionCache(tmp_path / "c").get(other) == {"backend": "chunked"}


def test_import_of_a_huge_nesting_is_rejected_whole_without_a_crash(tmp_path):
    file = tmp_path / "deep.json"
    file.write_text('{"schema": 1, "entries": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.warns(CacheWarning, match="nested too deeply"):
        report = DecisionCache(tmp_path / "c").import_(file)
    assert report.imported == 0 and len(report.rejected) == 1


def test_import_ignores_entries_tuned_on_another_device_or_version(tmp_path):
    from dispatch.autotune.fleet import Machine

    tune = {"config": {"chunk": 8}, "latency_us": 2.0}
    h200 = {"kind": "tune", "op": "softmax", "device": "NVIDIA H200", "backend": "chunked", "backend_version": "1.0"}
    entries = [(h200, tune),
               ({**h200, "device": "NVIDIA B200"}, tune),
               ({**h200, "device": "cpu:riscv64"}, tune),
               ({**h200, "backend_version": "0.9"}, tune),
               ({**h200, "backend": "elsewhere"}, tune),  # not loaded here: kept
               ({"kind": "decision", "op": "softmax", "device": "NVIDIA H200", "candidates": "chunked=0.9,torch=2"},
                {"backend": "chunked"})]
    file = _export_file(tmp_path / "in.json", entries)
    gpu_host = Machine("cpu:x86_64", {"NVIDIA H200"}, {"chunked": {"backend_version": "1.0"}})
    with pytest.warns(CacheWarning, match="rejected entry"):
        report = DecisionCache(tmp_path / "a").import_(file, gpu_host)
    whys = dict(report.rejected)
    assert report.imported == 2 and sorted(whys) == ["entry 1", "entry 2", "entry 3", "entry 5"]
    assert "tuned on NVIDIA B200, this machine has NVIDIA H200" in whys["entry 1"]
    assert "cpu:riscv64" in whys["entry 2"] and "backend_version 0.9 (here 1.0)" in whys["entry 3"]
    assert "decided with chunked 0.9, this machine has chunked 1.0" in whys["entry 5"]
    # where no GPU tells which model this is, GPU entries are taken as they are
    cpu_host = Machine("cpu:x86_64", None, {"chunked": {"backend_version": "1.0"}})
    with pytest.warns(CacheWarning):
        assert DecisionCache(tmp_path / "b").import_(file, cpu_host).imported == 3


def test_this_machine_accepts_its_own_export(tmp_path):
    from dispatch.autotune.fleet import Machine

    x, cache, files = _race_once()
    assert cache.export(tmp_path / "e.json") == 3
    report = DecisionCache(tmp_path / "other").import_(tmp_path / "e.json", Machine.here())
    assert (report.imported, report.rejected) == (3, ())
    from dispatch._keys import device_name
    assert Machine.here().cpu == device_name(torch.device("cpu"))


# -- a cache that cannot be written -----------------------------------------------------------

def _unwritable(kind, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    if kind == "file-for-dir":
        monkeypatch.setenv("DISPATCH_CACHE_DIR", str(blocker))
    elif kind == "no-home":
        monkeypatch.delenv("DISPATCH_CACHE_DIR")
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        monkeypatch.setenv("HOME", str(blocker / "home"))
    elif kind == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        (tmp_path / "ro").mkdir(mode=0o500)
        monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "ro"))
    elif kind == "dir-for-entry":
        _, cache, files = _race_once()
        for path in files.values():
            path.unlink()
            (path / "inside").mkdir(parents=True)
        _again(cache)


@pytest.mark.parametrize("kind", ["file-for-dir", "no-home", "read-only", "dir-for-entry"])
def test_an_unwritable_cache_is_one_warning_and_decisions_stay_in_memory(kind, tmp_path, monkeypatch):
    import warnings

    import chunked_backend
    from dispatch._dispatcher import DISPATCHER
    from dispatch.autotune import measurement_count

    _unwritable(kind, tmp_path, monkeypatch)
    if "chunked" not in dispatch.backends():
        dispatch.register(chunked_backend.make("chunked", priority=200))
    dispatch.configure(autotune=True, allow=["torch", "chunked"])
    x, wide = torch.randn(8, 64), torch.randn(8, 512)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
        torch.testing.assert_close(dispatch.softmax(wide), torch.softmax(wide, -1))  # another key, another save
        DISPATCHER.reset()
        before = measurement_count()
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
        assert measurement_count() == before  # the decision was kept: no second race
    unwritable = [w for w in caught if "cannot write the dispatch cache" in str(w.message)]
    assert len(unwritable) == 1 and issubclass(unwritable[0].category, CacheWarning)


# -- noisy races are raced once more ----------------------------------------------------------

@pytest.fixture
def fake_timer(monkeypatch):
    """Timings set by the test: chunked configs at ``chunked`` us (+ chunk/1e4), torch at ``torch``."""
    import importlib

    from dispatch.autotune import Timing

    sweep_module = importlib.import_module("dispatch.autotune.sweep")

    # chunked 14% ahead of torch: beyond the reference margin (10%), so chunked wins a race
    setting = {"chunked": 9.0, "torch": 10.5, "spread": 0.1, "calls": 0}

    def measure(fn, device, settings=None, config=None):
        setting["calls"] += 1
        if config is not None and "chunk" in config.as_dict():
            median = setting["chunked"] + config["chunk"] / 1e4
        else:
            median = setting["torch"]
        return Timing(config, median, setting["spread"], 50)

    monkeypatch.setattr(sweep_module, "measure", measure)
    return setting


def test_a_race_won_within_its_noise_is_raced_once_more_then_trusted(fake_timer):
    fake_timer["spread"] = 5.0  # 55% of the winner's median, and torch within it
    x, cache, files = _race_once()
    first = json.loads(files["decision:"].read_text())["value"]
    assert first["spread_us"] == 5.0 and first["reraced"] is False
    fake_timer.update(spread=0.1, calls=0)
    _again(cache)
    dispatch.softmax(x)
    assert fake_timer["calls"] == 4  # every config of both backends measured again, not read from the tune cache
    second = json.loads(files["decision:"].read_text())["value"]
    assert second["reraced"] is True and second["spread_us"] == 0.1
    fake_timer.update(spread=5.0, calls=0)
    _again(cache)
    dispatch.softmax(x)
    assert fake_timer["calls"] == 0 and dispatch.explain("softmax", x).decision.cached


@pytest.mark.parametrize("setting", [{"spread": 2.0}, {"spread": 5.0, "torch": 20.0}],
                         ids=["spread-22%", "noisy-but-far-ahead"])
def test_a_race_whose_noise_could_not_change_the_winner_is_trusted(fake_timer, setting):
    fake_timer.update(setting)
    x, cache, _ = _race_once()
    fake_timer["calls"] = 0
    _again(cache)
    dispatch.softmax(x)
    assert fake_timer["calls"] == 0


def test_a_noisy_cached_decision_is_still_used_when_tuning_is_off(fake_timer):
    fake_timer["spread"] = 5.0
    x, cache, _ = _race_once()
    dispatch.configure(autotune=False)
    _again(cache)
    d = dispatch.explain("softmax", x).decision
    assert d.cached and d.backend == "chunked" and fake_timer["calls"] == 4


@pytest.mark.parametrize("config", [{"chunk": 3}, {"nonsense": 1}, {"chunk": 8, "path": "gone"}, {"chunk": 8.0}],
                         ids=["value-outside", "unknown-key", "extra-key", "float-for-int"])
@pytest.mark.parametrize("entry", ["tune", "decision"])
def test_a_stored_config_outside_the_tune_space_is_not_used(entry, config):
    # a config the backend no longer has (its kernels changed, or the file was edited) is never
    # handed to its kernel: a CacheWarning names it, and the call is served as if there were no entry
    x, cache, files = _race_once()
    if entry == "tune":
        files["decision:"].unlink()
        _rewrite_value(files["tune:chunked"], {"config": config, "latency_us": 1.0})
    else:
        _rewrite_value(files["decision:"], {"backend": "chunked", "config": config})
    _again(cache)
    with pytest.warns(CacheWarning, match="not in chunked's tune space now"):
        torch.testing.assert_close(dispatch.softmax(x, backend="chunked"), torch.softmax(x, -1))
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    used = dispatch.explain("softmax", x, backend="chunked").decision.config.as_dict()
    assert used.get("chunk") in (8, 64, 1024) and type(used["chunk"]) is int and set(used) == {"chunk"}


def test_a_cached_winner_that_is_none_of_its_keys_candidates_is_warned_and_raced_again():
    # (a key names the backends that served it: a winner outside them was written by hand)
    x, cache, files = _race_once()
    _rewrite_value(files["decision:"], {"backend": "ghost", "config": {}})
    _again(cache)
    with pytest.warns(CacheWarning, match="the decision's backend 'ghost' is not one of its key's candidates"):
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    decision = dispatch.explain("softmax", x).decision
    assert decision.backend in ("chunked", "torch") and "fastest when raced" in decision.reason
