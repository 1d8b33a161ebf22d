"""dispatch: GPU tensor ops that run the fastest correct backend for each call, chosen in the open."""

from __future__ import annotations

from . import _opdecl
from . import ops as _builtin  # noqa: F401  (declares softmax, log_softmax, logsumexp)
from . import norms as _norms  # noqa: F401  (declares rms_norm, layer_norm)
from ._dispatcher import DISPATCHER as _DISPATCHER
from ._opdecl import OpDecl, TensorArg
from ._plugins import LoadFailure, backends, faults, load_failures, refresh, register, unregister
from ._settings import Settings, configure, reset, settings, use
from ._spec import BackendInfo, CallSpec, TensorSpec, Verdict
from .errors import (BackendFaultError, BackendRefusedError, DispatchError, FaultWarning, NoBackendError,
                     PluginError, PluginLoadWarning, TuneError, UnknownBackendError)
from .distributed import AgreementWarning
from .explain import Explanation, explain
from .hookspec import hookimpl

from . import ab  # noqa: E402  (dispatch.ab.compare; its heavy imports load on use)

__version__ = "0.1.0"

softmax = _DISPATCHER.function("softmax").function
log_softmax = _DISPATCHER.function("log_softmax").function
logsumexp = _DISPATCHER.function("logsumexp").function
rms_norm = _DISPATCHER.function("rms_norm").function
layer_norm = _DISPATCHER.function("layer_norm").function


from . import _compile  # noqa: E402

_compile.install()  # torch.compile sees each op as one custom-op node (registered when Dynamo loads)


def op(name: str):
    """The function of declared op ``name`` (``dispatch.op("softmax") is dispatch.softmax``).

    Ops that plugins declare are also attributes: ``dispatch.<name>``.
    """
    return _DISPATCHER.function(name).function


def declared_ops():
    """A read-only view of every declared op (built-in and from plugins), name -> OpDecl."""
    from . import _plugins

    _plugins.registry()
    return _opdecl.declared()


def __getattr__(name: str):
    if not name.startswith("_"):
        if name not in _opdecl.declared():
            from . import _plugins

            _plugins.registry()  # plugins may declare it
        if name in _opdecl.declared():
            return op(name)
    raise AttributeError(f"module 'dispatch' has no attribute {name!r}")


__all__ = [
    "AgreementWarning", "BackendFaultError", "BackendInfo", "BackendRefusedError", "CallSpec", "DispatchError", "Explanation",
    "FaultWarning", "LoadFailure", "NoBackendError", "OpDecl", "PluginError", "PluginLoadWarning", "Settings",
    "TensorArg", "TensorSpec",
    "TuneError", "UnknownBackendError", "Verdict", "backends", "configure", "declared_ops", "explain", "faults",
    "hookimpl", "layer_norm", "load_failures", "log_softmax", "logsumexp", "op", "refresh", "register", "reset", "rms_norm", "settings",
    "softmax", "unregister", "use",
]
