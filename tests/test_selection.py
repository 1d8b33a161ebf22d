"""Backend choice: forced per call, per block, per process and by env var; allow/deny; errors; explain."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch

import dispatch
from dispatch import BackendRefusedError, NoBackendError, UnknownBackendError

import chunked_backend


def served_by(op, x, *args, **kwargs):
    return dispatch.explain(op, x, *args, **kwargs).decision.backend


@pytest.fixture
def chunked():
    plugin = chunked_backend.make("chunked", priority=150)  # above torch on the CPU
    dispatch.register(plugin)
    return plugin


def test_static_order_follows_priority_on_the_device(chunked):
    x = torch.randn(4, 16)
    assert served_by("softmax", x) == "chunked"
    out = dispatch.softmax(x)
    assert chunked.calls, "the chosen backend's kernel must really run"
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_a_refusing_backend_is_skipped_with_its_reason_shown(chunked):
    x = torch.randn(4, 16, dtype=torch.float16)
    explanation = dispatch.explain("softmax", x)
    assert explanation.decision.backend == "torch"
    verdict = {c.name: c.verdict for c in explanation.decision.candidates}["chunked"]
    assert not verdict.ok and "float16" in verdict.reason
    assert "float16" in str(explanation)


def test_backend_keyword_forces_a_backend(chunked):
    x = torch.randn(4, 16)
    dispatch.softmax(x, backend="torch")
    assert not chunked.calls
    dispatch.softmax(x, backend="chunked")
    assert chunked.calls == ["softmax"] * len(chunked.calls) and chunked.calls


def test_forced_backend_that_refuses_raises_naming_backend_op_reason_and_servers(chunked):
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    with pytest.raises(BackendRefusedError) as info:
        dispatch.softmax(x, backend="chunked")
    err = info.value
    assert err.backend == "chunked" and err.op == "softmax" and "bfloat16" in err.reason
    assert "torch" in err.servers and "torch" in str(err) and "chunked" in str(err)
    assert not chunked.calls  # never a silent fallback


def test_unknown_backend_names_the_loaded_ones():
    with pytest.raises(UnknownBackendError, match="'nope' is not loaded; loaded backends: .*torch"):
        dispatch.softmax(torch.randn(2, 2), backend="nope")


def test_use_block_forces_and_nests(chunked):
    x = torch.randn(4, 16)
    with dispatch.use("torch"):
        assert served_by("softmax", x) == "torch"
        dispatch.softmax(x)
        with dispatch.use("chunked"):
            dispatch.log_softmax(x)
        dispatch.logsumexp(x, -1)
    assert set(chunked.calls) == {"log_softmax"}  # (a key's first call runs the kernel twice: it is checked)
    assert served_by("softmax", x) == "chunked"


def test_use_block_is_per_thread(chunked):
    x = torch.randn(4, 16)
    seen = {}

    def other():
        seen["other"] = served_by("softmax", x)

    with dispatch.use("torch"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        seen["here"] = served_by("softmax", x)
    assert seen == {"other": "chunked", "here": "torch"}



def test_one_use_object_entered_again_and_within_itself_restores_each_outer_block(chunked):
    x = torch.randn(4, 16)
    forced = dispatch.use("torch")
    with forced as scope:
        assert scope.backend == "torch" and served_by("softmax", x) == "torch"
        with dispatch.use("chunked"):
            with forced:  # the same object inside another block: torch again, then chunked
                assert served_by("softmax", x) == "torch"
            assert served_by("softmax", x) == "chunked"
        assert served_by("softmax", x) == "torch"
    assert served_by("softmax", x) == "chunked"
    with forced:  # and again after it was left
        assert served_by("softmax", x) == "torch"
    with dispatch.use(allow=["torch", "chunked"], deny={"chunked"}):  # unhashable and set arguments
        assert served_by("softmax", x) == "torch"
    with pytest.raises(TypeError, match="backend"):
        with dispatch.use(3):
            pass
    assert served_by("softmax", x) == "chunked"  # a block that raised on entry left nothing behind


def test_one_use_object_shared_by_threads_gives_each_its_own_block(chunked):
    """A ``use`` object made once (at module level, say) and entered by several threads at once:
    each thread is served by the forced backend inside, and by its own choice outside."""
    x = torch.randn(4, 16)
    forced = dispatch.use("torch")
    inside, errors = threading.Barrier(4), []

    def worker():
        try:
            with forced:
                inside.wait(timeout=30)  # all four threads inside the block at once
                assert served_by("softmax", x) == "torch"
                inside.wait(timeout=30)
            assert served_by("softmax", x) == "chunked"
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert served_by("softmax", x) == "chunked"


def test_use_as_a_decorator_puts_each_call_of_the_function_in_the_block(chunked):
    x = torch.randn(4, 16)

    @dispatch.use("torch")
    def forward(t):
        return served_by("softmax", t), dispatch.softmax(t, -1)

    who, y = forward(x)
    assert who == "torch" and chunked.calls == []
    torch.testing.assert_close(y, torch.softmax(x, -1))
    assert served_by("softmax", x) == "chunked"  # outside the function, the usual choice
    assert forward(x)[0] == "torch"  # and again, call after call

def test_process_setting_and_allow_deny_lists(chunked):
    x = torch.randn(4, 16)
    dispatch.configure(backend="torch")
    assert served_by("softmax", x) == "torch"
    dispatch.configure(backend=None, deny=["chunked"])
    assert served_by("softmax", x) == "torch"
    dispatch.configure(deny=[], allow=["chunked"])
    assert served_by("softmax", x) == "chunked"
    with pytest.raises(NoBackendError, match="not in the process allow list"):
        dispatch.softmax(torch.randn(2, 2, dtype=torch.float16))
    dispatch.configure(allow=None)
    with dispatch.use(deny="chunked"):
        assert served_by("softmax", x) == "torch"


def test_forcing_a_denied_backend_is_an_error(chunked):
    dispatch.configure(deny="chunked")
    with pytest.raises(BackendRefusedError, match="denied"):
        dispatch.softmax(torch.randn(2, 2), backend="chunked")


def test_changing_settings_takes_effect_on_already_resolved_calls(chunked):
    x = torch.randn(4, 16)
    dispatch.softmax(x)
    n = len(chunked.calls)
    dispatch.configure(backend="torch")
    dispatch.softmax(x)
    assert len(chunked.calls) == n


def test_env_var_sets_the_process_backend():
    code = ("import torch, dispatch; x = torch.randn(2, 3); "
            "print(dispatch.explain('softmax', x).decision.reason); dispatch.softmax(x, backend='nope')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "DISPATCH_BACKEND": "torch"})
    assert "forced" in proc.stdout
    assert "UnknownBackendError" in proc.stderr


def test_bad_env_values_say_what_would_work(monkeypatch):
    monkeypatch.setenv("DISPATCH_POLICY", "fastest")
    with pytest.raises(ValueError, match="DISPATCH_POLICY must be one of measured, static"):
        dispatch.reset()
    monkeypatch.delenv("DISPATCH_POLICY")


@pytest.mark.parametrize("where,kwargs,said", [
    ("configure", dict(backend=3), "'backend' must be a backend name (a non-empty str) or None to choose (got 3)"),
    ("configure", dict(backend=""), "'backend' must be a backend name"),
    ("use", dict(backend=""), "'backend' must be a backend name"),
    ("call", dict(backend=""), "'backend' must be a backend name"),
    ("configure", dict(autotune="yes"), "'autotune' must be True or False (got 'yes')"),
    ("configure", dict(policy="fast"), "'policy' must be one of 'measured', 'static' (got 'fast')"),
    ("use", dict(timing="x"), "'timing' must be one of 'wall', 'device' (got 'x')"),
    ("configure", dict(distributed_timeout="x"), "'distributed_timeout' must be a number of seconds > 0 (got 'x')"),
    ("configure", dict(distributed_timeout="10"), "'distributed_timeout' must be a number of seconds > 0 (got '10')"),
    ("configure", dict(allow={"torch": 1}),
     "'allow' must be a str like 'torch,triton' or a list of str (got {'torch': 1})"),
    ("use", dict(deny={"torch": True}), "'deny' must be a str like 'torch,triton' or a list of str"),
    ("use", dict(allow=5), "'allow' must be a str like 'torch,triton' or a list of str (got 5)"),
    ("configure", dict(allow=["torch", 5]), "'allow' must hold backend names, non-empty str (got 5 in ['torch', 5])"),
    ("use", dict(deny=b"torch"), "'deny' must be a str like 'torch,triton' or a list of str (got b'torch')"),
    ("configure", dict(allow=[]), "'allow' names no backend (got [])"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 12 else None)
def test_bad_settings_name_the_argument_the_value_and_what_would_work(where, kwargs, said):
    x = torch.randn(2, 3)
    with pytest.raises((TypeError, ValueError)) as caught:
        if where == "configure":
            dispatch.configure(**kwargs)
        elif where == "use":
            with dispatch.use(**kwargs):
                pass
        else:
            dispatch.softmax(x, -1, **kwargs)
    assert said in str(caught.value)


@pytest.mark.parametrize("names", ["torch,chunked", "torch, chunked", "torch chunked", " torch\tchunked "])
def test_a_string_of_backend_names_splits_at_commas_and_spaces(chunked, names):
    x = torch.randn(2, 3)
    with dispatch.use(allow=names):
        assert served_by("softmax", x) == "chunked"  # both allowed: the first in the order
        with dispatch.use(deny=names.replace("torch", "")):  # chunked denied: torch, allowed
            assert served_by("softmax", x) == "torch"


def test_an_allow_list_of_no_names_in_the_env_is_an_error(monkeypatch):
    monkeypatch.setenv("DISPATCH_ALLOW", ",")
    with pytest.raises(ValueError, match="DISPATCH_ALLOW=',' names no backend"):
        dispatch.reset()
    monkeypatch.delenv("DISPATCH_ALLOW")


def test_a_name_in_a_deny_list_that_no_backend_has_is_said_once():
    dispatch.configure(deny=["tritn"])
    with pytest.warns(UserWarning, match="'tritn' is in an allow or deny list but is no loaded backend"):
        dispatch.softmax(torch.randn(2, 3), -1)


def test_explain_cli_shows_candidates_and_choice():
    out = subprocess.run([sys.executable, "-m", "dispatch", "explain", "softmax", "--shape", "8x128", "--dtype",
                          "float32", "--device", "cpu"], capture_output=True, text=True, check=True).stdout
    assert "softmax(8x128 float32" in out and "choice: torch" in out and "bucket: M<=16,N<=128" in out


def test_explain_cli_rejects_bad_arguments_clearly():
    proc = subprocess.run([sys.executable, "-m", "dispatch", "explain", "softmax", "--shape", "8xa"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--shape must look like 8x128" in proc.stderr


def test_explain_shows_the_configs_a_tune_space_pruned_and_why():
    import chunked_backend
    from dispatch.backend import Config, TuneSpace

    plugin = chunked_backend.make("pruning", priority=200)

    @dispatch.hookimpl
    def dispatch_tune_space(op, spec):
        return TuneSpace(configs=[{"chunk": 64}], default={"chunk": 64}, tunables=("chunk",),
                         pruned=[(Config.of(chunk=4096), f"longer than the row ({spec.shape[-1]})")])

    plugin.dispatch_tune_space = dispatch_tune_space
    dispatch.register(plugin)
    text = str(dispatch.explain("softmax", torch.randn(4, 100), -1, backend="pruning"))
    assert "pruned configs" in text and "chunk=4096" in text and "longer than the row (100)" in text


def _costed(name, costs, priority=0):
    """A softmax backend (the chunked test kernel) whose card carries ``costs``."""
    plugin = chunked_backend.make(name, priority=priority)

    @dispatch.hookimpl
    def dispatch_backend_info():
        return dispatch.BackendInfo(name=name, version="1.0", ops=("softmax",), priority={"cpu": priority},
                                    costs=costs)

    plugin.dispatch_backend_info = dispatch_backend_info
    return plugin


def test_with_tuning_off_the_cards_cost_figures_order_small_and_large_calls():
    """A backend with a costly launch but more bandwidth serves large calls, the cheap launch small
    ones: decided from the cards' figures and the op's bytes moved, with nothing measured."""
    from dispatch.autotune import measurement_count

    dispatch.register(_costed("quick_launch", {"cpu": (2.0, 10.0)}, priority=1))
    dispatch.register(_costed("wide", {"cpu": (50.0, 1000.0)}))
    dispatch.configure(allow=["quick_launch", "wide"])
    before = measurement_count()
    small = dispatch.explain("softmax", torch.randn(2, 16)).decision
    large = dispatch.explain("softmax", torch.randn(256, 1024)).decision  # 2 MB moved
    assert small.backend == "quick_launch" and large.backend == "wide"
    assert "lowest estimated cost" in large.reason and measurement_count() == before


def test_a_card_figure_of_last_ranks_its_backend_after_every_figure_and_says_so():
    """A backend that serves a call but should take it only when raced, forced or tabled: its card's
    "last" puts it behind every backend with figures, however high its priority, with a readable
    reason (not a huge made-up launch time); forced, it still serves."""
    dispatch.register(_costed("last_card", {"cpu": (1.0, 1e6), "cpu:softmax": "last"}, priority=50))
    dispatch.register(_costed("wide", {"cpu": (50.0, 1000.0)}))
    dispatch.configure(allow=["last_card", "wide"])
    x = torch.randn(2, 16)
    decision = dispatch.explain("softmax", x).decision
    assert decision.backend == "wide"
    assert "last_card last (its card ranks such calls after every figure)" in decision.reason
    torch.testing.assert_close(dispatch.softmax(x, -1, backend="last_card"), torch.softmax(x, -1))
    info = dispatch.BackendInfo(name="x", version="1", ops=("softmax",), costs={"cuda:softmax": "last"})
    assert info.estimate_us("cuda", 10, op="softmax") == float("inf") and info.estimate_us("cuda", 10) is None
    with pytest.raises(TypeError, match=r"\(launch us, GB/s, ns per element of a row\) or 'last'"):
        dispatch.BackendInfo(name="x", version="1", ops=("softmax",), costs={"cuda": "first"})


def test_device_timing_drops_the_launch_from_the_estimate_and_keys_decisions_apart():
    """Under CUDA graphs a call costs its device time only: the backend with the costly launch but
    more bandwidth then serves small calls too, and wall and device decisions are cached apart."""
    from dispatch._keys import decision_key
    from dispatch.backend import spec_of

    dispatch.register(_costed("quick_launch", {"cpu": (2.0, 10.0)}))
    dispatch.register(_costed("wide", {"cpu": (50.0, 1000.0)}))
    dispatch.configure(allow=["quick_launch", "wide"])
    x = torch.randn(2, 16)
    assert dispatch.explain("softmax", x).decision.backend == "quick_launch"
    dispatch.configure(timing="device")
    explained = dispatch.explain("softmax", x)
    assert explained.decision.backend == "wide" and "timing: device" in str(explained)
    spec = spec_of("softmax", x, -1)
    assert decision_key(spec, {"a": "1"}, "device") != decision_key(spec, {"a": "1"})
    with pytest.raises(ValueError, match="'timing' must be one of 'wall', 'device'"):
        dispatch.configure(timing="gpu")


def test_a_use_block_races_its_calls_by_its_own_timing_and_resolves_them_apart():
    """``use(timing="device")`` around code a CUDA graph replays: its calls are decided by device time
    (the launch left out), calls outside by the process's wall timing, each resolved under its own
    key; an inner block's timing wins, and a bad one is refused naming the argument."""
    dispatch.register(_costed("quick_launch", {"cpu": (2.0, 10.0)}))
    dispatch.register(_costed("wide", {"cpu": (50.0, 1000.0)}))
    dispatch.configure(allow=["quick_launch", "wide"])
    x = torch.randn(2, 16)
    want = torch.softmax(x, -1)
    with dispatch.use(timing="device"):
        inside = dispatch.explain("softmax", x)
        torch.testing.assert_close(dispatch.softmax(x), want)
        with dispatch.use(deny=["tilelang"]):  # a nested block without a timing keeps the outer one
            assert dispatch.explain("softmax", x).decision.backend == "wide"
        with dispatch.use(timing="wall"):
            assert dispatch.explain("softmax", x).decision.backend == "quick_launch"
    assert inside.decision.backend == "wide" and "timing: device" in str(inside)
    outside = dispatch.explain("softmax", x)
    assert outside.decision.backend == "quick_launch" and "timing: wall" in str(outside)
    torch.testing.assert_close(dispatch.softmax(x), want)
    with dispatch.use(timing="device"):  # resolved above under the block's key: still the device pick
        assert dispatch.explain("softmax", x).hot and dispatch.explain("softmax", x).decision.backend == "wide"
    with pytest.raises(ValueError, match="'timing' must be one of 'wall', 'device'"):
        with dispatch.use(timing="gpu"):
            pass


