"""Plugin loading: built-ins through entry points, failures rolled back and reported, autoload switch."""

from __future__ import annotations

import os
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


def test_another_packages_entry_point_named_torch_does_not_replace_the_reference(monkeypatch):
    # an impostor "torch" (a softmax over the last dim whatever dim is asked), listed before the
    # real one: the built-in reference keeps the name, and the impostor is reported, not dropped
    module = types.ModuleType("dispatch_test_impostor")
    impostor = chunked_backend.make("torch")

    @dispatch.hookimpl
    def dispatch_kernel(op, spec, config):
        return lambda x, dim=-1, dtype=None: torch.softmax(x, -1)

    module.dispatch_backend_info = impostor.dispatch_backend_info
    module.dispatch_check = impostor.dispatch_check
    module.dispatch_kernel = dispatch_kernel
    monkeypatch.setitem(sys.modules, "dispatch_test_impostor", module)
    real = list(_plugins._entry_points())
    fake = EntryPoint("torch", "dispatch_test_impostor", _plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(_plugins, "_entry_points", lambda: [fake, *real])
    registry = _plugins.Registry()
    registry.load_entry_points(environ={})
    assert registry.backends["torch"].plugin is not module
    failure = next(f for f in registry.failures if f.name == "torch")
    assert "dispatch_test_impostor" in failure.origin and "taken by" in failure.error


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


@pytest.mark.parametrize("value", ["maybe", "2", "Y"])
def test_a_bad_autoload_switch_is_an_error_not_autoload(value):
    # the switch that keeps third-party code from running: a value it can't read must not mean "on"
    code = ("import dispatch\ntry:\n    print(sorted(dispatch.backends()))\n"
            "except ValueError as exc:\n    print('error:', exc)")
    out = _run(code, {"DISPATCH_DISABLE_PLUGIN_AUTOLOAD": value, "DISPATCH_PLUGINS": ""})
    said = f"error: DISPATCH_DISABLE_PLUGIN_AUTOLOAD must be 0/1/true/false/yes/no/on/off (got {value!r})"
    assert out.strip() == said


def test_cli_lists_backends_and_load_failures():
    out = subprocess.run([sys.executable, "-m", "dispatch", "backends"], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "COLUMNS": "200"}).stdout
    assert "torch" in out and "reference" in out
    assert ("failed to load" in out) or ("no load failures" in out)


def test_cli_backends_table_into_a_pipe_loses_no_word():
    # a log or a pipe gets the whole table, whatever $COLUMNS says (test runners set it to 80)
    pytest.importorskip("tilelang")  # its row lists five ops, which 80 columns cut short
    out = subprocess.run([sys.executable, "-m", "dispatch", "backends"], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "COLUMNS": "80"}).stdout
    row = next(line for line in out.splitlines() if "tilelang" in line)
    assert all(op in row for op in ("layer_norm", "log_softmax", "logsumexp")), row


