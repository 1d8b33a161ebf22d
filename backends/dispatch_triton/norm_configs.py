"""rms_norm and layer_norm on Triton: the forward's configs, their defaults and checks, and the grids they launch.

Host side, no kernels: the kernel that takes these configs is in :mod:`dispatch_triton.norm_kernels`,
its launcher in :mod:`dispatch_triton.norms`. :func:`default_config` is the pick with tuning off,
:func:`config_space` the candidates a tune races (the default first); :func:`_check_config` checks a
config before :class:`~dispatch_triton.norms.NormLauncher` builds on it, and :func:`_fwd_grid`,
:func:`_coop_grid` and :func:`_persist_regs` size its launches.

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
  loads going to shared memory rather than to a register double buffer;
* ``PACK`` (``COOP``, layer_norm, a 2-byte result): a chunk's two partials in one exchanged word,
  each kept to 16 significant bits (``exchange._publish_packed``).

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
"""

from __future__ import annotations

import torch

from .launch import _occupancy_of, exchange_groups

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
    if op == "layer_norm" and dtype != torch.float32 and (out_dtype is None or out_dtype.itemsize == 2):
        # for the tuner: layer_norm's 2-byte results with a chunk's two partials in one word (PACK).
        # On an H100 (bf16, 2048-element chunks) 1-4% less time at 16-64 rows of 64K-256K and 256 x
        # 65536, level at 8 x 131072, 1% more at 512 x 32768 and 6% more at 128 x 131072
        # (benchmarks/results/current/norms/layer_norm_coop/packed_h100/): not a default
        coops.append(dict(coops[0], PACK=1))
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
    for name in ("PREFETCH", "HINTS", "COOP", "ONE_SUM", "WB_EACH", "LANES", "PACK"):
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