def test_an_op_specific_cost_figure_overrides_the_device_types():
    info = dispatch.BackendInfo(name="costed", version="1", ops=("softmax",),
                                costs={"cuda": (10.0, 1000.0), "cuda:softmax": (40.0, 2000.0)})
    assert info.estimate_us("cuda", 2_000_000, op="softmax") == 40.0 + 1.0
    assert info.estimate_us("cuda", 2_000_000, op="logsumexp") == 10.0 + 2.0
    assert info.estimate_us("cuda", 2_000_000, launch=False, op="softmax") == 1.0
    assert info.estimate_us("cpu", 1) is None


def test_a_verdicts_card_names_the_figures_that_estimate_its_call():
    """A backend whose kernel for a call is another family than its plain figures describe says so
    in its verdict; those figures then come before the strided, long-row and plain ones (but not
    before the grad ones), and a backend that names none keeps its own."""
    info = dispatch.BackendInfo(name="costed", version="1", ops=("softmax", "logsumexp"),
                                costs={"cuda": (10.0, 1000.0), "cuda:strided": (10.0, 500.0),
                                       "cuda:tiles": (10.0, 2000.0), "cuda:logsumexp:tiles": (10.0, 4000.0),
                                       "cuda:softmax:grad": (100.0, 100.0)})
    assert info.estimate_us("cuda", 2_000_000, op="softmax", strided=True) == 10.0 + 4.0
    assert info.estimate_us("cuda", 2_000_000, op="softmax", strided=True, card="tiles") == 10.0 + 1.0
    assert info.estimate_us("cuda", 2_000_000, op="logsumexp", strided=True, card="tiles") == 10.0 + 0.5
    assert info.estimate_us("cuda", 2_000_000, op="softmax", grad=True, card="tiles") == 100.0 + 20.0
    assert info.estimate_us("cuda", 2_000_000, op="softmax", card="unknown") == 10.0 + 2.0  # no such figures
    assert dispatch.Verdict.yes("serves", card="tiles").card == "tiles" and dispatch.Verdict.no("no").card == ""
    with pytest.raises(ValueError, match="'card' must name a card's figures with an identifier"):
        dispatch.Verdict.yes("serves", card="tiles:x")

    # through dispatch: the backend whose verdict names its fast family's figures for wide rows wins
    # those calls, the other keeps the rest, and the reason says which figures decided
    plugin = _costed("two_families", {"cpu": (5.0, 100.0), "cpu:wide": (5.0, 10000.0)})

    @dispatch.hookimpl
    def dispatch_check(op, spec):
        return dispatch.Verdict.yes("wide rows: the fast family" if spec.reduced_size >= 1024 else "narrow rows",
                                    card="wide" if spec.reduced_size >= 1024 else "")

    plugin.dispatch_check = dispatch_check
    dispatch.register(plugin)
    dispatch.register(_costed("plain", {"cpu": (5.0, 1000.0)}))
    dispatch.configure(allow=["two_families", "plain"])
    wide = dispatch.explain("softmax", torch.randn(256, 1024)).decision
    narrow = dispatch.explain("softmax", torch.randn(1024, 256)).decision  # the same bytes
    assert wide.backend == "two_families" and "two_families 5.2 us ('wide' figures)" in wide.reason, wide.reason
    assert narrow.backend == "plain", narrow.reason


