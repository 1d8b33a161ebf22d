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
* the device: the current CUDA device must be the one the kernel was loaded on, else the JIT path
  (checked per call where the process sees more than one device);
* the stream: read per call (torch's current stream), so launches follow streams and CUDA-graph
  capture like the JIT path's;
* launch hooks (profilers): the direct path is armed only when Triton has none installed, and a
  hook installed later sends calls back to the JIT path. The launcher is then handed no hooks at
  all (an empty hook chain would still be called twice per launch).

Pointers are handed to the launcher as integers (``data_ptr()``): Triton's launcher takes an int
as the device address it is, where for a tensor it calls ``data_ptr`` and asks the driver to
translate the address (``cuPointerGetAttribute``), about half a microsecond per tensor argument.
The tensors come from torch's CUDA allocator on the kernel's device (the call key fixes the
device), where that translation is the identity. Tensors fixed for the object's life (``fixed``:
stand-ins for absent arguments, buffers) have their addresses read once and are kept alive here.

The direct path is armed after the first eager call that meets these conditions, by a check
launch whose output must match the JIT path's (so a launcher ABI this code does not know is
found out once, and the object stays on the JIT path). It is never armed while a CUDA graph is
being captured (the check synchronizes) nor under the Triton interpreter (no compiled kernel).
"""

from __future__ import annotations

import inspect

import torch

try:  # Triton >= 3.4 keeps its launch hooks in knobs
    from triton import knobs as _knobs

    _RUNTIME = _knobs.runtime
except Exception:  # pragma: no cover - older Triton: hooks on CompiledKernel
    _RUNTIME = None


# What the direct path reads of the device per call, and the devices it arms on (module-level, so
# that the CPU tests can stand in for a GPU)
ARM_DEVICES = ("cuda",)


_empty_like = torch.empty_like  # the check's outputs (module-level, for the CPU tests' stand-in launcher)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # device index -> current stream handle
_current_device = getattr(torch._C, "_cuda_getDevice", None)  # () -> current device index
_device_count = torch.cuda.device_count


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _idle(hook) -> bool:
    """Whether a Triton launch hook does nothing: None, or a hook chain with no hooks in it."""
    return hook is None or (hasattr(hook, "calls") and not hook.calls)


def _hook_holder():
    """Where Triton keeps its launch hooks (``launch_enter_hook``, ``launch_exit_hook``)."""
    if _RUNTIME is not None:
        return _RUNTIME
    from triton.compiler.compiler import CompiledKernel

    return CompiledKernel


def _hooks() -> tuple:
    """Triton's (launch_enter_hook, launch_exit_hook) as the JIT path would pass them."""
    holder = _hook_holder()
    return holder.launch_enter_hook, holder.launch_exit_hook


_LAUNCHER_CALL = ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]


def launcher_entry(run, function, packed) -> tuple:
    """``(callee, head)``: the launch is ``callee(gx, gy, gz, stream, *head, *kernel_args)``.

    Through the compiled kernel's launcher object ``run`` (``head`` = function, metadata, no launch
    metadata, no hooks); or, where it is the CUDA launcher whose ``__call__`` only allocates
    scratch buffers this kernel does not have (Triton 3.6's: ``(gridX, gridY, gridZ, stream,
    function, *args)``, no global or profile scratch), its C entry point directly, one Python
    frame less per launch.
    """
    generic = run, (function, packed, None, None, None)
    launch = getattr(run, "launch", None)
    try:
        params = list(inspect.signature(type(run).__call__).parameters)
    except (TypeError, ValueError):
        return generic
    if (params == _LAUNCHER_CALL and callable(launch) and getattr(run, "global_scratch_size", 1) == 0
            and getattr(run, "profile_scratch_size", 1) == 0 and hasattr(run, "launch_cooperative_grid")
            and hasattr(run, "launch_pdl")):
        return launch, (function, run.launch_cooperative_grid, run.launch_pdl, None, None, packed, None, None, None)
    return generic


