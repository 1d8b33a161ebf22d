"""Registers a thread of TileLang's shared-memory rows kernel (``smem_rows``) takes, as ptxas
compiles it for sm_90a: one line per distinct (op, chunk, cluster, threads) of the config space;
with ``--cases``, of its tiles over a leading dim (``smem_cols``): one line per config of
``smem_cols.configs`` at each case, built as shipped and with a launch bound; with ``--norms``, of
the norms' chunk-in-shared-memory forward (``smem_norms``, a weight, and layer_norm's bias): one
line per distinct config of the norm config space at each row length, built without and with
the launch bound, and which of the two ships (``smem_norms.ships_bound``).

    python3 benchmarks/smem_kernel_registers.py [--ops softmax,log_softmax] [--cols 32768,65536,131072] [--unbound]
    python3 benchmarks/smem_kernel_registers.py --ops softmax --cases 4096x4096:0,8x150x128x128:1
    python3 benchmarks/smem_kernel_registers.py --norms --ops rms_norm,layer_norm --cols 16384,65536,262144

Needs ``nvcc`` (no GPU): the kernel's CUDA source from TileLang, compiled with the flags TileLang's
build passes (``--use_fast_math`` where the program asks for fast math). A CTA's registers
(``threads x registers``, out of 64K an SM) cap how many CTAs an SM holds next to the cap of
their chunks in shared memory, so a jump here explains a jump in a long-row sweep. The kernel's
launch bound (``smem_rows.launch_bound``) asks ptxas for a number of CTAs an SM; ``--unbound``
compiles each config without it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "backends"))


def registers(source: str, fast_math: bool) -> tuple[str, str]:
    """ptxas's registers a thread and bytes of spill stores for ``source`` (an error's tail for both
    where it failed)."""
    import tilelang

    tl = os.path.dirname(tilelang.__file__)
    with tempfile.TemporaryDirectory() as tmp:
        cu = os.path.join(tmp, "k.cu")
        with open(cu, "w") as f:
            f.write(source)
        cmd = ["nvcc", "-std=c++20", "-w", "-gencode", "arch=compute_90a,code=sm_90a", "-DENABLE_BF16",
               f"-I{tl}/src", f"-I{tl}/3rdparty/cutlass/include", "-Xptxas", "-v", "-cubin",
               "-o", os.path.join(tmp, "k.cubin"), cu] + (["--use_fast_math"] if fast_math else [])
        out = subprocess.run(cmd, capture_output=True, text=True).stderr
    regs, spills = re.search(r"Used (\d+) registers", out), re.search(r"(\d+) bytes spill stores", out)
    if regs is None:
        return ("error: " + out.strip()[-300:],) * 2
    return regs.group(1), spills.group(1) if spills else "0"


def program_registers(program, **jit_kwargs) -> tuple[str, str]:
    """:func:`registers` of a ``@tilelang.jit`` program built with ``jit_kwargs``, with its fast math."""
    fast = bool((getattr(program, "pass_configs", None) or {}).get("tl.enable_fast_math"))
    return registers(program(**jit_kwargs).get_kernel_source(), fast)


def ctas_by_registers(regs: str, threads: int) -> int | str:
    """The CTAs of ``threads`` an sm_90 SM holds by their registers (allocated 8 a thread at a time)."""
    from dispatch_tilelang.smem_rows import SM_REGISTERS

    return SM_REGISTERS // (threads * -(-int(regs) // 8) * 8) if regs.isdigit() else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="softmax,log_softmax")
    ap.add_argument("--cols", default="32768,65536,131072,262144")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--unbound", action="store_true", help="each config built without the kernel's launch bound")
    ap.add_argument("--cases", default="", help="shape:dim list: the smem_cols kernel's configs at each")
    ap.add_argument("--norms", action="store_true", help="the smem_norms kernel's configs at each of --cols "
                    "(--ops rms_norm,layer_norm)")
    a = ap.parse_args()

    if shutil.which("nvcc") is None:
        ap.error("needs nvcc on PATH (the CUDA toolkit; no GPU)")
    if a.cases:
        return cols_registers(a.ops.split(","), a.cases.split(","), a.dtype)
    if a.norms:
        return norms_registers(a.ops.split(","), [int(n) for n in a.cols.split(",")], a.dtype)
    from dispatch_tilelang import configs as C
    from dispatch_tilelang import smem_rows
    from dispatch_tilelang.cuda_kernels import DTYPE_BYTES

    seen = set()
    print("| op | chunk | cluster | threads | walk steps | launch bound | registers | spill bytes | CTAs an SM: "
          "by registers / by shared memory and threads |")
    print("|---|---|---|---|---|---|---|---|---|")
    for op in a.ops.split(","):
        for n in map(int, a.cols.split(",")):
            for cfg in (c for c in C.config_space(op, 256, n, a.dtype, "cuda") if c.get("smem")):
                tile, cluster, threads = cfg["tile_n"], cfg["cluster"], cfg["threads"]
                if (op, tile, threads, cluster) in seen:
                    continue
                seen.add((op, tile, threads, cluster))
                program = smem_rows.program(op, n, a.dtype, a.dtype, tile, cluster, "sm_90", bound=not a.unbound)
                regs, spills = program_registers(program, block_m=1, threads=threads)
                steps = tile // (16 // DTYPE_BYTES[a.dtype] * threads)
                bound = "-" if a.unbound else smem_rows.launch_bound(tile, a.dtype, threads)
                by_regs = ctas_by_registers(regs, threads)
                by_smem = smem_rows.ctas_by_smem(tile, a.dtype, threads)
                print(f"| {op} | {tile} | {cluster} | {threads} | {steps} | {bound} | {regs} | {spills} | "
                      f"{by_regs} / {by_smem} |", flush=True)


def cols_registers(ops: list[str], cases: list[str], dtype: str) -> None:
    """One line per config of ``smem_cols.configs`` at each ``shape:dim`` case: its registers as
    shipped and with the launch bound, and the CTAs an SM that each leaves."""
    from dispatch_tilelang import smem_cols, smem_rows
    from dispatch_tilelang.cuda_kernels import DTYPE_BYTES
    from sweep_smem_cols import view3

    print("| op | case | block_i | cluster | threads | tile KB | registers (spill bytes) | with a bound of k: "
          "registers (spill bytes) | CTAs an SM: by registers, unbound / by shared memory and threads |")
    print("|---|---|---|---|---|---|---|---|---|")
    for op in ops:
        for case in cases:
            shape_s, dim_s = case.split(":")
            key = view3([int(v) for v in shape_s.split("x")], int(dim_s))
            for cfg in smem_cols.configs(key, dtype):
                bi, c, t = cfg["block_i"], cfg["cluster"], cfg["threads"]
                tr = smem_cols.tile_rows(key[1], dtype, bi, c, t)
                (regs, spills), (bregs, bspills) = (
                    program_registers(smem_cols.program(op, key, dtype, dtype, bi, tr, c, "sm_90", bound=bound),
                                      threads=t) for bound in (False, True))
                k = smem_cols.launch_bound(dtype, bi, tr, c, t)
                by_regs = ctas_by_registers(regs, t)
                by_smem = smem_rows.ctas_an_sm(smem_cols.smem_bytes(dtype, bi, tr, c), t)
                kb = tr * bi * DTYPE_BYTES[dtype] / 1024
                print(f"| {op} | {case} | {bi} | {c} | {t} | {kb:.0f} | {regs} ({spills}) | "
                      f"k={k}: {bregs} ({bspills}) | {by_regs} / {by_smem} |", flush=True)


def norms_registers(ops: list[str], cols: list[int], dtype: str) -> None:
    """One line per distinct chunk-in-shared-memory config of the norm config space at each row
    length: its registers without and with the launch bound, which ships, and the CTAs an SM that
    each leaves."""
    from dispatch_tilelang import norm_configs, smem_norms, smem_rows

    print("| op | N | chunk | cluster | threads | unbound: registers (spill bytes) | with a bound of k: registers "
          "(spill bytes) | ships | CTAs an SM: by registers, unbound / by shared memory and threads |")
    print("|---|---|---|---|---|---|---|---|---|")
    for op in ops:
        if op not in ("rms_norm", "layer_norm"):
            raise SystemExit(f"--norms takes --ops rms_norm and/or layer_norm (got {op!r})")
        for n in cols:
            for cfg in (c for c in norm_configs.config_space(256, n, "cuda", dtype) if c.get("smem")):
                tile, c, t = cfg["tile_n"], cfg["cluster"], cfg["threads"]
                (regs, spills), (bregs, bspills) = (
                    program_registers(smem_norms.program(op, n, dtype, True, op == "layer_norm", 1e-5, tile, c,
                                                         "sm_90", bound=bound), block_m=1, threads=t)
                    for bound in (False, True))
                k = smem_rows.launch_bound(tile, dtype, t)
                ships = "bound" if smem_norms.ships_bound(c, t) else "unbound"
                print(f"| {op} | {n} | {tile} | {c} | {t} | {regs} ({spills}) | k={k}: {bregs} ({bspills}) | {ships} | "
                      f"{ctas_by_registers(regs, t)} / {smem_rows.ctas_by_smem(tile, dtype, t)} |", flush=True)


if __name__ == "__main__":
    main()
