"""The TileLang backend's kernels: what it can compile where, config spaces, and compiled callables.

Public surface (module level):

* ``OPS``: ``("softmax", "log_softmax", "logsumexp")``, all over the last dim of a 2-D input.
* ``available(target)`` / ``supports(op, dtype, target)``: verdicts with reasons, never raising.
* ``config_space(...)`` / ``default_config(...)``: plain dicts, deterministic order, default first.
* ``build(op, n_rows, n_cols, in_dtype, out_dtype, config, target)``: a ``CompiledKernel``; call it
  with a contiguous ``(M, N)`` tensor, get ``(M, N)`` (``(M,)`` for logsumexp) in ``out_dtype``.
* The autotune hooks of the protocol: ``JIT_PARAMS`` (tunable JIT parameters per target),
  ``BUILD_KEYS`` (config keys that pick a kernel family and never reach TileLang), ``TUNABLES``,
  ``ALIASES`` and ``jit_program(...)``, the ``@tilelang.jit`` program of one family, whose
  tunables are *required* parameters (so an autotuner must seed them, see ``native_tune``).

Shapes: ``M`` (rows) is dynamic in every kernel, ``N`` is static. One compile serves every row
count for a given (op, N, dtypes, config, target); ``n_rows`` only prunes config spaces. Compiled
kernels are cached in-process per key and on disk by TileLang itself (``TILELANG_CACHE_DIR``,
default ``~/.tilelang/cache``, read when tilelang is first imported): a second process that
builds the same kernels compiles nothing, it only re-traces the Python program (tens of ms)
and loads the shared object.

Accumulation is always float32. Targets: ``"cuda"`` (any NVIDIA GPU TileLang supports; the
cluster-split family for rows > 32K columns needs sm_90+) and ``"c"`` (TileLang's CPU dialect,
compiled by the host C++ compiler; bf16 travels as int16 bit patterns because the C codegen has
no bf16 type, which ``CompiledKernel`` hides).
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Mapping
from typing import Any

from . import configs as _configs

OPS = ("softmax", "log_softmax", "logsumexp")
TARGETS = ("cuda", "c")
DTYPES = ("float32", "float16", "bfloat16")

#: Tunable JIT parameters of every program ``jit_program`` returns, per target (required, no defaults).
JIT_PARAMS: dict[str, tuple[str, ...]] = {"cuda": ("block_m", "threads"), "c": ("block_m",)}
#: Config keys that choose the kernel family at build time; stripped before TileLang sees a config.
BUILD_KEYS: dict[str, tuple[str, ...]] = {"cuda": ("tile_n", "cluster"), "c": ("tile_n",)}
#: Config keys an autotuner varies within one family.
TUNABLES: dict[str, tuple[str, ...]] = JIT_PARAMS
#: JIT parameter name -> config key, where they differ (here they never do).
ALIASES: dict[str, str] = {}

_DTYPE_ALIASES = {
    "float32": "float32", "fp32": "float32", "float": "float32",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
}


def dtype_name(dtype: Any) -> str:
    """Canonical dtype string ("float32", "float16", "bfloat16", or e.g. "float64") of a torch dtype or name."""
    name = str(dtype).removeprefix("torch.")
    return _DTYPE_ALIASES.get(name, name)


def _check_target(target: str) -> None:
    if target not in TARGETS:
        raise ValueError(f"'target' must be one of {TARGETS} (got {target!r})")


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"'op' must be one of {OPS} (got {op!r})")


# ----------------------------------------------------------------------------- verdicts


@functools.lru_cache(maxsize=None)
def available(target: str) -> tuple[bool, str]:
    """Can this process compile and run TileLang kernels for ``target`` ("cuda" or "c")? Never raises.

    Cached; call ``available.cache_clear()`` after changing the environment.
    """
    if target not in TARGETS:
        return False, f"unknown target {target!r}; the TileLang backend compiles for {TARGETS}"
    try:
        import tilelang  # noqa: F401

        if target == "c":
            import tilelang.cpu.language  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure is a verdict, not a crash
        return False, f"tilelang is not importable: {type(exc).__name__}: {exc}"
    if target == "c":
        try:
            from tilelang.contrib.cc import get_cplus_compiler

            compiler = get_cplus_compiler()
        except Exception:  # noqa: BLE001
            compiler = None
        compiler = compiler or shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
        if not compiler:
            return False, "no C++ compiler found (set CXX, or install g++/clang++) for TileLang's C target"
        return True, f"tilelang {tilelang.__version__}, C target via {compiler}"
    try:
        import torch

        if not torch.cuda.is_available():
            return False, "no CUDA device visible to torch"
    except Exception as exc:  # noqa: BLE001
        return False, f"torch cannot query CUDA: {exc}"
    try:
        from tilelang import env as tl_env

        cuda_home = tl_env.CUDA_HOME
    except Exception:  # noqa: BLE001
        cuda_home = None
    nvcc = (cuda_home and os.path.exists(os.path.join(cuda_home, "bin", "nvcc"))) or shutil.which("nvcc")
    if not nvcc:
        return False, "nvcc not found (set CUDA_HOME); TileLang compiles CUDA kernels with it"
    return True, f"tilelang {tilelang.__version__} on {torch.cuda.get_device_name()}"


def supports(op: str, dtype: Any, target: str) -> tuple[bool, str]:
    """Can a kernel for ``op`` on ``dtype`` inputs be built for ``target``? A verdict with a reason; never raises.

    float32, float16 and bfloat16 are supported on both targets (bf16 on "c" as int16 bit
    patterns, converted inside the kernel with round-to-nearest-even). float64 and integer
    inputs are refused: these kernels accumulate in float32.
    """
    if op not in OPS:
        return False, f"the TileLang backend has no {op!r} kernel (it has {', '.join(OPS)})"
    if target not in TARGETS:
        return False, f"unknown target {target!r}; the TileLang backend compiles for {TARGETS}"
    name = dtype_name(dtype)
    if name not in DTYPES:
        return False, f"TileLang {op} kernels take float32/float16/bfloat16 and accumulate in float32; {name} is not served"
    return True, ""


# --------------------------------------------------------------------------- configs


def config_space(op: str, n_rows: int, n_cols: int, dtype: Any, target: str) -> list[dict]:
    """Candidate configs for ``op`` on ``(n_rows, n_cols)`` inputs of ``dtype``: the default first, deterministic order."""
    return _from_configs("config_space", op, n_rows, n_cols, dtype, target)


def default_config(op: str, n_rows: int, n_cols: int, dtype: Any, target: str) -> dict:
    """The config to use untuned (the first entry of ``config_space``)."""
    return _from_configs("default_config", op, n_rows, n_cols, dtype, target)


def _from_configs(what: str, op: str, n_rows: int, n_cols: int, dtype: Any, target: str):
    """``configs.<cuda|cpu>_<what>(op, n_rows, n_cols, dtype name)`` after checking the arguments."""
    _check_op(op)
    _check_target(target)
    prefix = "cuda" if target == "cuda" else "cpu"
    return getattr(_configs, f"{prefix}_{what}")(op, n_rows, max(1, n_cols), dtype_name(dtype))


def split_config(config: Mapping[str, Any], target: str) -> tuple[dict, dict]:
    """``(jit_kwargs, build_keys)``: what the JIT program takes, and what picks the program (defaults filled in)."""
    _check_target(target)
    config = dict(config)
    build = {"tile_n": int(config.pop("tile_n", 0))}
    if target == "cuda":
        build["cluster"] = int(config.pop("cluster", 1))
    unknown = set(config) - set(JIT_PARAMS[target])
    if unknown:
        raise ValueError(f"unknown config key(s) {sorted(unknown)} for target {target!r}; expected {JIT_PARAMS[target] + BUILD_KEYS[target]}")
    return config, build


def families(configs: list[Mapping[str, Any]], target: str) -> dict[tuple, list[dict]]:
    """Group configs by their build-time keys: each group is one JIT program, tuned on its own."""
    groups: dict[tuple, list[dict]] = {}
    for cfg in configs:
        _, build_keys = split_config(cfg, target)
        groups.setdefault(tuple(sorted(build_keys.items())), []).append(dict(cfg))
    return groups


# ------------------------------------------------------------------------ programs


def jit_program(op: str, n_cols: int, in_dtype: Any, out_dtype: Any, target: str, build_keys: Mapping[str, Any] | None = None):
    """The ``@tilelang.jit`` program of one kernel family; its parameters are ``JIT_PARAMS[target]``, all required.

    ``build_keys`` holds the family's build-time keys (``tile_n``, and ``cluster`` on cuda); a
    full config is accepted too, its JIT keys are ignored here. Calling the program with the JIT
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
    if target == "cuda":
        from . import cuda_kernels

        return cuda_kernels.program(op, n_cols, ins, outs, build["tile_n"], build["cluster"], cuda_arch())
    from . import cpu_kernels

    return cpu_kernels.program(op, n_cols, ins, outs, build["tile_n"])