def test_a_row_cost_figure_sends_few_long_rows_to_the_backend_that_splits_them():
    """A card's third figure (ns per element of a row) is a floor under bandwidth: a backend that gives
    each row to one block takes a row's time however few the rows, so it loses long rows and keeps
    short ones, with the same bytes moved."""

    info = dispatch.BackendInfo(name="costed", version="1", ops=("softmax",),
                                costs={"cuda": (10.0, 1000.0, 2.0)})
    assert info.estimate_us("cuda", 2_000_000, op="softmax", row_size=100) == 10.0 + 2.0  # bandwidth
    assert info.estimate_us("cuda", 2_000_000, op="softmax", row_size=10_000) == 10.0 + 20.0  # one row
    assert info.estimate_us("cuda", 2_000_000, op="softmax") == 10.0 + 2.0  # an op that declares no rows

    dispatch.register(_costed("row_per_block", {"cpu": (1.0, 1000.0, 1.0)}))
    dispatch.register(_costed("split_rows", {"cpu": (5.0, 1000.0)}))
    dispatch.configure(allow=["row_per_block", "split_rows"])
    many_short = dispatch.explain("softmax", torch.randn(512, 256)).decision  # 1 MB, rows of 256
    few_long = dispatch.explain("softmax", torch.randn(2, 65536)).decision  # 1 MB, rows of 65536
    assert many_short.backend == "row_per_block" and few_long.backend == "split_rows"
    assert "row_per_block 66.5 us" in few_long.reason, few_long.reason
    x = torch.randn(2, 65536)
    torch.testing.assert_close(dispatch.softmax(x, -1), torch.softmax(x, -1))


