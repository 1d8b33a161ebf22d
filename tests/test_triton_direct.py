"""The Triton backend's direct launch, without a GPU: when it is armed, what it launches, and when a
call goes back to the JIT path (a stand-in JIT function and compiled kernel record the launches)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from dispatch_triton import direct  # noqa: E402


class FakeCompiled:
    """A compiled kernel's launcher: records its launches and writes ``x + 1`` into the output."""

    function, packed_metadata = 1234, ("meta",)

    def __init__(self, log, wrong=False):
        self.log, self.wrong = log, wrong

    def run(self, g0, g1, g2, stream, function, packed, launch_metadata, enter, leave, x, out, *tail):
        # pointers arrive as addresses (ints), as the real launcher takes them without a driver query
        assert isinstance(x, int) and isinstance(out, int) and (enter, leave) == (None, None)
        self.log.append(("direct", (g0, g1, g2), stream, function, packed, tail))
        MEMORY[out].copy_(MEMORY[x] + (2 if self.wrong else 1))


MEMORY: dict[int, torch.Tensor] = {}  # address -> tensor, for the stand-in launcher


def mem(t: torch.Tensor) -> torch.Tensor:
    MEMORY[t.data_ptr()] = t
    return t


class FakeJit:
    """A JIT function of parameters (x, out, N, BLOCK): ``fn[grid](x, out, N=..., BLOCK=...)``."""

    arg_names = ["x_ptr", "out_ptr", "N", "BLOCK"]

    def __init__(self, wrong=False):
        self.log, self.compiled = [], FakeCompiled([], wrong)
        self.compiled.log = self.log

    def __getitem__(self, grid):
        def call(x, out, **kw):
            self.log.append(("jit", tuple(grid), dict(kw)))
            out.copy_(x + 1)
            return self.compiled
        return call


@pytest.fixture
def cpu_as_gpu(monkeypatch):
    """Let the direct path arm on CPU tensors, on "device 0" whose current stream is 77."""
    monkeypatch.setattr(direct, "ARM_DEVICES", ("cpu",))
    monkeypatch.setattr(direct, "_raw_stream", lambda index: 77)
    import types

    hooks = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    state = {"device": 0, "hooks": hooks, "count": 2}
    monkeypatch.setattr(direct, "_current_device", lambda: state["device"])
    monkeypatch.setattr(direct, "_device_count", lambda: state["count"])
    monkeypatch.setattr(direct, "_RUNTIME", hooks)
    monkeypatch.setattr(direct, "_capturing", lambda: False)
    monkeypatch.setattr(direct, "_empty_like", lambda t: mem(torch.empty_like(t)))
    state["patch"] = monkeypatch
    return state


def aligned(n=8):
    return mem(torch.arange(float(n)))


def misaligned(n=8):
    return mem(torch.arange(float(n + 1))[1:])  # 4 bytes past an aligned start


def empty(n=8):
    return mem(torch.empty(n))


def make(fn, **kw):
    return direct.DirectLaunch(fn, (3,), 2, {"N": 8, "BLOCK": 16}, {"num_warps": 4}, **kw)


def test_first_call_takes_the_jit_path_then_launches_directly_with_prepacked_arguments(cpu_as_gpu):
    fn = FakeJit()
    launch = make(fn)
    x, out = aligned(), empty()
    launch.launch(x, out)
    assert fn.log[0] == ("jit", (3,), {"N": 8, "BLOCK": 16, "num_warps": 4})
    assert launch.state == "direct"
    fn.log.clear()
    out2 = empty()
    launch.launch(x, out2)
    assert fn.log == [("direct", (3, 1, 1), 77, 1234, ("meta",), (8, 16))]  # tail in parameter order
    assert torch.equal(out2, x + 1)


def test_a_misaligned_input_takes_the_jit_path_and_does_not_arm(cpu_as_gpu):
    fn = FakeJit()
    launch = make(fn)
    launch.launch(misaligned(), empty())
    assert launch.state == "jit"  # compiled for an unaligned pointer: not the kernel to keep
    launch.launch(aligned(), empty())
    assert launch.state == "direct"
    fn.log.clear()
    x = misaligned()
    out = empty()
    launch.launch(x, out)
    assert [e[0] for e in fn.log] == ["jit"]
    assert torch.equal(out, x + 1)


def test_another_current_device_takes_the_jit_path(cpu_as_gpu):
    fn = FakeJit()
    launch = make(fn)
    launch.launch(aligned(), empty())
    cpu_as_gpu["device"] = 1
    fn.log.clear()
    launch.launch(aligned(), empty())
    assert [e[0] for e in fn.log] == ["jit"]


