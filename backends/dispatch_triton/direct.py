"""Direct launch of a compiled Triton kernel: the JIT's binding, specialization and cache lookup done once.

``jit_fn[grid](*args, **constexprs)`` costs 6-13 us of Python per call (argument binding,
specialization of every argument, the cache key, the cache lookup) before the compiled kernel's
launcher runs. :class:`DirectLaunch` takes that path once, keeps the ``CompiledKernel`` it
returns, and from then on calls the kernel's launcher itself, with everything that does not
change between calls resolved: the function handle, the packed metadata, the grid and the
arguments that are not tensors (the ints and constexprs, in the kernel's parameter order).

What the compiled kernel assumes, and how each assumption is kept:

* dtypes of the tensors, the ints and the constexprs: fixed by the caller for the object's life
  (a :class:`~dispatch_triton.launch.Launcher` is built per call spec);
* 16-byte alignment of the data pointers, which Triton specializes on: the stand-in tensors and
  fresh outputs come from torch's allocator (always aligned); the user's tensors (the first
  argument, and any other that ``checked`` names) are checked per call, and a misaligned one
  takes the JIT path (which compiles the unaligned variant);
* the device: the current CUDA device must be the one the kernel was loaded on, else the JIT path;
* the stream: read per call (torch's current stream), so launches follow streams and CUDA-graph
  capture like the JIT path's;
* launch hooks (profilers): the direct path is armed only when Triton has none installed, and a
  hook installed later sends calls back to the JIT path.

The direct path is armed after the first eager call that meets these conditions, by a check
launch whose output must match the JIT path's (so a launcher ABI this code does not know is
found out once, and the object stays on the JIT path). It is never armed while a CUDA graph is
being captured (the check synchronizes) nor under the Triton interpreter (no compiled kernel).
"""

from __future__ import annotations

import torch

try:  # Triton >= 3.4 keeps its launch hooks in knobs
    from triton import knobs as _knobs

    _RUNTIME = _knobs.runtime
except Exception:  # pragma: no cover - older Triton: hooks on CompiledKernel
    _RUNTIME = None


# What the direct path reads of the device per call, and the devices it arms on (module-level, so
# that the CPU tests can stand in for a GPU)
ARM_DEVICES = ("cuda",)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # device index -> current stream handle
_current_device = getattr(torch._C, "_cuda_getDevice", None)  # () -> current device index


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _idle(hook) -> bool:
    """Whether a Triton launch hook does nothing: None, or a hook chain with no hooks in it."""
    return hook is None or (hasattr(hook, "calls") and not hook.calls)


def _hooks() -> tuple:
    """Triton's (launch_enter_hook, launch_exit_hook) as the JIT path would pass them."""
    if _RUNTIME is not None:
        return _RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook
    from triton.compiler.compiler import CompiledKernel

    return CompiledKernel.launch_enter_hook, CompiledKernel.launch_exit_hook


class DirectLaunch:
    """``launch(*tensors)``: the kernel ``jit_fn`` on ``grid`` with ``tensors`` then ``tail``.

    ``tensors`` are the kernel's leading pointer arguments (the first is the user's input, the
    one at position ``out`` (1 by default) what the kernel writes, compared once when arming;
    those at the positions in ``checked`` are checked for alignment per call, the others must
    come from torch's allocator); ``tail`` the remaining
    arguments (ints, constexprs) by name, ``options`` the launch options (num_warps, ...).
    ``state`` says where the object is: ``"jit"`` (not armed yet), ``"direct"`` or ``"disarmed"``
    (with ``why``: the direct path will not be tried again).
    """

    def __init__(self, jit_fn, grid: tuple[int, ...], n_tensors: int, tail: dict, options: dict, *,
                 enabled: bool = True, checked: tuple[int, ...] = (0,), out: int = 1):
        self.jit_fn, self.grid, self.n_tensors = jit_fn, tuple(grid) + (1,) * (3 - len(grid)), n_tensors
        self.checked, self.out = tuple(sorted(set(checked) | {0})), int(out)
        self.tail, self.options = dict(tail), dict(options)
        self.kernel = jit_fn[grid]
        self.state, self.why = ("jit", "") if enabled else ("disarmed", "direct launch disabled")
        self.direct = None  # the armed launch: direct(x, *tensors) -> None
        self.launch = self._first

    def _jit(self, *tensors):
        return self.kernel(*tensors, **self.tail, **self.options)

    def _first(self, *tensors):
        """The JIT path; arms the direct path when the conditions hold (see the module's docstring)."""
        compiled = self._jit(*tensors)
        if self.state == "jit" and compiled is not None:
            self._try_arm(compiled, tensors)
        return compiled

    def _try_arm(self, compiled, tensors) -> None:
        x = tensors[0]
        if x.device.type not in ARM_DEVICES or _capturing():
            return  # not now: another eager call will try
        if any(tensors[i].data_ptr() % 16 for i in self.checked):
            return  # compiled for an unaligned pointer; an aligned call will arm
        try:
            direct = self._make_direct(compiled, x.device)
            if direct is None:
                return
            ok, why = self._check(direct, tensors)
        except Exception as exc:  # noqa: BLE001 - an unknown launcher ABI: stay on the JIT path
            ok, why = False, f"{type(exc).__name__}: {exc}"
        if ok:
            self.state, self.direct, self.launch = "direct", direct, direct
        else:
            self.state, self.why = "disarmed", why

    def _make_direct(self, compiled, device: torch.device):
        names = list(self.jit_fn.arg_names)
        missing = [n for n in names[self.n_tensors:] if n not in self.tail]
        if missing:
            raise ValueError(f"no value for kernel parameter(s) {missing}")
        tail = tuple(self.tail[n] for n in names[self.n_tensors:])
        enter, leave = _hooks()
        if not (_idle(enter) and _idle(leave)):
            return None  # a launch hook is installed: the JIT path calls it with its metadata
        index = device.index if device.index is not None else _current_device()
        stream_of, current_device = _raw_stream, _current_device
        run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
        g0, g1, g2 = self.grid
        jit, hooks = self._jit, _hooks

        if self.checked == (0,):
            def direct(x, *rest):
                if x.data_ptr() & 15 or current_device() != index or not _idle(hooks()[0]):
                    return jit(x, *rest)
                run(g0, g1, g2, stream_of(index), function, packed, None, enter, leave, x, *rest, *tail)

            return direct
        others = tuple(i - 1 for i in self.checked[1:])  # positions in ``rest``

        def direct_checked(x, *rest):
            bits = x.data_ptr()
            for i in others:
                bits |= rest[i].data_ptr()
            if bits & 15 or current_device() != index or not _idle(hooks()[0]):
                return jit(x, *rest)
            run(g0, g1, g2, stream_of(index), function, packed, None, enter, leave, x, *rest, *tail)

        return direct_checked

    def _check(self, direct, tensors) -> tuple[bool, str]:
        """Launch both ways into separate outputs (argument ``out``) and compare them."""
        k = self.out
        a, b = torch.empty_like(tensors[k]), torch.empty_like(tensors[k])
        self._jit(*tensors[:k], a, *tensors[k + 1:])
        direct(*tensors[:k], b, *tensors[k + 1:])
        if torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-3, equal_nan=True):
            return True, ""
        return False, "a direct launch did not reproduce the JIT path's output"
