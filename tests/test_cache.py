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
    with pytest.warns(CacheWarning, match="ignoring corrupt cache file"):
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
    assert dst.import_(tmp_path / "export.json") == (2, 0)
    assert dst.get({"kind": "decision", "op": "softmax"}) == {"backend": "torch"}
    # a pickle (or any non-JSON) is rejected whole, never loaded
    import pickle
    (tmp_path / "evil.json").write_bytes(pickle.dumps({"x": 1}))
    with pytest.warns(CacheWarning, match="rejected cache import"):
        assert dst.import_(tmp_path / "evil.json") == (0, 1)
    (tmp_path / "partly.json").write_text(json.dumps({"schema": 1, "entries": [
        {"key": {"op": "softmax"}, "value": {"backend": "torch"}}, {"key": {"op": 3}, "value": {}}, "junk"]}))
    with pytest.warns(CacheWarning, match="rejected entry"):
        assert dst.import_(tmp_path / "partly.json") == (1, 2)


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