def test_with_one_device_the_current_device_is_not_asked_per_call(cpu_as_gpu):
    cpu_as_gpu["count"] = 1  # the only device is the current one: nothing to ask per call
    fn = FakeJit()
    launch = make(fn)
    launch.launch(aligned(), empty())
    assert launch.state == "direct"
    cpu_as_gpu["device"] = 1  # would send a multi-device launch to the JIT path; here it is not read
    fn.log.clear()
    x, out = aligned(), empty()
    launch.launch(x, out)
    assert [e[0] for e in fn.log] == ["direct"] and torch.equal(out, x + 1)


def test_not_armed_while_capturing_a_cuda_graph(cpu_as_gpu):
    cpu_as_gpu["patch"].setattr(direct, "_capturing", lambda: True)
    launch = make(FakeJit())
    launch.launch(aligned(), empty())
    assert launch.state == "jit"


def test_a_launcher_that_disagrees_with_the_jit_path_is_never_used(cpu_as_gpu):
    fn = FakeJit(wrong=True)
    launch = make(fn)
    x, out = aligned(), empty()
    launch.launch(x, out)
    assert launch.state == "disarmed" and "did not reproduce" in launch.why
    fn.log.clear()
    launch.launch(x, out)
    assert [e[0] for e in fn.log] == ["jit"] and torch.equal(out, x + 1)


def test_a_launch_hook_keeps_calls_on_the_jit_path(cpu_as_gpu):
    cpu_as_gpu["hooks"].launch_enter_hook = print
    launch = make(FakeJit())
    launch.launch(aligned(), empty())
    assert launch.state == "jit"


def test_a_hook_installed_after_arming_sends_calls_back_to_the_jit_path(cpu_as_gpu):
    fn = FakeJit()
    launch = make(fn)
    launch.launch(aligned(), empty())
    assert launch.state == "direct"
    cpu_as_gpu["hooks"].launch_enter_hook = print
    fn.log.clear()
    launch.launch(aligned(), empty())
    assert [e[0] for e in fn.log] == ["jit"]


def test_missing_parameter_values_disarm_with_the_names():
    fn = FakeJit()
    launch = direct.DirectLaunch(fn, (1,), 2, {"N": 8}, {})
    with pytest.raises(ValueError, match="BLOCK"):
        launch._make_direct(fn.compiled, torch.device("cpu", 0))


def test_the_interpreter_never_arms():
    import os

    launch = make(FakeJit(), enabled=os.environ.get("TRITON_INTERPRET") != "1")
    launch.launch(aligned(), empty())
    assert launch.state in ("jit", "disarmed")  # CPU tensors: never "direct" without the stand-ins


def test_a_captured_split_launch_gets_a_private_slot_buffer_that_holds_every_partial(monkeypatch):
    """While a CUDA graph is captured, a split launch gets its own zeroed slot buffer (its zeroing is
    captured with it), large enough for the kernel's layout: 64 words, then a (max, sum) pair of
    words per partial, ``M * programs_per_row`` partials."""
    from dispatch_triton import buffers

    made = []

    def zeros(n, dtype, device):
        made.append((n, dtype))
        return torch.zeros(n, dtype=dtype)

    monkeypatch.setattr(buffers, "_capturing", lambda: True)
    monkeypatch.setattr(buffers, "_raw_stream", lambda index: 5)  # a side stream (torch captures on one)
    monkeypatch.setattr(buffers, "_captured_zeros", zeros)
    rows, programs_per_row = 4, 32
    a = buffers._split_slots(torch.device("cuda", 0), rows * programs_per_row)
    b = buffers._split_slots(torch.device("cuda", 0), rows * programs_per_row)
    assert a is not b  # private to each captured launch
    assert made[0][1] == torch.int64 and made[0][0] >= 64 + 2 * rows * programs_per_row


class FakeJitWithWeight(FakeJit):
    """Parameters (x, out, w, N, BLOCK): writes ``x + w``; ``w`` stays the same for every launch."""

    arg_names = ["x_ptr", "out_ptr", "w_ptr", "N", "BLOCK"]

    def __init__(self):
        super().__init__()
        jit = self

        class Compiled(FakeCompiled):
            def run(self, g0, g1, g2, stream, function, packed, launch_metadata, enter, leave, x, out, *tail):
                assert all(isinstance(a, int) for a in (x, out, *tail))
                jit.log.append(("direct", tail))
                MEMORY[out].copy_(MEMORY[x] + MEMORY[tail[0]])

        self.compiled = Compiled(self.log)

    def __getitem__(self, grid):
        def call(x, out, w, **kw):
            self.log.append(("jit", dict(kw)))
            out.copy_(x + w)
            return self.compiled
        return call


