"""Shipped decision tables: a table made by a sweep serves calls on its device, after the user's cache."""

from __future__ import annotations

import importlib
import json
import warnings
from pathlib import Path

import pytest
import torch

import dispatch
from dispatch._dispatcher import DISPATCHER
from dispatch._keys import device_name
from dispatch.autotune import CacheWarning, default_cache
from dispatch.autotune.tables import default_tables_dir
from dispatch.cli import main

import chunked_backend

SHAPE = (4, 64)


@pytest.fixture
def fake_timer(monkeypatch):
    """Races decided by the test: chunked configs at ``chunked`` us (+ chunk/1e4), torch at ``torch``."""
    from dispatch.autotune import Timing

    sweep_module = importlib.import_module("dispatch.autotune.sweep")
    setting = {"chunked": 10.0, "torch": 20.0, "calls": 0}

    def measure(fn, device, settings=None, config=None):
        setting["calls"] += 1
        if config is not None and "chunk" in config.as_dict():
            return Timing(config, setting["chunked"] + config["chunk"] / 1e4, 0.1, 50)
        return Timing(config, setting["torch"], 0.1, 50)

    monkeypatch.setattr(sweep_module, "measure", measure)
    return setting


@pytest.fixture
def table(fake_timer, tmp_path, monkeypatch):
    """A table made by a sweep in which chunked (chunk 8) wins; the user's cache is then emptied."""
    plugin = chunked_backend.make("chunked", priority=10)  # below torch: the static order picks torch
    dispatch.register(plugin)
    dispatch.configure(allow="chunked,torch")
    file = default_tables_dir() / "cpu-table.json"
    file.parent.mkdir(parents=True, exist_ok=True)
    rc = main(["tune", "--sweep", "softmax/logsumexp:float32:4x64", "--backends", "chunked,torch",
               "--device", "cpu", "--export", str(file)])
    assert rc == 0 and fake_timer["calls"] > 0
    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "fresh-cache"))
    DISPATCHER.reset()
    fake_timer["calls"] = 0
    plugin.calls.clear()
    return file, plugin


def decision(op="softmax", x=None):
    return dispatch.explain(op, torch.randn(*SHAPE) if x is None else x, dim=-1).decision


def test_a_shipped_decision_serves_the_call_with_its_backend_and_config_and_measures_nothing(table, fake_timer):
    file, plugin = table
    data = json.loads(file.read_text())
    assert data["device"] == device_name(torch.device("cpu")) and len(data["entries"]) == 2
    assert data["command"].startswith("python -m dispatch tune --sweep") and data["created"]
    x = torch.randn(*SHAPE)
    d = decision(x=x)
    assert (d.backend, d.config.as_dict(), d.config_source) == ("chunked", {"chunk": 8}, "shipped table")
    assert f"shipped decision ({file.name}" in str(dispatch.explain("softmax", x, dim=-1))
    torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    assert plugin.calls and fake_timer["calls"] == 0
    assert decision("logsumexp").backend == "chunked"
    assert decision("log_softmax").backend == "torch"  # not in the table: the static order
    assert not list(default_cache().entries())  # a shipped decision is not copied into the user's cache


def test_precedence_user_cache_then_shipped_table_then_static_order(table, fake_timer, monkeypatch, tmp_path):
    file, _ = table
    dispatch.configure(autotune=True)  # a shipped decision is taken before a race
    assert decision().backend == "chunked" and fake_timer["calls"] == 0
    fake_timer.update(chunked=30.0)  # the user's own race says torch
    importlib.import_module("dispatch.tune").tune_call("softmax", torch.randn(*SHAPE), dim=-1)
    dispatch.configure(autotune=False)
    d = decision()
    assert (d.backend, d.cached, d.config_source) == ("torch", True, "cache")
    (tmp_path / "no-tables").mkdir()
    monkeypatch.setenv("DISPATCH_TABLES_DIR", str(tmp_path / "no-tables"))
    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "empty-cache"))
    DISPATCHER.reset()
    assert "first in the static order" in decision().reason


