"""Building TileLang kernels: the JIT program of a family, compiled per config, cached in-process.

``build(op, n_rows, n_cols, in_dtype, out_dtype, config, target)`` returns a
:class:`CompiledKernel`; call it with a contiguous ``(M, N)`` tensor, get ``(M, N)`` (``(M,)`` for
logsumexp) in ``out_dtype``. On CUDA, ``row_stride=s`` builds the kernel of rows ``s`` elements
apart (an ``(M, N)`` view of strides ``(s, 1)``; 0, the default, is dense rows): a build key of
its own, so a dense call and a strided one never share a kernel. ``jit_program(...)`` is the
``@tilelang.jit`` program of one family, whose tunables are *required* parameters
(``configs.JIT_PARAMS``), so an autotuner must seed them (see ``native_tune``); ``adopt`` keeps
what such a tuner compiled.

Shapes: ``M`` (rows) is dynamic in every kernel, ``N`` is static. One compile serves every row
count for a given (op, N, dtypes, config, target); ``n_rows`` only prunes config spaces. Compiled
kernels are cached in-process per key and on disk by TileLang itself (``TILELANG_CACHE_DIR``,
default ``~/.tilelang/cache``, read when tilelang is first imported): a second process that
builds the same kernels compiles nothing, it only re-traces the Python program (tens of ms)
and loads the shared object.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from dispatch.backend import PARSE_LOCK

from .availability import DTYPES, _check_op, _check_target, dtype_name, supports
from .configs import BUILD_KEYS, fit_config, keep_refused, split_config, validate_config


def jit_program(op: str, n_cols: int, in_dtype: Any, out_dtype: Any, target: str,
                build_keys: Mapping[str, Any] | None = None, row_stride: int = 0):
    """The ``@tilelang.jit`` program of one kernel family; its parameters are ``JIT_PARAMS[target]``, all required.

    ``build_keys`` holds the family's build-time keys (``tile_n``, and ``cluster``, ``smem`` and ``keep`` on cuda); a
    full config is accepted too, its JIT keys are ignored here. ``row_stride`` (CUDA only): the
    elements between rows, 0 for dense rows. Calling the program with the JIT
    kwargs compiles (or loads from TileLang's disk cache) a ``JITKernel``; ``tilelang.autotune``
    can wrap it directly (see ``native_tune.tune_native``).
    """
    _check_op(op)
    _check_target(target)
    ins, outs = dtype_name(in_dtype), dtype_name(out_dtype)
    for name in (ins, outs):
        if name not in DTYPES:
            raise ValueError(f"TileLang kernels take {DTYPES} (got {name!r})")
    _, build = split_config({k: v for k, v in (build_keys or {}).items() if k in BUILD_KEYS[target]}, target)
    if n_cols < 1:
        raise ValueError(f"n_cols must be >= 1 to compile a kernel (got {n_cols})")
    _check_row_stride(n_cols, row_stride, target)
    if target == "cuda" and (why := keep_refused(op, build)) is not None:
        raise ValueError(why)
    if target == "cuda" and build["smem"]:
        from . import smem_rows

        if row_stride:
            raise ValueError(f"the chunk-in-shared-memory family (smem=1) reads dense rows only (got row_stride={row_stride})")
        if ins != outs:
            raise ValueError(f"the chunk-in-shared-memory family (smem=1) writes its input's dtype (got {ins} -> {outs}); "
                             "the register families (smem=0) serve a cast")
        return smem_rows.program(op, n_cols, ins, outs, build["tile_n"], build["cluster"], cuda_arch(),
                                 keep=bool(build["keep"]))
    if target == "cuda":
        from . import cuda_kernels

        return cuda_kernels.program(op, n_cols, ins, outs, build["tile_n"], build["cluster"], cuda_arch(), row_stride)
    from . import cpu_kernels

    return cpu_kernels.program(op, n_cols, ins, outs, build["tile_n"])


def _check_row_stride(n_cols: int, row_stride: int, target: str) -> None:
    """Raise where rows ``row_stride`` apart can't be built: the C kernels take dense rows only
    (strided ones go to the column kernels there), and rows may not overlap."""
    if not row_stride:
        return
    if target != "cuda":
        raise ValueError(f"target {target!r} takes dense rows only (got row_stride={row_stride})")
    if row_stride < n_cols:
        raise ValueError(f"row_stride={row_stride} must be 0 (dense rows) or at least n_cols={n_cols}")


def cuda_arch() -> str | None:
    """CUDA arch to compile for: ``$DISPATCH_TILELANG_CUDA_ARCH`` (e.g. "sm_90", for cross-compiling), else the device's."""
    return os.environ.get("DISPATCH_TILELANG_CUDA_ARCH") or None


def kernel_inputs(x, target: str) -> list:
    """The tensors a JIT program of ``target`` takes for input ``x`` (bf16 becomes its int16 view on "c")."""
    import torch

    if target == "c" and x.dtype == torch.bfloat16:
        return [x.view(torch.int16)]
    return [x]


class CompiledKernel:
    """A compiled kernel for one (op, N, dtypes, config, target, row stride). Call it with a contiguous
    ``(M, N)`` tensor, or with an ``(M, N)`` view of strides ``(row_stride, 1)`` where ``row_stride`` is set."""

    __slots__ = ("op", "n_cols", "in_dtype", "out_dtype", "config", "target", "kernel", "row_stride", "_torch_in",
                 "_torch_out", "_in_bits", "_out_bits")

    def __init__(self, op, n_cols, in_dtype, out_dtype, config, target, kernel, row_stride: int = 0):
        import torch

        self.op, self.n_cols, self.in_dtype, self.out_dtype = op, n_cols, in_dtype, out_dtype
        self.config, self.target, self.kernel, self.row_stride = dict(config), target, kernel, int(row_stride)
        self._torch_in, self._torch_out = getattr(torch, in_dtype), getattr(torch, out_dtype)
        self._in_bits = target == "c" and in_dtype == "bfloat16"
        self._out_bits = target == "c" and out_dtype == "bfloat16"

    def __repr__(self) -> str:
        stride = f", row_stride={self.row_stride}" if self.row_stride else ""
        return (f"CompiledKernel({self.op}, n_cols={self.n_cols}, {self.in_dtype}->{self.out_dtype}, {self.config}, "
                f"target={self.target!r}{stride})")

    def _layout_ok(self, x) -> bool:
        """``x`` is what the kernel reads: contiguous rows, or rows ``row_stride`` apart, unit stride along one."""
        if self.row_stride:
            return tuple(x.stride()) == (self.row_stride, 1)
        return x.is_contiguous()

    def __call__(self, x):
        if x.dim() != 2 or x.shape[1] != self.n_cols or x.dtype != self._torch_in or not self._layout_ok(x):
            layout = f"strides ({self.row_stride}, 1)" if self.row_stride else "contiguous"
            raise ValueError(
                f"{self!r} takes a {layout} (M, {self.n_cols}) {self.in_dtype} tensor "
                f"(got shape {tuple(x.shape)}, {x.dtype}, strides {tuple(x.stride())})"
            )
        if x.shape[0] == 0 or self.kernel is None:
            return self._trivial(x)
        if self._in_bits:
            import torch

            x = x.view(torch.int16)
        y = self.kernel(x)
        if self._out_bits:
            import torch

            y = y.view(torch.bfloat16)
        return y

    def _trivial(self, x):
        """Empty inputs and empty rows, with no launch: torch's answers (logsumexp of no elements is -inf)."""
        m = x.shape[0]
        if self.op == "logsumexp":
            return x.new_full((m,), float("-inf"), dtype=self._torch_out)
        return x.new_empty((m, self.n_cols), dtype=self._torch_out)


_BUILT: dict[tuple, CompiledKernel] = {}
_BUILD_LOCKS: dict[tuple, threading.Lock] = {}
_BUILD_LOCKS_GUARD = threading.Lock()
# One program made, traced and compiled at a time in a process: TileLang parses kernel sources
# with ``ast`` (making a program alone parses hundreds of times), and CPython 3.11's ast module
# keeps its recursion-depth counter in shared state, so two threads parsing at once can corrupt
# it ("SystemError: AST constructor recursion depth mismatch"), after which every later ast call
# in the process fails.
# It is dispatch's PARSE_LOCK, which ``ast.parse`` also takes while a tune compiles (another
# backend's compiles, Triton's, parse their kernels meanwhile).
_TRACE_LOCK = PARSE_LOCK


def build(op: str, n_rows: int, n_cols: int, in_dtype: Any, out_dtype: Any, config: Mapping[str, Any], target: str,
          row_stride: int = 0) -> CompiledKernel:
    """Compile (or fetch from the in-process / TileLang disk cache) the kernel for ``config``.

    ``n_rows`` is not part of the key: ``M`` is dynamic, so the result serves every row count.
    ``n_cols == 0`` needs no kernel (softmax of empty rows is empty, their logsumexp is -inf).
    ``row_stride`` (CUDA): the kernel of rows that many elements apart; 0, dense rows.

    Raises:
        ValueError: ``op``/``target``/dtype unknown, or ``config`` invalid for this call (the
            message says why); errors from TileLang's compiler propagate unchanged.
    """
    _check_op(op)
    _check_target(target)
    ins, outs = dtype_name(in_dtype), dtype_name(out_dtype)
    for name in (ins, outs):
        ok, reason = supports(op, name, target)
        if not ok:
            raise ValueError(reason)
    config = fit_config(n_cols, ins, config)  # a shared-memory chunk sized to this row
    key = _build_key(op, n_cols, ins, outs, config, target, row_stride)
    hit = _BUILT.get(key)
    if hit is not None:
        return hit
    with _BUILD_LOCKS_GUARD:
        lock = _BUILD_LOCKS.setdefault(key, threading.Lock())
    with lock:
        hit = _BUILT.get(key)
        if hit is not None:
            return hit
        if n_cols == 0:
            compiled = CompiledKernel(op, 0, ins, outs, config, target, None)
        else:
            reason = validate_config(op, n_cols, ins, config, target, row_stride)
            if reason is not None:
                raise ValueError(f"cannot build {op} for N={n_cols} {ins} on {target!r} with {dict(config)!r}: {reason}")
            jit_kwargs, build_keys = split_config(config, target)
            with _TRACE_LOCK:  # making the program (a @tilelang.jit decoration) reads sources too
                jit_kernel = jit_program(op, n_cols, ins, outs, target, build_keys, row_stride)(**jit_kwargs)
            compiled = CompiledKernel(op, n_cols, ins, outs, config, target, jit_kernel, row_stride)
        _BUILT[key] = compiled
        return compiled


def build_all(op: str, n_rows: int, n_cols: int, in_dtype: Any, out_dtype: Any, configs: list[Mapping[str, Any]],
              target: str, workers: int | None = None, device: Any = None,
              row_stride: int = 0) -> list[tuple[dict, str]]:
    """Build every config at once: what :func:`build` does for each, with the compiles on a thread
    pool (a program is made and traced one at a time, under the trace lock; TileLang's lowering
    releases the GIL and ``nvcc`` is a subprocess, so the compiles overlap). The kernels land
    where :func:`build` finds them. ``device`` (a CUDA device) is made current on each compile
    thread, where the kernel is loaded. Returns ``(config, reason)`` for each config that failed."""
    from dispatch.backend import Config, compile_all

    ins, outs = dtype_name(in_dtype), dtype_name(out_dtype)

    def one(config: Config) -> None:
        if device is not None and target == "cuda":
            import torch

            with torch.cuda.device(device):
                return build_one(config)
        return build_one(config)

    def build_one(config: Config) -> None:
        cfg = config.as_dict()
        if n_cols == 0 or _BUILT.get(_build_key(op, n_cols, ins, outs, cfg, target, row_stride)) is not None:
            return
        reason = validate_config(op, n_cols, ins, cfg, target, row_stride)
        if reason is not None:
            raise ValueError(reason)
        jit_kwargs, build_keys = split_config(cfg, target)
        kernel = compile_program(lambda: jit_program(op, n_cols, ins, outs, target, build_keys, row_stride), jit_kwargs)
        adopt(op, n_cols, ins, outs, cfg, target, kernel, row_stride)

    report = compile_all([Config.of(c) for c in configs], one, workers)
    return [(f.config.as_dict(), f.reason) for f in report.failures]


def compile_program(make_program, jit_kwargs: Mapping[str, Any]) -> Any:
    """The kernel of ``make_program()`` (a ``@tilelang.jit`` program) at ``jit_kwargs``: the program
    made and traced under the trace lock, compiled outside it (TileLang's lowering releases the GIL
    and ``nvcc`` is a subprocess, so compiles on threads overlap)."""
    with _TRACE_LOCK:
        program = make_program()
        get_tir = getattr(program, "get_tir", None)
        prim = get_tir(**jit_kwargs) if callable(get_tir) else None
        if prim is None:  # a TileLang without get_tir: made, traced and compiled in one call
            return program(**jit_kwargs)
    import tilelang

    return tilelang.compile(prim, out_idx=getattr(program, "out_idx", None),
                            execution_backend=getattr(program, "execution_backend", None),
                            target=getattr(program, "target", None),
                            target_host=getattr(program, "target_host", None),
                            verbose=getattr(program, "verbose", None),
                            pass_configs=getattr(program, "pass_configs", None),
                            **({"compile_flags": program.compile_flags}
                               if getattr(program, "compile_flags", None) else {}))


def compile_once(cache: dict, lock, key: tuple, make_program, jit_kwargs: Mapping[str, Any]) -> Any:
    """``cache[key]``, compiled by :func:`compile_program` at the first ask (outside ``lock``, so
    threads build different kernels at once; two threads racing for one key keep the first stored)."""
    kernel = cache.get(key)
    if kernel is None:
        kernel = compile_program(make_program, jit_kwargs)
        with lock:
            kernel = cache.setdefault(key, kernel)
    return kernel


def _build_key(op: str, n_cols: int, ins: str, outs: str, config: Mapping[str, Any], target: str,
               row_stride: int = 0) -> tuple:
    return (op, n_cols, ins, outs, target, int(row_stride), tuple(sorted(dict(config).items())))


def adopt(op: str, n_cols: int, in_dtype: Any, out_dtype: Any, config: Mapping[str, Any], target: str,
          jit_kernel: Any, row_stride: int = 0) -> CompiledKernel:
    """Keep ``jit_kernel`` -- compiled for ``config`` (rows ``row_stride`` apart, 0 dense) by
    TileLang's autotuner or :func:`build_all` -- as the build of ``config``, so that :func:`build`
    does not compile it again (a grouped compile of the tuner leaves nothing in TileLang's
    per-kernel disk cache)."""
    ins, outs = dtype_name(in_dtype), dtype_name(out_dtype)
    compiled = CompiledKernel(op, n_cols, ins, outs, dict(config), target, jit_kernel, row_stride)
    return _BUILT.setdefault(_build_key(op, n_cols, ins, outs, config, target, row_stride), compiled)
