"""rms_norm and layer_norm on Triton, host side: config spaces, the forward launcher, Triton's native
autotuner over the forward kernel and the backend's hooks (kernels in :mod:`dispatch_triton.norm_kernels`;
the backward in :mod:`dispatch_triton.norm_backward`).

A config is a dict: ``BLOCK_N`` (a power of two), ``ROWS`` (rows per tile, one-pass only),
``SPLIT`` (programs per row, chunked only; a power of two), ``PERSIST`` (one-pass only: 0 for a
program per tile, k for a persistent grid of k programs per multiprocessor that load the next tile
while working on the current one), ``COOP`` (1: the cooperative path; ``BLOCK_N`` is then a
program's chunk, at most 128 of them a row), ``num_warps``, ``num_stages``. It is one-pass when
``BLOCK_N`` covers the bucketed row length. Optional keys (0 when absent):

* ``PREFETCH`` (chunked and split paths): the next chunk's load in flight while the current one
  is reduced or written;
* ``HINTS``: L2 eviction hints (see :mod:`dispatch_triton.norm_kernels`);
* ``ONE_SUM`` (rows in registers): layer_norm's sum and sum of squares in one reduction
  (``_rows_out``);
* ``WB_EACH`` (a persistent grid, ``COOP``): the weight and bias loaded again (from L2) for each
  tile or row rather than held in registers across them;
* ``LANES`` (the chunked and split paths, layer_norm): a row's (or segment's) statistics from a
  running (mean, M2) per lane, merged at the end, rather than sums about a row shift, which take
  a second walk wherever the shift lands more than a standard deviation from the mean (rows
  with massive elements in two of the shift's three groups);
* ``REGS`` (any path but a persistent one, which sets its own): the registers a thread may use
  (``maxnreg``);
* ``STAGES`` (a persistent grid): the tile loop pipelined by Triton in 2..8 stages, the next tiles'
  loads going to shared memory rather than to a register double buffer.

Forward, by the row length's bucket (the default of each; the tune space holds a handful more):

* up to 1024: tiles of 4 KB (2048 elements of 2 bytes, 1024 of fp32; several rows each), 4 warps;
* 2048 and 4096: a row per program, 16 elements a thread (4 and 8 warps), but layer_norm's fp32
  rows of 2048 two a program of 4 warps, its 2-byte rows of 4096 4 warps, its fp32 ones 16;
* 8192: a row per program, 8 warps (32 elements a thread: two programs a multiprocessor);
  layer_norm's 2-byte rows in a persistent grid of two such programs a multiprocessor;
* 16384: bf16/fp16 rows in a persistent grid of one program per multiprocessor (32 warps;
  layer_norm's 16), the next row's load in flight while one is reduced and written; fp32 rows
  (twice the bytes in flight per register) a program per row of 16 warps, but for rms_norm a
  persistent grid of 16-warp programs and for layer_norm 32 warps with ``ONE_SUM``;
* rms_norm's fp32 rows of 4096 and 8192 are not held: a program of 8 warps walks a row twice in
  chunks of a quarter (4096) or a half (8192), ``PREFETCH`` and ``HINTS``, as long rows do;
* longer: a row's chunks held in registers by a group of programs that exchange partial sums
  (``COOP``: one launch, x read once, pipelined one row ahead; 2048-element chunks of 4 warps;
  rms_norm's at 96 registers a thread, its 2-byte rows loading the weight for each row), except
  for 2-byte rows of up to 64K with rows for 1.5 programs a multiprocessor or more, where
  a program per row walks it twice (the second pass newest chunks first, mostly from L2) in
  chunks of 8192 elements, 16 warps, PREFETCH and HINTS. layer_norm's 2-byte rows of up to 64K
  written as float32 (``out_dtype``, autocast) take the exchange there, in 4096-element chunks
  past 32K and 2048 up to it: twice the bytes written leave the walk's second read less of the L2.
  On an H200, ``COOP`` took the forward of 64 x 262144 from 61-63% to 75-85% of a same-size copy
  (rms_norm bf16/fp32, layer_norm fp32); for 2-byte rows of 32K-64K the program per row ran 2-4%
  faster for rms_norm and 23-25% for layer_norm
  (``benchmarks/sweep_norm_configs.py``). The tune space also holds the split path (rows cut
  into ``SPLIT`` segments, two launches).

A persistent grid is never larger than what is resident at once: its programs are compiled with
``maxnreg`` so that they fit (a program waiting for a slot would wait for another to finish).

Every launch goes through a :class:`~dispatch_triton.direct.DirectLaunch`: after the first call
the compiled kernel's launcher is called with its arguments prepacked.
"""

