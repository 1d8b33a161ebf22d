"""The guides' Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("guide", ["writing-an-op.md"])
def test_the_guides_python_blocks_run(guide, tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / guide).read_text(), re.DOTALL)
    assert blocks, f"{guide} has no python block"
    script = tmp_path / "guide.py"
    script.write_text("\n".join(blocks))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={"DISPATCH_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin",
                                             "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