def test_a_long_row_cost_figure_serves_only_rows_longer_than_long_row():
    """A ``":long"`` figure describes a backend's kernels for rows longer than ``LONG_ROW``
    (split over blocks: another launch and bandwidth); shorter rows keep the plain figure, and an
    op's own figure still beats the device type's long one."""
    from dispatch.backend import LONG_ROW

    info = dispatch.BackendInfo(name="costed", version="1", ops=("softmax", "rms_norm"),
                                costs={"cuda": (10.0, 1000.0), "cuda:long": (20.0, 500.0),
                                       "cuda:rms_norm": (1.0, 100.0), "cuda:softmax:long": (30.0, 250.0)})
    assert info.estimate_us("cuda", 2_000_000, op="logsumexp", row_size=LONG_ROW) == 10.0 + 2.0
    assert info.estimate_us("cuda", 2_000_000, op="logsumexp", row_size=LONG_ROW + 1) == 20.0 + 4.0
    assert info.estimate_us("cuda", 2_000_000, op="softmax", row_size=LONG_ROW + 1) == 30.0 + 8.0
    assert info.estimate_us("cuda", 2_000_000, op="rms_norm", row_size=65536) == 1.0 + 20.0
    assert info.estimate_us("cuda", 2_000_000, op="logsumexp") == 10.0 + 2.0  # an op that declares no rows
    # a strided call (a dim that is not the last, unit-stride one) runs other kernels: not the long figures
    assert info.estimate_us("cuda", 2_000_000, op="logsumexp", row_size=65536, strided=True) == 10.0 + 2.0

    dispatch.register(_costed("row_blocks", {"cpu": (1.0, 4000.0), "cpu:long": (1.0, 1000.0)}))
    dispatch.register(_costed("split_rows", {"cpu": (5.0, 2000.0)}))
    dispatch.configure(allow=["row_blocks", "split_rows"])
    short = dispatch.explain("softmax", torch.randn(2048, 1024)).decision  # 8 MB, rows of 1024
    long = dispatch.explain("softmax", torch.randn(64, 32768)).decision  # 8 MB, rows of 32768
    assert short.backend == "row_blocks" and long.backend == "split_rows", (short.reason, long.reason)
    assert "row_blocks 17.8 us" in long.reason, long.reason


