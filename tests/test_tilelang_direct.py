"""The TileLang backend's call path, without a GPU: when the tvm-ffi executable's call is armed, how
it is called for each output ABI, and what keeps calls on the adapter (stand-in kernel and executable)."""

from __future__ import annotations

import pytest
import torch

from dispatch_tilelang import direct


class FakeExecutable:
    """A tvm-ffi executable of ``y = 2 * x``, either ABI; records the pointers it was handed."""

    def __init__(self, abi, wrong=False):
        self.abi, self.wrong, self.calls = abi, wrong, []

    def __call__(self, x, second):
        self.calls.append(x.data_ptr())
        y = x * (3 if self.wrong else 2)
        if self.abi == "callee":
            return y
        second.copy_(y)


TVMFFIKernelAdapter = type("TVMFFIKernelAdapter", (), {})  # the adapter class, by name


def fake_kernel(abi, wrong=False, op="softmax"):
    adapter = TVMFFIKernelAdapter()
    adapter.result_idx, adapter.params = [1], ["x", "y"]
    adapter._ffi_callee_allocated_output_abi = abi == "callee"
    exe = FakeExecutable(abi, wrong)
    adapter._get_executable = lambda: exe

    class Compiled:
        target, kernel, _torch_out = "cuda", type("JITKernel", (), {"adapter": adapter})(), torch.float32
        adapter_calls = 0

        def __call__(self, x):
            Compiled.adapter_calls += 1
            return x * 2

    Compiled.op = op
    return Compiled(), exe


@pytest.fixture
def cpu_armed(monkeypatch):
    monkeypatch.setattr(direct, "ARM_DEVICES", ("cpu",))
    monkeypatch.setattr(direct, "_capturing", lambda: False)


def rows(m=4, n=8, offset=0):
    return torch.arange(float(m * n + offset))[offset:].view(m, n)


@pytest.mark.parametrize("abi", ["caller", "callee"])
def test_first_call_goes_through_the_adapter_then_the_executable(cpu_armed, abi):
    compiled, exe = fake_kernel(abi)
    run = direct.call_path(compiled, 4, 8, (4, 8), True)
    x = rows()
    assert torch.equal(run(x), x * 2) and run.path.state == "direct"
    calls = compiled.adapter_calls
    exe.calls.clear()
    assert torch.equal(run(x), x * 2)
    assert compiled.adapter_calls == calls and exe.calls == [x.data_ptr()]


def test_the_output_takes_the_specs_shape(cpu_armed):
    compiled, _ = fake_kernel("callee")
    x = rows().view(2, 2, 8)
    run = direct.call_path(compiled, 4, 8, (2, 2, 8), False)
    run(x)
    out = run(x)
    assert out.shape == (2, 2, 8) and torch.equal(out, x * 2)


@pytest.mark.parametrize("abi", ["caller", "callee"])
def test_a_misaligned_input_is_copied_never_handed_over(cpu_armed, abi):
    compiled, exe = fake_kernel(abi)
    run = direct.call_path(compiled, 4, 8, (4, 8), True)
    run(rows())
    x = rows(offset=1)  # 4 bytes past an aligned start
    before = x.clone()
    exe.calls.clear()
    assert torch.equal(run(x), x * 2)
    assert exe.calls and all(p % 16 == 0 for p in exe.calls)
    assert torch.equal(x, before)


def test_an_executable_that_disagrees_with_the_adapter_is_never_used(cpu_armed):
    compiled, exe = fake_kernel("caller", wrong=True)
    run = direct.call_path(compiled, 4, 8, (4, 8), True)
    x = rows()
    run(x)
    assert run.path.state == "adapter only" and "differs" in run.path.why
    exe.calls.clear()
    assert torch.equal(run(x), x * 2) and exe.calls == []


def test_not_armed_while_capturing(cpu_armed, monkeypatch):
    monkeypatch.setattr(direct, "_capturing", lambda: True)
    compiled, _ = fake_kernel("caller")
    run = direct.call_path(compiled, 4, 8, (4, 8), True)
    run(rows())
    assert run.path.state == "adapter"


def test_another_adapter_stays_on_the_adapters_call(cpu_armed):
    compiled, _ = fake_kernel("caller")
    compiled.kernel.adapter = object()
    run = direct.call_path(compiled, 4, 8, (4, 8), True)
    assert torch.equal(run(rows()), rows() * 2)
    assert run.path.state == "adapter only" and "not tvm-ffi" in run.path.why


class FakeNormExecutable:
    """A tvm-ffi executable of ``y = x * w + b`` (three inputs, then the output), either ABI."""

    def __init__(self, abi, wrong=False):
        self.abi, self.wrong, self.calls = abi, wrong, []

    def __call__(self, x, w, b, last):
        self.calls.append((x.data_ptr(), w.data_ptr(), b.data_ptr()))
        y = x * w + b + (1 if self.wrong else 0)
        if self.abi == "callee":
            return y
        last.copy_(y)


def norm_path(abi, wrong=False, m=4, n=8):
    adapter = TVMFFIKernelAdapter()
    adapter.result_idx, adapter.params = [3], ["x", "w", "b", "y"]
    adapter._ffi_callee_allocated_output_abi = abi == "callee"
    exe = FakeNormExecutable(abi, wrong)
    adapter._get_executable = lambda: exe
    kernel = type("JITKernel", (), {"adapter": adapter, "calls": 0})()
    kernel_call = lambda x, w, b: x * w + b  # noqa: E731 - the adapter's call
    type(kernel).__call__ = lambda self, *a: (setattr(self, "calls", self.calls + 1), kernel_call(*a))[1]
    from dispatch_tilelang.norms import aligned

    ones, zeros = torch.ones(n), torch.zeros(n)

    def prepare(x, weight=None, bias=None):  # as dispatch_tilelang.norms.kernel's: stand-ins, aligned
        args = (x.reshape(m, n), ones if weight is None else weight, zeros if bias is None else bias)
        return tuple(aligned(a) for a in args)

    path = direct.NormCallPath(kernel, "cuda", m, n, (m, n), torch.float32, prepare)
    return path.run, kernel, exe


@pytest.mark.parametrize("abi", ["caller", "callee"])
def test_a_norm_kernel_is_called_through_its_executable_once_checked(cpu_armed, abi):
    run, kernel, exe = norm_path(abi)
    x, w, b = rows(), torch.arange(8.0), torch.full((8,), 0.5)
    assert torch.equal(run(x, w, b), x * w + b) and run.path.state == "direct"
    calls = kernel.calls
    exe.calls.clear()
    assert torch.equal(run(x, w, b), x * w + b) and torch.equal(run(x), x)  # absent: the stand-ins
    assert kernel.calls == calls and len(exe.calls) == 2


def test_a_norm_call_hands_over_aligned_copies_and_leaves_the_users_tensors(cpu_armed):
    run, _, exe = norm_path("caller")
    run(rows(), torch.ones(8), torch.zeros(8))
    w = torch.arange(9.0)[1:]  # 4 bytes past an aligned start
    x = rows(offset=1)
    before = (x.clone(), w.clone())
    exe.calls.clear()
    assert torch.equal(run(x, w), x * w)
    assert exe.calls and all(p % 16 == 0 for p in exe.calls[0])
    assert torch.equal(x, before[0]) and torch.equal(w, before[1])


def test_a_norm_executable_that_disagrees_is_never_used(cpu_armed):
    run, kernel, exe = norm_path("callee", wrong=True)
    x = rows()
    run(x)
    assert run.path.state == "adapter only" and "differs" in run.path.why
    exe.calls.clear()
    assert torch.equal(run(x), x) and exe.calls == []