def test_a_table_raced_by_wall_time_does_not_decide_calls_timed_by_device_time(table, fake_timer, monkeypatch,
                                                                              tmp_path):
    """A table made with the default wall timing serves wall-timed calls only: with
    ``timing="device"`` (code replayed in CUDA graphs) a call goes by the cards or its own race, and
    a table exported under device timing serves such calls in turn."""
    file, _ = table
    assert decision().config_source == "shipped table"
    dispatch.configure(timing="device")
    assert decision().config_source != "shipped table"
    device_file = file.with_name("cpu-device-table.json")
    monkeypatch.setenv("DISPATCH_TIMING", "device")
    rc = main(["tune", "--sweep", "softmax:float32:4x64", "--backends", "chunked,torch", "--device", "cpu",
               "--export", str(device_file)])
    assert rc == 0
    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "another-fresh-cache"))
    DISPATCHER.reset()
    dispatch.configure(timing="device")
    d = decision()
    assert (d.backend, d.config_source) == ("chunked", "shipped table")



def test_a_call_bound_by_its_device_time_takes_the_wall_timed_entry_where_none_raced_by_device_time(
        table, fake_timer, monkeypatch, tmp_path):
    # a call that moves the L2's size or more pays its device time as its wall time, so a table
    # raced by wall time decides it under timing="device" too, and says how; a smaller call does not
    from dispatch import _select

    file, _ = table
    dispatch.configure(timing="device")
    for bound in (False, True):
        monkeypatch.setattr(_select, "device_bound", lambda spec, bound=bound: bound)
        DISPATCHER.reset()
        dispatch.configure(timing="device")
        d = decision()
        if not bound:
            assert d.config_source != "shipped table"
            continue
        assert (d.backend, d.config_source) == ("chunked", "shipped table"), d.reason
        assert f"shipped decision ({file.name}: raced by wall time" in d.reason
    device_file = file.with_name("cpu-device-table.json")  # an entry raced by device time comes first
    monkeypatch.setenv("DISPATCH_TIMING", "device")
    fake_timer["chunked"] = 30.0  # by device time torch wins
    assert main(["tune", "--sweep", "softmax:float32:4x64", "--backends", "chunked,torch", "--device", "cpu",
                 "--export", str(device_file)]) == 0
    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "another-fresh-cache"))
    DISPATCHER.reset()
    dispatch.configure(timing="device")
    d = decision()
    assert (d.backend, d.config_source) == ("torch", "shipped table") and "raced by wall time" not in d.reason


def test_device_bound_is_a_gpu_call_moving_at_least_the_l2():
    from dispatch._tuner import device_bound
    from dispatch.backend import spec_of

    assert not device_bound(spec_of("softmax", torch.randn(4096, 4096), -1))  # the CPU has no device time
    if torch.cuda.is_available():
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        small = torch.empty(l2 // 16, device="cuda", dtype=torch.float32).view(1, -1)  # reads + writes L2 / 2
        large = torch.empty(l2 // 4, device="cuda", dtype=torch.float32).view(1, -1)  # reads + writes 2 x L2
        assert not device_bound(spec_of("softmax", small, -1))
        assert device_bound(spec_of("softmax", large, -1))


def test_tune_races_and_exports_by_the_timing_it_is_given_and_says_which(table, fake_timer, monkeypatch, tmp_path,
                                                                        capsys):
    """``tune --timing device`` writes device-timing decisions, which serve device-timed calls and
    not wall-timed ones; a table raced under ``DISPATCH_TIMING`` records it in its command, so that
    the command reproduces the table; ``explain --timing`` shows the decision for that timing."""
    file, _ = table
    by_flag = file.with_name("cpu-by-flag.json")
    argv = ["tune", "--sweep", "softmax:float32:4x64", "--backends", "chunked,torch", "--device", "cpu",
            "--timing", "device", "--export", str(by_flag)]
    assert main(argv) == 0
    data = json.loads(by_flag.read_text())
    assert {e["key"]["timing"] for e in data["entries"]} == {"device"}
    assert data["command"] == "python -m dispatch " + " ".join(argv)
    assert "(device timing)" in capsys.readouterr().err
    file.unlink()  # only the device-timing table is left
    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "cache-2"))
    DISPATCHER.reset()
    assert decision().config_source != "shipped table"  # a wall-timed call
    assert main(["explain", "softmax", "--shape", "4x64", "--device", "cpu", "--timing", "device"]) == 0
    shown = capsys.readouterr().out
    assert "timing: device" in shown and "shipped table" in shown

    by_env = file.with_name("cpu-by-env.json")
    monkeypatch.setenv("DISPATCH_TIMING", "device")
    dispatch.configure(timing="device")  # as a process started with the variable reads it
    assert main(["tune", "--sweep", "softmax:float32:4x64", "--backends", "chunked,torch", "--device", "cpu",
                 "--export", str(by_env)]) == 0
    command = json.loads(by_env.read_text())["command"]
    assert command.startswith("DISPATCH_TIMING=device python -m dispatch tune ")


