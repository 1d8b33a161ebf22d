"""A tune's time: candidates compiled ahead on a pool (a failure drops one, never the tune), every
backend's compile before any timing, the early stop, the compile/timing split in explain and the
log, shape pruning, and a cache left consistent by Ctrl-C."""

from __future__ import annotations

import json
import logging
import random
import threading
import time

import os

import pytest
import torch

import chunked_backend
import dispatch
from dispatch.autotune import Config, Failure, Timing, TuneSettings, compile_all, default_cache, sweep
from dispatch.errors import TuneError

TEST_BACKENDS = ["torch", "chunked", "other"]


def _with_precompile(plugin, fails=(), events=None, delay=0.0, name="chunked"):
    """``plugin`` with a dispatch_precompile that compiles each config on a pool (``delay`` seconds
    each), failing those whose chunk is in ``fails``; ``events`` records (name, what, when)."""
    built = plugin.built = []

    @dispatch.hookimpl
    def dispatch_precompile(op, spec, configs):
        def one(config):
            if events is not None:
                events.append((name, "compile", time.perf_counter()))
            time.sleep(delay)
            if config["chunk"] in fails:
                raise RuntimeError(f"ptxas: out of registers for chunk={config['chunk']}")
            built.append(config["chunk"])
        return compile_all(configs, one).failures

    plugin.dispatch_precompile = dispatch_precompile
    if events is not None:
        kernel = plugin.dispatch_kernel

        @dispatch.hookimpl
        def dispatch_kernel(op, spec, config):
            inner = kernel(op, spec, config)

            def run(x):
                events.append((name, "time", time.perf_counter()))
                return inner(x)
            return run

        plugin.dispatch_kernel = dispatch_kernel
    return plugin


def _tune_entry(backend: str) -> dict:
    for key, value in default_cache().entries():
        if key.get("kind") == "tune" and key.get("backend") == backend:
            return value
    raise AssertionError(f"no tune entry for {backend}")


# -- compile failures ------------------------------------------------------------------------------

def test_a_candidate_that_fails_to_compile_is_dropped_and_the_tune_still_picks():
    plugin = _with_precompile(chunked_backend.make("chunked", priority=200), fails=(8,))
    dispatch.register(plugin)
    dispatch.configure(autotune=True, policy="measured", allow=TEST_BACKENDS)
    x = torch.randn(8, 64)
    explanation = dispatch.explain("softmax", x)
    decision = explanation.decision
    assert decision.backend in ("torch", "chunked")
    torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    value = _tune_entry("chunked")
    timed = [t["config"]["chunk"] for t in value["timings"]]
    assert sorted(timed) == [64, 1024]  # the one that failed to compile was never timed
    assert [f["config"]["chunk"] for f in value["failures"]] == [8]
    assert "compile error" in value["failures"][0]["reason"] and "out of registers" in value["failures"][0]["reason"]
    assert sorted(plugin.built) == [64, 1024]
    if decision.backend == "chunked":
        assert "failed: chunk=8: compile error" in str(explanation)


def test_the_default_failing_to_compile_leaves_the_others_to_tune():
    dispatch.register(_with_precompile(chunked_backend.make("chunked", priority=200), fails=(64,)))
    dispatch.configure(autotune=True, allow=["chunked"])
    decision = dispatch.explain("softmax", torch.randn(8, 64)).decision
    assert decision.backend == "chunked" and decision.config["chunk"] in (8, 1024)


def test_every_candidate_failing_to_compile_fails_that_backend_only():
    dispatch.register(_with_precompile(chunked_backend.make("chunked", priority=200), fails=(8, 64, 1024)))
    dispatch.configure(autotune=True, policy="measured", allow=TEST_BACKENDS)
    decision = dispatch.explain("softmax", torch.randn(8, 64)).decision
    assert decision.backend == "torch"
    note = next(c.note for c in decision.candidates if c.name == "chunked")
    assert "no config compiled" in note


def test_a_raising_precompile_hook_costs_the_head_start_not_the_tune():
    plugin = chunked_backend.make("chunked", priority=200)

    @dispatch.hookimpl
    def dispatch_precompile(op, spec, configs):
        raise RuntimeError("compiler missing")

    plugin.dispatch_precompile = dispatch_precompile
    dispatch.register(plugin)
    dispatch.configure(autotune=True, allow=["chunked"])
    decision = dispatch.explain("softmax", torch.randn(8, 64)).decision
    assert decision.backend == "chunked" and decision.tune is not None and len(decision.tune.timings) == 3