def _cards_first_choice():
    """``first(op, shape, dim=-1, in_dtype=bf16, **kwargs)``: the built-in backend the cards put first for
    that call on a CUDA device (skips where the GPU backends are not loaded)."""
    import attrs

    from dispatch import _plugins
    from dispatch._select import by_estimated_cost
    from dispatch.backend import spec_of

    servers = [b for b in _plugins.registry().backends.values() if b.name in ("torch", "triton", "tilelang")]
    if len(servers) < 3:
        pytest.skip("needs both GPU backends loaded")

    def first(op, shape, dim=-1, in_dtype=torch.bfloat16, **kwargs):
        spec = spec_of(op, torch.empty(*shape, dtype=in_dtype, device="meta"), dim, **kwargs)
        spec = attrs.evolve(spec, tensors=[attrs.evolve(t, device=torch.device("cuda", 0)) for t in spec.tensors])
        return by_estimated_cost(servers, spec)[0][0].name

    return first


def test_the_built_in_cards_send_many_long_rows_to_triton_and_keep_short_rows_as_before():
    """On an H200 Triton's split rows led TileLang's at every long-row shape with many rows (odd
    lengths by 1.6-1.8x), while TileLang's cheaper launch wins few long rows, where torch's softmax
    takes a row's time however few the rows: the cards say so through their ":long" figures, for
    calls no shipped table covers."""
    first = _cards_first_choice()

    for op in ("softmax", "log_softmax", "logsumexp"):
        assert first(op, (1335, 50257)) == "triton", op  # vocabulary logits: TileLang 1.6x Triton's time
        assert first(op, (256, 262144)) == "triton", op
        assert first(op, (4096, 4096)) == "tilelang", op  # rows of 4K: the plain figures, as before
    assert first("logsumexp", (4, 50257)) == "tilelang"  # few long rows: the launch decides
    for op in ("softmax", "log_softmax"):  # torch gives a long row to one block: 25-67 us where TileLang takes 10-19
        for shape in ((8, 128256), (32, 151936), (1, 262144)):
            assert first(op, shape) != "torch", (op, shape)
        assert first(op, (1, 4096)) == "torch", op  # a short row: its one-row time does not count
    assert first("softmax", (65536, 128), 0) == "triton"  # a long dim 0: the strided kernel's figures, not ":long"


