"""Registers and spills of the Triton row kernel as compiled for a GPU: one line per op and dtype.

    python3 benchmarks/row_kernel_registers.py --path 3 --block-n 4096 --warps 4 [--maxnreg 168] [--asm DIR]
    python3 benchmarks/row_kernel_registers.py --arch 90 --path 4 --block-n 4096 --warps 2 --ops logsumexp

``--path`` is the kernel's PATH code (0 rows, 1 online, 2 split, 3 split_pipe, 4 chunks). A
program's registers decide how many programs a multiprocessor holds, and with them the bytes an
SM has in flight (each program's chunk of ``BLOCK_N`` elements), so a jump here explains a jump
in a long-row benchmark. The kernel is compiled as a launch on aligned rows gets it: the
pointers, the row length and the strides known to be multiples of 16 (Triton's specialization;
``--unaligned`` leaves the hints out, and its loads narrow). On a GPU it is compiled for that GPU
and loaded; without one, ``--arch`` names the target (90: H100/H200) and the registers are read
from the binary. ``--asm DIR`` also writes each kernel's PTX and SASS there (``<op>_<dtype>.ptx``
/ ``.sass``): where the loads of the next rows and the wait for a row's partials land in the
machine code.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dispatch_triton.jit import _softmax_kernel as fn
from dispatch_triton.launch import programs_an_sm

_OPS = {"softmax": 0, "log_softmax": 1, "logsumexp": 2}
_ESZ = {"bf16": 2, "fp32": 4}
_TORCH_NAMES = {"bfloat16": "bf16", "float32": "fp32"}  # the other scripts' spelling, taken too
_HINTED = ("x_ptr", "out_ptr", "mask_ptr", "ws_ptr", "sync_ptr", "slot_ptr", "N", "stride_xm", "stride_om", "stride_mm")


def binary_usage(cubin: bytes) -> tuple[int, int]:
    """``(registers, stack bytes)`` of a kernel's binary, by the ``cuobjdump`` that Triton ships."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", out)
    if found is None:
        raise RuntimeError(f"no register count in cuobjdump's output:\n{out}")
    return int(found[1]), int(found[2])


def compile_kernel(op: str, dt: str, a, arch: int):
    """The row kernel of ``op`` on ``dt`` rows, for ``a``'s path, chunk and warps, compiled for ``sm_<arch>``."""
    ptrs = {"x_ptr": "*" + dt, "out_ptr": "*" + dt, "mask_ptr": "*i8", "ws_ptr": "*fp32", "sync_ptr": "*i32",
            "slot_ptr": "*i64"}
    consts = dict(OP=_OPS[op], HAS_MASK=False, PHASE=0, PATH=a.path, BLOCK_N=a.block_n, ROWS=1, SPLIT=1,
                  NW=a.warps, NS=a.stages, FAST_EXP=a.fast_exp, ALIGN=0, EVEN=int(a.path == 4 and not a.unaligned))
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in fn.arg_names}
    attrs = {} if a.unaligned else {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in _HINTED}
    options = {"num_warps": a.warps, "num_stages": a.stages} | ({"maxnreg": a.maxnreg} if a.maxnreg else {})
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                          target=GPUTarget("cuda", arch, 32), options=options)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", type=int, default=3)
    ap.add_argument("--block-n", type=int, default=4096)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--maxnreg", type=int, default=None)
    ap.add_argument("--stages", type=int, default=1,
                    help="num_stages (PATH 4 with 2 or more: the staged chunks, loads pipelined through shared memory)")
    ap.add_argument("--ops", default="softmax,log_softmax")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--fast-exp", type=int, default=1)
    ap.add_argument("--unaligned", action="store_true",
                    help="compile without the hints an aligned launch gets (multiples of 16)")
    ap.add_argument("--arch", type=int, default=None,
                    help="compute capability to compile for (90: H100/H200); without a GPU it must be given")
    ap.add_argument("--asm", metavar="DIR", help="write each kernel's PTX and SASS to DIR")
    a = ap.parse_args(argv)
    a.dtypes = ",".join(_TORCH_NAMES.get(dt, dt) for dt in a.dtypes.split(","))
    bad = [op for op in a.ops.split(",") if op not in _OPS] + [dt for dt in a.dtypes.split(",") if dt not in _ESZ]
    if bad:
        ap.error(f"--ops/--dtypes: {bad} not among {sorted(_OPS)} / {sorted(_ESZ)} (or bfloat16, float32)")
    on_gpu = torch.cuda.is_available()
    if a.arch is None and not on_gpu:
        sys.exit("row_kernel_registers.py compiles for this machine's GPU, and there is none: "
                 "--arch 90 compiles for an H100/H200 without one")
    arch = a.arch or triton.runtime.driver.active.get_current_target().arch
    for dt in a.dtypes.split(","):
        for op in a.ops.split(","):
            k = compile_kernel(op, dt, a, arch)
            if on_gpu and a.arch is None:
                k._init_handles()
                regs, spills = k.n_regs, f"{k.n_spills} spills"
            else:
                regs, stack = binary_usage(k.asm["cubin"])
                spills = f"{stack} bytes of stack"
            if a.asm:
                os.makedirs(a.asm, exist_ok=True)
                for kind in ("ptx", "sass"):
                    with open(os.path.join(a.asm, f"{op}_{dt}.{kind}"), "w") as f:
                        f.write(k.asm[kind])
            per_sm = programs_an_sm(regs, a.warps)
            smem = int(k.metadata.shared)
            staged = ""
            if a.stages > 1:
                copies = len(re.findall(r"cp\.async\.c[ag]", k.asm["ptx"]))
                both = programs_an_sm(regs, a.warps, smem)
                staged = (f"; {smem} bytes of shared memory, {copies} cp.async, {both} programs an SM by both "
                          f"({both * (a.stages - 1) * a.block_n * _ESZ[dt] // 1024} KB in flight)" if copies else
                          f"; {smem} bytes of shared memory, 0 cp.async: the loads are not pipelined")
            print(f"{op} {dt} PATH={a.path} BLOCK_N={a.block_n} warps={a.warps} stages={a.stages} "
                  f"maxnreg={a.maxnreg} sm_{arch}{' unaligned' if a.unaligned else ''}: {regs} registers, {spills}, "
                  f"{per_sm} programs an SM by registers ({per_sm * a.block_n * _ESZ[dt] // 1024} KB of chunks)"
                  f"{staged}", flush=True)


if __name__ == "__main__":
    main()