def test_a_precompile_hook_answering_a_str_is_named_with_what_it_returned():
    plugin = chunked_backend.make("chunked", priority=200)

    @dispatch.hookimpl
    def dispatch_precompile(op, spec, configs):
        return "oops"

    plugin.dispatch_precompile = dispatch_precompile
    dispatch.register(plugin)
    dispatch.configure(autotune=True, allow=["chunked"])
    dispatch.explain("softmax", torch.randn(8, 64))  # the tune still runs (the head start is lost)
    said = [f.error for f in dispatch.faults() if "dispatch_precompile" in str(f.error)]
    assert said and "returned 'oops' (str)" in str(said[-1]), said


def test_compile_all_runs_on_a_pool_and_reports_in_order():
    seen = set()
    lock = threading.Lock()
    barrier = threading.Barrier(3, timeout=10)  # three compiles at once, or this times out

    def one(config):
        barrier.wait()
        with lock:
            seen.add(threading.current_thread().name)
        if config["k"] == 1:
            raise ValueError("bad tile\nmore detail")

    configs = [Config.of(k=k) for k in range(3)]
    report = compile_all(configs, one, workers=3)
    assert report.compiled == (configs[0], configs[2])
    assert report.failures == (Failure(configs[1], "compile error: ValueError: bad tile"),)
    assert len(seen) == 3 and report.seconds >= 0


# -- all backends compile first, then each is timed -------------------------------------------------

def test_a_race_compiles_every_backend_before_timing_any():
    events = []
    dispatch.register(_with_precompile(chunked_backend.make("chunked", priority=200), events=events,
                                       delay=0.05, name="chunked"))
    dispatch.register(_with_precompile(chunked_backend.make("other", priority=150), events=events,
                                       delay=0.05, name="other"))
    dispatch.configure(autotune=True, policy="measured", allow=TEST_BACKENDS)
    decision = dispatch.explain("softmax", torch.randn(8, 64)).decision
    compiles = [t for _, what, t in events if what == "compile"]
    timings = [t for _, what, t in events if what == "time"]
    assert len(compiles) == 6 and timings
    assert max(compiles) < min(timings)  # nothing was timed while anything compiled
    for c in decision.candidates:
        if c.name in ("chunked", "other"):
            assert c.compile_s is not None and c.compile_s >= 0.05 and c.timing_s is not None and c.timing_s > 0
            # the whole is its two parts and some bookkeeping (generous: a loaded machine's threads wait)
            assert c.compile_s + c.timing_s <= c.tune_s + 1e-3 < c.compile_s + c.timing_s + 1.0


# -- the split, in explain and the log ------------------------------------------------------------

def test_explain_shows_the_compile_and_timing_split_of_each_tuned_backend(caplog):
    dispatch.register(_with_precompile(chunked_backend.make("chunked", priority=200), delay=0.02))
    dispatch.configure(autotune=True, policy="measured", allow=TEST_BACKENDS)
    with caplog.at_level(logging.INFO, logger="dispatch.tune"):
        explanation = dispatch.explain("softmax", torch.randn(8, 64))
    text = str(explanation)
    chunked = next(c for c in explanation.decision.candidates if c.name == "chunked")
    assert f"(tuned in {chunked.tune_s:.1f} s: compile {chunked.compile_s:.1f} s, timing {chunked.timing_s:.1f} s)" in text
    assert chunked.compile_s >= 0.02
    value = _tune_entry("chunked")
    assert value["compile_s"] == pytest.approx(chunked.compile_s) and value["timing_s"] == pytest.approx(chunked.timing_s)
    messages = [r.getMessage() for r in caplog.records if r.name == "dispatch.tune"]
    assert any(m.startswith("compiled 3/3 config(s) of chunked") for m in messages), messages
    tuned = [m for m in messages if m.startswith("tuned ")]
    assert {m.split()[1] for m in tuned} == {"torch", "chunked"}  # one line per backend
    assert all("compile" in m and "timing" in m for m in tuned)
    if explanation.decision.backend == "chunked":
        assert "tuned configs (compile " in text


