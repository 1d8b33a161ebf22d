"""The sample third-party backend, pip-installed: discovered, listed, selectable, used and certified.

Everything after the install runs in fresh interpreters, as a user's would: the running process
imported its entry points before the package existed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import installed

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION = ROOT / "plugins" / "dispatch_sample_backend"

USER_SCRIPT = textwrap.dedent("""
    import json, torch, dispatch
    from dispatch.tolerance import mismatch
    from dispatch_pytest.conformance import certify

    def served(op, x, *args, **kwargs):  # which backend dispatch resolved the call to, in this process
        explanation = dispatch.explain(op, x, *args, **kwargs)
        return explanation.decision.backend if explanation.hot else None

    x = torch.randn(16, 3000) * 4
    seen = {"backends": sorted(dispatch.backends()), "failures": [f.name for f in dispatch.load_failures()]}
    seen["default"] = dispatch.explain("softmax", x).decision.backend
    seen["softmax"] = mismatch(dispatch.softmax(x, backend="sample"), torch.softmax(x, -1))
    seen["softmax_served_by"] = served("softmax", x, backend="sample")
    with dispatch.use("sample"):
        seen["log_softmax"] = mismatch(dispatch.log_softmax(x), torch.log_softmax(x, -1))
        seen["logsumexp"] = mismatch(dispatch.logsumexp(x, -1, keepdim=True), torch.logsumexp(x, -1, keepdim=True))
        seen["use_served_by"] = [served("log_softmax", x), served("logsumexp", x, -1, keepdim=True)]
    try:
        dispatch.softmax(x.double(), backend="sample")
    except dispatch.BackendRefusedError as exc:
        seen["refusal"] = exc.reason
    report = certify("sample", device="cpu")
    seen["certified"] = report.summary()
    seen["certification_failures"] = [str(r) for r in report.failed]
    print(json.dumps(seen))
""")
LIST_SCRIPT = "import dispatch; print(sorted(dispatch.backends()))"


@pytest.fixture(scope="module")
def sample_installed():
    """``dispatch-sample-backend`` installed for this module's tests (the site directory its processes get)."""
    with installed.site(DISTRIBUTION) as site:
        yield site


def _fresh_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    # one torch thread: two interpreters run at once, and the inputs are small
    env.update(DISPATCH_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200", OMP_NUM_THREADS="1")
    return env


def _start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out


def test_the_installed_sample_is_discovered_listed_selected_used_and_certified(sample_installed, tmp_path):
    env = installed.env_with(sample_installed, _fresh_env(tmp_path))
    listing = _start(["-m", "dispatch", "backends"], env, tmp_path)  # two fresh interpreters at once
    seen = json.loads(_finish(_start(["-c", USER_SCRIPT], env, tmp_path)).splitlines()[-1])
    table = _finish(listing)

    assert "sample" in seen["backends"] and "sample" not in seen["failures"]
    assert re.search(r"^\W*sample\s", table, re.MULTILINE), table  # a row of the table
    assert seen["default"] != "sample"  # low priority: never chosen by default
    assert seen["softmax_served_by"] == "sample" and seen["use_served_by"] == ["sample", "sample"]
    assert seen["softmax"] is None and seen["log_softmax"] is None and seen["logsumexp"] is None
    assert seen["refusal"].startswith("input dtype float64 not served")
    assert seen["certification_failures"] == [] and " 0 failed" in seen["certified"], seen["certified"]


def test_with_autoload_off_the_sample_loads_only_when_named(sample_installed, tmp_path):
    off = installed.env_with(sample_installed, _fresh_env(tmp_path)) | {"DISPATCH_DISABLE_PLUGIN_AUTOLOAD": "1"}
    unnamed = _start(["-c", LIST_SCRIPT], off, tmp_path)
    named = _start(["-c", LIST_SCRIPT], off | {"DISPATCH_PLUGINS": "sample"}, tmp_path)
    assert _finish(unnamed).strip() == "['torch']"  # the reference always loads
    assert _finish(named).strip() == "['sample', 'torch']"
