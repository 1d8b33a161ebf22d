"""What the TileLang backend can compile where: its ops, targets and dtypes, as verdicts that never raise.

Targets: ``"cuda"`` (any NVIDIA GPU TileLang supports; the cluster-split family for rows > 32K
columns needs sm_90+) and ``"c"`` (TileLang's CPU dialect, compiled by the host C++ compiler;
bf16 travels as int16 bit patterns because the C codegen has no bf16 type, which
:class:`~dispatch_tilelang.build.CompiledKernel` hides). Accumulation is always float32.
"""

from __future__ import annotations

import functools
import os
import shutil
from typing import Any

OPS = ("softmax", "log_softmax", "logsumexp")
TARGETS = ("cuda", "c")
DTYPES = ("float32", "float16", "bfloat16")

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