def test_a_cached_tune_is_reported_without_a_split():
    dispatch.register(chunked_backend.make("chunked", priority=200))
    dispatch.configure(autotune=True, policy="measured", allow=TEST_BACKENDS)
    x = torch.randn(8, 64)
    dispatch.explain("softmax", x)
    from dispatch._dispatcher import DISPATCHER

    key = next(k for k, _ in default_cache().entries() if k["kind"] == "decision")
    default_cache().entries_dir.joinpath(default_cache().path_of(key).name).unlink()
    default_cache().forget_memo()
    DISPATCHER.reset()
    decision = dispatch.explain("softmax", x).decision  # raced again from the cached tunes
    assert all(c.compile_s is None for c in decision.candidates)


# -- early stop -----------------------------------------------------------------------------------

def _fake_timer(latency: dict, calls: list):
    """A deterministic timer honouring ``stop_above_us``: a config's first repetitions read as its
    full median (what a noiseless measurement would show)."""

    def timer(fn, device, settings, config):
        fn()
        us = latency[config["k"]]
        if settings.stop_above_us is not None and us > settings.stop_above_us:
            calls.append((config["k"], settings.probe_rep))
            return Timing(config, us, 0.0, settings.probe_rep)
        calls.append((config["k"], settings.rep))
        return Timing(config, us, 0.0, settings.rep)

    return timer


def _sweep(latency: dict, first=None, settings=TuneSettings()):
    calls = []
    configs = [Config.of(k=k) for k in latency]
    result = sweep(configs, lambda c: (lambda: torch.zeros(1)), None, torch.device("cpu"), settings,
                   first=Config.of(k=first) if first is not None else None, timer=_fake_timer(latency, calls))
    return result, calls


def test_the_early_stop_stops_only_candidates_far_behind_and_keeps_the_best():
    latency = {0: 10.0, 1: 30.0, 2: 14.0, 3: 9.0, 4: 16.0, 5: 13.4}
    result, calls = _sweep(latency, first=0)
    assert result.config == Config.of(k=3) and result.latency_us == 9.0
    short = {k for k, reps in calls if reps == TuneSettings().probe_rep}
    assert short == {1, 4}  # 30 > 1.5 x 10, and 16 > 1.5 x 9 (the best by then); 14 and 13.4 were not
    assert [k for k, _ in calls] == [0, 1, 2, 3, 4, 5]  # the default first, then the space's order
    by_config = {t.config["k"]: t.reps for t in result.timings}
    assert by_config[1] == by_config[4] == TuneSettings().probe_rep and by_config[3] == TuneSettings().rep


def test_the_early_stop_never_drops_the_eventual_best():
    rng = random.Random(7)
    for trial in range(300):
        n = rng.randint(1, 9)
        latency = {k: rng.choice([rng.uniform(5, 50), rng.uniform(5, 8)]) for k in range(n)}
        first = rng.randrange(n)
        with_stop, calls = _sweep(latency, first=first)
        without, _ = _sweep(latency, first=first, settings=TuneSettings(early_stop=0))
        assert with_stop.config == without.config, (trial, latency, first)
        best = min(latency.values())
        assert with_stop.latency_us <= best * (1 + TuneSettings().tie_tolerance)  # the best, or one tied with it
        # a candidate was stopped only when it was more than 1.5x behind one timed in full before it
        for k, reps in calls:
            if reps == TuneSettings().probe_rep:
                assert latency[k] > 1.5 * best


def test_the_early_stop_keeps_ties_in_the_spaces_order():
    # k=1 and k=2 tie within 2%: the earlier in the space wins whichever is timed first
    result, _ = _sweep({0: 20.0, 1: 10.1, 2: 10.0}, first=2)
    assert result.config == Config.of(k=1)


def test_a_real_measurement_stops_after_its_probe_when_far_behind():
    from dispatch.autotune import measure

    settings = TuneSettings(warmup=1, rep=40, probe_rep=5, stop_above_us=1.0)
    slow = measure(lambda: time.sleep(0.002), torch.device("cpu"), settings)
    assert slow.reps == 5 and slow.median_us > 1000
    fast = measure(lambda: None, torch.device("cpu"), TuneSettings(warmup=1, rep=40, probe_rep=5, stop_above_us=1e6))
    assert fast.reps == 40


# -- shape pruning (Triton) -----------------------------------------------------------------------