def test_the_built_in_cards_keep_tens_of_long_rows_off_torch_and_send_those_of_10_mb_or_more_to_triton():
    """Torch's softmax family runs long rows at 1400-2300 GB/s (H100, H200 races), and with 64-128
    rows of 64K-98K the cards had sent such calls to it, 1.3-1.5x slower than either kernel (H100:
    softmax 128x98304 36.6 us against Triton's 24.5, log_softmax 64x65536 17.3 against 12.9). From
    about 10 MB Triton's split rows led TileLang's at 16-128 rows (16x151936 10.8 against 12.8 us,
    32x151936 13.9 against 16.6); below, the launch decides as before."""
    first = _cards_first_choice()

    for op in ("softmax", "log_softmax"):
        for shape in ((128, 98304), (64, 65536), (256, 65536)):
            assert first(op, shape) == "triton", (op, shape)
        for shape in ((16, 151936), (32, 151936), (32, 128256)):
            assert first(op, shape) == "triton", (op, shape)
        for shape in ((8, 128256), (4, 131072), (1, 262144)):
            assert first(op, shape) == "tilelang", (op, shape)
    assert first("log_softmax", (64, 32768)) == "torch"  # decode-sized rows of 32K: torch's launch, as before


def test_a_cast_cost_figure_serves_calls_that_write_another_dtype():
    """A ``":cast"`` figure describes a backend's kernels for calls whose output dtype is not the
    input's (``softmax(x, -1, dtype=torch.float32)`` of bf16 ``x``); same-dtype calls keep the plain
    figure, and an op's own figure and a long-row one still come first."""
    from dispatch.backend import LONG_ROW

    info = dispatch.BackendInfo(name="costed", version="1", ops=("softmax", "rms_norm"),
                                costs={"cuda": (10.0, 1000.0), "cuda:cast": (10.0, 500.0), "cuda:long": (20.0, 250.0),
                                       "cuda:rms_norm": (1.0, 100.0)})
    assert info.estimate_us("cuda", 2_000_000, op="softmax") == 10.0 + 2.0
    assert info.estimate_us("cuda", 2_000_000, op="softmax", cast=True) == 10.0 + 4.0
    assert info.estimate_us("cuda", 2_000_000, op="softmax", cast=True, row_size=LONG_ROW + 1) == 20.0 + 8.0
    assert info.estimate_us("cuda", 2_000_000, op="rms_norm", cast=True) == 1.0 + 20.0

    def casting(name, costs):  # the chunked test kernel, serving casts too
        plugin = _costed(name, costs)

        @dispatch.hookimpl
        def dispatch_check(op, spec):
            return dispatch.Verdict.yes()

        plugin.dispatch_check = dispatch_check
        return plugin

    dispatch.register(casting("slow_cast", {"cpu": (1.0, 4000.0), "cpu:cast": (1.0, 1000.0)}))
    dispatch.register(casting("steady", {"cpu": (1.0, 2000.0)}))
    dispatch.configure(allow=["slow_cast", "steady"])
    x = torch.randn(2048, 1024, dtype=torch.float64)
    assert dispatch.explain("softmax", x, -1).decision.backend == "slow_cast"
    cast = dispatch.explain("softmax", x, -1, dtype=torch.float32).decision
    assert cast.backend == "steady" and "slow_cast" in cast.reason, cast.reason
    torch.testing.assert_close(dispatch.softmax(x, -1, dtype=torch.float32), torch.softmax(x, -1, dtype=torch.float32))