def test_cli_backends_table_folds_long_words_in_a_narrow_console(monkeypatch, capsys):
    from dispatch import _console, cli

    monkeypatch.setattr(_console, "PIPE_WIDTH", 70)
    assert cli.main(["backends"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 70
    assert "\u2026" not in out  # rich's ellipsis: a cell cut short


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


# -- the backend card is validated at load ----------------------------------------------------------

def _card_plugin(name: str, **card):
    """A working plugin whose card carries ``card`` (priority, versions, ...)."""
    plugin = chunked_backend.make(name)

    @dispatch.hookimpl
    def dispatch_backend_info():
        fields = {"name": name, "version": "1.0", "ops": ("softmax", "log_softmax", "logsumexp"), **card}
        return dispatch.BackendInfo(**fields)

    plugin.dispatch_backend_info = dispatch_backend_info
    return plugin


BAD_CARDS = [
    ({"priority": {"cpu": "high"}}, "'priority' must be"),
    ({"priority": {"cpu": float("nan")}}, "'priority' must be"),
    ({"priority": {"cpu": True}}, "'priority' must be"),
    ({"priority": {"cpu": 1.5}}, "'priority' must be"),
    ({"priority": {3: 1}}, "'priority' must be"),
    ({"priority": 5}, "'priority' must be"),
    ({"versions": {"triton": 3}}, "'versions' must be"),
    ({"versions": ["triton"]}, "'versions' must be"),
    ({"version": 1}, "'version' must be"),
    ({"description": None}, "'description' must be"),
    ({"reference": "yes"}, "'reference' must be"),
    ({"ops": "softmax"}, "'ops' must be a collection of op names"),
    ({"ops": 3}, "'ops' must be a collection of op names"),
    ({"ops": ("softmax", "sofmax")}, "'ops' must be in"),
    ({"costs": {"cuda": (10.0, 0.0)}}, "'costs' must be"),
    ({"costs": {"cuda": (10.0, 1000.0, -1.0)}}, "'costs' must be"),
    ({"costs": {"cuda": (10.0, 1000.0, 1.0, 2.0)}}, "'costs' must be"),
    ({"costs": {"cuda": (10.0, 1000.0, float("inf"))}}, "'costs' must be"),
    ({"priority": {"cpux": 200}}, "'priority' keys must start with a device type torch knows"),  # a typo: never applies
    ({"costs": {"gpu:softmax": (1.0, 2.0)}}, "'costs' keys must start with a device type torch knows"),
]


@pytest.mark.parametrize("card, message", BAD_CARDS, ids=[str(c) for c, _ in BAD_CARDS])
def test_a_malformed_card_is_refused_at_registration_naming_the_field_and_value(card, message):
    with pytest.raises((TypeError, ValueError), match=message) as raised:
        dispatch.register(_card_plugin("badcard", **card))
    assert "(got " in str(raised.value)
    assert "Attribute(" not in str(raised.value)  # one sentence, not attrs' tuple of internals
    assert "badcard" not in dispatch.backends()
    x = torch.randn(3, 5)
    torch.testing.assert_close(dispatch.softmax(x, backend="torch"), torch.softmax(x, -1))
    torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))


def test_a_plugin_with_a_malformed_card_is_a_load_failure_listed_by_the_cli(monkeypatch, capsys):
    module = _card_plugin("badprio", priority={"cpu": "high"})
    module.__name__ = "dispatch_test_badprio"
    monkeypatch.setitem(sys.modules, "dispatch_test_badprio", module)
    _fake_eps(monkeypatch, EntryPoint("badprio", "dispatch_test_badprio", _plugins.ENTRY_POINT_GROUP))
    registry = _plugins.Registry()
    registry.load_entry_points(environ={"DISPATCH_DISABLE_PLUGIN_AUTOLOAD": "1", "DISPATCH_PLUGINS": "badprio"})
    failure = next(f for f in registry.failures if f.name == "badprio")
    assert "'priority' must be" in failure.error and "'high'" in failure.error
    assert set(registry.backends) == {"torch"}
    monkeypatch.setattr(_plugins, "_registry", registry)
    from dispatch import cli
    monkeypatch.setenv("COLUMNS", "300")
    assert cli.main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "badprio" in out and "'priority' must be" in out


# -- a plugin cannot end the process ----------------------------------------------------------------

class _PluginBail(BaseException):
    """Not an Exception: what a plugin might raise to bail out."""


