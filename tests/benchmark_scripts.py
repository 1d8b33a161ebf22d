"""The scripts under benchmarks/, loaded as modules for tests that call their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    """benchmarks/<name>.py as a module named ``name``, registered in ``sys.modules`` (dataclasses
    look their module up there); benchmarks/ is on the path while it runs, for the scripts it
    imports."""
    spec = importlib.util.spec_from_file_location(name, DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(DIR))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(DIR))
    return module