def test_the_built_in_cards_send_rows_written_in_fp32_to_triton():
    """On an H200, bf16 and fp16 rows normalized in fp32 ran on TileLang level with Triton at N = 256
    and 6-24% slower at 1024 and 4096: the cards send such calls to Triton, and same-dtype rows stay
    as they were."""
    first = _cards_first_choice()
    for op in ("softmax", "log_softmax"):
        for dtype in (torch.bfloat16, torch.float16):
            for shape in ((262144, 256), (65536, 1024), (16384, 4096), (2048, 32000)):
                assert first(op, shape, in_dtype=dtype, dtype=torch.float32) == "triton", (op, dtype, shape)
            assert first(op, (16384, 4096), in_dtype=dtype) == "tilelang", (op, dtype)


def test_a_grad_cost_figure_sends_recorded_calls_elsewhere_and_keeps_them_apart():
    """A backend whose forward is fast but whose backward is not: its ``"<device>:<op>:grad"`` figure
    is used for calls autograd records, so inference calls and training calls of one shape get
    different backends, without measuring anything."""

    info = dispatch.BackendInfo(name="costed", version="1", ops=("softmax",),
                                costs={"cuda": (10.0, 1000.0), "cuda:softmax:grad": (40.0, 100.0)})
    assert info.estimate_us("cuda", 2_000_000, op="softmax", grad=True) == 40.0 + 20.0
    assert info.estimate_us("cuda", 2_000_000, op="softmax") == 10.0 + 2.0
    assert info.estimate_us("cuda", 2_000_000, op="logsumexp", grad=True) == 10.0 + 2.0

    dispatch.register(_costed("fast_forward", {"cpu": (1.0, 1000.0), "cpu:softmax:grad": (100.0, 10.0)}))
    dispatch.register(_costed("steady", {"cpu": (5.0, 500.0)}))
    dispatch.configure(allow=["fast_forward", "steady"])
    x = torch.randn(64, 256)
    assert dispatch.explain("softmax", x).decision.backend == "fast_forward"
    assert dispatch.explain("softmax", x.requires_grad_()).decision.backend == "steady"
    y = dispatch.softmax(x, -1)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.zeros_like(x), atol=1e-6, rtol=0)  # d(sum softmax)/dx = 0


