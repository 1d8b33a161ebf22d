"""Plugin loading: built-ins through entry points, failures rolled back and reported, autoload switch."""

from __future__ import annotations

import subprocess
import sys
import types
from importlib.metadata import EntryPoint

import pytest
import torch

import dispatch
from dispatch import _plugins
from dispatch.errors import PluginError

import chunked_backend


def test_builtin_backends_come_from_the_entry_point_group():
    names = {ep.name: ep.value for ep in _plugins._entry_points()}
    assert names["torch"] == "dispatch_torch"
    info = dispatch.backends()["torch"]
    assert info.reference and {"softmax", "log_softmax", "logsumexp"} <= set(dispatch.declared_ops())


def test_registry_views_are_read_only():
    with pytest.raises(TypeError):
        dispatch.backends()["x"] = None


def _fake_eps(monkeypatch, *eps):
    real = list(_plugins._entry_points())
    monkeypatch.setattr(_plugins, "_entry_points", lambda: sorted(real + list(eps), key=lambda e: e.name))


def test_a_plugin_that_fails_to_import_is_recorded_and_others_keep_working(monkeypatch):
    _fake_eps(monkeypatch, EntryPoint("broken", "dispatch_no_such_module_xyz", _plugins.ENTRY_POINT_GROUP))
    registry = _plugins.Registry()
    registry.load_entry_points(environ={})
    failure = next(f for f in registry.failures if f.name == "broken")
    assert "ModuleNotFoundError" in failure.error and "dispatch_no_such_module_xyz" in failure.traceback
    assert "torch" in registry.backends and "broken" not in registry.backends


def test_a_plugin_that_raises_in_its_info_hook_is_rolled_back(monkeypatch):
    module = types.ModuleType("dispatch_test_bad_info")

    @dispatch.hookimpl
    def dispatch_backend_info():
        raise RuntimeError("no GPU driver")

    module.dispatch_backend_info = dispatch_backend_info
    module.dispatch_check = chunked_backend.make().dispatch_check
    module.dispatch_kernel = chunked_backend.make().dispatch_kernel
    monkeypatch.setitem(sys.modules, "dispatch_test_bad_info", module)
    _fake_eps(monkeypatch, EntryPoint("badinfo", "dispatch_test_bad_info", _plugins.ENTRY_POINT_GROUP))
    registry = _plugins.Registry()
    registry.load_entry_points(environ={})
    assert "badinfo" in [f.name for f in registry.failures]
    assert "no GPU driver" in next(f for f in registry.failures if f.name == "badinfo").error
    assert "badinfo" not in registry.backends
    # rolled back: nothing of it is left registered with pluggy
    assert all(impl.plugin_name != "badinfo" for impl in registry._pm.hook.dispatch_check.get_hookimpls())


def test_missing_required_hooks_and_bad_hook_signatures_are_plugin_errors():
    plugin = types.SimpleNamespace(dispatch_backend_info=chunked_backend.make().dispatch_backend_info)
    with pytest.raises(PluginError, match="does not implement the required hook"):
        dispatch.register(plugin, name="chunked")

    @dispatch.hookimpl
    def dispatch_check(op, spec, surprise):
        return dispatch.Verdict.yes()

    bad = chunked_backend.make("badsig")
    bad.dispatch_check = dispatch_check
    with pytest.raises(PluginError, match="surprise"):
        dispatch.register(bad)
    assert "badsig" not in dispatch.backends()


def test_a_raising_check_hook_is_a_refusal_with_the_error_as_reason_and_a_recorded_fault():
    plugin = chunked_backend.make("flaky")

    @dispatch.hookimpl
    def dispatch_check(op, spec):
        raise ValueError("boom")

    plugin.dispatch_check = dispatch_check
    dispatch.register(plugin)
    x = torch.randn(4, 8)
    explanation = dispatch.explain("softmax", x, -1)
    flaky = next(c for c in explanation.decision.candidates if c.name == "flaky")
    assert not flaky.verdict.ok and "ValueError: boom" in flaky.verdict.reason
    assert any(f.backend == "flaky" and f.hook == "dispatch_check" for f in dispatch.faults())
    torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))


def test_registering_the_same_name_twice_is_refused():
    dispatch.register(chunked_backend.make("twin"))
    with pytest.raises(PluginError, match="already registered"):
        dispatch.register(chunked_backend.make("twin"))


def _run(code: str, env: dict) -> str:
    import os
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, check=True).stdout


def test_autoload_can_be_switched_off_and_backends_named_explicitly():
    code = "import dispatch; print(sorted(dispatch.backends()))"
    off = _run(code, {"DISPATCH_DISABLE_PLUGIN_AUTOLOAD": "1", "DISPATCH_PLUGINS": ""})
    assert off.strip() == "['torch']"  # the reference alone: no third-party code ran
    on = _run(code, {"DISPATCH_DISABLE_PLUGIN_AUTOLOAD": "0"})
    assert "'torch'" in on


def test_cli_lists_backends_and_load_failures():
    out = subprocess.run([sys.executable, "-m", "dispatch", "backends"], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "COLUMNS": "200"}).stdout
    assert "torch" in out and "reference" in out
    assert ("failed to load" in out) or ("no load failures" in out)


def test_hooks_may_declare_a_subset_of_the_hookspec_arguments():
    plugin = chunked_backend.make("partial", priority=150)

    @dispatch.hookimpl
    def dispatch_check(spec):  # no 'op': pluggy allows it, and so does dispatch
        return dispatch.Verdict.yes("only looks at the spec") if spec.dtype == torch.float32 else \
            dispatch.Verdict.no("float32 only")

    plugin.dispatch_check = dispatch_check
    dispatch.register(plugin)
    x = torch.randn(3, 7)
    assert dispatch.explain("softmax", x).decision.backend == "partial"
    torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
