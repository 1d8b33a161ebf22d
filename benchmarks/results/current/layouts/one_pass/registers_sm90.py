"""Registers and local-memory stack of the strided kernel's tiles holding all of R (``ONE_PASS``),
bf16, as ptxas builds them for sm_90; no GPU needed (Triton's bundled ``cuobjdump`` reads the
cubin): ``python3 registers_sm90.py``. A program of ``warps`` warps at ``regs`` registers a
thread leaves ``65536 // (32 * warps * regs)`` programs on a multiprocessor; a stack above 0 is
spilled registers."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dispatch_triton.strided_jit import _strided_kernel as fn

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
# (BLOCK_I, BLOCK_R, warps): the default for R = 1024 and R = 256, and wider or fewer-warp tiles
TILES = ((16, 1024, 8), (32, 1024, 16), (16, 1024, 4), (64, 1024, 16), (16, 256, 2), (64, 256, 8))


def resources(cubin: bytes) -> tuple[int, int]:
    """``(registers, stack bytes)`` of the one kernel in ``cubin``."""
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True,
                             check=True).stdout
    finally:
        os.unlink(f.name)
    return int(re.search(r"REG:(\d+)", out).group(1)), int(re.search(r"STACK:(\d+)", out).group(1))


def sm90_resources(fn, consts: dict, warps: int, io: dict) -> tuple[int, int]:
    """``(registers, stack bytes)`` of the Triton kernel ``fn`` built for sm_90 with the constexprs
    ``consts`` at ``warps`` warps (``io``: the pointer arguments' types; every other argument i32)."""
    sig = {a: "constexpr" if a in consts else io.get(a, "i32") for a in fn.arg_names}
    kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    return resources(kernel.asm["cubin"])


def main() -> None:
    print(f"triton {triton.__version__}, sm_90, bf16 in and out, FAST_EXP, EVEN, I32")
    print("| op | BLOCK_I x BLOCK_R | warps | elements a thread | registers | stack bytes | programs an SM |")
    print("|---|---|---|---|---|---|---|")
    io = {"x_ptr": "*bf16", "out_ptr": "*bf16"}
    for op, name in ((0, "softmax"), (1, "log_softmax")):
        for bi, br, warps in TILES:
            consts = dict(OP=op, BLOCK_R=br, BLOCK_I=bi, ONE_PASS=1, EVEN=1, ACC_2D=0, PREFETCH=0, TMA=0, STAGES=1,
                          FAST_EXP=1, KEEP_X=0, I32=1, TAIL=0)
            regs, stack = sm90_resources(fn, consts, warps, io)
            print(f"| {name} | {bi} x {br} | {warps} | {bi * br // (32 * warps)} | {regs} | {stack} | "
                  f"{65536 // (32 * warps * regs)} |", flush=True)


if __name__ == "__main__":
    main()