def test_rows_whose_bytes_are_not_a_multiple_of_16_get_a_bucket_of_their_own():
    """A decision raced on bf16 rows of 30001 (no 16-byte copies: other kernels, other speeds) must
    not serve rows of 32768 of the same power-of-two bucket, nor the other way round."""
    from dispatch._keys import shape_bucket
    from dispatch.backend import spec_of

    def bucket(shape, dtype=torch.bfloat16, dim=-1):
        return shape_bucket(spec_of("softmax", torch.empty(shape, dtype=dtype), dim))

    assert bucket((2048, 32768)) == bucket((2097, 32000)) == "M<=4096,N<=32768,lastdim"
    assert bucket((2048, 30001)) == bucket((2048, 30004)) == "M<=4096,N<=32768,lastdim,unaligned"
    assert bucket((2048, 30004), torch.float32) == "M<=4096,N<=32768,lastdim"  # 16-byte rows in fp32
    assert bucket((64, 30001, 3), dim=1) == "M<=256,N<=32768,dim-2"  # 192 columns, not rows: unchanged


def test_a_non_contiguous_input_gets_a_bucket_of_its_own():
    """A decision raced on a contiguous input may name a kernel that reads only contiguous inputs
    (TileLang's tiles over a leading dim, its chunk-in-shared-memory rows): a slice or a permuted
    view of the same sizes must not be handed it."""
    from dispatch._keys import shape_bucket
    from dispatch.backend import spec_of

    def bucket(x, dim):
        return shape_bucket(spec_of("softmax", x, dim))

    dense = torch.empty(8, 256, 64, 64, dtype=torch.bfloat16)
    assert bucket(dense, 1) == "M<=65536,N<=256,dim-3"
    assert bucket(torch.empty(8, 256, 64, 128, dtype=torch.bfloat16)[..., ::2], 1) == "M<=65536,N<=256,dim-3,strided"
    channels_last = dense.contiguous(memory_format=torch.channels_last)
    assert bucket(channels_last, 1) == "M<=65536,N<=256,dim-3,strided"
    assert bucket(torch.empty(2048, 32768, dtype=torch.bfloat16)[:, :32000], -1) == "M<=4096,N<=32768,lastdim,strided"
    assert bucket(torch.empty(2048, 32000, dtype=torch.bfloat16), -1) == "M<=4096,N<=32768,lastdim"


def test_explain_takes_the_call_as_the_op_does():
    # what the op refuses explain refuses the same way; what the op takes (out=) explain takes
    x, y = torch.randn(4, 8), torch.empty(4, 8)
    for bad in (1, ""):
        with pytest.raises(TypeError, match="'backend' must be a backend name"):
            dispatch.softmax(x, -1, backend=bad)
        with pytest.raises(TypeError, match="'backend' must be a backend name"):
            dispatch.explain("softmax", x, -1, backend=bad)
    plain = dispatch.explain("softmax", x, -1).decision.backend
    assert dispatch.explain("softmax", x, -1, out=y).decision.backend == plain
    with pytest.raises(TypeError, match="out"):
        dispatch.explain("rms_norm", x, [8], out=y)  # rms_norm takes no out=, as torch's


def test_an_unknown_forced_backend_says_which_setting_named_it():
    x = torch.randn(2, 4)
    with pytest.raises(UnknownBackendError, match=r"'tritn' is not loaded.*; the call's backend= named it$"):
        dispatch.softmax(x, -1, backend="tritn")
    with pytest.raises(UnknownBackendError, match=r"'tritn' is not loaded.*; dispatch.use\(...\) named it$"):
        with dispatch.use("tritn"):
            dispatch.softmax(x, -1)
    dispatch.configure(backend="torch,triton")
    try:
        with pytest.raises(UnknownBackendError, match=r"DISPATCH_BACKEND named it; a forced backend is one name.*"
                                                      r"DISPATCH_ALLOW"):
            dispatch.softmax(x, -1)
    finally:
        dispatch.configure(backend=None)


def test_nested_allow_lists_that_share_no_backend_name_both_lists():
    with pytest.raises(ValueError, match=r"use\(allow=\['triton'\]\) inside use\(allow=\['torch'\]\) allows no "):
        with dispatch.use(allow=["torch"]):
            with dispatch.use(allow=["triton"]):
                pass
    with dispatch.use(allow=["torch", "triton"]):  # intersecting lists are fine
        with dispatch.use(allow=["torch"]):
            assert dispatch.explain("softmax", torch.randn(2, 4), -1).decision.backend == "torch"
