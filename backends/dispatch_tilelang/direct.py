"""The fastest call of a compiled TileLang kernel: its tvm-ffi executable, everything else resolved once.

A ``JITKernel`` call goes through its adapter's ``func``, which per call counts the inputs, loops
over the parameters to place them, resolves the output's symbolic shape by a loop over the
dynamic symbols and allocates it. For one call spec all of that is known in advance: the input
is parameter 0, the output parameter 1, its shape ``(M, N)`` (``(M,)`` for logsumexp) and its
dtype fixed. :func:`call_path` resolves it once and returns ``run(x)``, which calls the tvm-ffi
executable (it checks shapes, dtypes and strides in C++ and launches on torch's current stream,
so calls follow streams and CUDA-graph capture): with an output allocated here, or, where the
kernel was lowered to allocate its outputs itself (TileLang 0.1.15's default), with the input as
the allocator's anchor, as the adapter calls it.

The kernels load and store 16-byte vectors: an input whose data pointer is not 16-byte aligned
(a view that starts mid-vector) is copied to an aligned buffer first, never handed over as is.
A kernel of strided rows (``compiled.row_stride``) is handed the input's ``(M, N)`` view of
strides ``(row_stride, 1)``, the strides its executable checks; a misaligned one is copied into
rows of the same stride (:func:`~dispatch_tilelang.norms.aligned`).
The direct call is used after a first eager call has shown that it gives what the adapter's
call gives; where the adapter is not tvm-ffi, or the check fails, calls go through the adapter.
The norm kernels (three inputs: rows, weight, bias; then the output) take the same path through
:class:`NormCallPath`. A kernel whose outputs are preallocated arguments (the norm backwards and
their column sums) needs no check: :func:`args_call` gives its executable's call.
"""

from __future__ import annotations

import torch

ARM_DEVICES = ("cuda",)  # where the executable's call is armed (module-level for the CPU tests)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def executable_of(jit_kernel, inputs: int = 1):
    """``(executable, abi, why_not)``: the kernel's tvm-ffi executable, how it takes its output, or
    None and why not. The kernel takes ``inputs`` tensors, then its one output.

    ``abi`` is ``"caller"`` (called as ``executable(*inputs, out)``, the output allocated here) or
    ``"callee"`` (called as ``executable(*inputs, anchor)``, returning the output it allocated
    through torch's allocator, ``anchor`` a tensor on the device, as TileLang's adapter calls it).
    """
    adapter = getattr(jit_kernel, "adapter", None)
    if adapter is None or type(adapter).__name__ != "TVMFFIKernelAdapter":
        return None, "", f"adapter {type(adapter).__name__} is not tvm-ffi"
    if list(getattr(adapter, "result_idx", ())) != [inputs] or len(adapter.params) != inputs + 1:
        return None, "", (f"parameters {adapter.params} with outputs {adapter.result_idx}, not {inputs} "
                          "input(s) and an output")
    abi = "callee" if getattr(adapter, "_ffi_callee_allocated_output_abi", False) else "caller"
    try:
        return adapter._get_executable(), abi, ""
    except Exception as exc:  # noqa: BLE001 - no executable: the adapter's call it is
        return None, "", f"{type(exc).__name__}: {exc}"


def args_call(jit_kernel):
    """``call(*args)`` of a kernel that takes every tensor as an argument (its outputs preallocated,
    ``out_idx=None``): where the adapter is tvm-ffi's, its call only hands the arguments over as they
    are, so the executable's ``main`` is called itself (the adapter's loops over its parameters cost
    some 4 us of host time a call); else the kernel's own call."""
    adapter = getattr(jit_kernel, "adapter", None)
    if adapter is not None and type(adapter).__name__ == "TVMFFIKernelAdapter" and not list(adapter.result_idx):
        try:
            return entry_of(adapter._get_executable())
        except Exception:  # noqa: BLE001 - no executable: the kernel's own call it is
            pass
    return jit_kernel


def entry_of(executable):
    """What calling ``executable`` calls: a tvm-ffi module's call is a Python method that calls its
    ``main`` function, so ``main`` itself (one Python frame less per call); else the executable."""
    try:
        import tvm_ffi

        module = tvm_ffi.Module
        if isinstance(executable, module) and type(executable).__call__ is module.__call__:
            return executable.main
    except Exception:  # noqa: BLE001 - no such module or no main: call the executable
        pass
    return executable


