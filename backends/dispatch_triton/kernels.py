"""The Triton kernels' public face: softmax, log_softmax and logsumexp over the rows of a 2-D tensor.

Re-exports what callers use; the code lives one idea per module:

* :mod:`dispatch_triton.jit`: the ``@triton.jit`` kernel and its device helpers (the design notes).
* :mod:`dispatch_triton.configs`: ``OPS``, ``config_space``, ``default_config`` and the config helpers.
* :mod:`dispatch_triton.launch`: ``Launcher`` (everything a launch needs, computed once per spec and
  config), ``run`` / ``prepare``, argument checks, sync/slot buffers, grid sizing.
* :mod:`dispatch_triton.autotune`: ``autotuned``, ``launch_autotuned``, ``run_autotuned``,
  ``config_from_triton`` (Triton's native autotuner).

``TRITON_INTERPRET`` is read when :mod:`dispatch_triton.jit` is first imported (the JIT functions
are built then). ``importlib.reload`` of this module reloads the parts too, in dependency order,
so a kernel imported before ``TRITON_INTERPRET`` was set can be rebuilt.
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys

_PARTS = ("jit", "configs", "launch", "autotune")  # dependency order

if "_softmax_kernel" in globals():  # importlib.reload(kernels): rebuild the parts as well
    for _part in _PARTS:
        _module = _sys.modules.get(f"{__package__}.{_part}")
        if _module is not None:
            _importlib.reload(_module)

from .autotune import autotuned, config_from_triton, launch_autotuned, run_autotuned  # noqa: E402
from .configs import (  # noqa: E402,F401
    _OP_CODE, _PATH_CODE, MAX_SPLIT, OPS, _cdiv, _cfg, _cfg_key, _n_split, _np2, config_space, default_config)
from .jit import _softmax_kernel  # noqa: E402,F401
from .launch import (  # noqa: E402,F401
    _OCC, _SYNC, Launcher, _slot_buffer, _sync_buffer, _validate, placeholder, prepare, run)

__all__ = ["OPS", "MAX_SPLIT", "config_space", "default_config", "Launcher", "run", "prepare", "autotuned",
           "launch_autotuned", "run_autotuned", "config_from_triton"]
