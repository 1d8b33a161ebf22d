"""A backend's ``versions["kernels"]`` hash covers every module that holds kernel code.

Tuned configs are cached under the backend's versions; a kernel module left out of the hash
keeps serving configs tuned for its old code after an edit.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

BACKENDS = Path(__file__).resolve().parents[1] / "backends"
# a decorator that makes kernel code: a Triton JIT function, a TileLang program or macro
_KERNEL_DECORATOR = re.compile(r"^\s*@(triton\.jit|tilelang\.jit|T\.prim_func|T\.macro)\b", re.M)


def _listed(package: Path) -> set[str]:
    # the package's _KERNEL_MODULES, read from its source (importing it needs its compiler)
    tree = ast.parse((package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_KERNEL_MODULES" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{package.name}/__init__.py assigns no _KERNEL_MODULES")


def _kernel_modules(package: Path) -> set[str]:
    return {f"{package.name}.{p.stem}" for p in package.glob("*.py")
            if p.name != "__init__.py" and _KERNEL_DECORATOR.search(p.read_text())}


@pytest.mark.parametrize("package", ["dispatch_triton", "dispatch_tilelang"])
def test_every_kernel_module_is_in_the_kernels_hash(package):
    pkg = BACKENDS / package
    found = _kernel_modules(pkg)
    assert found, f"no kernel module found in {pkg}: the scan is broken"
    missing = found - _listed(pkg)
    assert not missing, f"{package}._KERNEL_MODULES leaves out {sorted(missing)}: edits there keep stale tunings"


def test_the_scan_finds_a_kernel_module_left_out(tmp_path):
    # the negative control: a package whose list misses its one kernel module
    pkg = tmp_path / "dispatch_fake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('_KERNEL_MODULES = ("dispatch_fake.listed",)\n')
    (pkg / "listed.py").write_text("import triton\n\n@triton.jit\ndef a():\n    pass\n")
    (pkg / "helpers.py").write_text("import triton\n\n\n@triton.jit\ndef b(x):\n    return x\n")
    assert _kernel_modules(pkg) - _listed(pkg) == {"dispatch_fake.helpers"}
