"""A third-party op package, pip-installed: its op is called, listed, explained, tuned, A/B-tested,
differentiated and certified like a built-in one, on both of its backends.

The package (tests/op_package) declares ``masked_rowsum(input, mask=None, keepdim=False)`` with an
optional int8 mask, and ships two backends for it. Everything after the install runs in fresh
interpreters, as a user's would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import installed

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tests" / "op_package"

USER_SCRIPT = textwrap.dedent("""
    import json, torch, dispatch
    from dispatch_pytest.conformance import certify

    def err(a, b):
        return float((a.double() - b.double()).abs().max())

    x = torch.randn(8, 300)
    mask = torch.randint(0, 2, (8, 300), dtype=torch.int8)
    expected = (x.double() * mask).sum(-1)
    seen = {"ops": list(dispatch.declared_ops()), "failures": [f.name for f in dispatch.load_failures()]}
    seen["same_function"] = dispatch.op("masked_rowsum") is dispatch.masked_rowsum
    seen["errors"] = {name: err(dispatch.masked_rowsum(x, mask, backend=name), expected)
                      for name in ("torch", "rowsum_chunked", "rowsum_matmul")}
    seen["unmasked"] = err(dispatch.masked_rowsum(x, backend="rowsum_chunked"), x.double().sum(-1))
    seen["keepdim_shape"] = list(dispatch.masked_rowsum(x, mask, keepdim=True, backend="rowsum_matmul").shape)
    seen["served_by"] = dispatch.explain("masked_rowsum", x, mask, backend="rowsum_chunked").decision.backend
    seen["refused"] = dispatch.explain("masked_rowsum", x, mask).decision.candidates[-1].verdict.reason
    try:
        dispatch.masked_rowsum(x, mask.float())
    except TypeError as exc:
        seen["bad_mask"] = str(exc)
    leaf = x.clone().requires_grad_(True)
    dispatch.masked_rowsum(leaf, mask, backend="rowsum_matmul").sum().backward()
    seen["grad_ok"] = bool(torch.equal(leaf.grad, mask.float()))
    seen["certified"] = [certify(name, device="cpu").summary() for name in ("rowsum_chunked", "rowsum_matmul")]
    print(json.dumps(seen))
""")


@pytest.fixture(scope="module")
def package_installed():
    """``dispatch-rowsum`` installed for this module's tests (the site directory its processes get)."""
    with installed.site(PACKAGE) as site:
        yield site


def _run(args: list[str], tmp_path: Path, site: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    env.update(DISPATCH_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200", OMP_NUM_THREADS="1")
    env = installed.env_with(site, env)
    return subprocess.run([sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


def test_the_op_is_called_explained_differentiated_and_certified(package_installed, tmp_path):
    done = _run(["-c", USER_SCRIPT], tmp_path, package_installed)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert "masked_rowsum" in seen["ops"] and not seen["failures"]
    assert seen["same_function"]
    assert all(e < 1e-4 for e in seen["errors"].values()), seen["errors"]
    assert seen["unmasked"] < 1e-4 and seen["keepdim_shape"] == [8, 1]
    assert seen["served_by"] == "rowsum_chunked"
    assert "does not implement masked_rowsum" in seen["refused"]
    assert "'mask' must be an int8 Tensor" in seen["bad_mask"]
    assert seen["grad_ok"]
    assert all(" 0 failed" in s and " 0 passed" not in s for s in seen["certified"]), seen["certified"]


def test_the_cli_lists_tunes_and_ab_tests_the_op(package_installed, tmp_path):
    listing = _run(["-m", "dispatch", "backends"], tmp_path, package_installed)
    assert listing.returncode == 0 and "masked_rowsum" in listing.stdout, listing.stderr
    assert "ops declared by plugin 'rowsum_ops' (entry point 'rowsum_ops'" in listing.stdout, listing.stdout
    tuned = _run(["-m", "dispatch", "tune", "masked_rowsum", "--shape", "8x300", "--device", "cpu"], tmp_path,
                 package_installed)
    assert tuned.returncode == 0, tuned.stderr
    assert "rowsum_chunked" in tuned.stdout and "fastest when raced" in tuned.stdout, tuned.stdout
    explained = _run(["-m", "dispatch", "explain", "masked_rowsum", "--shape", "8x300", "--device", "cpu",
                      "--arg", "masked=False"], tmp_path, package_installed)
    assert explained.returncode == 0 and "unmasked" in explained.stdout, explained.stdout + explained.stderr
    ab = _run(["-m", "dispatch", "ab", "masked_rowsum", "--shape", "8x300", "--dtype", "float32", "--device", "cpu",
               "--backends", "torch,rowsum_chunked,rowsum_matmul", "--warmup", "2", "--rep", "5", "-q",
               "--json", str(tmp_path / "ab.json")], tmp_path, package_installed)
    assert ab.returncode == 0, ab.stdout + ab.stderr
    results = json.loads((tmp_path / "ab.json").read_text())["results"]
    assert {r["backend"]: r["status"] for r in results} == {
        "torch": "pass", "rowsum_chunked": "pass", "rowsum_matmul": "pass"}
    assert all(r["bytes_moved"] == 8 * 300 * (4 + 1) + 8 * 4 for r in results)


def test_spec_of_knows_the_packages_op_in_a_fresh_process(package_installed, tmp_path):
    # the guide's way to build a spec in a backend's tests, before anything else loads the plugins
    done = _run(["-c", "import torch; from dispatch.backend import spec_of; "
                 "print(spec_of('masked_rowsum', torch.ones(2, 3)).op)"], tmp_path, package_installed)
    assert done.returncode == 0 and done.stdout.split() == ["masked_rowsum"], done.stderr
