"""The measured policy, runtime faults and quarantine, strict mode, and concurrent first calls."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

import dispatch
from dispatch import BackendFaultError
from dispatch._dispatcher import DISPATCHER
from dispatch.errors import FaultWarning
from dispatch.autotune import measurement_count

import chunked_backend
from backends_needed import require_backend

TEST_BACKENDS = ["torch", "chunked", "slow", "wrong", "counted", "bad", "flaky"]


def test_measured_policy_races_backends_and_the_faster_one_wins():
    slow = chunked_backend.make("slow", fault="slow", priority=200)
    dispatch.register(slow)
    dispatch.configure(autotune=True, policy="measured", allow=TEST_BACKENDS)
    x = torch.randn(8, 64)
    explanation = dispatch.explain("softmax", x)
    decision = explanation.decision
    assert decision.backend == "torch"
    timings = {c.name: c.latency_us for c in decision.candidates}
    assert timings["slow"] >= 2000 and timings["slow"] > timings["torch"]  # slow sleeps 2 ms per call
    assert "fastest when raced" in decision.reason
    # each raced backend's tuning time is kept: slow's 75+ timed calls of 2 ms each show
    seconds = {c.name: c.tune_s for c in decision.candidates if c.latency_us is not None}
    assert seconds["slow"] >= 0.15 and seconds["slow"] > seconds["torch"] >= 0, seconds
    assert "(tuned in " in str(explanation)


def test_a_wrong_backend_cannot_win_a_race_even_when_fast():
    dispatch.register(chunked_backend.make("wrong", fault="wrong", priority=200))
    dispatch.configure(autotune=True, allow=TEST_BACKENDS)
    with pytest.warns(dispatch.FaultWarning, match="'wrong' could not be tuned for softmax.*wrong result"):
        decision = dispatch.explain("softmax", torch.randn(8, 64)).decision  # said, as without tuning
    assert decision.backend == "torch"
    wrong = next(c for c in decision.candidates if c.name == "wrong")
    assert wrong.latency_us is None and "wrong result" in wrong.note


def test_the_decision_is_persisted_and_reused_without_measuring():
    dispatch.register(chunked_backend.make("chunked", priority=200))
    dispatch.configure(autotune=True, allow=TEST_BACKENDS)
    x = torch.randn(8, 64)
    first = dispatch.explain("softmax", x).decision
    assert not first.cached
    before = measurement_count()
    DISPATCHER.reset()
    again = dispatch.explain("softmax", torch.randn(7, 60)).decision  # same bucket
    assert again.cached and again.backend == first.backend and measurement_count() == before


def test_static_policy_does_not_race():
    dispatch.register(chunked_backend.make("slow", fault="slow", priority=200))
    dispatch.configure(autotune=True, policy="static", allow=TEST_BACKENDS)
    decision = dispatch.explain("softmax", torch.randn(8, 64)).decision
    assert decision.backend == "slow" and "static order" in decision.reason
    assert decision.config_source == "tuned now"


def test_tie_within_noise_resolves_to_the_static_order():
    from dispatch.autotune import Config, Timing, pick_winner

    timings = [Timing(Config.of(name="a"), 10.1), Timing(Config.of(name="b"), 10.0), Timing(Config.of(name="c"), 12)]
    assert pick_winner(timings, 0.02).config["name"] == "a"
    assert pick_winner(timings, 0.0).config["name"] == "b"


@pytest.mark.parametrize("kernel_us, winner", [(9.5, "torch"), (9.1, "torch"), (8.9, "kernel"), (5.0, "kernel"),
                                               (11.0, "torch")])
def test_a_backend_must_beat_the_reference_by_the_margin_to_win_a_race(kernel_us, winner):
    # 10 us for the reference: a kernel 5% or 9% faster is within the noise of wall times from one
    # machine start to the next, so the reference serves; 11% or more faster, the kernel wins
    from dispatch.autotune import Config, Timing, TuneSettings, pick_backend

    assert TuneSettings().reference_margin == 0.10
    timings = [Timing(Config.of(name="kernel"), kernel_us), Timing(Config.of(name="torch"), 10.0)]
    assert pick_backend(timings, "torch").config["name"] == winner
    # without a reference among them, the fastest wins as before
    assert pick_backend(timings, None).config["name"] == ("kernel" if kernel_us < 10.0 else "torch")
    assert pick_backend(timings, "torch", TuneSettings(reference_margin=0.0)).config["name"] == \
        ("kernel" if kernel_us < 10.0 * 0.98 else "torch")


@pytest.mark.parametrize("kernel_us, winner", [(9.8, "torch"), (9.71, "torch"), (9.6, "kernel"), (9.1, "kernel"),
                                               (10.5, "torch")])
def test_a_race_timed_on_the_device_needs_a_smaller_lead_over_the_reference(kernel_us, winner):
    # a GPU call timed from a flushed L2 (or under timing="device") repeats within 1-2% between
    # machine starts: a kernel 4% or more faster than the reference wins there, 3% or less does not
    from dispatch.autotune import Config, Timing, TuneSettings, pick_backend
    from dispatch.autotune.sweep import race_verdict

    assert TuneSettings().device_reference_margin == 0.03
    timings = [Timing(Config.of(name="kernel"), kernel_us), Timing(Config.of(name="torch"), 10.0)]
    best = pick_backend(timings, "torch", on_device=True)
    assert best.config["name"] == winner
    if winner == "torch" and kernel_us < 10.0:
        assert race_verdict(timings, best, "torch", on_device=True).startswith("within 3% of the fastest")
    # the same timings of launch-bound wall times keep the reference at any of these leads
    assert pick_backend(timings, "torch").config["name"] == "torch"


def test_a_race_won_on_a_tie_says_so_rather_than_fastest():
    # two kernels within the 2% tie tolerance: the first in the static order wins, and the reason
    # must not call it the fastest when the other measured less
    from dispatch.autotune import Config, Timing, pick_backend
    from dispatch.autotune.sweep import race_verdict

    timings = [Timing(Config.of(name="triton"), 106.1), Timing(Config.of(name="tilelang"), 104.1),
               Timing(Config.of(name="torch"), 188.6)]
    best = pick_backend(timings, "torch", on_device=True)
    assert best.config["name"] == "triton"
    assert race_verdict(timings, best, "torch", on_device=True) == (
        "within 2% of the fastest when raced (a tie), and first in the static order")
    clear = [Timing(Config.of(name="triton"), 100.0), Timing(Config.of(name="tilelang"), 104.1)]
    assert race_verdict(clear, pick_backend(clear, None), None) == "fastest when raced"


def test_a_race_on_the_cpu_keeps_the_launch_bound_margin():
    # CPU times are the host's: whatever the timing asked for, a race there is not one timed on the
    # device, so a backend needs the 10% lead over the reference
    from dispatch._select import races_on_device

    spec = dispatch.explain("softmax", torch.randn(4, 32)).decision.spec
    assert spec.device.type == "cpu"
    assert not races_on_device(spec, "wall") and not races_on_device(spec, "device")


@pytest.mark.parametrize("fault", ["raise", "nan", "wrong"])
def test_a_faulty_backend_is_quarantined_for_the_key_and_the_call_is_still_correct(fault):
    bad = chunked_backend.make("bad", fault=fault, priority=200)
    dispatch.register(bad)
    x = torch.randn(4, 32)
    with pytest.warns(FaultWarning, match="backend 'bad' .* quarantined"):
        out = dispatch.softmax(x)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    assert dispatch.explain("softmax", x).decision.backend == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, not on every call
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
        y = torch.randn(3, 28)  # same bucket: quarantined there too, no new warning
        torch.testing.assert_close(dispatch.softmax(y), torch.softmax(y, -1))
    # another bucket is not quarantined: the backend is tried there again
    other = torch.randn(64, 1024)
    with pytest.warns(FaultWarning):
        dispatch.softmax(other)


def test_a_backend_that_starts_raising_later_falls_back_on_that_call():
    state = {"broken": False}
    flaky = chunked_backend.make("flaky", priority=200)
    inner = flaky.dispatch_kernel

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        run = inner(op=op, spec=spec, config=config)

        def maybe(x):
            if state["broken"]:
                raise RuntimeError("device lost")
            return run(x)
        return maybe

    flaky.dispatch_kernel = dispatch_kernel
    dispatch.register(flaky)
    x = torch.randn(4, 16)
    dispatch.softmax(x)
    assert dispatch.explain("softmax", x).decision.backend == "flaky"
    state["broken"] = True
    with pytest.warns(FaultWarning, match="device lost"):
        out = dispatch.softmax(x)
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_strict_mode_turns_a_fallback_into_an_error():
    dispatch.register(chunked_backend.make("bad", fault="nan", priority=200))
    dispatch.configure(strict=True)
    with pytest.raises(BackendFaultError, match="strict mode"):
        dispatch.softmax(torch.randn(4, 32))


def test_a_forced_backend_that_faults_raises_instead_of_falling_back():
    dispatch.register(chunked_backend.make("bad", fault="raise", priority=0))
    with pytest.raises(BackendFaultError, match="crashed"):
        dispatch.softmax(torch.randn(4, 32), backend="bad")


def test_concurrent_first_calls_tune_once_and_all_get_correct_results():
    counted = chunked_backend.make("counted", priority=200)
    dispatch.register(counted)
    dispatch.configure(autotune=True, allow=TEST_BACKENDS)
    x = torch.randn(16, 128)
    want = torch.softmax(x, -1)
    before = measurement_count()
    results, errors = [], []
    barrier = threading.Barrier(6)

    def worker():
        barrier.wait()
        try:
            results.append(dispatch.softmax(x))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 6
    for r in results:
        torch.testing.assert_close(r, want)
    # one race: torch (1 config) + counted (3 configs), measured once each
    assert measurement_count() - before == 4


@pytest.mark.parametrize("hook", ["dispatch_kernel", "dispatch_tune_space"])
def test_a_backend_whose_kernel_or_tune_hook_raises_is_a_fault_and_the_next_backend_serves(hook):
    plugin = chunked_backend.make("brittle", priority=200)

    def boom(op, spec, config=None):
        raise RuntimeError(f"{hook} exploded")

    setattr(plugin, hook, dispatch.hookimpl(specname=hook)(boom) if hook == "dispatch_kernel"
            else dispatch.hookimpl(specname=hook)(lambda op, spec: boom(op, spec)))
    dispatch.register(plugin)
    x = torch.randn(4, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FaultWarning)
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    decision = dispatch.explain("softmax", x).decision
    assert decision.backend == "torch"
    with pytest.raises((BackendFaultError, RuntimeError), match="exploded"):
        dispatch.softmax(x, backend="brittle")


def test_pre_tuning_races_every_allowed_backend_stores_the_decision_and_shows_progress(capsys):
    from dispatch.tune import tune_call

    dispatch.register(chunked_backend.make("chunked", priority=200))
    dispatch.configure(allow=["torch", "chunked"])
    x = torch.randn(16, 256)
    explanation = tune_call("softmax", x, -1, progress=True)
    decision = explanation.decision
    assert decision.backend in ("torch", "chunked") and "fastest when raced" in decision.reason
    assert "tuning softmax(16x256 float32" in capsys.readouterr().err  # the progress bar
    before = measurement_count()
    again = tune_call("softmax", x, -1)
    assert again.decision.cached and measurement_count() == before
    assert dispatch.explain("softmax", x).decision.backend == decision.backend


def test_a_race_between_real_backends_times_each_and_keeps_the_fastest():
    require_backend("tilelang")
    dispatch.configure(autotune=True, allow=["torch", "tilelang"])
    x = torch.randn(32, 512)
    out = dispatch.softmax(x)
    torch.testing.assert_close(out, torch.softmax(x, -1))
    decision = dispatch.explain("softmax", x).decision
    raced = {c.name: c.latency_us for c in decision.candidates if c.name in ("torch", "tilelang")}
    assert all(v is not None and v > 0 for v in raced.values()), decision.candidates
    fastest = min(raced.values())
    assert raced[decision.backend] <= fastest * 1.02  # the winner, or a tie within noise
    DISPATCHER.reset()
    before = measurement_count()
    assert dispatch.explain("softmax", x).decision.cached and measurement_count() == before


def test_a_large_output_is_compared_slice_by_slice_and_reported_whole(monkeypatch):
    """Outputs are compared in slices (bounded float64 copies next to a large tensor); a difference
    in any slice, the last one too, is found, and the report counts over the whole tensors."""
    from dispatch import tolerance

    monkeypatch.setattr(tolerance, "_SLICE", 7)
    reference = torch.randn(5, 9)
    assert tolerance.mismatch(reference.clone(), reference) is None
    assert tolerance.mismatch(reference.t().contiguous().t(), reference) is None  # another layout
    result = reference.clone()
    result[0, 0] += 1.0
    result[4, 8] += 1.0  # in the last, short slice
    assert tolerance.mismatch(result, reference).startswith("2 of 45 values outside")
    late_nan = reference.clone()
    late_nan[4, 7] = float("nan")
    assert "the result has NaN at 1 position" in tolerance.mismatch(late_nan, reference)


def test_a_nan_mismatch_says_which_side_has_the_nan():
    from dispatch.tolerance import mismatch

    reference = torch.tensor([0.1, 0.2, float("nan"), 0.4])
    result = torch.tensor([float("nan"), 0.2, 0.3, float("nan")])
    why = mismatch(result, reference)
    assert "the result has NaN at 2 positions where the reference has none" in why
    assert "the reference has NaN at 1 position where the result has none" in why
    only_ours = mismatch(torch.tensor([float("nan"), 1.0]), torch.tensor([0.5, 1.0]))
    assert only_ours.startswith("the result has NaN at 1 position where the reference has none")


def test_a_tune_flushes_the_l2_only_for_calls_that_move_a_quarter_of_it_or_more(monkeypatch):
    # a decode-sized call finds its input in L2 in a model, a bandwidth-sized one cannot
    import attrs

    from dispatch import _tuner

    monkeypatch.setattr(_tuner, "_l2_bytes", lambda index: 40 << 20)  # a 40 MB L2

    def spec_of(shape):
        spec = dispatch.explain("softmax", torch.empty(shape, device="meta")).decision.spec
        first = attrs.evolve(spec.tensors[0], device=torch.device("cuda", 0))
        return attrs.evolve(spec, tensors=(first, *spec.tensors[1:]))

    assert not _tuner.flushes_l2(spec_of((32, 4096)))   # 1 MB read and written
    assert not _tuner.flushes_l2(spec_of((1024, 1024)))  # 8 MB: a fifth of the L2
    assert _tuner.flushes_l2(spec_of((4096, 4096)))      # 128 MB
    cpu = dispatch.explain("softmax", torch.empty(32, 4096)).decision.spec
    assert _tuner.flushes_l2(cpu)  # nothing is flushed on the CPU anyway; the flag stays as it was
