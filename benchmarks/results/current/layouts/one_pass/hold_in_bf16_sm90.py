"""Does holding a one-pass tile in x's own 2-byte dtype (its exp computed again for the output,
nothing held in fp32) take fewer registers than holding it in fp32? A kernel of the bare one-pass
tile both ways (``HOLD`` 1 and 0), built for sm_90 without a GPU, its registers and stack
(spilled) bytes read back by ``registers_sm90.sm90_resources``: ``python3 hold_in_bf16_sm90.py``.
Nothing here runs: it asks the compiler only."""

from __future__ import annotations

import triton
import triton.language as tl

from dispatch_triton.jit import _exp
from registers_sm90 import sm90_resources  # beside this script


@triton.jit
def hold_kernel(x_ptr, out_ptr, n_iblocks, sxo, sxr, soo, sor, OP: tl.constexpr, BLOCK_R: tl.constexpr,
                BLOCK_I: tl.constexpr, HOLD: tl.constexpr, FAST_EXP: tl.constexpr):
    pid = tl.program_id(0)
    o = (pid // n_iblocks).to(tl.int64)
    cols = (pid % n_iblocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    rr = tl.arange(0, BLOCK_R)
    offs = rr[:, None] * sxr + cols[None, :]
    if HOLD == 1:  # x held as loaded; softmax = exp(x - (max + log(sum)))
        raw = tl.load(x_ptr + o * sxo + offs)
        m = tl.max(raw, 0).to(tl.float32)
        safe = tl.where(m == float("-inf"), 0.0, m)
        s = tl.sum(_exp(raw.to(tl.float32) - safe[None, :], FAST_EXP), 0)
        if OP == 0:
            y = _exp(raw.to(tl.float32) - (safe + tl.log(s))[None, :], FAST_EXP)
        else:
            y = (raw.to(tl.float32) - safe[None, :]) - tl.log(s)[None, :]
    else:  # x held in fp32, as the strided kernel's ONE_PASS does; softmax keeps its exps
        v = tl.load(x_ptr + o * sxo + offs).to(tl.float32)
        safe = tl.where(tl.max(v, 0) == float("-inf"), 0.0, tl.max(v, 0))
        e = _exp(v - safe[None, :], FAST_EXP)
        s = tl.sum(e, 0)
        if OP == 0:
            y = e * (1.0 / s)[None, :]
        else:
            y = (v - safe[None, :]) - tl.log(s)[None, :]
    tl.store(out_ptr + o * soo + rr[:, None] * sor + cols[None, :], y.to(out_ptr.dtype.element_ty))


def main() -> None:
    print(f"triton {triton.__version__}, sm_90, bf16 in and out, FAST_EXP")
    print("| op | held as | BLOCK_I x BLOCK_R | warps | elements a thread | registers | stack bytes |")
    print("|---|---|---|---|---|---|---|")
    io = {"x_ptr": "*bf16", "out_ptr": "*bf16"}
    for op, name in ((0, "softmax"), (1, "log_softmax")):
        for hold in (0, 1):
            for bi, br, warps in ((16, 1024, 8), (32, 1024, 16), (32, 1024, 8), (64, 1024, 16)):
                consts = dict(OP=op, BLOCK_R=br, BLOCK_I=bi, HOLD=hold, FAST_EXP=1)
                regs, stack = sm90_resources(hold_kernel, consts, warps, io)
                print(f"| {name} | {'bf16' if hold else 'fp32'} | {bi} x {br} | {warps} | "
                      f"{bi * br // (32 * warps)} | {regs} | {stack} |", flush=True)


if __name__ == "__main__":
    main()
