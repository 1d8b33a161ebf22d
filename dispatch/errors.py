"""What dispatch raises, and who is at fault for each error."""

from __future__ import annotations


class DispatchError(RuntimeError):
    """Base of every error dispatch raises on its own account."""


class UnknownBackendError(DispatchError, ValueError):
    """The user named a backend that is not loaded (the message lists those that are)."""


class BackendRefusedError(DispatchError):
    """A backend the user forced cannot serve the call; never answered by a silent fallback."""

    def __init__(self, message: str, *, backend: str, op: str, reason: str, servers: tuple[str, ...]):
        super().__init__(message)
        self.backend = backend
        self.op = op
        self.reason = reason
        self.servers = servers


class NoBackendError(DispatchError):
    """No loaded and allowed backend can serve the call (the reference is denied or missing)."""


class BackendFaultError(DispatchError):
    """A backend raised, or returned non-finite values where the reference has none, in strict mode.

    ``backend``, ``hook`` (None for the kernel itself) and ``op`` say who faulted, where, on what.
    """

    def __init__(self, message: str, *, backend: str | None = None, hook: str | None = None,
                 op: str | None = None):
        super().__init__(message)
        self.backend = backend
        self.hook = hook
        self.op = op


class TuneError(DispatchError):
    """A tuning sweep measured no config: the message names every config and why it failed."""


class PluginError(DispatchError):
    """A plugin author's mistake: a malformed hook answer or a backend that breaks the protocol."""


class PluginLoadWarning(UserWarning):
    """A backend plugin failed to load and was skipped; ``dispatch.load_failures()`` holds why."""


class FaultWarning(RuntimeWarning):
    """A backend faulted on a key and was quarantined for it; another backend served the call."""