def cuda_arch() -> str | None:
    """CUDA arch to compile for: ``$DISPATCH_TILELANG_CUDA_ARCH`` (e.g. "sm_90", for cross-compiling), else the device's."""
    return os.environ.get("DISPATCH_TILELANG_CUDA_ARCH") or None


def kernel_inputs(x, target: str) -> list:
    """The tensors a JIT program of ``target`` takes for input ``x`` (bf16 becomes its int16 view on "c")."""
    import torch

    if target == "c" and x.dtype == torch.bfloat16:
        return [x.view(torch.int16)]
    return [x]


def validate_config(op: str, n_cols: int, in_dtype: Any, config: Mapping[str, Any], target: str) -> str | None:
    """Why ``config`` cannot build for this call, or None."""
    try:
        jit_kwargs, build = split_config(config, target)
    except ValueError as exc:
        return str(exc)
    missing = [k for k in JIT_PARAMS[target] if k not in jit_kwargs]
    if missing:
        return f"config {dict(config)!r} lacks {missing}"
    if target == "c":
        return _configs.check_cpu_config(n_cols, {**jit_kwargs, **build})
    from . import cuda_kernels

    if build["cluster"] > 1 and not _configs.cuda_supports_clusters():
        return "thread-block clusters (cluster > 1) need an sm_90+ GPU"
    return cuda_kernels.check_launch(n_cols, dtype_name(in_dtype), build["tile_n"], build["cluster"], jit_kwargs["block_m"], jit_kwargs["threads"])