from __future__ import annotations

import threading

import torch
import triton

from dispatch.backend import placeholder, unique_configs

from . import _interpreting
from .direct import DirectLaunch
from .buffers import _split_slots
from .launch import _occupancy_of, exchange_groups
from .norm_kernels import _norm_fwd

NORM_OPS = ("rms_norm", "layer_norm")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_N = 1 << 20  # longest row served
_MAX_ONE_PASS = 16384  # longest row held in registers (forward)
_MAX_GRID_ROWS = 65535  # the split path's rows
_CHUNK = 4096  # the chunk of long rows
_SPLIT_PER_SM = 6  # programs per multiprocessor the forward's split aims at
_MAX_COOP_CHUNKS = 128  # chunks of a row on the COOP path (its gather is CHUNKS_P2 = np2(chunks) wide)


def _np2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _sms(device: torch.device | None) -> int:
    if device is not None and device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def _cfg(block_n: int, rows: int = 1, split: int = 1, warps: int = 4, stages: int = 1, persist: int = 0,
         **options: int) -> dict:
    return {"BLOCK_N": int(block_n), "ROWS": int(rows), "SPLIT": int(split), "PERSIST": int(persist),
            "num_warps": int(warps), "num_stages": int(stages), **{k: int(v) for k, v in options.items()}}


def one_pass(config: dict, n: int) -> bool:
    """Whether ``config`` holds a whole row of ``n`` (its bucket) in registers."""
    return config["BLOCK_N"] >= _np2(max(n, 1))


