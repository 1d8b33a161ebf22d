"""Backends, plugins and benchmarks use dispatch's public surface only: no ``dispatch._*`` module or name.

Every ``.py`` file under backends/, plugins/ and benchmarks/ is parsed (never imported) and each
``import dispatch._x``, ``from dispatch._x import ...``, ``from dispatch import _x``,
``from dispatch.backend import _x`` and attribute use such as ``dispatch._plugins`` is reported
with its file and line. Dunder names (``dispatch.__version__``) are public.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("backends", "plugins", "benchmarks")

# (file, use) pairs still allowed, results scripts that reach what no public name does: one times
# the dispatcher's own two wrappers of one resolved call against each other; one asks the
# selector's cost estimate for CUDA calls on a machine without a GPU.
_VIEW_BIT = "benchmarks/results/current/launch/view_bit/plain_ab.py"
_PICKS = "benchmarks/results/current/launch/view_bit/bench_launch/device_timing_picks.py"
KNOWN: set[tuple[str, str]] = {(_VIEW_BIT, "from dispatch._dispatcher import ..."),
                               (_VIEW_BIT, "from dispatch import _native"),
                               (_PICKS, "from dispatch import _opdecl"), (_PICKS, "from dispatch import _plugins"),
                               (_PICKS, "from dispatch._select import ...")}


def _private(dotted: str) -> bool:
    """Whether a dotted name under ``dispatch`` has a private part (``_x``, not ``__x__``)."""
    return any(part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
               for part in dotted.split("."))


def _attribute_chain(node: ast.Attribute) -> str | None:
    """``dispatch.a.b`` for an attribute chain rooted at the name ``dispatch``, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "dispatch":
        return ".".join(["dispatch", *reversed(parts)])
    return None


def private_uses(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for every use of a private dispatch module or name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if a.name.split(".")[0] == "dispatch" and _private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "dispatch":
            if _private(node.module):
                found.append((node.lineno, f"from {node.module} import ..."))
            else:
                found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names
                          if _private(a.name)]
        elif isinstance(node, ast.Attribute):
            chain = _attribute_chain(node)
            if chain is not None and _private(chain):
                parts = chain.split(".")
                first = next(i for i, part in enumerate(parts) if _private(part))
                found.append((node.lineno, ".".join(parts[:first + 1])))
    return sorted(set(found))


def _scanned_files() -> list[Path]:
    files = []
    for top in SCANNED:
        files += [p for p in sorted((ROOT / top).rglob("*.py")) if ".egg-info" not in str(p)]
    return files


def test_scanned_directories_hold_the_backends_and_plugins():
    names = {p.relative_to(ROOT).as_posix() for p in _scanned_files()}
    for expected in ("backends/dispatch_triton/__init__.py", "backends/dispatch_tilelang/__init__.py",
                     "backends/dispatch_torch/__init__.py", "benchmarks/bench_softmax.py",
                     "plugins/dispatch_sample_backend/dispatch_sample/__init__.py"):
        assert expected in names


@pytest.mark.parametrize("source, what", [
    ("import dispatch._plugins", "import dispatch._plugins"),
    ("import dispatch._keys as k", "import dispatch._keys"),
    ("from dispatch._select import Selector", "from dispatch._select import ..."),
    ("from dispatch.autotune._x import y", "from dispatch.autotune._x import ..."),
    ("from dispatch import _plugins", "from dispatch import _plugins"),
    ("from dispatch.backend import _hidden", "from dispatch.backend import _hidden"),
    ("import dispatch\ndispatch._plugins.registry()", "dispatch._plugins"),
    ("import dispatch\nname = dispatch._keys.device_name(d)", "dispatch._keys"),
])
def test_every_form_of_private_use_is_caught(source, what):
    assert [w for _, w in private_uses(source)] == [what]


def test_public_uses_pass():
    source = textwrap.dedent("""
        import dispatch
        import dispatch.backend
        from dispatch import BackendInfo, __version__
        from dispatch.backend import hookimpl, placeholder
        from dispatch.autotune import TuneSettings
        from . import _numerics
        from ._numerics import F32
        version = dispatch.__version__
        ops = dispatch.OPS
        other._private.thing()
    """)
    assert private_uses(source) == []


def test_backends_plugins_and_benchmarks_import_public_names_only():
    offenders = []
    for path in _scanned_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, what in private_uses(path.read_text()):
            if (rel, what) not in KNOWN:
                offenders.append(f"{rel}:{line}: {what}")
    assert not offenders, ("dispatch internals used outside dispatch/ (import from dispatch or dispatch.backend "
                           "instead; add a missing name to dispatch/backend.py):\n" + "\n".join(offenders))