# --------------------------------------------------------------------------- build


class CompiledKernel:
    """A compiled kernel for one (op, N, dtypes, config, target). Call it with a contiguous ``(M, N)`` tensor."""

    __slots__ = ("op", "n_cols", "in_dtype", "out_dtype", "config", "target", "kernel", "_torch_in", "_torch_out", "_in_bits", "_out_bits")

    def __init__(self, op, n_cols, in_dtype, out_dtype, config, target, kernel):
        import torch

        self.op, self.n_cols, self.in_dtype, self.out_dtype = op, n_cols, in_dtype, out_dtype
        self.config, self.target, self.kernel = dict(config), target, kernel
        self._torch_in, self._torch_out = getattr(torch, in_dtype), getattr(torch, out_dtype)
        self._in_bits = target == "c" and in_dtype == "bfloat16"
        self._out_bits = target == "c" and out_dtype == "bfloat16"

    def __repr__(self) -> str:
        return f"CompiledKernel({self.op}, n_cols={self.n_cols}, {self.in_dtype}->{self.out_dtype}, {self.config}, target={self.target!r})"

    def source(self) -> str:
        """The generated kernel source (CUDA C++ or C)."""
        return "" if self.kernel is None else self.kernel.get_kernel_source()

    def __call__(self, x):
        if x.dim() != 2 or x.shape[1] != self.n_cols or x.dtype != self._torch_in or not x.is_contiguous():
            raise ValueError(
                f"{self!r} takes a contiguous (M, {self.n_cols}) {self.in_dtype} tensor "
                f"(got shape {tuple(x.shape)}, {x.dtype}, contiguous={x.is_contiguous()})"
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
_TRACE_LOCK = threading.Lock()


def build(op: str, n_rows: int, n_cols: int, in_dtype: Any, out_dtype: Any, config: Mapping[str, Any], target: str) -> CompiledKernel:
    """Compile (or fetch from the in-process / TileLang disk cache) the kernel for ``config``.

    ``n_rows`` is not part of the key: ``M`` is dynamic, so the result serves every row count.
    ``n_cols == 0`` needs no kernel (softmax of empty rows is empty, their logsumexp is -inf).

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
    key = _build_key(op, n_cols, ins, outs, config, target)
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
            reason = validate_config(op, n_cols, ins, config, target)
            if reason is not None:
                raise ValueError(f"cannot build {op} for N={n_cols} {ins} on {target!r} with {dict(config)!r}: {reason}")
            jit_kwargs, build_keys = split_config(config, target)
            with _TRACE_LOCK:  # making the program (a @tilelang.jit decoration) reads sources too
                jit_kernel = jit_program(op, n_cols, ins, outs, target, build_keys)(**jit_kwargs)
            compiled = CompiledKernel(op, n_cols, ins, outs, config, target, jit_kernel)
        _BUILT[key] = compiled
        return compiled


def _build_key(op: str, n_cols: int, ins: str, outs: str, config: Mapping[str, Any], target: str) -> tuple:
    return (op, n_cols, ins, outs, target, tuple(sorted(dict(config).items())))


def adopt(op: str, n_cols: int, in_dtype: Any, out_dtype: Any, config: Mapping[str, Any], target: str,
          jit_kernel: Any) -> CompiledKernel:
    """Keep ``jit_kernel`` -- compiled for ``config`` by TileLang's autotuner -- as the build of
    ``config``, so that :func:`build` does not compile it again (a grouped compile of the tuner
    leaves nothing in TileLang's per-kernel disk cache)."""
    ins, outs = dtype_name(in_dtype), dtype_name(out_dtype)
    compiled = CompiledKernel(op, n_cols, ins, outs, dict(config), target, jit_kernel)
    return _BUILT.setdefault(_build_key(op, n_cols, ins, outs, config, target), compiled)


def cache_dir() -> str:
    """TileLang's on-disk kernel cache (``$TILELANG_CACHE_DIR``, fixed when tilelang is first imported)."""
    from tilelang import env as tl_env

    return str(tl_env.TILELANG_CACHE_DIR)