def test_fixed_trailing_tensors_are_launched_by_their_address_and_kept_alive(cpu_as_gpu):
    import gc
    import weakref

    fn = FakeJitWithWeight()
    w = mem(torch.full((8,), 10.0))
    ref = weakref.ref(w)
    launch = direct.DirectLaunch(fn, (1,), 3, {"N": 8, "BLOCK": 16}, {}, fixed=(w,))
    address = w.data_ptr()
    x = aligned()
    launch.launch(x, empty())
    assert launch.state == "direct"
    del w
    gc.collect()
    assert ref() is not None  # the launch holds the tensor whose address it hands out
    fn.log.clear()
    out = empty()
    launch.launch(x, out)
    assert fn.log == [("direct", (address, 8, 16))]
    assert torch.equal(out, x + 10)


class CudaLauncherLike:
    """The shape of Triton 3.6's CUDA launcher: ``__call__`` allocates scratch, then calls ``launch``."""

    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self, global_scratch=0, profile_scratch=0):
        self.global_scratch_size, self.profile_scratch_size = global_scratch, profile_scratch
        self.launch = lambda *args: ("entry", args)

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        return ("call", args)


def test_the_launcher_entry_point_is_called_directly_only_where_its_call_adds_nothing():
    run = CudaLauncherLike()
    callee, head = direct.launcher_entry(run, 7, "meta")
    assert callee is run.launch
    # the C entry takes what __call__ would add (cooperative, pdl, no scratch buffers) before the metadata
    assert head == (7, False, True, None, None, "meta", None, None, None)
    for needs_scratch in (CudaLauncherLike(global_scratch=64), CudaLauncherLike(profile_scratch=8)):
        callee, head = direct.launcher_entry(needs_scratch, 7, "meta")
        assert callee is needs_scratch and head == (7, "meta", None, None, None)


def test_an_entry_point_that_disagrees_with_the_jit_path_falls_back_to_the_launcher_object(cpu_as_gpu):
    """The direct entry is checked like every direct launch: wrong output there -> the launcher object."""
    fn = FakeJit()
    good_run = fn.compiled.run

    class Launcher36(CudaLauncherLike):
        def __call__(self, gridX, gridY, gridZ, stream, function, *args):
            return good_run(gridX, gridY, gridZ, stream, function, *args)

    launcher = Launcher36()
    launcher.launch = lambda *args: MEMORY[args[-3]].fill_(-1)  # writes garbage into the output
    fn.compiled.run = launcher
    launch = make(fn)
    x, out = aligned(), empty()
    launch.launch(x, out)
    assert launch.state == "direct"
    out2 = empty()
    launch.launch(x, out2)
    assert torch.equal(out2, x + 1)


class FakeJit4(FakeJit):
    """A JIT function of parameters (x, out, w, ws, N, BLOCK): ``out = x + 1``, or with ``into_ws``
    ``ws = 2 x`` (``out`` left alone)."""

    arg_names = ["x_ptr", "out_ptr", "w_ptr", "ws_ptr", "N", "BLOCK"]

    def __init__(self, into_ws=False):
        super().__init__()
        self.into_ws = into_ws

    def __getitem__(self, grid):
        def call(x, out, w, ws, **kw):
            self.log.append(("jit", tuple(grid), dict(kw)))
            if self.into_ws:
                ws.copy_(2 * x)
            else:
                out.copy_(x + 1)
            return self.compiled
        return call


def test_checked_tensors_besides_the_first_send_misaligned_calls_to_the_jit_path(cpu_as_gpu):
    fn = FakeJit4()
    launch = direct.DirectLaunch(fn, (3,), 4, {"N": 8, "BLOCK": 16}, {}, checked=(0, 2))
    x, w = aligned(), aligned()
    launch.launch(x, empty(), misaligned(), aligned())
    assert launch.state == "jit"  # compiled for a misaligned w: not armed
    launch.launch(x, empty(), w, aligned())
    assert launch.state == "direct"
    fn.log.clear()
    launch.launch(x, empty(), misaligned(), aligned())
    launch.launch(x, empty(), w, misaligned())  # not a checked position: direct
    assert [e[0] for e in fn.log] == ["jit", "direct"]


