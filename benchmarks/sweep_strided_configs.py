"""Sweep the Triton strided kernel's configs (softmax / logsumexp over a dim that is not unit-stride).

For each case (bench_layouts.py's: dim 0 of a 2-D tensor, dim 1 of (B, C, H, W), a transposed
view, a tall dim 0) and op, :class:`dispatch_triton.strided.StridedLauncher` is run under a grid
of configs: the tuned space (:func:`~dispatch_triton.strided_configs.config_space`), the default config
(marked ``*``), the default with each kernel variant (``EVEN``, ``PREFETCH``, ``ACC_2D``,
``num_stages``, ``TMA`` with 2-4 stages), larger tiles (up to 16K elements, 4-16 warps) with the
variants, R shared by 2-16 times as many programs as the default's (each with a shorter slab of R
to read twice), and ``ONE_PASS`` tiles holding all of R where R is short enough (``--grid`` picks
other grids). Beside
them: torch eager, ``torch.compile`` (``--compile``) and the copy of the same number of elements
(``y.copy_(x)``, contiguous).

Timing is ``dispatch.backend.measure``: CUDA events, median of ``--rep`` repetitions after
``--warmup``, the L2 flushed before each repetition (so the first read of the input comes from
HBM; a second pass over it may still hit L2), the back-to-back host rate left out (these kernels
are not host-bound). GB/s = (bytes read + bytes written once) / median; "% copy" is against
``dispatch.ab.measure_copy_bandwidth`` (a 512 MB buffer), "% same copy" against the same-size
copy. Every candidate's output is compared with torch's once before it is timed; a mismatch is
reported and the row kept out of the ranking. All candidates' kernels are compiled first, on a
thread pool (``StridedLauncher.compile``). Writes ``sweep.json`` and ``sweep.md`` under ``--out``::

    python3 benchmarks/sweep_strided_configs.py --out DIR [--quick] [--cases a,b] [--ops softmax,logsumexp]
        [--dtypes bfloat16[,float32]] [--compile] [--budget-s 200] [--device cpu]
        [--grid split|flags|wide|one_pass|walk|tail|offsets|coop]
        [--dim1 64x256x56x56,...]

``--device cpu`` is a smoke test under the Triton interpreter: tiny shapes, two or three configs per
case. On one H200, ``--quick`` (about 40 configs per case and op, 600 kernels) takes 1.5-3.5 minutes,
most of it compiling; without it (about 250 per case and op) far longer: narrow ``--cases``/``--ops``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1:][:1] == ["cpu"]:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402

from dispatch.ab import measure_copy_bandwidth, torch_compiled  # noqa: E402
from dispatch.backend import TuneSettings, measure  # noqa: E402
from dispatch_triton import strided as S  # noqa: E402

try:  # the same cases as bench_layouts.py
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_layouts import CASES as _LAYOUTS

    _LAYOUT_CASES = {name: (c.shape, c.view, c.dim) for name, c in _LAYOUTS.items()}
except Exception:  # noqa: BLE001 - run from elsewhere: the same definitions
    _LAYOUT_CASES = {}

# name -> (shape of the tensor allocated, view of it, dim)
CASES = {name: _LAYOUT_CASES.get(name, case) for name, case in {
    "dim0_4096x4096": ((4096, 4096), lambda t: t, 0),
    "dim1_32x1024x64x64": ((32, 1024, 64, 64), lambda t: t, 1),
    "transposed_4096x4096": ((4096, 4096), lambda t: t.t(), -1),
    "dim0_65536x128": ((65536, 128), lambda t: t, 0),
}.items()}
# and bench_layouts.py's other cases over one dim that is not the last (dim 1 of 64x256x56x56, ...)
CASES.update({name: (c.shape, c.view, c.dim) for name, c in (_LAYOUTS.items() if _LAYOUT_CASES else ())
              if c.family == "dim != -1" and isinstance(c.dim, int) and name not in CASES})
# the same layouts, tiny, for --device cpu
SMOKE_CASES = {
    "dim0_4096x4096": ((64, 48), lambda t: t, 0),
    "dim1_32x1024x64x64": ((2, 32, 4, 4), lambda t: t, 1),
    "transposed_4096x4096": ((48, 64), lambda t: t.t(), -1),
    "dim0_65536x128": ((256, 16), lambda t: t, 0),
}
FLAGS = ("EVEN", "PREFETCH", "ACC_2D", "ONE_PASS", "I32", "TMA", "FAST_EXP", "REVERSE", "KEEP_X")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def label(cfg: dict) -> str:
    s = f"I{cfg['BLOCK_I']} R{cfg['BLOCK_R']} w{cfg['num_warps']} s{cfg.get('SPLIT_R', 1)}"
    if "num_stages" in cfg:
        s += f" st{cfg['num_stages']}"
    if int(cfg.get("TAIL", 0)):
        s += f" T{cfg['TAIL']}"
    return s + "".join(f" {f}" for f in FLAGS if int(cfg.get(f, 0)))


def _key(cfg: dict) -> tuple:
    return tuple(sorted((k, int(v)) for k, v in cfg.items()))


def candidates(p: S.StridedPlan, device: torch.device, itemsize: int, quick: bool) -> list[dict]:
    """The configs swept for plan ``p``, the most telling first (compiles follow this order, so a
    time budget cuts the tail): the default, the default with each variant, larger tiles with the
    variants, ``ONE_PASS`` tiles, R shared by 2-16 times the programs, then the tuned space."""
    default = S.default_config(p, device, itemsize)
    out: dict[tuple, dict] = {}

    def add(cfg):
        out.setdefault(_key(cfg), dict(cfg))

    add(default)
    flag_sets = [dict(EVEN=1), dict(PREFETCH=1), dict(ACC_2D=1), dict(EVEN=1, PREFETCH=1),
                 dict(EVEN=1, PREFETCH=1, ACC_2D=1), dict(num_stages=4)]
    if not quick:
        flag_sets += [dict(num_stages=1), dict(num_stages=2)]
    tma_ok = p.x_strides[2] == 1 and p.inner > 1
    if tma_ok:
        flag_sets += [dict(TMA=1, EVEN=1), dict(TMA=1, EVEN=1, num_stages=4)]
    for extra in flag_sets:  # the default with each variant
        add(dict(default, **extra))
    top = max(16, min(256, S._np2(p.inner)))
    if tma_ok:  # TMA: pipelined loads, tiles of 8-16 KB in bf16, 3-4 stages; R split as usual and 4x
        for bi in ((64, 128) if quick else (32, 64, 128, 256)):
            if bi > top:
                continue
            for tile in ((4096, 8192) if quick else (2048, 4096, 8192)):
                br = tile // bi
                if not 8 <= br <= 256:
                    continue
                split = S.split_for(p, bi, br, device)
                for st in ((3, 4) if quick else (2, 3, 4)):
                    for w in ((8,) if quick else (4, 8)):
                        add(dict(S._cfg(bi, br, w, split), TMA=1, EVEN=1, num_stages=st))
                if split * 4 <= 64 and p.R // (split * 4) >= 2 * br:
                    add(dict(S._cfg(bi, br, 8, split * 4), TMA=1, EVEN=1, num_stages=4))
        for bi in (32, 64, 128):  # R much longer than the columns: splits past split_for's 64
            br = 4096 // bi
            for split in (128, 256):
                if (bi <= top and split * bi <= 8192 and p.R // split >= 2 * br
                        and p.outer * _cdiv(p.inner, bi) * 64 < 8 * 132):
                    add(dict(S._cfg(bi, br, 8, split), TMA=1, EVEN=1, num_stages=4))
    top = max(16, min(256, S._np2(p.inner)))
    tiles = (2048, 4096, 8192) if quick else (2048, 4096, 8192, 16384)
    widths = (16, 64, 128) if quick else (16, 32, 64, 128, 256)
    best_guess = [dict(EVEN=1, PREFETCH=1), dict(EVEN=1, PREFETCH=1, ACC_2D=1)]
    if not quick:
        best_guess += [{}, dict(EVEN=1), dict(EVEN=1, ACC_2D=1)]
    doubled = []
    for bi in widths:
        if bi > top:
            continue
        for tile in tiles:
            br = tile // bi
            if not 8 <= br <= 1024:
                continue
            warp_opts = {min(16, max(4, tile // 256))} | (set() if quick else {min(16, max(4, tile // 512))})
            for w in sorted(warp_opts):
                split = S.split_for(p, bi, br, device)
                for extra in best_guess:
                    if quick and extra.get("ACC_2D") and tile != 4096:
                        continue
                    add(dict(S._cfg(bi, br, w, split), **extra))
                if tile == 4096:  # more programs, each with a shorter slab of R (a smaller L2 working set)
                    for k in ((2, 8) if quick else (2, 4, 8, 16)):
                        if split * k <= 64 and p.R // (split * k) >= 2 * br:
                            doubled.append(dict(S._cfg(bi, br, w, split * k), EVEN=1, PREFETCH=1))
    # all of R in one tile: at most 16K elements, 16 to 64 per thread
    r2 = S._np2(p.R)
    for bi in (4, 8, 16, 32, 64):
        if bi > top or bi * r2 > 16384 or r2 < 16:
            continue
        for w in (8, 16):
            if 16 <= bi * r2 // (32 * w) <= 64:
                add(dict(S._cfg(bi, r2, w), ONE_PASS=1, EVEN=1))
    for cfg in doubled:
        add(cfg)
    # R much longer than the columns (65536x128): more programs than split_for's 64 splits give,
    # the finish merging SPLIT_R x BLOCK_I partials (4K at most)
    for bi in (16, 32, 64):
        if bi > top:
            continue
        for split in (128, 256):
            br = 64 if bi <= 32 else 32
            if split * bi <= 4096 and p.R // split >= 2 * br and p.outer * _cdiv(p.inner, bi) * 64 < 8 * 132:
                add(dict(S._cfg(bi, br, 8, split), EVEN=1, PREFETCH=1))
    for cfg in S.config_space(p, device, itemsize):  # the tuned space (quick: its larger tiles at 4 warps)
        if not quick or (cfg["BLOCK_I"] * cfg["BLOCK_R"] >= 2048 and cfg["num_warps"] == 4):
            add(cfg)
    return list(out.values())


def _split_per_sm(p: S.StridedPlan, blocks: int, programs: int, most: int, block_r: int) -> int:
    """The largest power of two, at most ``most``, that shares R among no more than ``programs``
    programs over ``blocks`` column blocks and leaves each two chunks of ``block_r`` rows at least."""
    split = 1
    while split * 2 * blocks <= programs and split * 2 <= most and p.R // (split * 2) >= 2 * block_r:
        split *= 2
    return split


def split_candidates(p: S.StridedPlan, device: torch.device, itemsize: int) -> list[dict]:
    """``ACC_2D`` + ``PREFETCH`` tiles of 16-64 elements a thread with R shared by enough programs to
    fill the device (2 to 8 programs per SM): the default, then these (``--grid split``). More
    elements a thread put more loads in flight per thread; the variants grid holds few such tiles."""
    sms = S._device_sms(device)
    out: dict[tuple, dict] = {}
    default = S.default_config(p, device, itemsize)
    out[_key(default)] = default
    top = max(16, S._np2(p.inner))
    for bi, br in ((16, 64), (16, 256), (32, 64), (32, 128), (64, 32), (64, 64), (64, 128), (128, 16),
                   (128, 32), (128, 64), (256, 8), (256, 16), (512, 8)):
        if bi > top:
            continue
        for w in (2, 4, 8):
            per_thread = bi * br // (32 * w)
            if not 16 <= per_thread <= 64:
                continue
            blocks = p.outer * _cdiv(p.inner, bi)
            for per_sm in (2, 4, 8):
                # the finish merges a [SPLIT_R, BLOCK_I] tile of partials
                split = _split_per_sm(p, blocks, per_sm * sms, min(256, 8192 // bi), br)
                cfg = dict(S._cfg(bi, br, w, split), ACC_2D=1, PREFETCH=1, EVEN=1)
                out.setdefault(_key(cfg), cfg)
    return list(out.values())


def wide_candidates(p: S.StridedPlan, device: torch.device, itemsize: int) -> list[dict]:
    """Column blocks of 256-2048 (64-128 where the inner dim is narrower) with a few rows a chunk, each
    warp on its own columns (16-byte loads,
    the chunk's rows in one thread, so each chunk reduces over its rows without leaving the thread),
    R shared by enough programs for 4-16 per SM, the partials merged in steps; plain and with
    ``ACC_2D`` (``--grid wide``). The default first."""
    sms = S._device_sms(device)
    vec = 16 // itemsize
    default = S.default_config(p, device, itemsize)
    out: dict[tuple, dict] = {_key(default): default}
    fast = {} if S._interpreting() else dict(FAST_EXP=1)
    for bi in (64, 128, 256, 512, 1024, 2048):
        if bi > S._np2(p.inner) or (bi < 256 and S._np2(p.inner) >= 256):  # 64-128: an inner dim under 256
            continue
        w0 = max(1, bi // (32 * vec))
        if w0 > 16:
            continue
        for br in (2, 4, 8, 16):
            if not 8 <= br * vec <= 64:
                continue
            blocks = p.outer * _cdiv(p.inner, bi)
            for per_sm in (4, 8, 16):
                split = _split_per_sm(p, blocks, per_sm * sms, 256, br)
                base = dict(S._cfg(bi, br, w0, split), EVEN=1, PREFETCH=1, **fast)
                out.setdefault(_key(base), base)
                if per_sm == 8:
                    acc = dict(base, ACC_2D=1)
                    out.setdefault(_key(acc), acc)
                    if w0 * 2 <= 16:
                        wider = dict(base, num_warps=w0 * 2)
                        out.setdefault(_key(wider), wider)
    return list(out.values())


def flag_candidates(p: S.StridedPlan, device: torch.device, itemsize: int) -> list[dict]:
    """The default config alone and with ``FAST_EXP``, ``REVERSE`` (where R is split) and both,
    and with ``KEEP_X`` where softmax and log_softmax read x twice (``--grid flags``)."""
    default = S.default_config(p, device, itemsize)
    out = [default, dict(default, FAST_EXP=1)]
    if default.get("SPLIT_R", 1) > 1:
        out += [dict(default, REVERSE=1), dict(default, FAST_EXP=1, REVERSE=1)]
    if p.out_strides[1] != 0 and not default.get("ONE_PASS"):  # x read twice: L2 hints
        out.append(dict(default, FAST_EXP=1, KEEP_X=1))
    return out


def one_pass_candidates(p: S.StridedPlan, device: torch.device, itemsize: int) -> list[dict]:
    """Tiles holding all of R (``ONE_PASS``) of 8-4096 columns and up to 32K elements, 1-16 warps,
    8-64 elements a thread (``--grid one_pass``). The default first."""
    default = S.default_config(p, device, itemsize)
    out: dict[tuple, dict] = {_key(default): default}
    fast = {} if S._interpreting() else dict(FAST_EXP=1)
    r2 = S._np2(p.R)
    for bi in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
        if bi * r2 > S._ONE_PASS_MAX or bi > max(8, S._np2(p.inner)):
            continue
        for w in (1, 2, 4, 8, 16):
            if 8 <= bi * r2 // (32 * w) <= 64:
                cfg = dict(S._cfg(bi, r2, w), ONE_PASS=1, EVEN=1, **fast)
                out.setdefault(_key(cfg), cfg)
    return list(out.values())


def _held_tiles(p: S.StridedPlan, fast: dict, per_thread: tuple[int, int]) -> list[dict]:
    """Tiles holding all of R: in two tiles (``TAIL``) where that pads R less than one tile, then
    padded to its next power of two; 16-512 columns, 1-16 warps, ``per_thread`` (least, most)
    elements a thread."""
    head, tail = S.head_tail(p.R)
    r2 = S._np2(p.R)
    out = []
    for br, t in ([(head, tail)] if tail and head + tail < r2 else []) + [(r2, 0)]:  # a budget cuts the last
        for bi in (16, 32, 64, 128, 256, 512):
            if bi * (br + t) > S._ONE_PASS_MAX or bi > max(16, S._np2(p.inner)):
                continue
            for w in (1, 2, 4, 8, 16):
                if per_thread[0] <= bi * (br + t) // (32 * w) <= per_thread[1]:
                    out.append(dict(S._cfg(bi, br, w), ONE_PASS=1, EVEN=1, **fast, **(dict(TAIL=t) if t else {})))
    return out


def tail_candidates(p: S.StridedPlan, device: torch.device, itemsize: int) -> list[dict]:
    """Where R is not a power of two: tiles holding all of R in two tiles (``TAIL``: R = 150 as
    128 + 32 rows) and padded to its next power of two, 16-512 columns, 1-16 warps, 16-96 elements
    a thread (``--grid tail``). The default first."""
    default = S.default_config(p, device, itemsize)
    out: dict[tuple, dict] = {_key(default): default}
    for cfg in _held_tiles(p, {} if S._interpreting() else dict(FAST_EXP=1), (16, 96)):
        out.setdefault(_key(cfg), cfg)
    return list(out.values())


def offsets_candidates(p: S.StridedPlan, device: torch.device, itemsize: int) -> list[dict]:
    """Tiles holding all of R (in two tiles where that pads less, and padded to its next power of
    two), 16-512 columns, 1-16 warps, 32-128 elements a thread, each with and without ``I32``
    (the tile's offsets in 32 bits: fewer registers) (``--grid offsets``). The default first, then
    the default with ``I32`` (without it where the default has it)."""
    default = S.default_config(p, device, itemsize)
    out: dict[tuple, dict] = {_key(default): default}
    if default.get("ONE_PASS"):  # the default with I32 flipped
        flip = {k: v for k, v in default.items() if k != "I32"} if default.get("I32") else dict(default, I32=1)
        out.setdefault(_key(flip), flip)
    for cfg in _held_tiles(p, {} if S._interpreting() else dict(FAST_EXP=1), (32, 128)):
        for c in (cfg, dict(cfg, I32=1)):
            out.setdefault(_key(c), c)
    return list(out.values())


def walk_candidates(p: S.StridedPlan, device: torch.device, itemsize: int) -> list[dict]:
    """R walked by one program a column block (``SPLIT_R`` 1): tiles of 1K-8K elements, 16-128
    columns, 4 or 8 warps, each with a running max and sum per element and the next chunk in flight,
    with and without ``KEEP_X`` (the second read from L2 while the column blocks in flight fit in
    it) (``--grid walk``). The default first."""
    default = S.default_config(p, device, itemsize)
    out: dict[tuple, dict] = {_key(default): default}
    fast = {} if S._interpreting() else dict(FAST_EXP=1)
    for bi in (16, 32, 64, 128):
        for br in (8, 16, 32, 64):
            if not 1024 <= bi * br <= 8192 or br > S._np2(p.R):
                continue
            for w in (4, 8):
                cfg = dict(S._cfg(bi, br, w), ACC_2D=1, PREFETCH=1, EVEN=1, **fast)
                out.setdefault(_key(cfg), cfg)
                if p.out_strides[1] != 0:  # softmax, log_softmax: x read twice
                    keep = dict(cfg, KEEP_X=1)
                    out.setdefault(_key(keep), keep)
    return list(out.values())


def coop_candidates(p: S.StridedPlan, device: torch.device, itemsize: int) -> list[dict]:
    """softmax and log_softmax with R in tiles held by a group of programs that exchange their
    columns' partials in one launch (``COOP``): 32-256 columns, tiles of 32 rows or more, as few
    tiles a column block as hold R at 32-64 elements a thread (4-16 warps), no more than the SMs
    nor a sixteenth of a tile's rows (each program reads the group's partials: 16 bytes a tile and
    column), each with ``I32`` and without (``--grid coop``). The default first."""
    default = S.default_config(p, device, itemsize)
    out: dict[tuple, dict] = {_key(default): default}
    if p.out_strides[1] == 0:  # logsumexp: COOP writes softmax and log_softmax only
        return list(out.values())
    fast = {} if S._interpreting() else dict(FAST_EXP=1)
    sms = S._device_sms(device)
    for bi in (32, 64, 128, 256):
        if bi > max(32, S._np2(p.inner)):
            continue
        for br in (32, 64, 128, 256, 512, 1024):
            tiles = -(-p.R // br)
            # every program reads the group's 2 x tiles x bi partials: at most a quarter of its own tile's bytes
            if tiles > sms or 16 * tiles > br or (tiles == 1 and br > 32) or br > 2 * S._np2(p.R):
                continue
            for w in (4, 8, 16):
                if 32 <= bi * br // (32 * w) <= 64:
                    cfg = dict(S._cfg(bi, br, w, tiles), COOP=1, EVEN=1, **fast)
                    for c in (cfg, dict(cfg, I32=1)):
                        out.setdefault(_key(c), c)
    return list(out.values())


def smoke_candidates(p: S.StridedPlan, device: torch.device, itemsize: int) -> list[dict]:
    default = S.default_config(p, device, itemsize)
    out = [default, dict(default, EVEN=1, PREFETCH=1, ACC_2D=1)]
    if p.x_strides[2] == 1 and p.inner > 1:
        out.append(dict(default, TMA=1, EVEN=1, num_stages=2))
    return out


# --grid, beside the default "variants"
GRIDS = {"split": split_candidates, "flags": flag_candidates, "wide": wide_candidates,
         "one_pass": one_pass_candidates, "walk": walk_candidates, "tail": tail_candidates,
         "offsets": offsets_candidates, "coop": coop_candidates}


def _nbytes(x: torch.Tensor, out_numel: int) -> int:
    return (x.numel() + out_numel) * x.element_size()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for sweep.json and sweep.md")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--dim1", default="", help="more cases: dim 1 of contiguous tensors of these shapes "
                        "(comma-separated, e.g. 64x256x56x56); with them --cases defaults to none")
    parser.add_argument("--ops", default="softmax,logsumexp", help="of softmax, log_softmax, logsumexp")
    parser.add_argument("--dtypes", default="bfloat16", help="comma-separated: bfloat16, float32")
    parser.add_argument("--quick", action="store_true", help="a smaller grid (about 40 configs per case and op)")
    parser.add_argument("--grid", default="variants",
                        choices=("variants", *GRIDS),
                        help="variants: the kernel variants and tile sizes (default); split: ACC_2D tiles with R "
                             "shared by 2-8 programs per SM; flags: the default with FAST_EXP and REVERSE; wide: "
                             "column blocks of 256-2048, a few rows a chunk; one_pass: tiles holding all of R, 8-4096 "
                             "columns, 1-16 warps; walk: R walked by one program a column block, with and without "
                             "KEEP_X; tail: where R is not a power of two, tiles of all of R padded and in two "
                             "tiles (TAIL); offsets: tiles of all of R with and without I32")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile (10-20 s per case and op)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: a smoke test under the Triton interpreter (tiny shapes, two or three configs)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rep", type=int, default=40)
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1), help="compile threads")
    parser.add_argument("--budget-s", type=float, default=200.0,
                        help="stop timing new candidates after this many seconds (what was timed is written)")
    parser.add_argument("--timing-reserve-s", type=float, default=45.0,
                        help="of --budget-s, the seconds kept for timing: compiling stops before")
    args = parser.parse_args(argv)
    t0 = time.time()
    smoke = args.device == "cpu"
    if not smoke and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --device cpu for the smoke test")
    device = torch.device(args.device)
    cases = [c for c in args.cases.split(",") if c] if args.dim1 == "" or "--cases" in (argv or sys.argv) else []
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; known: {', '.join(CASES)}")
    for text in (t for t in args.dim1.split(",") if t):
        try:
            shape = tuple(int(n) for n in text.split("x"))
        except ValueError:
            raise SystemExit(f"--dim1: {text!r} is not a shape like 64x256x56x56") from None
        if len(shape) < 2 or min(shape) < 1:
            raise SystemExit(f"--dim1: {text!r} needs two dims or more, each at least 1")
        CASES[f"dim1_{text}"] = (shape, lambda t: t, 1)
        SMOKE_CASES[f"dim1_{text}"] = (tuple(min(n, 8) for n in shape), lambda t: t, 1)
        cases.append(f"dim1_{text}")
    ops = [o for o in args.ops.split(",") if o]
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",") if d]
    settings = TuneSettings(warmup=args.warmup, rep=args.rep, host_bound=False, flush_l2=True)
    if smoke:
        settings = TuneSettings(warmup=1, rep=3, host_bound=False)
    copy = measure_copy_bandwidth(device, settings)
    copy_gbps = copy.gbps
    print(f"copy bandwidth ({copy.nbytes >> 20} MB buffer): {copy_gbps:.0f} GB/s  [{time.time() - t0:.1f} s]",
          flush=True)

    # 1. inputs, plans, launchers; every candidate's kernels compiled on a thread pool
    jobs = []  # (case, dtype, op, x, dim, plan, want, [(cfg, launcher or error)])
    for name in cases:
        shape, view, dim = (SMOKE_CASES if smoke else CASES)[name]
        for dtype in dtypes:
            x = view(torch.randn(*shape, device=device, dtype=dtype))
            d = dim % x.dim()
            for op in ops:
                p = S.plan(op, x.shape, x.stride(), (d,))
                if isinstance(p, str):
                    print(f"{name} {op}: no strided plan ({p})")
                    continue
                want = getattr(torch, op)(x, d)
                if smoke:
                    cfgs = smoke_candidates(p, device, x.element_size())
                elif args.grid in GRIDS:
                    cfgs = GRIDS[args.grid](p, device, x.element_size())
                else:
                    cfgs = candidates(p, device, x.element_size(), args.quick)
                built = []
                for cfg in cfgs:
                    try:
                        built.append((cfg, S.StridedLauncher(op, p, want.dtype, want.shape, device, cfg)))
                    except Exception as exc:  # noqa: BLE001 - a config the launcher refuses is reported
                        built.append((cfg, f"{type(exc).__name__}: {exc}"))
                jobs.append((name, dtype, op, x, d, p, want, built))
    # round robin over the case/op/dtype jobs, each in its candidates' order: a budget cuts tails
    queues = [[(launcher, x) for _c, launcher in built if not isinstance(launcher, str)]
              for *_, x, _d, _p, _w, built in jobs]
    todo = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]
    compile_budget = args.budget_s - args.timing_reserve_s
    print(f"{len(todo)} candidates over {len(jobs)} case/op/dtype; compiling on {args.workers} threads "
          f"(until {compile_budget:.0f} s)", flush=True)
    errors: dict[int, str] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, args.workers))
    futures = [(id(launcher), pool.submit(launcher.compile, x)) for launcher, x in todo]
    for i, (lid, fut) in enumerate(futures, 1):
        left = compile_budget - (time.time() - t0)
        try:
            if left <= 0 and not fut.done():
                raise FutureTimeout
            fut.result(timeout=max(left, 0.001))
        except FutureTimeout:
            errors[lid] = "not compiled: --budget-s reached"
            continue
        except Exception as exc:  # noqa: BLE001 - a config that does not compile is reported
            errors[lid] = f"compile: {type(exc).__name__}: {str(exc)[:200]}"
        if i % 25 == 0 or i == len(futures):
            print(f"  compiled {i}/{len(futures)}  [{time.time() - t0:.1f} s]", flush=True)
    skipped = sum(1 for why in errors.values() if why.startswith("not compiled"))
    if skipped:
        print(f"  compile budget reached: {skipped} candidates left out", flush=True)
    pool.shutdown(wait=True, cancel_futures=True)

    # 2. time: copy of the same size, torch, torch.compile, every candidate
    results = []
    stopped = False
    for name, dtype, op, x, d, p, want, built in jobs:
        nbytes = _nbytes(x, want.numel())
        src = torch.randn(x.numel(), device=device, dtype=dtype)
        dst = torch.empty_like(src)
        same = measure(lambda: dst.copy_(src), device, settings)
        same_gbps = 2 * src.numel() * src.element_size() / same.median_us / 1e3
        del src, dst
        read = measure(lambda: x.amax(d), device, settings)  # a read of x along the same dim: torch's own
        rows = []

        def record(who, cfg, fn, is_default=False):
            row = {"contender": who, "config": cfg, "default": is_default}
            try:
                got = fn()
                bad = not torch.allclose(got.float(), want.float(), atol=2e-2 if dtype == torch.bfloat16 else 1e-4,
                                         rtol=2e-2 if dtype == torch.bfloat16 else 1e-4, equal_nan=True)
                row["max_abs_err"] = (got.float() - want.float()).abs().nan_to_num().max().item()
                if bad:
                    row["error"] = f"mismatch: max abs err {row['max_abs_err']:.3g}"
                else:
                    t = measure(fn, device, settings)
                    row.update(median_us=t.median_us, spread_us=t.spread_us, gbps=nbytes / t.median_us / 1e3)
                    row["pct_copy"] = 100.0 * row["gbps"] / copy_gbps
                    row["pct_same_copy"] = 100.0 * row["gbps"] / same_gbps
            except Exception as exc:  # noqa: BLE001 - a contender that fails is reported, the rest run
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)

        eager = getattr(torch, op)
        record("torch", None, lambda: eager(x, d))
        if args.compile and not smoke:
            compiled = torch_compiled(eager)
            record("torch.compile", None, lambda: compiled(x, d))
        default = S.default_config(p, device, x.element_size())
        for cfg, launcher in built:
            if time.time() - t0 > args.budget_s:
                stopped = True
                rows.append({"contender": "triton", "config": cfg, "default": cfg == default,
                             "error": "not timed: --budget-s reached"})
                continue
            if isinstance(launcher, str) or id(launcher) in errors:
                rows.append({"contender": "triton", "config": cfg, "default": cfg == default,
                             "error": launcher if isinstance(launcher, str) else errors[id(launcher)]})
                continue
            record("triton", cfg, lambda launcher=launcher: launcher.run(x), cfg == default)
        results.append({"case": name, "shape": list(x.shape), "stride": list(x.stride()), "dim": d,
                        "dtype": str(dtype).removeprefix("torch."), "op": op,
                        "plan": {"outer": p.outer, "R": p.R, "inner": p.inner},
                        "bytes": nbytes, "same_copy_us": same.median_us, "same_copy_gbps": same_gbps,
                        "read_amax_us": read.median_us,
                        "rows": rows})
        print(table(results[-1]), flush=True)
        print(f"[{time.time() - t0:.1f} s]", flush=True)

    if stopped:
        print(f"--budget-s {args.budget_s:.0f} reached: later candidates were not timed", flush=True)
    result = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter)",
              "torch": torch.__version__, "triton": _triton_version(), "copy_gbps": copy_gbps,
              "copy_bytes": copy.nbytes, "settings": {"warmup": settings.warmup, "rep": settings.rep,
                                                      "flush_l2": settings.flush_l2, "host_bound": False},
              "quick": args.quick, "stopped_by_budget": stopped, "wall_s": time.time() - t0, "cases": results}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "sweep.md"), "w") as f:
        f.write(markdown(result))
    print(f"wrote {args.out}/sweep.json and sweep.md  [{time.time() - t0:.1f} s]")


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except Exception:  # noqa: BLE001
        return "?"


def _ranked(case: dict) -> list[dict]:
    ok = sorted((r for r in case["rows"] if "median_us" in r), key=lambda r: r["median_us"])
    return ok + [r for r in case["rows"] if "median_us" not in r]


def _who(r: dict) -> str:
    if r["config"] is None:
        return r["contender"]
    return ("* " if r["default"] else "  ") + label(r["config"])


def table(case: dict) -> str:
    head = (f"== {case['case']} {case['dtype']} {case['op']}  shape {case['shape']} stride {case['stride']} "
            f"dim {case['dim']}  (outer, R, inner) = ({case['plan']['outer']}, {case['plan']['R']}, "
            f"{case['plan']['inner']})  same-size copy {case['same_copy_us']:.1f} us"
            + (f", x.amax(dim) {case['read_amax_us']:.1f} us" if "read_amax_us" in case else ""))
    lines = [head, f"{'config (* default)':<44} {'us':>9} {'GB/s':>7} {'% copy':>7} {'% same':>7}"]
    for r in _ranked(case):
        if "error" in r:
            lines.append(f"{_who(r):<44} error: {r['error'][:100]}")
        else:
            lines.append(f"{_who(r):<44} {r['median_us']:9.1f} {r['gbps']:7.0f} {r['pct_copy']:6.1f}% "
                         f"{r['pct_same_copy']:6.1f}%")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    lines = [f"# Strided kernel config sweep: {result['device']}, torch {result['torch']}, Triton {result['triton']}",
             "", f"Copy bandwidth (read + write): {result['copy_gbps']:.0f} GB/s. Medians of "
             f"dispatch.backend.measure ({'CUDA events, ' if result['device'].startswith('cpu') is False else ''}"
             f"warm-up {result['settings']['warmup']}, {result['settings']['rep']} repetitions"
             f"{', L2 flushed before each' if not result['device'].startswith('cpu') else ''}, host rate not counted). "
             "GB/s = (bytes read + bytes written once) / median; % same = against the copy of the same "
             "number of elements. `*` marks the default config. Flags: see dispatch_triton/strided_jit.py.", ""]
    if result["stopped_by_budget"]:
        lines += ["**The time budget ran out: later candidates were not timed.**", ""]
    for case in result["cases"]:
        lines += [f"## {case['case']} {case['dtype']} {case['op']}", "",
                  f"shape {case['shape']}, stride {case['stride']}, dim {case['dim']}; (outer, R, inner) = "
                  f"({case['plan']['outer']}, {case['plan']['R']}, {case['plan']['inner']}); same-size copy "
                  f"{case['same_copy_us']:.1f} us ({case['same_copy_gbps']:.0f} GB/s)"
                  + (f"; torch's `x.amax(dim)` (one read of x) {case['read_amax_us']:.1f} us"
                     if "read_amax_us" in case else ""), "",
                  "| config | us | GB/s | % copy | % same copy |", "|---|---|---|---|---|"]
        for r in _ranked(case):
            who = _who(r).strip().replace("* ", "**default** ")
            if "error" in r:
                lines.append(f"| {who} | error: {r['error'][:100]} | | | |")
            else:
                lines.append(f"| {who} | {r['median_us']:.1f} | {r['gbps']:.0f} | {r['pct_copy']:.1f} | "
                             f"{r['pct_same_copy']:.1f} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