def test_a_timing_the_cli_does_not_know_is_refused_naming_the_choices(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--sweep", "softmax:float32:4x64", "--timing", "gpu"])
    err = capsys.readouterr().err
    assert "--timing" in err and "'gpu'" in err and "wall" in err and "device" in err

def _rewrite(file, change):
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data))


def test_a_table_of_another_device_is_never_used(table):
    file, _ = table

    def elsewhere(data):
        data["device"] = "cpu:another-arch"
        for entry in data["entries"]:
            entry["key"]["device"] = "cpu:another-arch"
    _rewrite(file, elsewhere)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # another device's table is no error, just not ours
        assert decision().backend == "torch"


def test_an_entry_whose_device_is_not_its_tables_is_warned_and_skipped(table):
    file, _ = table
    _rewrite(file, lambda data: data["entries"][0]["key"].update(device="cpu:another-arch"))
    with pytest.warns(CacheWarning, match="must be the table's device"):
        decision("softmax")  # entry 0 is logsumexp's (sorted by key); softmax's entry is still used
    assert decision("logsumexp").backend == "torch" and decision("softmax").backend == "chunked"


@pytest.mark.parametrize("text", ["{not json", '{"format": "dispatch-decision-table", "schema": 99}', "[1, 2]",
                                  "[" * 100000])