def _one_pass_space(bn: int, dtype: torch.dtype, op: str | None) -> list[dict]:
    """Candidates that hold rows of bucket ``bn`` in registers, the default first: (tile rows,
    warps, persistent programs per multiprocessor[, options])."""
    wide = dtype == torch.float32
    layer = op == "layer_norm"
    if bn <= 1024:  # tiles of 4 KB: 2048 elements of 2 bytes, 1024 of fp32 (a row of 1024 fp32 a
        # program of 4 warps: 37.5-38.1 us against 39.5 for two rows, both ops, two sweeps)
        r = max(1, (1024 if wide else 2048) // bn)
        cands = [(r, 4, 0), (2 * r, 8, 0), (r, 8, 0), (2 * r, 4, 0)]
    elif bn == 2048:
        cands = [(1, 4, 0), (1, 8, 0), (2, 8, 0), (2, 4, 0)]
        if layer and wide:  # 38.3-38.5 us at 8192 x 2048 against 39.5-39.8 for (1, 4) (two sweeps)
            cands = _first(cands, (2, 4, 0))
    elif bn == 4096:
        cands = [(1, 8, 0), (1, 4, 0), (1, 16, 0), (1, 8, 2)]
        if layer:  # bf16: 4 warps, 4-5% faster than 8 (4096 and 16384 rows, two sweeps); fp32: 16, 1-2%
            cands = _first(cands, (1, 16, 0) if wide else (1, 4, 0))
    elif bn == 8192:  # 8 warps: two programs fit a multiprocessor (16 warps of layer_norm: one)
        cands = [(1, 8, 0), (1, 16, 0), (1, 16, 1), (1, 32, 0), (1, 8, 2)]
        if layer and not wide:  # two persistent programs a multiprocessor: 23.0-23.1 us against 23.9-24.1
            cands = _first(cands, (1, 8, 2))
        if not wide:  # for the tuner: 2-byte rows, 22.3 (rms_norm) and 22.9-23.1 us against 23.1 and 23.4 (one run)
            cands.append((1, 16, 2, {"WB_EACH": 1, "ONE_SUM": int(layer)}))
    else:
        # 16384: bf16/fp16 rows in a persistent grid with the next row's load in flight (one program
        # of 32 warps a multiprocessor); fp32 rows load twice the bytes: a program per row
        # (rms_norm's fp32 rows: a persistent grid of 16 warps, 94% of a same-size copy at
        # 1024 x 16384 on the H200 against 88% for a program per row). layer_norm's bf16 rows: one
        # persistent program of 16 warps (24.0-24.2 us against 24.7-25.0 for 32 warps, two sweeps);
        # its fp32 rows: 32 warps a row with the statistics from one reduction (42.0 us against
        # 45.4-46.3 for 16 warps and two reductions)
        cands = [(1, 16, 0), (1, 32, 1), (1, 32, 0), (1, 16, 1)]
        if not wide:
            cands = _first(cands, (1, 16, 1) if layer else (1, 32, 1))
        elif op == "rms_norm":
            cands = _first(cands, (1, 16, 1))
        else:
            cands = [(1, 32, 0, {"ONE_SUM": 1})] + cands
        if not wide:  # for the tuner: layer_norm 23.7 us against 24.1 for the default (one run)
            cands.append((1, 32, 1, {"WB_EACH": 1, "ONE_SUM": int(layer)}))
    return [_cfg(bn, c[0], 1, c[1], 1, c[2], **(c[3] if len(c) > 3 else {})) for c in cands]


def _first(cands: list[tuple], c: tuple) -> list[tuple]:
    """``cands`` with ``c`` first (added if absent)."""
    return [c] + [o for o in cands if o != c]


def _split_for(m: int, nchunks: int, device) -> int:
    """Programs per row that give about ``_SPLIT_PER_SM`` programs per multiprocessor (a power of
    two, at most the row's chunks and 64)."""
    want = _np2(_cdiv(_SPLIT_PER_SM * _sms(device), max(m, 1)))
    return max(1, min(want, 1 << (max(nchunks, 1).bit_length() - 1), 64))


def config_space(m: int, n: int, dtype: torch.dtype, device: torch.device | None = None,
                 op: str | None = None, out_dtype: torch.dtype | None = None) -> list[dict]:
    """Candidate forward configs for ``m`` rows of ``n``, deterministic, by the bucket of ``n``
    (and, for long rows, how many programs per row ``m`` rows need to fill the device); the
    default (:func:`default_config`) first, so that it wins ties. ``out_dtype``: the result's
    dtype where it is not the input's (float32 for a half-precision input read under autocast)."""
    np2 = _np2(max(int(n), 1))
    if np2 <= _MAX_ONE_PASS:
        space = _one_pass_space(max(np2, 16), dtype, op)
        if op == "rms_norm" and dtype == torch.float32 and np2 in (4096, 8192):
            # rms_norm's fp32 rows of 4K-8K: a program per row walking it twice in chunks, the
            # second read from L2 (4096 x 4096: 37.7 us against 39.2 held in registers; 2048 x
            # 8192: 38.2 against 39.6)
            space.insert(0, _cfg(np2 // 4 if np2 == 4096 else np2 // 2, 1, 1, 8, PREFETCH=1, HINTS=1))
        return space
    nchunks = _cdiv(n, _CHUNK)
    split = _split_for(m, nchunks, device) if m <= _MAX_GRID_ROWS else 1
    wide = 4 * _CHUNK if dtype == torch.float32 else 2 * _CHUNK
    chunked = [_cfg(wide, 1, 1, 16, PREFETCH=1, HINTS=1), _cfg(_CHUNK, 1, 1, 8), _cfg(2 * _CHUNK, 1, 1, 16)]
    if op == "layer_norm":  # for the tuner: the statistics by lanes, never a second walk
        chunked.insert(1, dict(chunked[0], LANES=1))
    splits = [_cfg(_CHUNK, 1, s, 8, PREFETCH=1, HINTS=1) for s in (split, split * 2, split // 2)
              if 2 <= s <= min(64, nchunks) and m <= _MAX_GRID_ROWS]
    if op == "layer_norm" and splits:  # for the tuner: the segments' statistics by lanes
        splits.insert(1, dict(splits[0], LANES=1))
    # COOP: a row's chunks held by a group of programs (one launch, x read once); chunks of 8 to
    # 32 elements a thread (three chunks live: two in flight); 2048-element chunks (fp32 rows: 2048
    # ran 1-18% faster than 1024 at 256 x 65536 on the H200, layer_norm most)
    # layer_norm's 2-byte rows of up to 64K written as float32 (autocast): past 32K, 4096-element chunks
    # of 4 warps (H100, 256 x 65536: 47.2 and 47.6 us in two runs against 51.2 and 51.0 for 2048); up to
    # 32K, 2048 (512 x 32768: 47.9 against 55.0 for 4096; benchmarks/results/current/autocast/; longer
    # rows and rms_norm's not measured: as their 2-byte rows)
    widened = op == "layer_norm" and dtype != torch.float32 and out_dtype == torch.float32 and np2 <= 65536
    shapes = ((2048, 4), (1024, 4), (4096, 4), (4096, 8)) if dtype == torch.float32 else \
        ((4096, 4), (2048, 4), (4096, 8), (8192, 8)) if widened and np2 > 32768 else \
        ((2048, 4), (4096, 4), (4096, 8), (8192, 8)) if widened else ((2048, 4), (4096, 8), (4096, 4), (8192, 8))
    coops = [_cfg(bn, 1, 1, w, COOP=1) for bn, w in shapes if _cdiv(n, bn) <= _MAX_COOP_CHUNKS]
    if coops and op == "rms_norm" and coops[0]["BLOCK_N"] == 2048:
        # rms_norm's chunks capped at 96 registers: more programs resident, more rows in flight (fp32
        # 256 x 65536: 40.4 us against 42.0); 2-byte rows also load the weight for each row rather
        # than hold it (WB_EACH), which spills nothing at 96 (64 x 262144: bf16 24.9-25.0 us against
        # 26.0-26.2 for 80 registers and the weight held, fp16 25.3 against 26.3; 128 x 131072: fp16
        # 26.0 against 28.6, bf16 29.3 against 28.9)
        each = {} if dtype == torch.float32 else {"WB_EACH": 1}
        # 2-byte rows: the default before (80 registers, the weight held) second, for the tuner
        coops[:0] = [dict(coops[0], REGS=96, **each)] + ([dict(coops[0], REGS=80)] if each else [])
    if not coops:  # rows longer than 128 chunks of these: chunks of a 128th of the row
        bn = _np2(_cdiv(n, _MAX_COOP_CHUNKS))
        coops = [_cfg(bn, 1, 1, min(32, max(4, bn // (256 if dtype == torch.float32 else 512))), COOP=1)]
    many = 2 * m >= 3 * _sms(device)  # rows for 1.5 programs a multiprocessor or more
    # the exchange first, but for 2-byte rows of up to 64K with rows enough: a program per row
    # walking it twice (the second pass mostly from L2) ran 2-4% faster there on the H200 for
    # rms_norm, 1.2-1.3x for layer_norm (benchmarks/results/current/norms/); written as float32, the
    # exchange: 47.2 us at layer_norm 256 x 65536 against 57.4 for the walk (H100)
    if dtype != torch.float32 and np2 <= 65536 and many and not widened:
        return chunked + coops + splits
    return coops + (chunked + splits if many or not splits else splits + chunked)


def default_config(m: int, n: int, dtype: torch.dtype, device: torch.device | None = None,
                   op: str | None = None, out_dtype: torch.dtype | None = None) -> dict:
    """The heuristic pick (what runs with tuning off): see the module's docstring."""
    return dict(config_space(m, n, dtype, device, op, out_dtype)[0])


def _check_config(config: dict, n: int) -> None:
    bn, rows, split = int(config["BLOCK_N"]), int(config["ROWS"]), int(config["SPLIT"])
    for name, v in (("BLOCK_N", bn), ("ROWS", rows), ("SPLIT", split)):
        if v < 1 or v & (v - 1):
            raise ValueError(f"config {name} must be a power of two (got {v}) in {config}")
    if rows > 1 and bn < n:
        raise ValueError(f"config ROWS={rows} packs whole rows: BLOCK_N={bn} must be >= N={n}")
    for name in ("PREFETCH", "HINTS", "COOP", "ONE_SUM", "WB_EACH", "LANES"):
        if int(config.get(name, 0)) not in (0, 1):
            raise ValueError(f"config {name} must be 0 or 1 (got {config[name]})")
    if coop(config) and _cdiv(n, bn) > _MAX_COOP_CHUNKS:
        raise ValueError(f"config COOP holds a row in at most {_MAX_COOP_CHUNKS} chunks: BLOCK_N={bn} cuts N={n} "
                         f"into {_cdiv(n, bn)}; use BLOCK_N >= {_np2(_cdiv(n, _MAX_COOP_CHUNKS))}")
    if int(config.get("PERSIST", 0)) < 0:
        raise ValueError(f"config PERSIST must be >= 0 (got {config['PERSIST']})")
    regs = int(config.get("REGS", 0))
    if regs and not (24 <= regs <= 255 and regs % 8 == 0):
        raise ValueError(f"config REGS must be 0 (as compiled) or a multiple of 8 in 24..255 (got {regs})")
    stages = int(config.get("STAGES", 0))
    if stages and not (int(config.get("PERSIST", 0)) and 2 <= stages <= 8):
        raise ValueError(f"config STAGES pipelines a persistent grid's tile loop: give it 2..8 with PERSIST "
                         f"(got {config})")
    if regs and int(config.get("PERSIST", 0)):
        raise ValueError(f"config REGS and PERSIST both set a thread's registers: give one (got {config})")


def coop(config: dict) -> bool:
    """Whether ``config`` takes the cooperative path (``COOP``: a row's chunks in the registers of a
    group of programs that exchange their partials; one launch, x read once)."""
    return bool(int(config.get("COOP", 0)))


_COOP_OCC: dict = {}  # programs per multiprocessor of a compiled COOP kernel


def _coop_grid(m: int, n: int, config: dict, device: torch.device, compile_fn, key: tuple) -> int:
    """Programs of a COOP launch: groups of ``S = cdiv(n, BLOCK_N)`` (one per chunk of a row), as many
    groups as the device holds at once (every program of a group must be resident: they wait for
    each other), at most one per row. ``compile_fn()`` compiles the kernel (its registers decide how
    many programs a multiprocessor holds), ``key`` names what it depends on. Under the interpreter:
    two groups, so the row loop runs."""
    s = _cdiv(n, int(config["BLOCK_N"]))
    if device.type != "cuda":
        return min(m, 2) * s
    key = (device, key)
    occ = _COOP_OCC.get(key)
    if occ is None:
        occ = _COOP_OCC[key] = _occupancy_of(compile_fn(), int(config["num_warps"]))
    cap = _sms(device) * occ
    if s > cap:
        raise ValueError(f"config {config} needs {s} programs of a row resident at once; this device holds {cap}: "
                         "use a larger BLOCK_N or fewer warps")
    return exchange_groups(m, s, cap) * s


def _persist_regs(config: dict) -> int:
    """Registers a thread may use so that ``PERSIST`` programs fit on a multiprocessor (65536
    registers): a persistent program that is not resident would wait for another to finish."""
    return min(255, 65536 // (int(config["PERSIST"]) * int(config["num_warps"]) * 32)) & ~7


def _fwd_grid(m: int, config: dict, device) -> int:
    """Programs of a one-pass forward: one per tile, or ``PERSIST`` per multiprocessor (on the CPU,
    under the interpreter: ``PERSIST`` in all, so that each walks several tiles)."""
    tiles = _cdiv(m, int(config["ROWS"]))
    persist = int(config.get("PERSIST", 0))
    if not persist:
        return tiles
    return min(tiles, persist * (_sms(device) if device.type == "cuda" else 1))


class NormLauncher:
    """The forward of one norm call shape: ``run(x, weight, bias)`` -> a new output.

    Built once per (op, M, N, dtype, row stride, device, config, weight/bias present): the grid,
    the constexprs and the placeholders for absent weight/bias (cached, of the input's dtype) are
    fixed here; a call allocates the output (and the split path's workspace) and launches.
    """

    def __init__(self, op: str, m: int, n: int, dtype: torch.dtype, row_stride: int, device: torch.device,
                 config: dict, eps: float, has_weight: bool, has_bias: bool, out_shape: tuple[int, ...],
                 like_input: bool = False, out_dtype: torch.dtype | None = None):
        if op not in NORM_OPS:
            raise ValueError(f"'op' must be one of {NORM_OPS} (got {op!r})")
        _check_config(config, n)
        anchor = torch.empty(0, device=device)
        device = anchor.device
        self.config = dict(config)
        # the result's dtype, the weight's and the bias's: the input's, or float32 for a half-precision
        # input read under autocast (the kernel stores in its output pointer's dtype)
        out_dtype = dtype if out_dtype is None else out_dtype
        if like_input and out_dtype != dtype:
            raise ValueError(f"'like_input' makes the output like the input: its dtype {dtype} is not "
                             f"'out_dtype' {out_dtype}")
        empty, size = torch.empty, tuple(out_shape)  # empty(*size): varargs parse faster than a tuple
        if like_input:  # a dense input of the output's shape and dtype: empty_like parses faster still
            new_y = torch.empty_like  # called as new_y(x): no Python frame
        else:
            def new_y(x):
                return empty(*size, dtype=out_dtype, device=device)
        self.direct: tuple[DirectLaunch, ...] = ()
        if m == 0 or n == 0:
            def run(x, weight=None, bias=None, saved=None):
                return empty(size, dtype=out_dtype, device=device)
            self.run = run
            return
        ph = placeholder(anchor, out_dtype)  # an absent weight or bias: of a present one's dtype
        ph32 = placeholder(anchor, torch.float32)
        is_coop = coop(config)
        # what compile() builds with: tensors like a call's (the COOP path's workspace is its slot
        # buffer; the last, the statistics a backward takes)
        self._stand_ins = (placeholder(anchor, dtype),) + (ph,) * 3 + (
            placeholder(anchor, torch.int64) if is_coop else ph32, ph32)
        meta = dict(IS_RMS=op == "rms_norm", HAS_WEIGHT=has_weight, HAS_BIAS=has_bias,
                    BLOCK_N=int(config["BLOCK_N"]), ROWS=int(config["ROWS"]),
                    PREFETCH=int(config.get("PREFETCH", 0)), HINTS=int(config.get("HINTS", 0)), COOP=int(is_coop),
                    ONE_SUM=int(config.get("ONE_SUM", 0)), WB_EACH=int(config.get("WB_EACH", 0)),
                    STAGES=int(config.get("STAGES", 0)), LANES=int(config.get("LANES", 0)),
                    CHUNKS_P2=_np2(_cdiv(n, int(config["BLOCK_N"]))) if is_coop else 0)
        ints = dict(M=m, N=n, stride_xm=row_stride, stride_ym=n, eps=float(eps), N_BUCKET=_np2(n))
        options = dict(num_warps=int(config["num_warps"]), num_stages=int(config.get("num_stages", 1)))
        if device.type == "cuda" and int(config.get("PERSIST", 0)) and one_pass(config, n):
            options["maxnreg"] = _persist_regs(config)
        elif device.type == "cuda" and int(config.get("REGS", 0)):
            options["maxnreg"] = int(config["REGS"])
        enabled = not _interpreting()
        split = int(config["SPLIT"])
        common = dict(ONE_PASS=False, SPLIT=1, PERSIST=0)

        def launches(stats: int) -> tuple[DirectLaunch, ...]:
            # the path's launches; stats 1: they also store each row's statistics (STATS) where a
            # call's sixth tensor says; else that argument is fixed (a placeholder, never written)
            m_meta = dict(meta, STATS=stats)

            def launcher(grid, out=1, opts=options, **kw):
                return DirectLaunch(_norm_fwd, grid, 6, dict(ints, **m_meta, **kw), opts, enabled=enabled,
                                    checked=(0, 2, 3), out=out, fixed=() if stats else (ph32,))

            if is_coop:  # one launch; the interpreter's two: publish, then await
                return self._coop(m, n, config, device, launcher, dtype, ints, m_meta, options)
            if one_pass(config, n):
                return (launcher((_fwd_grid(m, config, device),), PHASE=0, ONE_PASS=True, SPLIT=1,
                                 PERSIST=int(config.get("PERSIST", 0))),)
            if split > 1:
                return (launcher((m, split), out=4, PHASE=1, **dict(common, SPLIT=split)),
                        launcher((m, split), PHASE=2, **dict(common, SPLIT=split)))
            return (launcher((m,), PHASE=0, **common),)

        stages = self.direct = launches(0)
        saving: list = []  # the STATS launches, built at the first call that asks for statistics

        def stats_launches():
            if not saving:
                saving.append(launches(1))
            return saving[0]

        if len(stages) == 1 and not is_coop:  # one launch, no workspace
            k0 = stages[0]

            def run(x, weight=None, bias=None, saved=None):
                y = new_y(x)
                if saved is None:
                    k0.launch(x, y, ph if weight is None else weight, ph if bias is None else bias, ph32)
                else:
                    stats_launches()[0].launch(x, y, ph if weight is None else weight,
                                               ph if bias is None else bias, ph32, saved[0])
                return y
        else:
            if is_coop:
                need = m * _cdiv(n, int(config["BLOCK_N"]))  # the partials of every row and chunk

                def ws_of():
                    return _split_slots(device, need)  # the stream's, or one private to a captured launch
            else:
                ws_size = 2 * m * split

                def ws_of():
                    return empty(ws_size, dtype=torch.float32, device=device)

            def run(x, weight=None, bias=None, saved=None):
                y = new_y(x)
                ws = ws_of()
                w = ph if weight is None else weight
                b = ph if bias is None else bias
                if saved is None:
                    for k in stages:  # k.launch, not a bound copy: arming replaces it
                        k.launch(x, y, w, b, ws)
                else:
                    for k in stats_launches():
                        k.launch(x, y, w, b, ws, saved[0])
                return y
        self.run = run

    def compile(self) -> None:
        """Compile (and load) every kernel a call runs, without launching: the JIT's warm-up path, so
        the first call finds them in its cache. Nothing to do under the interpreter or for empty shapes."""
        if _interpreting():
            return
        for direct in self.direct:
            direct.compile(*self._stand_ins)

    def _coop(self, m, n, config, device, launcher, dtype, ints, meta, options):
        """The COOP path's launches: one on the GPU; under the interpreter, which runs programs one
        after another (partials could never meet in one launch), PHASE 1 (publish) then PHASE 2.

        The grid is the plain kernel's (``STATS`` 0), whose registers decide how many programs a
        multiprocessor holds; the variant that also stores the rows' statistics is compiled with
        ``maxnreg`` at that kernel's count, so that it fits the same groups (on the H200, compiled
        freely, it ran layer_norm bf16 64 x 262144 in 42 us, capped in 40; 36 without the store)."""
        common = dict(ONE_PASS=False, SPLIT=1, PERSIST=0)
        stand_ins = self._stand_ins  # x, y, weight, bias, the slot buffer and the statistics, as compile()'s
        plain = dict(meta, STATS=0)

        def compile_fn():
            return _norm_fwd.warmup(*stand_ins, grid=(1,), **ints, **plain, **common, PHASE=0, **options)

        # what the compiled kernel depends on (M and eps are not specialized on: not in the key)
        key = (tuple(t.dtype for t in stand_ins), tuple(sorted(plain.items())), tuple(sorted(options.items())),
               tuple((k, v) for k, v in ints.items() if k not in ("M", "eps")))
        grid = (_coop_grid(m, n, config, device, compile_fn, key),)
        if _interpreting():
            return (launcher(grid, PHASE=1, **common), launcher(grid, PHASE=2, **common))
        opts = options
        if meta.get("STATS") and device.type == "cuda":
            compiled = compile_fn()  # the JIT's cache: compiled already by the grid's sizing
            compiled._init_handles()
            opts = dict(options, maxnreg=int(compiled.n_regs))
        return (launcher(grid, opts=opts, PHASE=0, **common),)


# -- Triton's native autotuner over the forward ---------------------------------------------------

_AUTOTUNED: dict = {}
_LOCK = threading.Lock()


def _to_triton(c: dict) -> triton.Config:
    return triton.Config({"BLOCK_N": c["BLOCK_N"], "ROWS": c["ROWS"], "PERSIST": c["PERSIST"]},
                         num_warps=c["num_warps"], num_stages=c["num_stages"],
                         maxnreg=_persist_regs(c) if c["PERSIST"] else None)


def config_from_triton(cfg: triton.Config) -> dict:
    """The config dict of a ``triton.Config`` built here (an autotuner's winner)."""
    return _cfg(cfg.kwargs["BLOCK_N"], cfg.kwargs["ROWS"], 1, cfg.num_warps, cfg.num_stages, cfg.kwargs["PERSIST"])


def _universe() -> list[dict]:
    return unique_configs(c for k in range(0, 21) for c in config_space(1 << 20, 1 << k, torch.float32)
                          if c["SPLIT"] == 1 and not coop(c))


def autotuned(do_bench=None):
    """``_norm_fwd`` under ``triton.autotune`` (one per ``do_bench``): one launch per call, configs of
    one program per row (``SPLIT`` 1), pruned per launch to the row length's bucket.

    ``key`` is ``N_BUCKET`` alone (Triton adds every tensor argument's dtype): ``HAS_WEIGHT``,
    ``HAS_BIAS`` and ``IS_RMS`` stay out of it, and :func:`run_autotuned` passes a placeholder of the
    input's dtype for an absent weight or bias, so calls with and without them share one entry.
    """
    fn = _AUTOTUNED.get(do_bench)
    if fn is None:
        with _LOCK:
            fn = _AUTOTUNED.get(do_bench)
            if fn is None:
                def prune(configs, named_args, **kwargs):
                    n = int(named_args["N"])
                    onep = _np2(n) <= _MAX_ONE_PASS  # what run_autotuned passes as ONE_PASS
                    allowed = {(c["BLOCK_N"], c["ROWS"], c["PERSIST"], c["num_warps"])
                               for c in config_space(int(named_args["M"]), n, named_args["x_ptr"].dtype)
                               if c["SPLIT"] == 1 and not coop(c) and one_pass(c, n) == onep}
                    kept = [c for c in configs
                            if (c.kwargs["BLOCK_N"], c.kwargs["ROWS"], c.kwargs["PERSIST"], c.num_warps) in allowed]
                    if not kept:
                        raise ValueError(f"no norm config fits N={n}")
                    return kept

                fn = triton.autotune(configs=[_to_triton(c) for c in _universe()], key=["N_BUCKET"],
                                     prune_configs_by={"early_config_prune": prune}, do_bench=do_bench)(_norm_fwd)
                _AUTOTUNED[do_bench] = fn
    return fn


def run_autotuned(op: str, x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                  eps: float = 1e-5, do_bench=None) -> torch.Tensor:
    """``op`` over the rows of a 2-D ``x`` (unit stride along a row), the config chosen by Triton's autotuner."""
    if op not in NORM_OPS:
        raise ValueError(f"'op' must be one of {NORM_OPS} (got {op!r})")
    if x.dim() != 2 or (x.shape[1] > 1 and x.stride(1) != 1):
        raise ValueError(f"'x' must be 2-D with unit stride along its rows (got shape {tuple(x.shape)}, "
                         f"strides {x.stride()})")
    m, n = x.shape
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    kernel = autotuned(do_bench)
    ph = placeholder(x, x.dtype)

    def grid(meta):
        return (_fwd_grid(m, meta, x.device) if meta["ONE_PASS"] else m, 1)

    # ONE_PASS follows from the config: every candidate of a bucket agrees (pruned to it)
    onep = _np2(n) <= _MAX_ONE_PASS
    kernel[grid](x, y, ph if weight is None else weight, ph if bias is None else bias, ph, ph, m, n, x.stride(0), n,
                 float(eps), _np2(n), IS_RMS=op == "rms_norm", HAS_WEIGHT=weight is not None,
                 HAS_BIAS=bias is not None, PHASE=0, ONE_PASS=onep, SPLIT=1)
    return y


# -- the backend's hooks for the norm ops -------------------------------------------------------

def check(spec) -> "Verdict":
    """Can the Triton kernels serve this norm call? (called by the backend's ``dispatch_check``)."""
    from dispatch.backend import Verdict, dtype_name, norm_layout_refusal, norm_size

    if spec.dtype not in DTYPES:
        return Verdict.no(f"input dtype {dtype_name(spec.dtype)} not served; float32, float16 and bfloat16 are")
    if spec.out_dtype != spec.dtype and spec.out_dtype != torch.float32:
        return Verdict.no(f"a {dtype_name(spec.dtype)} input with a {dtype_name(spec.out_dtype)} result: the "
                          "kernels write the input's dtype, or float32 (a half-precision input under autocast)")
    for t in spec.tensors[1:]:
        if t.present and t.dtype != spec.out_dtype:
            return Verdict.no(f"{t.name} dtype {dtype_name(t.dtype)} differs from the result's "
                              f"({dtype_name(spec.out_dtype)}); pass them in one dtype")
        if t.present and not t.dense:
            return Verdict.no(f"{t.name} must be contiguous (got strides {list(t.stride)})")
    n = norm_size(spec)
    if n > MAX_N:
        return Verdict.no(f"normalized size {n} > {MAX_N}, the longest row these kernels hold")
    refusal = norm_layout_refusal(spec)
    if refusal is not None:
        return Verdict.no(refusal)
    return Verdict.yes()



def _shape(spec) -> tuple[int, int]:
    from dispatch.backend import norm_rows, norm_size

    return norm_rows(spec), norm_size(spec)


def tune_space(spec):
    from dispatch.backend import TuneSpace

    m, n = _shape(spec)
    configs = config_space(m, n, spec.dtype, spec.device, spec.op, spec.out_dtype)
    default = dict(configs[0])
    return TuneSpace(configs=configs, default=default, tunables=tuple(default))


def kernel(spec, config):
    from dispatch.backend import norm_eps, norm_row_stride

    m, n = _shape(spec)
    cfg = dict(config.as_dict()) if config else default_config(m, n, spec.dtype, spec.device, spec.op, spec.out_dtype)
    present = [t.present for t in spec.tensors[1:]] + [False]
    return NormLauncher(spec.op, m, n, spec.dtype, norm_row_stride(spec), spec.device, cfg, norm_eps(spec),
                        present[0], present[1], spec.out_shape,
                        like_input=spec.input.dense and spec.out_dtype == spec.dtype, out_dtype=spec.out_dtype).run


def backward(spec):
    from dispatch.backend import norm_eps, norm_row_stride

    from .norm_backward import make_backward  # it imports this module's helpers

    m, n = _shape(spec)
    present = [t.present for t in spec.tensors[1:]] + [False]
    wanted = [t.requires_grad for t in spec.tensors[1:]] + [False]
    return make_backward(spec.op, m, n, spec.dtype, norm_row_stride(spec), norm_eps(spec), present[0], present[1],
                         wanted[0], wanted[1])
