"""The native call key: ``csrc/call_key.cpp``, built once per torch and Python, loaded by op functions.

A resolved call spends most of dispatch's time reading its tensors' attributes into the key (each
an attribute lookup that makes a new Python object: ~0.5 us for one tensor on a CPU). The native
``tensor_key`` reads them from torch's ``TensorImpl`` into one bytes object in ~40 ns, the same
object for the same facts while it stays in a small table (256 slots), so that the call's dict
lookup finds its hash computed and matches it by identity. It must be
compiled against the torch in use, so it is built the first time an op function is made (~20 s,
once per torch build, Python and source; a line on stderr says so) into the native directory
(``DISPATCH_NATIVE_DIR``, else ``native/`` in the user cache directory), under a file lock, so that
processes started together build it once.

``DISPATCH_NATIVE=off`` keeps the Python key; ``DISPATCH_NATIVE=load`` uses a built one but never
builds. Where it can't be built, a ``NativeWarning`` says why and calls use the Python key (same
keys, same results): a missing compiler or missing headers are looked for again by each process; a
compile that fails (as C++17, then C++20) leaves its log in ``build.failed`` and is not tried
again for that torch until the file is removed. Which key a process uses: :func:`status`, shown
by ``python -m dispatch backends``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ENV_NATIVE = "DISPATCH_NATIVE"
ENV_NATIVE_DIR = "DISPATCH_NATIVE_DIR"
MODES = ("auto", "load", "off")
_MODULE = "_dispatch_call_key"
_SOURCE = Path(__file__).parent / "csrc" / "call_key.cpp"
_BUILD_TIMEOUT_S = 600


class NativeWarning(UserWarning):
    """The native call key could not be built or loaded: calls use the Python key (slower, same results)."""


_lock = threading.Lock()
_loaded: tuple[Callable | None, str] | None = None


def tensor_key() -> Callable | None:
    """The native ``tensor_key`` function, built if needed; None when off or unavailable."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load()
    return _loaded[0]


@contextlib.contextmanager
def python_key():
    """Op functions made inside use the Python key (for side-by-side timing; not thread-safe)."""
    global tensor_key
    saved = tensor_key
    tensor_key = _none
    try:
        yield
    finally:
        tensor_key = saved


def _none() -> None:
    return None


def status() -> str:
    """Which call key this process uses, and why."""
    tensor_key()
    assert _loaded is not None
    return _loaded[1]


def mode(environ=os.environ) -> str:
    value = (environ.get(ENV_NATIVE) or "auto").strip().lower()
    if value in ("0", "false", "no"):
        value = "off"
    if value not in MODES:
        raise ValueError(f"{ENV_NATIVE}={value!r}: expected one of {', '.join(MODES)}")
    return value


def native_dir(environ=os.environ) -> Path:
    env = environ.get(ENV_NATIVE_DIR)
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("dispatch", appauthor=False)) / "native"


def build_tag() -> str:
    """What the built module depends on: the source, torch's build, Python's ABI."""
    import torch

    parts = [_SOURCE.read_text(), torch.__version__, str(getattr(torch.version, "git_version", "")),
             sys.version, str(sysconfig.get_config_var("EXT_SUFFIX")), str(torch._C._GLIBCXX_USE_CXX11_ABI)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _load() -> tuple[Callable | None, str]:
    try:
        how = mode()
    except ValueError as exc:
        warnings.warn(f"{exc}; using the Python call key", NativeWarning, stacklevel=4)
        return None, f"python ({exc})"
    if how == "off":
        return None, f"python ({ENV_NATIVE}=off)"
    try:
        directory = native_dir() / build_tag()
        path = directory / (_MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
        failed = directory / "build.failed"
        if not path.exists():
            if how == "load":
                return None, f"python (not built at {directory}; {ENV_NATIVE}=load never builds)"
            if failed.exists():
                why = f"an earlier build failed (log: {failed}; remove it to try again)"
                warnings.warn(f"dispatch's native call key: {why}; calls use the Python key", NativeWarning,
                              stacklevel=4)
                return None, f"python ({why})"
            _build(directory, path, failed)
        return _import(path).tensor_key, f"native ({path})"
    except Exception as exc:  # noqa: BLE001 - a build or load problem is reported, never fatal
        why = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"dispatch's native call key is unavailable ({why}); calls use the Python key",
                      NativeWarning, stacklevel=4)
        return None, f"python ({why})"


def _import(path: Path):
    loader = importlib.machinery.ExtensionFileLoader(_MODULE, str(path))
    spec = importlib.util.spec_from_file_location(_MODULE, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def compile_command(output: Path, std: str = "c++17") -> list[str]:
    """The compiler command that builds the module at ``output`` against this torch and Python."""
    import torch

    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        raise RuntimeError("no C++ compiler found (set CXX, or install g++ or clang++)")
    python_include = sysconfig.get_paths()["include"]
    if not (Path(python_include) / "Python.h").exists():
        raise RuntimeError(f"Python's headers are not installed (no Python.h in {python_include})")
    torch_dir = Path(torch.__file__).parent
    include = torch_dir / "include"
    if not (include / "torch" / "csrc" / "autograd" / "python_variable.h").exists():
        raise RuntimeError(f"torch's C++ headers are not installed (looked in {include})")
    lib = torch_dir / "lib"
    command = [compiler, "-O2", "-shared", "-fPIC", f"-std={std}", "-w",
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
               f"-I{python_include}", f"-I{include}", f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
               str(_SOURCE), "-o", str(output), f"-L{lib}", "-lc10", "-ltorch_python", f"-Wl,-rpath,{lib}"]
    if sys.platform == "darwin":
        command.insert(1, "-undefined")
        command.insert(2, "dynamic_lookup")
    return command


def _build(directory: Path, path: Path, failed: Path) -> None:
    """Build the module into ``path`` (atomically; under a file lock shared by every process)."""
    from filelock import FileLock

    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(directory / "build.lock"), timeout=_BUILD_TIMEOUT_S):
        if path.exists():  # another process built it while this one waited
            return
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            output = Path(tmp) / path.name
            compile_command(output)  # raises, unrecorded, what a later process may not meet
            sys.stderr.write(f"dispatch: building its native call key for torch {_torch_version()} "
                             f"(once; ~20 s) in {directory}\n")
            start, log = time.perf_counter(), []
            for std in ("c++17", "c++20"):  # torch's headers may come to need the later standard
                command = compile_command(output, std)
                done = subprocess.run(command, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
                if done.returncode == 0:
                    break
                log.append(" ".join(command) + "\n\n" + done.stdout + done.stderr)
            else:
                failed.write_text("\n\n".join(log))
                raise RuntimeError(f"the compiler exited with {done.returncode} (log: {failed})")
            os.replace(output, path)
            sys.stderr.write(f"dispatch: native call key built in {time.perf_counter() - start:.0f} s\n")


def _torch_version() -> str:
    import torch

    return torch.__version__
