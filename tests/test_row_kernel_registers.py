"""benchmarks/row_kernel_registers.py: without a GPU it compiles the row kernel for a named target as
an aligned launch gets it (16-byte loads), reads its registers from the binary, and says what it needs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from benchmark_scripts import DIR, load

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def registers():
    return load("row_kernel_registers")


def test_programs_an_sm_follow_the_registers_a_warp_is_given(registers):
    assert registers.programs_an_sm(121, 2) == 8  # 121 x 32 registers a warp, in blocks of 256: 3968 -> 4096
    assert registers.programs_an_sm(32, 1) == 32  # no more than 32 programs an SM
    assert registers.programs_an_sm(32, 8) == 8  # no more than 64 warps an SM


@pytest.mark.skipif(torch.cuda.is_available(), reason="the binary is read where no GPU loads it")
def test_an_aligned_launch_loads_16_bytes_at_once_and_an_unaligned_one_does_not(registers, tmp_path):
    # its own process: this one runs Triton's interpreter, which compiles nothing
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    common = [sys.executable, str(DIR / "row_kernel_registers.py"), "--arch", "90", "--path", "4",
              "--block-n", "2048", "--warps", "1", "--ops", "logsumexp", "--dtypes", "bf16"]
    for extra, folder in (([], tmp_path / "aligned"), (["--unaligned"], tmp_path / "unaligned")):
        out = subprocess.run(common + extra + ["--asm", str(folder)], env=env, capture_output=True, text=True,
                             check=True).stdout
        found = re.search(r"sm_90(?: unaligned)?: (\d+) registers, (\d+) bytes of stack, (\d+) programs an SM", out)
        assert found, out
        assert int(found[3]) == registers.programs_an_sm(int(found[1]), 1)
    assert "LDG.E.EF.128" in (tmp_path / "aligned" / "logsumexp_bf16.sass").read_text()
    assert "LDG.E.EF.128" not in (tmp_path / "unaligned" / "logsumexp_bf16.sass").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_it_asks_for_a_target(registers):
    with pytest.raises(SystemExit, match="--arch 90"):
        registers.main(["--path", "4"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the binary is read where no GPU loads it")
def test_staged_chunks_copy_their_next_chunks_into_shared_memory(registers, tmp_path):
    # logsumexp's chunks with num_stages 3: the loads are Triton-pipelined cp.async copies (LDGSTS),
    # two chunks of shared memory a program, and a thread holds no chunk in flight in registers
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    common = [sys.executable, str(DIR / "row_kernel_registers.py"), "--arch", "90", "--path", "4",
              "--block-n", "2048", "--warps", "1", "--ops", "logsumexp", "--dtypes", "bf16"]
    got = {}
    for stages in (1, 3):
        folder = tmp_path / f"s{stages}"
        out = subprocess.run(common + ["--stages", str(stages), "--asm", str(folder)], env=env, capture_output=True,
                             text=True, check=True).stdout
        got[stages] = (out, (folder / "logsumexp_bf16.sass").read_text())
    out, sass = got[3]
    found = re.search(r"(\d+) registers.*?; (\d+) bytes of shared memory, (\d+) cp\.async", out)
    assert found, out
    assert int(found[2]) >= 2 * 2048 * 2 and int(found[3]) > 0 and "LDGSTS" in sass
    plain = re.search(r"(\d+) registers", got[1][0])
    assert "LDGSTS" not in got[1][1] and "shared memory" not in got[1][0]
    assert int(found[1]) < int(plain[1])  # the chunk in flight no longer waits in registers
