"""A distribution of this repository pip-installed for a test module into a directory of its own:
the processes a test starts find it through ``PYTHONPATH`` (:func:`env_with`); the environment the
tests run in, shared by parallel workers, is left as it is."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True,
                   cwd=ROOT, timeout=300)


@contextlib.contextmanager
def site(path: Path) -> Iterator[Path]:
    """``pip install --target DIR path`` (no deps, no build isolation) for the block: yields DIR."""
    with tempfile.TemporaryDirectory(prefix="dispatch-test-site-") as target:
        pip("install", "--no-deps", "--no-build-isolation", "--target", target, str(path))
        yield Path(target)


def env_with(site_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``site_dir`` first on ``PYTHONPATH``."""
    paths = [str(site_dir), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}
