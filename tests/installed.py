"""A distribution of this repository pip-installed (editable) for a test module, uninstalled after."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True,
                   cwd=ROOT, timeout=300)


@contextlib.contextmanager
def editable(path: Path, name: str) -> Iterator[Path]:
    """``pip install -e path`` (no deps, no build isolation) for the block, ``pip uninstall name`` after."""
    pip("install", "--no-deps", "--no-build-isolation", "-e", str(path))
    try:
        yield path
    finally:
        pip("uninstall", "-y", name)