class CallPath:
    """``run(x)`` for every ``x`` of one call spec: the adapter's call first, then the executable's.

    ``state``: ``"adapter"`` (not checked yet), ``"direct"``, or ``"adapter only"`` with ``why``.
    ``run`` is one closure for the object's life (the dispatcher keeps it): a flag switches it
    from the adapter's call to the executable's.
    """

    def __init__(self, compiled, m: int, n: int, out_shape: tuple[int, ...], input_is_2d: bool):
        self.compiled, self.m, self.n, self.out_shape = compiled, m, n, tuple(out_shape)
        if compiled.kernel is None or m == 0:
            self.executable, self.abi, self.why = None, "", "no kernel (empty input)"
        else:
            self.executable, self.abi, self.why = executable_of(compiled.kernel)
        if compiled.target != "cuda" and self.executable is not None:
            self.executable, self.why = None, f"target {compiled.target!r}: bf16 travels as int16 bit patterns there"
        self.state = "adapter" if self.executable is not None else "adapter only"
        row_stride = getattr(compiled, "row_stride", 0)  # 0: dense rows
        self._rows = _strided_rows(m, n, row_stride) if row_stride else None
        self.run = self._strided_closure() if self._rows is not None else self._closure(input_is_2d)

    def _adapter(self, x: torch.Tensor) -> torch.Tensor:
        if self._rows is not None:
            return self.compiled(self._rows(x)).view(self.out_shape)
        if x.data_ptr() & 15:
            x = x.clone()  # the kernels load 16-byte vectors; a fresh allocation is aligned
        return self.compiled(x.reshape(self.m, self.n)).view(self.out_shape)

    def _closure(self, input_is_2d: bool):
        exe, empty, out_dtype = entry_of(self.executable), torch.empty, self.compiled._torch_out
        m, n, out_shape = self.m, self.n, self.out_shape
        kernel_shape = (m,) if self.compiled.op == "logsumexp" else (m, n)
        same_shape, armed, callee = kernel_shape == out_shape, [False], self.abi == "callee"

        # the executable's call, written out in ``run`` too (one frame less per call)
        def direct(x: torch.Tensor) -> torch.Tensor:
            if x.data_ptr() & 15:
                x = x.clone()  # the kernels load 16-byte vectors; a fresh allocation is aligned
            x2 = x if input_is_2d else x.view(m, n)
            if callee:
                out = exe(x2, x2)
            else:
                out = empty(kernel_shape, dtype=out_dtype, device=x.device)
                exe(x2, out)
            return out if same_shape else out.view(out_shape)

        until_armed = self._until_armed(direct, armed)

        def run(x: torch.Tensor) -> torch.Tensor:
            if armed[0]:
                if x.data_ptr() & 15:
                    x = x.clone()
                x2 = x if input_is_2d else x.view(m, n)
                if callee:
                    out = exe(x2, x2)
                else:
                    out = empty(kernel_shape, dtype=out_dtype, device=x.device)
                    exe(x2, out)
                return out if same_shape else out.view(out_shape)
            return until_armed(x)

        run.path = self  # type: ignore[attr-defined]
        return run

    def _until_armed(self, direct, armed: list):
        """The call before the executable's is armed: the adapter's, and once (on a device the
        direct path arms on, not while a graph is captured) the check that arms ``direct``."""
        adapter = self._adapter

        def call(x: torch.Tensor, *rest) -> torch.Tensor:
            out = adapter(x, *rest)
            if self.state == "adapter" and x.device.type in ARM_DEVICES and not _capturing():
                self._check(direct, (x, *rest), out)
                armed[0] = self.state == "direct"
            return out

        return call

    def _strided_closure(self):
        """``run`` of a kernel of strided rows: the adapter's call, then the executable's once checked,
        each handed the rows in place (see :func:`_strided_rows`)."""
        exe, empty, out_dtype, rows = entry_of(self.executable), torch.empty, self.compiled._torch_out, self._rows
        out_shape, callee, armed = self.out_shape, self.abi == "callee", [False]
        kernel_shape = (self.m,) if self.compiled.op == "logsumexp" else (self.m, self.n)

        def direct(x: torch.Tensor) -> torch.Tensor:
            x2 = rows(x)
            if callee:
                return exe(x2, x2).view(out_shape)
            out = empty(kernel_shape, dtype=out_dtype, device=x.device)
            exe(x2, out)
            return out.view(out_shape)

        until_armed = self._until_armed(direct, armed)

        def run(x: torch.Tensor) -> torch.Tensor:
            return direct(x) if armed[0] else until_armed(x)

        run.path = self  # type: ignore[attr-defined]
        return run

    def _check(self, direct, args: tuple, expected: torch.Tensor) -> None:
        """Arm the executable's call if it gives what the adapter's gave (once; it synchronizes)."""
        try:
            ok = torch.allclose(direct(*args).float(), expected.float(), rtol=1e-2, atol=1e-3, equal_nan=True)
            why = "" if ok else "the executable's output differs from the adapter's"
        except Exception as exc:  # noqa: BLE001 - stay on the adapter's call
            ok, why = False, f"{type(exc).__name__}: {exc}"
        self.state, self.why = ("direct", "") if ok else ("adapter only", why)


