"""dispatch: GPU tensor ops that run the fastest correct backend for each call, chosen in the open."""

from ._plugins import LoadFailure, backends, faults, load_failures, refresh, register, unregister
from ._settings import Settings, configure, reset, settings, use
from ._spec import OPS, BackendInfo, CallSpec, Verdict
from .errors import (BackendFaultError, BackendRefusedError, DispatchError, NoBackendError, PluginError,
                     TuneError, UnknownBackendError)
from .distributed import AgreementWarning
from .explain import Explanation, explain
from .hookspec import hookimpl
from .ops import log_softmax, logsumexp, softmax

from . import ab  # noqa: E402  (dispatch.ab.compare; its heavy imports load on use)

__version__ = "0.1.0"

__all__ = [
    "OPS", "AgreementWarning", "BackendFaultError", "BackendInfo", "BackendRefusedError", "CallSpec", "DispatchError", "Explanation",
    "LoadFailure", "NoBackendError", "PluginError", "Settings", "TuneError", "UnknownBackendError", "Verdict",
    "backends", "configure", "explain", "faults", "hookimpl", "load_failures", "log_softmax", "logsumexp",
    "refresh", "register", "reset", "settings", "softmax", "unregister", "use",
]