@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_triton_pruning_keeps_the_default_and_drops_only_what_the_rows_rule_out(op):
    from dispatch_triton.configs import _device_sms, config_space, default_config, prune

    shapes = [(m, n) for m in (1, 2, 3, 5, 17, 32, 33, 64, 100, 256, 600, 1024, 4096, 65536, 262144)
              for n in (1, 7, 16, 100, 256, 1000, 1024, 4096, 5000, 16384, 32768, 65536, 262144, 1 << 22)]
    dropped_any = False
    for m, n in shapes:
        for dtype in (torch.bfloat16, torch.float32):
            space = config_space(op, m, n, dtype)
            default = default_config(op, m, n, dtype)
            kept, pruned = prune(op, m, n, dtype, space, default)
            assert default in kept, (op, m, n, dtype)
            assert [c for c in space if c in kept] == kept  # order kept
            assert len(kept) + len(pruned) == len(space)
            for c, why in pruned:
                assert why
                rows_hi = 1
                while rows_hi < m:
                    rows_hi *= 4
                assert (c["path"] == "rows" and c["ROWS"] > rows_hi) or (
                    c["path"] == "split_online" and op == "logsumexp" and rows_hi // 4 + 1 >= 4 * _device_sms())
                dropped_any = True
    assert dropped_any


def test_triton_space_prunes_multi_row_tiles_for_a_single_row():
    pytest.importorskip("triton")
    from dispatch.backend import spec_of
    from dispatch_triton import dispatch_tune_space

    space = dispatch_tune_space("softmax", spec_of("softmax", torch.empty(1, 4096, dtype=torch.bfloat16), -1))
    assert all(c["ROWS"] == 1 for c in space.configs) and space.pruned
    assert all(isinstance(c, Config) and c["ROWS"] == 2 and "row(s)" in why for c, why in space.pruned)
    same_bucket = dispatch_tune_space("softmax", spec_of("softmax", torch.empty(32, 4096, dtype=torch.bfloat16), -1))
    assert any(c["ROWS"] == 2 for c in same_bucket.configs)


def test_triton_compiles_nothing_ahead_on_the_cpu():
    """The interpreter runs Python, so there is nothing to build ahead (TileLang's C target builds:
    test_tilelang_kernels.py::test_a_tune_on_the_c_target_compiles_ahead_and_says_how_long_that_took)."""
    pytest.importorskip("triton")
    from dispatch.backend import spec_of
    import dispatch_triton

    spec = spec_of("softmax", torch.empty(8, 64), -1)
    configs = tuple(dispatch_triton.dispatch_tune_space("softmax", spec).configs)
    assert dispatch_triton.dispatch_precompile("softmax", spec, configs) is None


def test_tilelang_build_all_compiles_on_a_pool_and_reports_a_config_that_cannot_build():
    pytest.importorskip("tilelang")
    from dispatch_tilelang import build as B

    good = [{"block_m": 1, "tile_n": 0}, {"block_m": 2, "tile_n": 0}]
    failed = B.build_all("log_softmax", 4, 96, torch.float32, torch.float32, good + [{"block_m": 1024, "tile_n": 0}], "c")
    assert [c for c, _ in failed] == [{"block_m": 1024, "tile_n": 0}] and "compile error" in failed[0][1]
    x = torch.randn(4, 96)
    for cfg in good:
        key = B._build_key("log_softmax", 96, "float32", "float32", cfg, "c")
        assert key in B._BUILT  # build() will find it
        torch.testing.assert_close(B.build("log_softmax", 4, 96, torch.float32, torch.float32, cfg, "c")(x),
                                   torch.log_softmax(x, -1))


# -- Ctrl-C ---------------------------------------------------------------------------------------

def _cache_files():
    d = default_cache().entries_dir
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def test_ctrl_c_during_a_race_leaves_only_whole_entries():
    def interrupting(run, config):
        def interrupted(x):
            if config.get("chunk") == 1024:
                raise KeyboardInterrupt
            return run(x)
        return interrupted

    dispatch.register(chunked_backend.with_kernel(chunked_backend.make("chunked", priority=200), interrupting))
    dispatch.configure(autotune=True, policy="measured", allow=TEST_BACKENDS)
    with pytest.raises(KeyboardInterrupt):
        dispatch.softmax(torch.randn(8, 64))
    files = _cache_files()
    assert not [f for f in files if f.startswith(".tmp")]
    kinds = []
    for name in files:
        if name.endswith(".json"):
            data = json.loads((default_cache().entries_dir / name).read_text())  # whole, valid JSON
            kinds.append((data["key"]["kind"], data["key"].get("backend")))
    assert ("decision", None) not in kinds and ("tune", "chunked") not in kinds  # nothing of the interrupted tune


def test_ctrl_c_while_an_entry_is_written_leaves_no_file(monkeypatch):
    import os

    cache = default_cache()
    key = {"kind": "tune", "op": "softmax", "backend": "x"}

    def interrupted(src, dst):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", interrupted)
        with pytest.raises(KeyboardInterrupt):
            cache.put(key, {"config": {}, "latency_us": 1.0})
    assert [f for f in _cache_files() if not f.endswith(".lock")] == []
    cache.forget_memo()
    assert cache.get(key) is None


def test_tune_error_when_nothing_compiles_names_every_config():
    with pytest.raises(TuneError, match="measured no config"):
        sweep([Config.of(k=1)], lambda c: (_ for _ in ()).throw(RuntimeError("boom")), None, torch.device("cpu"))


# -- Triton's compile step, without a GPU ---------------------------------------------------------

def test_triton_direct_launch_compile_takes_the_warm_up_path_with_the_launch_arguments():
    pytest.importorskip("triton")
    from dispatch_triton.direct import DirectLaunch

    calls, handles = [], []

    class Compiled:
        def _init_handles(self):
            handles.append(True)

    class FakeJit:
        arg_names = ["x", "out", "M", "BLOCK"]

        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

        def warmup(self, *args, grid, **kwargs):
            calls.append((args, grid, kwargs))
            return Compiled()

    direct = DirectLaunch(FakeJit(), (7,), 2, {"M": 3, "BLOCK": 64}, {"num_warps": 4})
    x, out = torch.empty(3), torch.empty(3)
    direct.compile(x, out)
    (args, grid, kwargs), = calls
    assert args == (x, out) and grid == (7, 1, 1) and kwargs == {"M": 3, "BLOCK": 64, "num_warps": 4}
    assert handles == [True] and direct.state == "jit"  # loaded, not launched, not armed


@pytest.mark.parametrize("op,n", [("softmax", 256), ("logsumexp", 256), ("softmax", 65536)])
def test_triton_launcher_compile_passes_stand_ins_of_the_launch_dtypes(monkeypatch, op, n):
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("checks what the interpreter compiles (nothing); on a GPU the launcher compiles")
    from dispatch_triton import launch
    from dispatch_triton.configs import config_space
    from dispatch_triton.direct import DirectLaunch

    seen = []
    monkeypatch.setattr(DirectLaunch, "compile", lambda self, *tensors: seen.append(tensors))
    config = config_space(op, 4, n, torch.bfloat16)[0]
    launcher = launch.Launcher(op, 4, n, torch.bfloat16, torch.float32, n, "cpu", config)
    launcher.compile()
    assert seen == []  # the interpreter compiles nothing
    monkeypatch.setattr(launch, "_interpreting", lambda: False)
    launcher.compile()
    assert len(seen) == len(launcher.direct) >= 1
    for tensors in seen:
        assert [t.dtype for t in tensors] == [torch.bfloat16, torch.float32, torch.int8, torch.float32, torch.int32,
                                              torch.int64]
        assert all(t.data_ptr() % 16 == 0 for t in tensors)  # aligned, as the launch's own tensors


def test_ctrl_c_in_a_compile_stops_the_compiles_not_yet_started_everywhere():
    from dispatch.autotune import compiling

    started = []

    def one(config):
        started.append(config["k"])
        if config["k"] == 0:
            raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            compile_all([Config.of(k=k) for k in range(5)], one, workers=1)
        assert started == [0]  # the four queued behind it never ran
        with pytest.raises(KeyboardInterrupt):  # nor do those of another tune, until one begins anew
            compile_all([Config.of(k=9)], one, workers=1)
        assert started == [0]
    finally:
        compiling.resume()
    assert compile_all([Config.of(k=7)], one).compiled == (Config.of(k=7),)


def test_a_tune_begun_after_an_interrupted_one_compiles_again():
    from dispatch.autotune import compiling

    compiling.interrupt()
    plugin = _with_precompile(chunked_backend.make("chunked", priority=200))
    dispatch.register(plugin)
    dispatch.configure(autotune=True, allow=["chunked"])
    assert dispatch.explain("softmax", torch.randn(8, 64)).decision.backend == "chunked"
    assert sorted(plugin.built) == [8, 64, 1024]


def test_compiles_parse_python_one_at_a_time_and_leave_ast_as_they_found_it():
    import ast

    from dispatch.autotune import compiling

    original = ast.parse
    inside = []
    barrier = threading.Barrier(2, timeout=10)

    def one(config):
        barrier.wait()  # both jobs at once
        inside.append(ast.parse is not original and not compiling.PARSE_LOCK._is_owned())
        with compiling.PARSE_LOCK:  # what a tracer holds: ast.parse in it re-enters
            assert isinstance(ast.parse("x = 1"), ast.Module)

    compile_all([Config.of(k=0), Config.of(k=1)], one, workers=2)
    assert inside == [True, True]
    assert ast.parse is original
    with compiling.serial_parsing():
        with compiling.serial_parsing():
            assert ast.parse is not original
        assert ast.parse is not original
    assert ast.parse is original


# -- one set of inputs per race --------------------------------------------------------------------

def test_a_race_makes_its_inputs_once_and_gives_each_backend_its_own_copy(monkeypatch):
    import dispatch._tuner as tuner

    made = []
    real = tuner.example_inputs
    monkeypatch.setattr(tuner, "example_inputs", lambda spec, seed=0: made.append(spec) or real(spec, seed))
    dispatch.register(chunked_backend.make("vandal", fault="writes input", priority=300))
    dispatch.register(chunked_backend.make("chunked", priority=200))
    dispatch.configure(autotune=True, policy="measured", allow=["torch", "chunked", "vandal"])
    with pytest.warns(dispatch.FaultWarning, match="'vandal' could not be tuned"):
        decision = dispatch.explain("softmax", torch.randn(8, 64)).decision
    assert len(made) == 1  # not once per backend
    by_name = {c.name: c for c in decision.candidates}
    assert "wrote into its input" in by_name["vandal"].note
    # the vandal zeroed its own copy only: the others were checked and timed on the real inputs
    assert by_name["chunked"].latency_us is not None and by_name["torch"].latency_us is not None


def test_the_copies_keep_the_layout_of_the_inputs():
    from dispatch.backend import with_strides

    def _copy(t):  # what a race gives each backend: a copy in the input's layout
        return with_strides(t, t.stride())

    base = torch.randn(8, 130)
    view = base[:, 1:129:2]  # gaps between elements and rows
    copy = _copy(view)
    assert copy.stride() == view.stride() and torch.equal(copy, view) and copy.data_ptr() != view.data_ptr()
    t = torch.randn(4, 6).t()
    assert _copy(t).stride() == t.stride()


def test_a_compile_worker_count_that_is_not_a_number_is_named_in_a_warning(monkeypatch):
    from dispatch.autotune import compiling

    monkeypatch.setenv(compiling.ENV_WORKERS, "eight")
    with pytest.warns(RuntimeWarning, match="DISPATCH_COMPILE_WORKERS='eight'"):
        n = compiling.default_workers()
    assert n >= 1
    monkeypatch.setenv(compiling.ENV_WORKERS, "3")
    assert compiling.default_workers() == 3
    for few in ("0", "-3"):  # no thread at all: warned of, not taken as one
        monkeypatch.setenv(compiling.ENV_WORKERS, few)
        with pytest.warns(RuntimeWarning, match=f"DISPATCH_COMPILE_WORKERS='{few}'.*1 or more"):
            assert compiling.default_workers() == n


def test_a_call_that_waits_on_a_long_tune_says_so_and_a_short_one_does_not(caplog, monkeypatch):
    from dispatch._dispatcher import _TuneNotice

    dispatch.register(chunked_backend.make("chunked", priority=200))
    dispatch.configure(autotune=True, allow=["torch", "chunked"])
    with caplog.at_level(logging.WARNING, logger="dispatch.tune"):
        dispatch.softmax(torch.randn(8, 64), -1)  # a tune well under AFTER_S: nothing said
        assert not [r for r in caplog.records if "for this call" in r.getMessage()]
        monkeypatch.setattr(_TuneNotice, "AFTER_S", 0.0)  # every tune counts as long from here
        dispatch.softmax(torch.randn(8, 512), -1)
    said = [r.getMessage() for r in caplog.records if "for this call" in r.getMessage()]
    assert said and said[0].startswith("tuning softmax(8x512 float32") and "python -m dispatch tune" in said[0]
    assert len(said) == 1  # then once every EVERY_S seconds at most


@pytest.mark.parametrize("value", [torch.float32, [4, 8], float("nan"), object()],
                         ids=["dtype", "list", "nan", "object"])
def test_a_tune_space_with_a_value_the_cache_could_not_keep_is_refused_where_it_is_made(value):
    # it would work with tuning off, then break the first tune (or key its decision on nothing stable)
    from dispatch.backend import TuneSpace

    with pytest.raises(TypeError, match=r"'config' values must be plain: str, int, a finite float, bool or None "
                                        r"\(got c="):
        TuneSpace(configs=[{"c": 1}, {"c": value}], default={"c": 1})
    assert TuneSpace(configs=[{"c": 1}, {"c": 2.5, "name": "x", "on": True, "off": None}], default={"c": 1})


NATIVE_FAULTS = {  # what the hook answers -> what the fault it is recorded with says
    "outside": ({"chunk": 12345}, 1.0, 0.0, "dispatch_native_tune returned config chunk=12345, which is not in the "
                "tune space it was given (chunk=8, chunk=64, chunk=1024); dispatch's sweep tuned the space instead"),
    "float-for-int": ({"chunk": 8.0}, 1.0, 0.0, "returned config chunk=8.0, which is not in the tune space"),
    "infinite": ({"chunk": 8}, float("inf"), 0.0, "returned a result the cache can't keep: 'latency_us' must be a "
                 "finite number >= 0 (got inf); dispatch's sweep tuned the space instead"),
    "nan-spread": ({"chunk": 8}, 1.0, float("nan"), "'spread_us' must be a finite number >= 0 (got nan)"),
}


@pytest.mark.parametrize("fault", [*NATIVE_FAULTS, "writes"])
def test_a_native_tune_hook_answering_outside_its_space_or_writing_its_example_is_named(fault):
    from dispatch.autotune import Config, TuneResult
    from dispatch.tune import tune_call

    plugin = chunked_backend.make("native", priority=500)

    @dispatch.hookimpl
    def dispatch_native_tune(op, spec, space, example, settings):
        if fault == "writes":
            example[0].zero_()
            return TuneResult(config=space.default, latency_us=1.0)
        config, latency, spread, _ = NATIVE_FAULTS[fault]
        return TuneResult(config=Config.of(config), latency_us=latency, spread_us=spread)

    plugin.dispatch_native_tune = dispatch_native_tune
    dispatch.register(plugin)
    if fault in NATIVE_FAULTS:  # recorded against the hook; dispatch's sweep tunes the space instead
        decision = tune_call("softmax", torch.randn(4, 16), -1, backends="native").decision
        assert decision.backend == "native" and decision.config in (Config.of(chunk=c) for c in (8, 64, 1024))
        assert type(decision.config["chunk"]) is int
        said = [str(f.error) for f in dispatch.faults() if f.backend == "native"]
        assert any(NATIVE_FAULTS[fault][3] in e for e in said), said
    else:
        with pytest.raises(dispatch.DispatchError, match="its dispatch_native_tune hook\\) wrote into the example"):
            tune_call("softmax", torch.randn(4, 16), -1, backends="native")
    x = torch.randn(4, 16)
    torch.testing.assert_close(dispatch.softmax(x, -1), torch.softmax(x, -1))


def test_a_tune_candidate_writing_into_its_input_is_named_and_ends_the_sweep():
    from dispatch.tune import tune_call

    def scribbling(run, config):
        if config.get("chunk") != 8:
            return run

        def scribble(x):
            out = run(x)
            x.mul_(2)  # the chunk=8 candidate writes into its input
            return out
        return scribble

    dispatch.register(chunked_backend.with_kernel(chunked_backend.make("scribbler", priority=500), scribbling))
    with pytest.raises(dispatch.DispatchError, match="candidate chunk=8 wrote into its input; the backend is not used"):
        tune_call("softmax", torch.randn(4, 16), -1, backends="scribbler")