def test_a_corrupt_table_is_warned_once_and_ignored(table, text):
    file, _ = table
    broken = file.with_name("broken.json")
    broken.write_text(text)
    with pytest.warns(CacheWarning, match="broken.json") as caught:
        assert decision("softmax").backend == "chunked"  # the good table still serves
    assert len([w for w in caught if "broken.json" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        assert decision("logsumexp").backend == "chunked"


@pytest.mark.parametrize("change", [
    lambda entry: entry["value"].update(backend=3),
    lambda entry: entry["value"].update(config={"chunk": [8]}),
    lambda entry: entry["key"].update(kind="tune"),
    lambda entry: entry["value"].update(backend="ghost"),  # not among its own candidates
], ids=["backend-not-str", "config-not-scalar", "not-a-decision", "backend-not-a-candidate"])
def test_a_bad_entry_is_warned_and_skipped_and_the_others_are_used(table, change):
    file, _ = table
    _rewrite(file, lambda data: change(data["entries"][1]))  # softmax's
    with pytest.warns(CacheWarning, match="entry 1"):
        assert decision("softmax").backend == "torch"
    assert decision("logsumexp").backend == "chunked"


def test_an_entry_raced_among_backends_not_loaded_here_is_not_used(table):
    file, _ = table

    def with_ghost(data):
        for entry in data["entries"]:
            entry["key"]["candidates"] += ",ghost=2.0"
            entry["value"]["backend"] = "ghost"
    _rewrite(file, with_ghost)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # a valid entry, just not for this set of backends
        d = decision()
    assert d.backend == "torch" and "first in the static order" in d.reason


def test_backend_versions_are_not_matched_but_backend_names_are(table):
    file, _ = table
    def older(data):
        for entry in data["entries"]:
            entry["key"]["candidates"] = entry["key"]["candidates"].replace("chunked=1.0", "chunked=0.9")
    _rewrite(file, older)
    assert decision().backend == "chunked"
    dispatch.register(chunked_backend.make("chunked2", priority=5))
    dispatch.configure(allow="chunked,chunked2,torch")  # a backend the table's race did not see
    assert "shipped" not in decision().reason


def test_the_tables_dir_defaults_to_the_packages_own_folder(monkeypatch):
    monkeypatch.delenv("DISPATCH_TABLES_DIR")
    assert default_tables_dir() == Path(dispatch.__file__).resolve().parent / "tables"


def test_an_interrupted_sweep_keeps_its_finished_decisions_and_writes_no_table(fake_timer, monkeypatch, tmp_path):
    dispatch.register(chunked_backend.make("chunked", priority=10))
    tune = importlib.import_module("dispatch.tune")
    real, done = tune.tune_call, []

    def interrupted(*args, **kwargs):
        if done:
            raise KeyboardInterrupt
        done.append(real(*args, **kwargs))
        return done[-1]
    monkeypatch.setattr(tune, "tune_call", interrupted)
    out = tmp_path / "table.json"
    assert main(["tune", "--sweep", "softmax:float32:4x64/4x2048", "--backends", "chunked,torch",
                 "--device", "cpu", "--export", str(out)]) == 130
    assert not out.exists()
    entries = [k for k, _ in default_cache().entries() if k["kind"] == "decision"]
    assert len(entries) == 1 and default_cache().rejected == {}


@pytest.mark.parametrize("argv, message", [
    (["tune", "--sweep", "softmax:float32"], "OPS:DTYPES:SHAPES"),
    (["tune", "--sweep", "softmax:int8:4x4"], "--dtype must be a floating dtype"),
    (["tune", "softmax", "--shape", "4x4", "--export", "t.json"], "--export writes the decisions of a --sweep"),
    (["tune", "softmax", "--sweep", "softmax:float32:4x4"], "give no OP or --shape"),
    (["tune"], "needs an OP and --shape"),
    (["tune", "--sweep", "softmax:float32:4x4/"], "an empty alternative between '/'s"),
    (["tune", "--sweep", "softmax:float8_e4m3fn:4x4"], "--dtype must be a floating dtype"),
    (["tune", "--sweep", "softmax:float32:4x4", "--export", "/proc/t.json"], "is not writable here"),
])
def test_sweep_arguments_are_checked_with_what_would_work(argv, message, capsys):
    with pytest.raises(SystemExit) if message.startswith(("OPS", "--dtype", "an empty")) else _nothing():
        assert main(argv) == 2
    assert message in capsys.readouterr().err


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_sweep_spec_names_every_combination_and_may_come_from_a_file(tmp_path):
    from dispatch.cli import parse_sweep

    calls = parse_sweep("softmax/logsumexp:bfloat16/float32:8x128/1x4096 log_softmax:float16:32x4096")
    assert len(calls) == 2 * 2 * 2 + 1
    assert ("logsumexp", torch.float32, (1, 4096)) in calls and ("log_softmax", torch.float16, (32, 4096)) in calls
    spec = tmp_path / "sweep.txt"
    spec.write_text("# the bandwidth rows\nsoftmax:float32:65536x1024  # one call\n\nlogsumexp:float32:8x128\n")
    assert parse_sweep(f"@{spec}") == [("softmax", torch.float32, (65536, 1024)),
                                       ("logsumexp", torch.float32, (8, 128))]


def test_an_unreadable_tables_dir_is_one_warning_and_no_shipped_decision(monkeypatch, tmp_path):
    tables = default_tables_dir()  # the test's own, empty
    real_glob = Path.glob

    def glob(self, pattern):
        if self == tables:
            raise PermissionError(13, "Permission denied", str(self))
        return real_glob(self, pattern)
    monkeypatch.setattr(Path, "glob", glob)
    with pytest.warns(CacheWarning, match="cannot list it"):
        assert "static order" in decision().reason


def test_of_two_tables_holding_one_key_the_first_by_name_serves_it(table):
    # a second sweep of the same device in its own file (nvidia-h200-decode.json beside
    # nvidia-h200.json): where both hold a key, the file first in name order serves it
    file, _plugin = table
    data = json.loads(file.read_text())
    other = json.loads(file.read_text())
    for entry in other["entries"]:
        entry["value"] = dict(entry["value"], backend="torch", config={})
    first = file.with_name("cpu-a-first.json")  # "cpu-a-first" < "cpu-table"
    first.write_text(json.dumps(other))
    assert decision().backend == "torch"
    assert f"shipped decision ({first.name}" in str(dispatch.explain("softmax", torch.randn(*SHAPE), dim=-1))
    first.unlink()
    assert decision().backend == "chunked" and data["entries"]


def test_every_table_the_package_ships_loads_whole_and_says_how_it_was_made():
    """The tables under ``dispatch/tables`` are read without a rejected file or entry, each names the
    command that made it, and the device-timing table's command says its timing (so rerunning it
    makes the same kind of table)."""
    from dispatch.autotune.tables import ShippedTables

    shipped = Path(dispatch.__file__).parent / "tables"
    files = sorted(shipped.glob("*.json"))
    tables = ShippedTables(shipped)
    assert files and len(tables) > 0 and tables.rejected == {}
    for path in files:
        data = json.loads(path.read_text())
        timings = {entry["key"].get("timing", "wall") for entry in data["entries"]}
        assert data["command"].split("python -m dispatch tune ")[0] in ("", "DISPATCH_TIMING=device "), path.name
        by_device = data["command"].startswith("DISPATCH_TIMING=device") or " --timing device " in data["command"]
        assert (timings == {"device"}) == by_device, path.name


def test_a_tables_dir_that_names_no_folder_is_said(monkeypatch, tmp_path):
    monkeypatch.setenv("DISPATCH_TABLES_DIR", str(tmp_path / "missing"))
    DISPATCHER.reset()
    with pytest.warns(CacheWarning, match="DISPATCH_TABLES_DIR names no folder"):
        dispatch.softmax(torch.randn(4, 8), -1)


def test_tune_names_a_backend_that_is_not_loaded_and_an_export_it_cant_write_before_tuning(tmp_path, capsys):
    assert main(["tune", "softmax", "--shape", "4x64", "--device", "cpu", "--backends", "torch,nosuch"]) == 2
    assert "backend 'nosuch' is not loaded; loaded backends:" in capsys.readouterr().err
    export = tmp_path / "missing" / "t.json"
    assert main(["tune", "--sweep", "softmax:float32:4x64", "--backends", "torch", "--device", "cpu",
                 "--export", str(export)]) == 2
    said = capsys.readouterr()
    assert f"error: --export {export}: its folder" in said.err and "tuning 1 calls" not in said.err


def test_tables_written_at_once_to_one_file_each_land_whole_and_a_reader_never_sees_a_part(table, tmp_path):
    # two exports of one file at once (two sweeps, say) each write a temporary file of their own
    import threading

    from dispatch.autotune.tables import write_table

    file, _ = table
    device = json.loads(file.read_text())["device"]
    entries = [(e["key"], e["value"]) for e in json.loads(file.read_text())["entries"]]
    target = tmp_path / "shared.json"
    errors, parsed, done = [], [], threading.Event()

    def write(tag):
        try:
            for i in range(40):
                write_table(target, device, entries, command=f"{tag} {i}" + " x" * 4000, created="now")
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    def read():
        while not done.is_set():
            if target.exists():
                parsed.append(json.loads(target.read_text())["command"].split()[0])

    threads = [threading.Thread(target=write, args=(tag,)) for tag in ("a", "b")]
    reader = threading.Thread(target=read)
    reader.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reader.join()
    assert errors == [] and parsed and set(parsed) <= {"a", "b"}
    assert len(json.loads(target.read_text())["entries"]) == len(entries)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_a_sweep_goes_on_past_a_call_no_named_backend_serves_and_exports_the_others(table, fake_timer, tmp_path,
                                                                                     capsys):
    # chunked and other serve float32 and float64, not float16: the float16 call is said and skipped,
    # the float32 one raced and written
    dispatch.register(chunked_backend.make("other", priority=5))
    out = tmp_path / "mixed.json"
    rc = main(["tune", "--sweep", "softmax:float16/float32:4x64", "--backends", "chunked,other", "--device", "cpu",
               "--export", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "[1/2] not tuned: no backend can serve softmax(4x64 float16" in err
    data = json.loads(out.read_text())
    assert [e["key"]["dtype"] for e in data["entries"]] == ["float32"]


def test_tune_says_it_ran_with_autotune_and_stored_what_it_raced(table, fake_timer, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DISPATCH_CACHE_DIR", str(tmp_path / "cold"))
    DISPATCHER.reset()
    assert main(["tune", "softmax", "--shape", "4x64", "--device", "cpu", "--backends", "chunked,torch"]) == 0
    shown = capsys.readouterr().out
    assert "autotune: on for this tune" in shown and "cached decision: no (raced now; stored in the cache)" in shown
    assert main(["tune", "softmax", "--shape", "4x64", "--device", "cpu", "--backends", "chunked,torch"]) == 0
    assert "cached decision: yes" in capsys.readouterr().out  # the second tune is a lookup