def test_the_arming_check_compares_the_output_it_is_told(cpu_as_gpu):
    # the output at position 3 (``ws``): argument 1 is left alone by the kernel, so comparing it
    # would compare two uninitialised buffers
    fn = FakeJit4(into_ws=True)
    seen = []

    def run(g0, g1, g2, stream, function, packed, launch_metadata, enter, leave, x, out, w, ws, *tail):
        seen.append(ws)
        MEMORY[ws].copy_(2 * MEMORY[x])

    fn.compiled.run = run
    launch = direct.DirectLaunch(fn, (3,), 4, {"N": 8, "BLOCK": 16}, {}, out=3)
    x, out, ws = aligned(), mem(torch.full((8,), float("nan"))), empty()
    ws.zero_()
    launch.launch(x, out, aligned(), ws)
    assert launch.state == "direct" and seen and seen[0] != ws.data_ptr()  # the check's own buffer
    assert torch.equal(ws, 2 * x)


def test_a_launcher_binds_each_stream_once_and_keeps_its_slot_buffer_when_the_shared_one_grows(monkeypatch):
    """The split paths bind a stream's buffers into their launches the first time they meet the
    stream: later calls on it reuse them, another stream gets its own. A buffer the stream's
    shared table replaces (grown for a larger launch) stays with the launches bound to it."""
    from dispatch_triton import buffers

    streams = iter([5, 5, 6, 5])
    monkeypatch.setattr(buffers, "_raw_stream", lambda index: next(streams))
    monkeypatch.setattr(buffers, "_capturing", lambda: False)
    monkeypatch.setattr(buffers, "_SLOTS", {})
    device = torch.device("cpu")
    current = buffers.per_stream(torch.device("cuda", 0), lambda key: buffers._slot_entry((device, key[1]), 10))
    first = current()
    assert current() is first  # stream 5 again: nothing built
    other = current()  # stream 6
    assert other is not first and other[0].data_ptr() != first[0].data_ptr()
    assert current() is first
    grown = buffers._slot_entry((device, 5), 100_000)  # a larger launch on stream 5
    assert grown is not first and grown[0].numel() >= 64 + 2 * 100_000
    assert buffers._slot_entry((device, 5), 10) is grown  # later launchers share the grown one
    assert first[0].numel() >= 64 + 2 * 10 and first[1] == 0  # the bound one lives on, with its own count


def test_on_torchs_default_stream_a_split_launch_never_asks_whether_a_graph_is_captured(monkeypatch):
    """torch's default stream (the legacy stream, handle 0) can't be captured, so a split launch there
    skips the capture check (about 0.3 us a call); on any other stream it asks, and while that stream
    is capturing it is handed no stream-bound buffers (the captured launch takes private ones)."""
    from dispatch_triton import buffers

    def asked():
        raise AssertionError("asked whether the default stream is capturing")

    stream, capturing = [0], [asked]
    monkeypatch.setattr(buffers, "_raw_stream", lambda index: stream[0])
    monkeypatch.setattr(buffers, "_capturing", lambda: capturing[0]())
    monkeypatch.setattr(buffers, "_SLOTS", {})
    device = torch.device("cpu")
    current = buffers.per_stream(torch.device("cuda", 0), lambda key: buffers._slot_entry((device, key[1]), 10))
    on_default = current()
    assert on_default is not None and current() is on_default
    cuda = torch.device("cuda", 0)
    assert buffers._stream_capturing((cuda, 0)) is False  # the module's own check, not asked either
    stream[0], capturing[0] = 7, (lambda: True)
    assert current() is None and buffers._stream_capturing((cuda, 7)) is True
    capturing[0] = lambda: False
    on_side = current()
    assert on_side is not None and on_side is not on_default
    assert buffers._stream_capturing((device, 7)) is False  # a CPU "stream" is never captured


def test_a_slot_buffer_is_zeroed_every_epoch_reset_launches(monkeypatch):
    """The host zeroes a slot buffer every ``_EPOCH_RESET`` launches counted into it, so a word left
    by an earlier launch can never carry a later launch's tag (a packed word's is 15-bit)."""
    from dispatch_triton import buffers

    monkeypatch.setattr(buffers, "_EPOCH_RESET", 3)
    entry = [torch.full((8,), 7, dtype=torch.int64), 0]
    buffers._tick(entry)
    buffers._tick(entry)
    assert entry[1] == 2 and int(entry[0].min()) == 7
    buffers._tick(entry)
    assert entry[1] == 0 and int(entry[0].abs().max()) == 0