class DirectLaunch:
    """``launch(*tensors)``: the kernel ``jit_fn`` on ``grid`` with ``tensors``, ``fixed``, then ``tail``.

    ``tensors`` are the kernel's leading pointer arguments that change per call (the first is the
    user's input; the one at position ``out`` (1 by default) what the kernel writes, compared once
    when arming; those at the positions in ``checked`` are checked for alignment per call, the
    others must come from torch's allocator);
    ``fixed`` the pointer arguments after them that stay the same for the object's life;
    ``n_tensors`` counts both. ``tail`` the remaining arguments (ints, constexprs) by name,
    ``options`` the launch options (num_warps, ...).
    ``state`` says where the object is: ``"jit"`` (not armed yet), ``"direct"`` or ``"disarmed"``
    (with ``why``: the direct path will not be tried again).
    """

    def __init__(self, jit_fn, grid: tuple[int, ...], n_tensors: int, tail: dict, options: dict, *,
                 enabled: bool = True, fixed: tuple = (), checked: tuple[int, ...] = (0,), out: int = 1):
        self.jit_fn, self.grid, self.n_tensors = jit_fn, tuple(grid) + (1,) * (3 - len(grid)), n_tensors
        self.checked, self.out = tuple(sorted(set(checked) | {0})), int(out)
        self.tail, self.options, self.fixed = dict(tail), dict(options), tuple(fixed)
        self.kernel = jit_fn[grid]
        self.state, self.why = ("jit", "") if enabled else ("disarmed", "direct launch disabled")
        self.direct = None  # the armed launch: direct(x, *tensors) -> None
        self.launch = self._first

    def _jit(self, *tensors):
        return self.kernel(*tensors, *self.fixed, **self.tail, **self.options)

    def compile(self, *tensors):
        """Compile (and load) the kernel that a launch with tensors like ``tensors`` (same dtypes
        and alignment: stand-ins will do) would run, without launching it: the JIT's warm-up path,
        so the first launch finds it in the JIT's cache. Safe to call from another thread. Returns
        the compiled kernel (None under the interpreter, which compiles nothing)."""
        compiled = self.jit_fn.warmup(*tensors, grid=self.grid, **self.tail, **self.options)
        init = getattr(compiled, "_init_handles", None)
        if callable(init):
            init()  # the module loaded and the launcher built here, not in the first timed call
        return compiled

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
        ok, why = False, ""
        for entry in (True, False):  # the launcher's C entry point, else the launcher object
            try:
                direct = self._make_direct(compiled, x.device, len(tensors), entry=entry)
                if direct is None:
                    return
                ok, why = self._check(direct, tensors)
            except Exception as exc:  # noqa: BLE001 - an unknown launcher ABI: stay on the JIT path
                ok, why = False, f"{type(exc).__name__}: {exc}"
            if ok:
                break
        if ok:
            self.state, self.direct, self.launch = "direct", direct, direct
        else:
            self.state, self.why = "disarmed", why

    def _make_direct(self, compiled, device: torch.device, n_call: int | None = None, *, entry: bool = True):
        names = list(self.jit_fn.arg_names)
        missing = [n for n in names[self.n_tensors:] if n not in self.tail]
        if missing:
            raise ValueError(f"no value for kernel parameter(s) {missing}")
        holder = _hook_holder()
        enter, leave = holder.launch_enter_hook, holder.launch_exit_hook
        if not (_idle(enter) and _idle(leave)):
            return None  # a launch hook is installed: the JIT path calls it with its metadata
        index = device.index if device.index is not None else _current_device()
        stream_of, current_device = _raw_stream, _current_device
        function, packed = compiled.function, compiled.packed_metadata
        run, head = (launcher_entry if entry else lambda r, f, p: (r, (f, p, None, None, None)))(
            compiled.run, function, packed)
        tail = (*(t.data_ptr() for t in self.fixed), *(self.tail[n] for n in names[self.n_tensors:]))
        g0, g1, g2 = self.grid
        jit = self._jit
        # a hook chain that gains a hook, or a hook set in its place, sends calls to the JIT path
        e_calls, l_calls = getattr(enter, "calls", None), getattr(leave, "calls", None)

        others = tuple(i - 1 for i in self.checked[1:])  # user tensors in ``rest`` checked per call
        several = _device_count() != 1  # with one device, the current one is always the kernel's
        if n_call == 2 and not others:  # (input, output): the common case, without a loop
            def direct(x, out):
                p = x.data_ptr()
                if (p & 15 or (several and current_device() != index) or e_calls or l_calls
                        or holder.launch_enter_hook is not enter or holder.launch_exit_hook is not leave):
                    return jit(x, out)
                run(g0, g1, g2, stream_of(index), *head, p, out.data_ptr(), *tail)
        else:
            def direct(x, *rest):
                p = x.data_ptr()
                ptrs = [t.data_ptr() for t in rest]
                bits = p
                for i in others:
                    bits |= ptrs[i]
                if (bits & 15 or (several and current_device() != index) or e_calls or l_calls
                        or holder.launch_enter_hook is not enter or holder.launch_exit_hook is not leave):
                    return jit(x, *rest)
                run(g0, g1, g2, stream_of(index), *head, p, *ptrs, *tail)

        return direct

    def _check(self, direct, tensors) -> tuple[bool, str]:
        """Launch both ways into separate outputs (argument ``out``) and compare them."""
        k = self.out
        a, b = _empty_like(tensors[k]), _empty_like(tensors[k])
        self._jit(*tensors[:k], a, *tensors[k + 1:])
        direct(*tensors[:k], b, *tensors[k + 1:])
        if torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-3, equal_nan=True):
            return True, ""
        return False, "a direct launch did not reproduce the JIT path's output"
