"""Several ranks agree on every decision and never hang: gloo jobs of 4 processes (NCCL on 2 GPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dispatch
from dispatch.distributed import current_group

HERE = Path(__file__).parent
WORKER = HERE / "distributed_worker.py"
HARD_LIMIT_S = 90  # a job past this is a hang: its processes are killed and the test fails


def run_job(tmp_path: Path, scenario: str, world: int = 4, device: str = "cpu", timeout_s: float = 30,
            shared_cache: bool = False, one_directory: bool = False) -> tuple[dict[int, dict], dict[int, int]]:
    """Run ``scenario`` on ``world`` ranks; (each rank's record, each rank's exit code). The ranks
    share one cache directory with ``shared_cache`` (only rank 0 writes) or ``one_directory``
    (every rank writes: what ranks of one host get when ``DISPATCH_CACHE_DIR`` is not set)."""
    out = tmp_path / "out"
    out.mkdir()
    procs = []
    for rank in range(world):
        env = dict(os.environ, DISPATCH_DISABLE_PLUGIN_AUTOLOAD="1", OMP_NUM_THREADS="1",
                   TIMEOUT_S=str(timeout_s), PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
                   DISPATCH_CACHE_DIR=str(tmp_path / ("cache" if shared_cache or one_directory else f"cache{rank}")),
                   DISPATCH_SHARED_CACHE="1" if shared_cache else "0")
        procs.append(subprocess.Popen(
            [sys.executable, str(WORKER), scenario, str(rank), str(world), str(tmp_path / "store"), str(out), device],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs, codes = {}, {}
    try:
        for rank, proc in enumerate(procs):
            logs[rank], _ = proc.communicate(timeout=HARD_LIMIT_S)
            codes[rank] = proc.returncode
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        pytest.fail(f"the {scenario!r} job hung: killed after {HARD_LIMIT_S} s")
    records = {}
    for rank in range(world):
        path = out / f"{rank}.json"
        if path.exists():
            records[rank] = json.loads(path.read_text())
    for rank, code in codes.items():
        if code != 0 and rank in records:
            pytest.fail(f"rank {rank} exited {code}:\n{logs[rank][-3000:]}")
    return records, codes


def test_ranks_with_different_timings_agree_on_the_slowest_ranks_fastest(tmp_path):
    records, _ = run_job(tmp_path, "race")
    assert len(records) == 4
    alone = {r: rec["alone"]["backend"] for r, rec in records.items()}
    assert alone == {0: "beta", 1: "beta", 2: "alpha", 3: "alpha"}, "alone, the ranks must disagree"
    agreed = [(rec["agreed"]["backend"], rec["agreed"]["config"]) for rec in records.values()]
    assert agreed == [agreed[0]] * 4 and agreed[0][0] == "beta"  # beta is faster on the slowest rank
    assert all("world (4 ranks, gloo)" in rec["agreed"]["agreed"] for rec in records.values())
    assert all("raced" in rec["agreed"]["agreed"] for rec in records.values())
    assert all("agreed by: world (4 ranks, gloo)" in rec["agreed"]["report"] for rec in records.values())
    assert all(rec["denied"]["backend"] == "alpha" and not rec["denied"]["warnings"] for rec in records.values())
    assert records[0]["forced_s"] < 5, "a forced backend must not wait for the other ranks"


def test_a_warm_cache_on_one_rank_and_cold_ones_agree_without_racing(tmp_path):
    records, _ = run_job(tmp_path, "warm")
    assert len(records) == 4
    chosen = {(rec["agreed"]["backend"], json.dumps(rec["agreed"]["config"])) for rec in records.values()}
    assert chosen == {("alpha", json.dumps({"chunk": 8}))}  # rank 0's cached decision, not a race's
    assert all(rec["beta_calls"] == 0 for rec in records.values()), "no rank may race"
    assert all(rec["agreed"]["seconds"] < 20 for rec in records.values())
    pair = [records[r]["pair"]["agreed"] for r in range(4)]  # configure(distributed=<ranks 0 and 1>)
    assert "ranks 0,1 (2 ranks, gloo)" in pair[0] and "ranks 0,1 (2 ranks, gloo)" in pair[1]
    assert pair[2:] == ["", ""], "ranks outside the group decide alone"
    for rank in (1, 2, 3):  # the agreed decision warms the cold ranks' caches
        assert list((tmp_path / f"cache{rank}").rglob("*.json")), f"rank {rank} did not cache the decision"
    for rank in (0, 1):  # configure(distributed=<a group destroyed since>): a warning, then decided alone
        destroyed = records[rank]["destroyed"]
        assert destroyed["agreed"] == "" and destroyed["backend"] in ("alpha", "beta")
        assert any("AgreementWarning: the group set by configure(distributed=...) can't be used" in w
                   for w in destroyed["all_warnings"]), destroyed["all_warnings"]


@pytest.mark.parametrize("shared_cache", [False, True], ids=["one-directory", "shared-cache"])
def test_a_race_on_one_cache_directory_is_paced_by_each_ranks_own_timings(tmp_path, shared_cache):
    # rank 0 tuned both backends alone into the directory both ranks use: rank 1 must not post
    # rank 0's latencies as its own (beta takes 3 ms a call on rank 1, alpha 1 ms on both)
    records, _ = run_job(tmp_path, "borrowed", world=2, shared_cache=shared_cache, one_directory=not shared_cache)
    agreed = {r: rec["agreed"] for r, rec in records.items()}
    assert len(agreed) == 2 and all("raced" in a["agreed"] for a in agreed.values()), agreed
    assert {a["backend"] for a in agreed.values()} == {"alpha"}, agreed[0]["report"]


def test_a_ranks_cached_decision_holding_a_config_outside_the_tune_space_is_not_the_groups(tmp_path):
    records, _ = run_job(tmp_path, "stale", world=2)
    agreed = {r: rec["agreed"] for r, rec in records.items()}
    assert len(agreed) == 2 and agreed[0]["config"] == agreed[1]["config"]
    assert agreed[0]["config"] != {"chunk": 7} and "cached" not in agreed[0]["agreed"], agreed[0]
    assert any("CacheWarning" in w and "{'chunk': 7}" in w and "not used" in w for w in agreed[1]["all_warnings"])


def test_explain_of_a_training_call_on_one_rank_after_the_call_does_not_wait_for_the_others(tmp_path):
    records, _ = run_job(tmp_path, "explain_grad", world=2, timeout_s=20)
    explained = records[0]["explain"]
    assert explained["seconds"] < 10, explained  # not the 20 s timeout
    assert not any("did not answer" in w for w in explained["warnings"]), explained["warnings"]
    assert "backward in a torch.compile'd step" in explained["report"]
    assert "this rank's own choice" in explained["report"]


@pytest.fixture(scope="module")
def uneven_job(tmp_path_factory):
    """One job for two tests: rank 3 has no beta, gamma faults on rank 2, and the ranks share one
    cache directory."""
    return run_job(tmp_path_factory.mktemp("uneven"), "uneven", shared_cache=True)


def test_ranks_with_different_backends_agree_on_one_they_all_serve(uneven_job):
    records, _ = uneven_job
    assert len(records) == 4
    # rank 3 has no beta, gamma faults on rank 2: alpha is the one that works everywhere
    assert {rec["agreed"]["backend"] for rec in records.values()} == {"alpha"}
    assert len({json.dumps(rec["agreed"]["config"]) for rec in records.values()}) == 1
    # gamma's tune failed on rank 2: that rank warns, and every rank's explain says why gamma lost
    assert any("FaultWarning: backend 'gamma' could not be tuned on rank 2" in w
               for w in records[2]["agreed"]["all_warnings"]), records[2]["agreed"]["all_warnings"]
    for rec in records.values():
        gamma = next(line for line in rec["agreed"]["report"].splitlines() if " gamma " in line)
        assert "not tuned on every rank: rank 2:" in gamma, rec["agreed"]["report"]
        assert "gamma left out, not tuned on every rank" in rec["agreed"]["report"]


def test_on_a_shared_cache_directory_only_rank_0_writes(uneven_job):
    records, _ = uneven_job
    assert records[0]["writes"] > 0
    assert [records[r]["writes"] for r in (1, 2, 3)] == [0, 0, 0]


def test_a_rank_that_dies_mid_agreement_leads_the_others_to_the_same_fallback(tmp_path):
    records, codes = run_job(tmp_path, "dies", timeout_s=3)
    assert codes[3] == 3 and 3 not in records
    assert sorted(records) == [0, 1, 2]
    assert {rec["agreed"]["backend"] for rec in records.values()} == {"alpha"}  # first in the static order
    assert all("rank(s) 3 did not answer" in " ".join(rec["agreed"]["warnings"]) for rec in records.values())
    assert all(rec["agreed"]["seconds"] < 20 for rec in records.values())


def test_a_ranks_own_race_time_is_not_counted_against_its_wait_for_the_others(tmp_path):
    # distributed_timeout bounds the wait for the other ranks: a race whose tuning takes longer than
    # it on every rank still ends in an agreed, raced decision, not a fallback
    records, _ = run_job(tmp_path, "slow_race", world=2, timeout_s=2)
    agreed = {r: rec["agreed"] for r, rec in records.items()}
    assert len(agreed) == 2 and agreed[0]["backend"] == agreed[1]["backend"]
    assert all("raced" in a["agreed"] and not a["warnings"] for a in agreed.values()), agreed


def test_the_topic_of_an_agreement_holds_the_timing_and_reads_an_empty_deny_list_as_none():
    from dispatch._settings import Scope, Settings
    from dispatch.backend import spec_of
    from dispatch.distributed import topic

    spec = spec_of("softmax", torch.randn(4, 8), -1)
    wall, device = Settings(timing="wall"), Settings(timing="device")
    assert topic(spec, wall) != topic(spec, device)  # a device-time race is not the wall-time one
    assert topic(spec, wall, Scope(timing="wall")) == topic(spec, wall)  # a block that denies nothing
    assert topic(spec, wall, Scope(deny=["triton"])) != topic(spec, wall)


def test_the_topic_of_a_training_call_is_not_the_inference_calls():
    # a backend without a backward serves the no_grad call only: the training call of the same
    # bucket needs an agreement of its own, or the ranks read an answer they can't use
    from dispatch._settings import Settings
    from dispatch.backend import spec_of
    from dispatch.distributed import topic

    x = torch.randn(4, 8)
    plain, training = spec_of("softmax", x, -1), spec_of("softmax", x.requires_grad_(), -1)
    assert training.requires_grad and not plain.requires_grad
    assert topic(plain, Settings()) != topic(training, Settings())


def _agreement(store=None, servers=()):
    from dispatch.distributed import Group, _Agreement

    agreement = object.__new__(_Agreement)  # (its parts, without a process group)
    agreement.group, agreement.servers = Group("world", 0, 2, store, "gloo"), list(servers)
    agreement.base, agreement.timeout = "dispatch-test", 30.0
    return agreement


def test_a_backend_whose_tune_failed_on_a_rank_is_not_the_static_answer():
    offer = {"servers": [{"name": n, "version": "1", "priority": p, "config": {}} for n, p in (("fast", 90),
                                                                                               ("torch", 10))]}
    posted = {0: offer, 1: offer}
    latencies = {0: {"fast": {"latency_us": 3.0, "config": {}}}, 1: {"fast": {"error": "RuntimeError: boom"}}}
    answer = _agreement()._reduce(["fast"], posted, latencies)  # (static policy: the first one tuned)
    assert (answer["kind"], answer["backend"]) == ("static", "torch")
    assert "fast could not be tuned on every rank (rank 1 fast: RuntimeError: boom)" in answer["why"]
    everyone_raced = _agreement()._reduce(["fast", "torch"], posted, {
        r: {n: {"error": "RuntimeError: boom"} for n in ("fast", "torch")} for r in (0, 1)})
    assert everyone_raced["kind"] == "none"  # each rank decides alone, and says so


def test_a_rank_stops_waiting_at_once_when_the_store_is_gone():
    import time as _time

    class GoneStore:  # what a rank sees after the rank that hosted the TCPStore died
        def set(self, key, value):
            raise RuntimeError("Broken pipe")

        def check(self, keys):
            raise RuntimeError("Connection reset by peer")

    start = _time.monotonic()
    with pytest.warns(dispatch.distributed.AgreementWarning, match="could not post"):
        posted, missing = _agreement(GoneStore())._exchange("offer", {"servers": []})
    assert _time.monotonic() - start < 5  # not the 30 s timeout
    assert posted == {} and missing == [0, 1]


def test_without_torch_distributed_no_group_agrees():
    assert not torch.distributed.is_initialized()
    assert current_group(True) is None
    assert dispatch.explain("softmax", torch.randn(2, 8)).decision.agreed == ""


def test_the_distributed_setting_rejects_what_is_not_a_flag_or_a_group(monkeypatch):
    with pytest.raises(TypeError, match="'distributed' must be True, False or a torch.distributed ProcessGroup"):
        dispatch.configure(distributed="yes")
    monkeypatch.setenv("DISPATCH_DISTRIBUTED", "0")
    monkeypatch.setenv("DISPATCH_DISTRIBUTED_TIMEOUT", "7")
    settings = dispatch.reset()
    assert settings.distributed is False and settings.distributed_timeout == 7.0
    monkeypatch.setenv("DISPATCH_DISTRIBUTED_TIMEOUT", "-1")
    with pytest.raises(ValueError, match="DISPATCH_DISTRIBUTED_TIMEOUT must be a number of seconds > 0"):
        dispatch.reset()
    monkeypatch.delenv("DISPATCH_DISTRIBUTED_TIMEOUT")
    dispatch.reset()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_two_gpus_agree_through_nccl(tmp_path):
    records, _ = run_job(tmp_path, "race", world=2, device="cuda")
    agreed = {(rec["agreed"]["backend"], json.dumps(rec["agreed"]["config"])) for rec in records.values()}
    assert len(records) == 2 and len(agreed) == 1
    assert all("nccl" in rec["agreed"]["agreed"] for rec in records.values())