class NormCallPath(CallPath):
    """``run(x, weight, bias)`` of a norm kernel (:mod:`dispatch_tilelang.norms`): ``prepare`` gives
    the kernel's three inputs (rows, weight or its stand-in, bias or its stand-in; each 16-byte
    aligned); the adapter's call first, then, once checked, the executable's (a ``JITKernel``
    call costs some 10 us of host time per call, more than a long row's kernel saves)."""

    def __init__(self, jit_kernel, target: str, m: int, n: int, out_shape: tuple[int, ...], out_dtype, prepare):
        self.jit_kernel, self.m, self.n, self.out_shape = jit_kernel, m, n, tuple(out_shape)
        self.prepare = prepare
        self.executable, self.abi, self.why = executable_of(jit_kernel, inputs=3)
        if target != "cuda" and self.executable is not None:
            self.executable, self.why = None, f"target {target!r}: bf16 travels as int16 bit patterns there"
        self.state = "adapter" if self.executable is not None else "adapter only"
        exe = entry_of(self.executable) if self.executable is not None else None
        empty, kernel_shape, out_shape = torch.empty, (m, n), self.out_shape
        callee, armed, reshaped = self.abi == "callee", [False], self.out_shape != (m, n)

        def direct(x, weight=None, bias=None):
            a, w, b = prepare(x, weight, bias)
            if callee:
                out = exe(a, w, b, a)
            else:
                out = empty(kernel_shape, dtype=out_dtype, device=x.device)
                exe(a, w, b, out)
            return out.view(out_shape) if reshaped else out

        until_armed = self._until_armed(direct, armed)

        def run(x, weight=None, bias=None):
            return direct(x, weight, bias) if armed[0] else until_armed(x, weight, bias)

        run.path = self  # type: ignore[attr-defined]
        self.run = run

    def _adapter(self, x, weight=None, bias=None):
        return self.jit_kernel(*self.prepare(x, weight, bias)).view(self.out_shape)


def _strided_rows(m: int, n: int, row_stride: int):
    """``rows(x)``: the ``(m, n)`` view of ``x``'s rows ``row_stride`` apart (its leading dims collapse
    to them: the verdict said so), or, where it starts mid-vector, a copy into aligned rows of that
    stride. The user's tensor is read in place, never written."""
    from .norms import aligned

    def rows(x: torch.Tensor) -> torch.Tensor:
        view = x.as_strided((m, n), (row_stride, 1))
        return aligned(view) if view.data_ptr() & 15 else view

    return rows


def call_path(compiled, m: int, n: int, out_shape: tuple[int, ...], input_is_2d: bool):
    """``run(x)`` for ``compiled`` (a :class:`~dispatch_tilelang.build.CompiledKernel`) on inputs
    of ``m`` rows of ``n`` (contiguous, or ``compiled.row_stride`` apart); ``run.path`` is the
    :class:`CallPath`."""
    return CallPath(compiled, m, n, out_shape, input_is_2d).run
