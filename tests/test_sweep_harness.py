"""benchmarks/sweep_harness.py: a race's case, timed against a copy of the input's bytes, lands in the
sweep's records and files as it is measured."""

from __future__ import annotations

import json
import types

import torch

from benchmark_scripts import load


def test_a_case_is_timed_against_a_copy_of_its_input_and_saved_at_once(tmp_path, monkeypatch, capsys):
    harness = load("sweep_harness")
    asked = []

    def race_table(fns, rounds, nbytes, copy_bytes, case, label, timer="flush"):
        asked.append((sorted(fns), rounds, nbytes, copy_bytes, timer))
        return [{**case, "name": k, "us": [float(i + 1)], "line": f"{label} | {k} |"} for i, k in enumerate(fns)]

    monkeypatch.setattr(harness, "race_table", race_table)
    records = []
    meta = {"command": "sweep", "columns": "op | dtype | M x N"}
    save = harness.saver(str(tmp_path), "race", meta, records, harness.write_race_markdown)
    x = torch.zeros(3, 40, dtype=torch.bfloat16)
    fns = {"copy": None, "a": None, "b": None}
    case, label = harness.row_case("softmax", 3, 40, "bfloat16")
    harness.race_case(fns, types.SimpleNamespace(rounds=2), 480, x, case, label, records, save, shown=2)
    # a script without --timer races by the flush; the copy moves x's 240 bytes twice (read, written)
    assert asked == [(["a", "b", "copy"], 2, 480, 480, "flush")]
    assert [r["name"] for r in records] == ["copy", "a", "b"] and records[0]["shape"] == "3x40"
    saved = json.loads((tmp_path / "race.json").read_text())
    assert saved["rows"] == records and saved["meta"] == meta
    assert "| softmax | bfloat16 | 3x40 | b |" in (tmp_path / "race.md").read_text()
    assert capsys.readouterr().out.splitlines() == ["| softmax | bfloat16 | 3x40 | copy |",
                                                    "| softmax | bfloat16 | 3x40 | a |"]
    harness.race_case(fns, types.SimpleNamespace(rounds=1, timer="graph"), 480, x, case, label, records, save)
    assert asked[-1][-1] == "graph" and len(records) == 6
    assert len(json.loads((tmp_path / "race.json").read_text())["rows"]) == 6
