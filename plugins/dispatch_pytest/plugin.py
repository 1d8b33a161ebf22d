"""The pytest hooks: ``--dispatch-backend`` and its fixture, ``--dispatch-certify`` and its test items.

dispatch (and torch) are imported only when a test asks for a backend or an option is given,
so the plugin costs nothing in test runs that don't use it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

OPTION_BACKEND = "--dispatch-backend"
OPTION_CERTIFY = "--dispatch-certify"
OPTION_DEVICE = "--dispatch-device"


def _names(values: Sequence[str] | None) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``, in order, without repeats."""
    names: list[str] = []
    for value in values or ():
        for name in value.replace(" ", "").split(","):
            if name and name not in names:
                names.append(name)
    return names


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dispatch", "dispatch backends")
    group.addoption(OPTION_BACKEND, action="append", metavar="NAME[,NAME]",
                    help="run tests that use the dispatch_backend fixture against these backends only "
                         "(default: every loaded backend; an unavailable one skips)")
    group.addoption(OPTION_CERTIFY, action="append", metavar="NAME[,NAME]",
                    help="add the conformance cases of dispatch_pytest.conformance for these backends "
                         "to the run (a refusal skips, a wrong result fails)")
    group.addoption(OPTION_DEVICE, default=None, metavar="DEVICE",
                    help="device of the conformance cases (default: cuda when there is one, else cpu)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "dispatch_conformance: a conformance case added by --dispatch-certify")
    for option in (OPTION_BACKEND, OPTION_CERTIFY):
        given = config.getoption(option)
        if given and not _names(given):  # (an empty value would run nothing and say nothing)
            raise pytest.UsageError(f"{option}={','.join(given)} names no backend: name one or more, comma-separated "
                                    "(see `python -m dispatch backends`)")
    named = _names(config.getoption(OPTION_BACKEND)) + _names(config.getoption(OPTION_CERTIFY))
    if named:
        import dispatch

        unknown = [n for n in named if n not in dispatch.backends()]
        if unknown:
            failures = {f.name: f.error for f in dispatch.load_failures()}
            why = "; ".join(f"{n}: {failures[n]}" if n in failures else f"{n}: no such entry point"
                            for n in unknown)
            raise pytest.UsageError(
                f"dispatch backend(s) {', '.join(map(repr, unknown))} named by {OPTION_BACKEND}/"
                f"{OPTION_CERTIFY} are not loaded ({why}); loaded: {', '.join(sorted(dispatch.backends()))}. "
                "See `python -m dispatch backends`.")
    if _names(config.getoption(OPTION_CERTIFY)):
        from .conformance import usable_device

        try:
            usable_device(config.getoption(OPTION_DEVICE))
        except ValueError as exc:
            raise pytest.UsageError(f"{OPTION_DEVICE}: {exc}") from None


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not (_names(config.getoption(OPTION_BACKEND)) or _names(config.getoption(OPTION_CERTIFY))):
        return None
    import dispatch

    cards = [f"{name} {info.version}" + ("" if info.available else " (unavailable)")
             for name, info in sorted(dispatch.backends().items())]
    lines = [f"dispatch backends: {', '.join(cards)}"]
    if dispatch.load_failures():
        lines.append("dispatch load failures: " + "; ".join(f"{f.name}: {f.error}" for f in dispatch.load_failures()))
    return lines


def backend_params(config: pytest.Config) -> list:
    """The ``dispatch_backend`` parameters: the named backends, else every loaded one.

    An unavailable backend is a parameter that skips, with the backend's reason.
    """
    import dispatch

    cards = dispatch.backends()
    names = _names(config.getoption(OPTION_BACKEND)) or sorted(cards)
    params = []
    for name in names:
        available = cards[name].available
        marks = () if available else (pytest.mark.skip(reason=f"backend {name!r} unavailable: {available.reason}"),)
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "dispatch_backend" in metafunc.fixturenames:
        metafunc.parametrize("dispatch_backend", backend_params(metafunc.config), indirect=True)


@pytest.fixture
def dispatch_backend(request: pytest.FixtureRequest) -> str:
    """The name of a dispatch backend; tests using it run once per backend (see ``--dispatch-backend``).

    Call ops with it: ``dispatch.softmax(x, backend=dispatch_backend)``.
    """
    if not hasattr(request, "param"):
        raise pytest.UsageError("the dispatch_backend fixture is parametrized at collection; request it as a "
                                "test argument, not through request.getfixturevalue()")
    return request.param


class ConformanceItem(pytest.Item):
    """One conformance case of one backend, as a test: ``certify[sample]::softmax-float32-8x128-dim-1``."""

    def __init__(self, *, backend: str, case, device: str | None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.backend = backend
        self.case = case
        self.device = device
        self.add_marker("dispatch_conformance")

    def runtest(self) -> None:
        from .conformance import check_case

        check_case(self.backend, self.case, device=self.device)

    def reportinfo(self):
        return self.path, None, f"dispatch conformance of {self.backend}: {self.case.id}"


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselect, so they apply to these items too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    backends = _names(config.getoption(OPTION_CERTIFY))
    if not backends:
        return
    from dispatch.backend import loaded_backends

    from .cases import default_cases
    from .conformance import _ops_of

    device = config.getoption(OPTION_DEVICE)
    for backend in backends:
        loaded = loaded_backends().get(backend)  # (one not loaded: its items fail, saying so)
        for case in default_cases(_ops_of(loaded) if loaded is not None else None):
            items.append(ConformanceItem.from_parent(session, name=f"certify[{backend}]::{case.id}",
                                                     nodeid=f"certify[{backend}]::{case.id}",
                                                     backend=backend, case=case, device=device))
