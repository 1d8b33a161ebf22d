"""The cache's command line: every failure is one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import json

import pytest
import torch

import dispatch
from dispatch.autotune import DecisionCache, default_cache
from dispatch.cli import main


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _entries(n: int) -> DecisionCache:
    cache = default_cache()
    for i in range(n):
        cache.put({"kind": "decision", "op": "softmax", "bucket": str(i)}, {"backend": "torch"})
    return cache


def test_cache_clear_removes_every_entry_it_can_and_names_the_odd_one(capsys):
    cache = _entries(3)
    odd = cache.entries_dir / "odd.json"
    (odd / "inside").mkdir(parents=True)
    assert main(["cache", "clear"]) == 1
    out, err = capsys.readouterr()
    assert "removed 3 entries" in out
    assert "odd.json" in _one_line(err) and _one_line(err).startswith("error: could not remove")
    assert sorted(p.name for p in cache.entries_dir.iterdir()) == ["odd.json"]


def test_cache_export_to_a_directory_is_one_line(tmp_path, capsys):
    _entries(1)
    (tmp_path / "out").mkdir()
    assert main(["cache", "export", str(tmp_path / "out")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "directory" in line and "dispatch-cache.json" in line


def test_cache_export_where_it_cannot_write_is_one_line(tmp_path, capsys):
    _entries(1)
    (tmp_path / "a-file").write_text("")
    assert main(["cache", "export", str(tmp_path / "a-file" / "e.json")]) == 2
    assert "a-file" in _one_line(capsys.readouterr().err)


def test_cache_import_of_a_huge_nesting_is_one_line(tmp_path, capsys):
    file = tmp_path / "deep.json"
    file.write_text("[" * 200_000 + "]" * 200_000)
    assert main(["cache", "import", str(file)]) == 1
    assert "imported 0, rejected 1" in _one_line(capsys.readouterr().err)


def test_cache_import_of_a_missing_file_is_a_bad_argument(tmp_path, capsys):
    assert main(["cache", "import", str(tmp_path / "absent.json")]) == 2  # a bad argument, not a rejected entry
    assert "absent.json: no such file" in _one_line(capsys.readouterr().err)


def test_cache_import_names_each_rejected_entry_on_one_line(tmp_path, capsys):
    good = {"key": {"kind": "decision", "op": "softmax"}, "value": {"backend": "torch"}}
    bad = {"key": {"kind": "decision", "op": "log_softmax"}, "value": {"backend": "torch", "timings": {"torch": "x"}}}
    (tmp_path / "in.json").write_text(json.dumps({"schema": 1, "entries": [good, bad]}))
    assert main(["cache", "import", str(tmp_path / "in.json")]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("imported 1, rejected 1: entry 1: 'timings.torch' must be a finite number")


def test_explain_with_odd_cached_timings_explains_and_warns_on_one_line(capsys):
    import chunked_backend

    dispatch.register(chunked_backend.make("chunked", priority=200))
    dispatch.configure(autotune=True, allow=["torch", "chunked"])
    dispatch.softmax(torch.randn(8, 64))
    cache = default_cache()
    for path in cache.entries_dir.glob("*.json"):
        data = json.loads(path.read_text())
        if data["key"]["kind"] == "decision":
            data["value"]["timings"] = {"chunked": "fast", "torch": [1]}
            path.write_text(json.dumps(data))
    cache.forget_memo()
    from dispatch._dispatcher import DISPATCHER
    DISPATCHER.reset()
    dispatch.configure(autotune=False)
    assert main(["explain", "softmax", "--shape", "8x64", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert "choice: chunked" in out
    assert _one_line(err).startswith("warning: ignoring cache file")


def test_cache_import_into_a_cache_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    entry = {"key": {"kind": "decision", "op": "softmax"}, "value": {"backend": "torch"}}
    (tmp_path / "in.json").write_text(json.dumps({"schema": 1, "entries": [entry]}))
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "a-file"))
    assert main(["cache", "import", str(tmp_path / "in.json")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"error: the cache dir {tmp_path / 'a-file'} is not a folder")


@pytest.mark.parametrize("action", ["clear", "show"])
def test_cache_clear_or_show_with_a_file_is_a_usage_error_and_deletes_nothing(action, capsys):
    cache = _entries(2)
    with pytest.raises(SystemExit) as exited:
        main(["cache", action, "softmax"])
    assert exited.value.code == 2 and f"cache {action} takes no FILE (got 'softmax')" in capsys.readouterr().err
    assert len(list(cache.entries_dir.glob("*.json"))) == 2


@pytest.mark.parametrize("action", ["show", "clear", "export"])
def test_a_cache_dir_that_is_a_file_is_an_error_not_an_empty_cache(action, tmp_path, monkeypatch, capsys):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(not_a_folder))
    assert main(["cache", action] + ([str(tmp_path / "out.json")] if action == "export" else [])) == 2
    assert f"the cache dir {not_a_folder} is not a folder" in capsys.readouterr().err


def test_cache_import_rejects_a_decision_whose_backend_is_not_among_its_keys_candidates(tmp_path, capsys):
    # no call of that key could be served by it: imported, it would be skipped at every call, unsaid
    key = {"kind": "decision", "op": "softmax", "candidates": f"torch={dispatch.backends()['torch'].version}"}
    entries = [{"key": key, "value": {"backend": "nope"}}, {"key": {**key, "op": "log_softmax"},
                                                          "value": {"backend": "torch"}}]
    (tmp_path / "in.json").write_text(json.dumps({"schema": 1, "entries": entries}))
    assert main(["cache", "import", str(tmp_path / "in.json")]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("imported 1, rejected 1: entry 0: the decision's backend 'nope' is not one of its "
                           "key's candidates (torch)"), line
