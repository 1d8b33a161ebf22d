"""Registers and spills of the Triton row kernel as compiled for this GPU: one line per op and dtype.

    python3 benchmarks/row_kernel_registers.py --path 3 --block-n 4096 --warps 4 [--maxnreg 168] [--asm DIR]

``--path`` is the kernel's PATH code (0 rows, 1 online, 2 split, 3 split_pipe, 4 chunks). A
program's registers decide how many programs a multiprocessor holds, so a jump here explains a
jump in a long-row benchmark. ``--asm DIR`` also writes each kernel's PTX and SASS there
(``<op>_<dtype>.ptx`` / ``.sass``): where the loads of the next rows and the wait for a row's
partials land in the machine code.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dispatch_triton.jit import _softmax_kernel as fn

_OPS = {"softmax": 0, "log_softmax": 1, "logsumexp": 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", type=int, default=3)
    ap.add_argument("--block-n", type=int, default=4096)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--maxnreg", type=int, default=None)
    ap.add_argument("--ops", default="softmax,log_softmax")
    ap.add_argument("--fast-exp", type=int, default=1)
    ap.add_argument("--asm", metavar="DIR", help="write each kernel's PTX and SASS to DIR")
    a = ap.parse_args()
    bad = [op for op in a.ops.split(",") if op not in _OPS]
    if bad:
        ap.error(f"--ops: {bad} not among {sorted(_OPS)}")
    if not torch.cuda.is_available():
        sys.exit("row_kernel_registers.py reads the registers of kernels loaded on a GPU: no CUDA device here")
    cap = triton.runtime.driver.active.get_current_target().arch
    for dt in ("bf16", "fp32"):
        ptrs = {"x_ptr": "*" + dt, "out_ptr": "*" + dt, "mask_ptr": "*i8", "ws_ptr": "*fp32", "sync_ptr": "*i32",
                "slot_ptr": "*i64"}
        for op in a.ops.split(","):
            consts = dict(OP=_OPS[op], HAS_MASK=False, PHASE=0, PATH=a.path, BLOCK_N=a.block_n, ROWS=1, SPLIT=1,
                          NW=a.warps, NS=1, FAST_EXP=a.fast_exp)
            sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in fn.arg_names}
            options = {"num_warps": a.warps} | ({"maxnreg": a.maxnreg} if a.maxnreg else {})
            k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", cap, 32),
                               options=options)
            k._init_handles()
            if a.asm:
                os.makedirs(a.asm, exist_ok=True)
                for kind in ("ptx", "sass"):
                    with open(os.path.join(a.asm, f"{op}_{dt}.{kind}"), "w") as f:
                        f.write(k.asm[kind])
            per_sm = 65536 // (-(-(k.n_regs * 32) // 256) * 256 * a.warps)
            print(f"{op} {dt} PATH={a.path} BLOCK_N={a.block_n} warps={a.warps} maxnreg={a.maxnreg}: "
                  f"{k.n_regs} registers, {k.n_spills} spills, {per_sm} programs an SM by registers", flush=True)


if __name__ == "__main__":
    main()