def test_a_plugin_that_exits_at_import_is_a_load_failure(monkeypatch, tmp_path):
    (tmp_path / "dispatch_test_exits.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "dispatch_test_bails.py").write_text("raise GeneratorExit('bail')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _fake_eps(monkeypatch, EntryPoint("exits", "dispatch_test_exits", _plugins.ENTRY_POINT_GROUP),
              EntryPoint("bails", "dispatch_test_bails", _plugins.ENTRY_POINT_GROUP))
    registry = _plugins.Registry()
    registry.load_entry_points(environ={"DISPATCH_DISABLE_PLUGIN_AUTOLOAD": "1", "DISPATCH_PLUGINS": "exits,bails"})
    errors = {f.name: f.error for f in registry.failures}
    assert "SystemExit" in errors["exits"] and "GeneratorExit" in errors["bails"]
    assert set(registry.backends) == {"torch"}
    assert "dispatch_test_exits" not in sys.modules


def test_a_third_party_card_cannot_claim_to_be_the_reference():
    # the reference's kernels are never checked: a backend calling itself one would go unchecked
    from dispatch import BackendInfo, Verdict

    @dispatch.hookimpl
    def dispatch_backend_info():
        return BackendInfo(name="oracle", version="1", ops=("softmax",), priority={"cpu": 500}, reference=True)

    plugin = types.SimpleNamespace(
        dispatch_backend_info=dispatch_backend_info,
        dispatch_check=dispatch.hookimpl(lambda op, spec: Verdict.yes()),
        dispatch_kernel=dispatch.hookimpl(lambda op, spec, config: lambda x: torch.zeros_like(x)))
    with pytest.raises(dispatch.PluginError, match="its card says reference=True, which marks torch's own ops"):
        dispatch.register(plugin, name="oracle")
    assert "oracle" not in dispatch.backends()
    x = torch.randn(2, 4)
    torch.testing.assert_close(dispatch.softmax(x, -1), torch.softmax(x, -1))


def test_a_plugin_that_fails_to_load_is_a_warning_naming_it_and_why(monkeypatch, tmp_path):
    (tmp_path / "dispatch_test_broken.py").write_text("raise ImportError('needs libfoo 2')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _fake_eps(monkeypatch, EntryPoint("broken", "dispatch_test_broken", _plugins.ENTRY_POINT_GROUP))
    registry = _plugins.Registry()
    with pytest.warns(dispatch.PluginLoadWarning) as seen:
        registry.load_entry_points(environ={"DISPATCH_DISABLE_PLUGIN_AUTOLOAD": "1",
                                            "DISPATCH_PLUGINS": "broken,nosuch"})
    messages = [str(w.message) for w in seen]
    assert len(messages) == 2, messages  # one a failure, each once
    assert any("'broken'" in m and "ImportError: needs libfoo 2" in m and "skipped" in m for m in messages)
    assert any("'nosuch'" in m and "no installed entry point" in m for m in messages)
    assert set(registry.backends) == {"torch"}


def test_a_real_ctrl_c_during_plugin_import_still_stops_the_process(monkeypatch, tmp_path):
    (tmp_path / "dispatch_test_interrupted.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _fake_eps(monkeypatch, EntryPoint("interrupted", "dispatch_test_interrupted", _plugins.ENTRY_POINT_GROUP))
    with pytest.raises(KeyboardInterrupt):
        _plugins.Registry().load_entry_points(environ={})


def test_an_installed_plugin_that_exits_at_import_does_not_end_calls_or_the_cli(tmp_path):
    # a real distribution on sys.path: its dist-info declares the entry point, its module exits
    (tmp_path / "dispatch_exit_plugin.py").write_text("import sys\nsys.exit('plugin gave up')\n")
    info = tmp_path / "dispatch_exit_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dispatch-exit-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dispatch.backends]\nexiter = dispatch_exit_plugin\n")
    import os
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "300", "DISPATCH_CACHE_DIR": str(tmp_path / "cache")}
    code = ("import sys, torch, dispatch; from dispatch import cli\n"
            "x = torch.randn(2, 3)\n"
            "torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))\n"
            "torch.testing.assert_close(dispatch.softmax(x, backend='torch'), torch.softmax(x, -1))\n"
            "print('calls ok')\n"
            "sys.exit(cli.main(['backends']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "calls ok" in done.stdout
    assert "exiter" in done.stdout and "SystemExit" in done.stdout and "plugin gave up" in done.stdout


def _exiting(hook: str, exc: BaseException):
    """A plugin whose ``hook`` raises ``exc`` (for "kernel_call", the kernel it returns does)."""
    plugin = chunked_backend.make("quitter", priority=200)
    good_kernel = plugin.dispatch_kernel

    def bail(*args, **kwargs):
        raise exc

    if hook == "dispatch_check":
        plugin.dispatch_check = dispatch.hookimpl(specname=hook)(lambda op, spec: bail())
    elif hook == "dispatch_tune_space":
        plugin.dispatch_tune_space = dispatch.hookimpl(specname=hook)(lambda op, spec: bail())
    elif hook == "dispatch_kernel":
        plugin.dispatch_kernel = dispatch.hookimpl(specname=hook)(lambda op, spec, config: bail())
    elif hook == "kernel_call":
        plugin.dispatch_kernel = dispatch.hookimpl(specname="dispatch_kernel")(lambda op, spec, config: bail)
    else:
        plugin.dispatch_backend_info = dispatch.hookimpl(specname=hook)(bail)
    del good_kernel
    return plugin


@pytest.mark.parametrize("exc", [SystemExit(2), _PluginBail("bail")], ids=["SystemExit", "BaseException"])
@pytest.mark.parametrize("hook", ["dispatch_check", "dispatch_tune_space", "dispatch_kernel", "kernel_call"])
def test_a_hook_that_exits_is_a_fault_of_its_backend_and_the_call_is_served(hook, exc):
    import warnings

    dispatch.register(_exiting(hook, exc))
    x = torch.randn(4, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
        torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    recorded = [f for f in dispatch.faults() if f.backend == "quitter"]
    if hook != "kernel_call":  # the kernel is not a hook: its fault is the quarantine, not a hook record
        assert recorded and recorded[0].hook == hook and type(exc).__name__ in recorded[0].error
    if hook != "dispatch_check":  # a refusal is not a fault: forced, it is a BackendRefusedError
        with pytest.raises(dispatch.BackendFaultError, match="quitter") as info:
            dispatch.softmax(torch.randn(70, 300), backend="quitter")  # a bucket not yet quarantined
        # the error names the hook (None: the kernel itself) and says why nothing else served the call
        assert info.value.hook == (None if hook == "kernel_call" else hook), info.value
        assert info.value.backend == "quitter" and info.value.op == "softmax"
        assert "it was forced, so no other backend serves this call" in str(info.value)
        assert "quarantined" not in str(info.value)


def test_an_info_hook_that_exits_is_a_plugin_error_at_registration():
    with pytest.raises(PluginError, match="dispatch_backend_info raised SystemExit"):
        dispatch.register(_exiting("dispatch_backend_info", SystemExit(1)), name="quitter")
    assert "quitter" not in dispatch.backends()


def test_an_op_package_whose_dispatch_ops_exits_is_a_plugin_error_at_registration():
    class Quitter:
        @dispatch.hookimpl
        def dispatch_ops(self):
            raise SystemExit(4)

    with pytest.raises(PluginError, match="dispatch_ops raised SystemExit"):
        dispatch.register(Quitter(), name="quitter_ops")
    dispatch.register(chunked_backend.make("quitter_ops"))  # rolled back: the name is free


def test_a_name_in_dispatch_plugins_that_nothing_installed_has_is_a_load_failure():
    registry = _plugins.Registry()
    registry.load_entry_points(environ={_plugins.ENV_DISABLE_AUTOLOAD: "1", _plugins.ENV_PLUGINS: "trtion"})
    failure = next(f for f in registry.failures if f.name == "trtion")
    assert "no installed entry point is named 'trtion'" in failure.error and "triton" in failure.error
    assert set(registry.backends) == {"torch"}


def test_a_misspelt_hook_is_a_plugin_error_listing_the_hooks():
    plugin = chunked_backend.make("typo")

    @dispatch.hookimpl
    def dispatch_checks(op, spec):
        return dispatch.Verdict.yes()

    plugin.dispatch_checks = dispatch_checks
    with pytest.raises(PluginError, match="dispatch_checks.*the hooks are .*dispatch_check, ") as info:
        dispatch.register(plugin)
    assert "typo" not in dispatch.backends()
    hooks = str(info.value).split("the hooks are ")[1]
    assert "dispatch_checks" not in hooks, hooks  # the list names the real hooks only


def test_an_op_package_that_declares_nothing_is_told_so():
    class Empty:
        @dispatch.hookimpl
        def dispatch_ops(self):
            return []

    with pytest.raises(PluginError, match="its dispatch_ops returned no op"):
        dispatch.register(Empty(), name="empty_ops")


# -- messages name who is at fault and what would work ---------------------------------------------

@pytest.mark.parametrize("hook", ["dispatch_kernel", "dispatch_tune_space"])
def test_a_forced_backends_hook_fault_is_one_error_naming_backend_hook_and_call(hook):
    plugin = chunked_backend.make("brittle")

    def boom(**kwargs):
        raise RuntimeError(f"{hook} exploded")

    if hook == "dispatch_kernel":
        plugin.dispatch_kernel = dispatch.hookimpl(specname=hook)(lambda op, spec, config: boom())
    else:
        plugin.dispatch_tune_space = dispatch.hookimpl(specname=hook)(lambda op, spec: boom())
    dispatch.register(plugin)
    with pytest.raises(dispatch.BackendFaultError) as raised:
        dispatch.softmax(torch.randn(4, 32), backend="brittle")
    message = str(raised.value)
    assert "'brittle'" in message and hook in message and "softmax(4x32 float32" in message
    assert "RuntimeError" in message and "exploded" in message
    assert (raised.value.backend, raised.value.op) == ("brittle", "softmax")


def test_a_check_hook_answering_with_the_wrong_type_is_a_fault_naming_the_hook_and_the_type_expected():
    plugin = chunked_backend.make("yesman")
    plugin.dispatch_check = dispatch.hookimpl(specname="dispatch_check")(lambda op, spec: True)
    dispatch.register(plugin)
    x = torch.randn(3, 8)
    torch.testing.assert_close(dispatch.softmax(x), torch.softmax(x, -1))
    fault = next(f for f in dispatch.faults() if f.backend == "yesman")
    assert fault.hook == "dispatch_check"
    assert "dispatch_check returned True" in fault.error and "Verdict" in fault.error


def test_the_backends_listing_shows_square_brackets_in_reasons_and_errors(monkeypatch, capsys):
    plugin = chunked_backend.make("bracketed")

    @dispatch.hookimpl
    def dispatch_backend_info():
        return dispatch.BackendInfo(name="bracketed", version="1.0", ops=("softmax", "log_softmax", "logsumexp"), versions={"dsl": "[dev]"},
                                    available=dispatch.Verdict.no("needs pip install 'dispatch-ops[tilelang]'"))

    plugin.dispatch_backend_info = dispatch_backend_info
    dispatch.register(plugin)
    registry = _plugins.registry()
    monkeypatch.setattr(registry, "_failures",
                        [_plugins.LoadFailure("odd", "entry point [odd]", "ImportError: needs [bold]extra[/bold]")])
    from dispatch import cli
    monkeypatch.setenv("COLUMNS", "400")
    assert cli.main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "dispatch-ops[tilelang]" in out and "[dev]" in out
    assert "entry point [odd]" in out and "needs [bold]extra[/bold]" in out


def test_a_backend_named_like_a_registered_op_package_is_refused_with_the_reason():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parent / "op_package" / "dispatch_rowsum" / "op.py"
    spec = importlib.util.spec_from_file_location("rowsum_op_for_clash", path)
    op_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(op_module)
    dispatch.register(op_module, name="rowsum_ops")
    with pytest.raises(PluginError, match="an op package named 'rowsum_ops' is already registered"):
        dispatch.register(chunked_backend.make("rowsum_ops"), name="rowsum_ops")


def _load_with_an_entry_point(tmp_path, name: str, source: str, before: str = "") -> str:
    """What a fresh process prints of plugin ``name``'s load failures, where an installed entry point
    named ``name`` is a module of ``source``, and its first call (run after ``before``) is right."""
    (tmp_path / f"dispatch_test_{name}.py").write_text(source)
    code = ("import sys, torch, dispatch\n"
            "from importlib.metadata import EntryPoint\n"
            "from dispatch import _plugins\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "real = list(_plugins._entry_points())\n"
            f"_plugins._entry_points = lambda: real + [EntryPoint({name!r}, 'dispatch_test_{name}', "
            "_plugins.ENTRY_POINT_GROUP)]\n"
            f"{before}"
            "torch.testing.assert_close(dispatch.softmax(torch.ones(2, 4), -1), torch.full((2, 4), 0.25))\n"
            f"print([f.error for f in dispatch.load_failures() if f.name == {name!r}])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DISPATCH_DISABLE_PLUGIN_AUTOLOAD": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_plugin_that_waits_at_import_on_dispatch_work_in_a_thread_is_a_load_failure_not_a_hang(tmp_path):
    # the loading thread holds the registry lock while the plugin's import waits on its helper
    # thread, which waits for the registry: that thread gives up after LOAD_WAIT_S
    said = _load_with_an_entry_point(tmp_path, "warms", "import concurrent.futures, torch, dispatch\n"
                                     "with concurrent.futures.ThreadPoolExecutor(1) as pool:\n"
                                     "    pool.submit(dispatch.softmax, torch.randn(2, 3), -1).result()\n",
                                     before="_plugins.LOAD_WAIT_S = 1.0\n")
    assert "plugins have been loading in another thread for over 1 s" in said


@pytest.mark.parametrize("call", ["dispatch.refresh()", "dispatch.backends()"])
def test_a_plugin_that_refreshes_or_asks_for_the_backends_at_import_is_a_load_failure_not_a_hang(tmp_path, call):
    # the loading thread holds the registry lock: the plugin's import must not wait on it
    said = _load_with_an_entry_point(tmp_path, "refreshes", f"import dispatch\n{call}\n")
    assert "asked for the loaded backends or ops, or a refresh, while plugins are loading" in said


def test_a_backend_unregistered_by_its_own_hook_mid_call_is_skipped_and_the_call_served():
    import types

    def check(op, spec):
        dispatch.unregister("vanishing")
        return dispatch.Verdict.yes()

    plugin = types.SimpleNamespace(
        dispatch_backend_info=dispatch.hookimpl(lambda: dispatch.BackendInfo(
            name="vanishing", version="1", ops=("softmax",), priority={"cpu": 1000})),
        dispatch_check=dispatch.hookimpl(check),
        dispatch_kernel=dispatch.hookimpl(lambda op, spec, config: lambda x: torch.softmax(x, -1)))
    dispatch.register(plugin)
    x = torch.randn(4, 8)
    with pytest.warns(dispatch.FaultWarning, match="'vanishing' was unregistered while the call was being resolved"):
        torch.testing.assert_close(dispatch.softmax(x, -1), torch.softmax(x, -1))
    assert "vanishing" not in dispatch.backends()


def test_unregistering_an_unknown_name_lists_each_registered_name_once():
    with pytest.raises(KeyError, match="no backend or op package named 'nope'") as info:
        dispatch.unregister("nope")
    listed = str(info.value).split("(registered: ")[1].rstrip(")'\"").split(", ")
    assert "torch" in listed and len(listed) == len(set(listed)), listed
