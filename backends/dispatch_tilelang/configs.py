"""Config spaces and default configs of the TileLang row kernels, pruned by row length, dtype and target.

A config is a flat dict. On ``"cuda"``: ``block_m`` and ``threads`` are JIT (tunable)
parameters; ``tile_n``, ``cluster``, ``smem`` and ``keep`` are build-time keys that pick the kernel
family (see ``cuda_kernels``; ``smem: 1``, present only where set, the chunk-in-shared-memory family
of ``smem_rows``; ``keep: 1`` there, softmax only, its kernel that keeps each exponential in shared
memory between the sum and the output, ``smem_rows.program(keep=True)``). On ``"c"``: ``block_m``
is the JIT parameter and ``tile_n`` the build-time key (see ``cpu_kernels``). Every list is in a
deterministic order, and every config in it is one ``cuda_kernels.check_launch`` /
``check_cpu_config`` accepts.

Lookup (checked arguments, any target): ``config_space`` / ``default_config`` (plain dicts, the
default first), ``split_config`` / ``families`` (build-time keys apart from JIT parameters) and
``validate_config``. The names the autotune protocol takes: ``JIT_PARAMS`` (tunable JIT parameters
per target), ``BUILD_KEYS`` (config keys that pick a kernel family and never reach TileLang),
``TUNABLES`` and ``ALIASES``. The JIT programs' tunables are *required* parameters, so an
autotuner must seed them (see ``native_tune``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from dispatch.backend import unique_configs

from . import cuda_kernels, smem_rows
from .availability import _check_op, _check_target, dtype_name

DTYPE_BYTES = cuda_kernels.DTYPE_BYTES

# Register budget of the CUDA kernels: fp32 values of the row each thread holds. At 32 a
# 1024-thread CTA still compiles to <= 64 registers with no spills (checked with ptxas -v).
MAX_ELEMS_PER_THREAD = cuda_kernels.MAX_FP32_PER_THREAD
# A row that fits one CTA's registers (1024 threads x 32) takes the whole-row family.
ROW_FAMILY_MAX_COLS = 1024 * MAX_ELEMS_PER_THREAD
# The CPU kernels keep a (block_m, tile) float32 tile (two on log_softmax) on the stack.
CPU_MAX_TILE_ELEMS = 32768
CPU_ROW_FAMILY_MAX_COLS = 8192
CPU_TILE_CHOICES = (512, 2048)
# The chunk-in-shared-memory family's chunks in the config space, and the longest row its default serves.
SMEM_MIN_BYTES, SMEM_MAX_BYTES = smem_rows.MIN_CHUNK_BYTES, 64 << 10
SMEM_MIN_COLS, SMEM_MAX_COLS = 16384, 262144  # the 2-byte rows its default serves
# Softmax rows longer than this may keep their exponentials in shared memory (config key ``keep``);
# at 32K one CTA a row runs at copy speed either way.
KEEP_MIN_COLS = 32768
# The most rows a CUDA CTA of the whole-row family holds (the tuned space's largest).
MAX_BLOCK_M = 32

#: Tunable JIT parameters of every program ``build.jit_program`` returns, per target (required, no defaults).
JIT_PARAMS: dict[str, tuple[str, ...]] = {"cuda": ("block_m", "threads"), "c": ("block_m",)}
#: Config keys that choose the kernel family at build time; stripped before TileLang sees a config.
BUILD_KEYS: dict[str, tuple[str, ...]] = {"cuda": ("tile_n", "cluster", "smem", "keep"), "c": ("tile_n",)}
#: Config keys an autotuner varies within one family.
TUNABLES: dict[str, tuple[str, ...]] = JIT_PARAMS
#: JIT parameter name -> config key, where they differ (here they never do).
ALIASES: dict[str, str] = {}


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _row_cap(n_rows: int) -> int:
    """Largest useful block_m: no point in a CTA of more rows than the whole input has."""
    return _pow2_ceil(max(1, n_rows))


@functools.lru_cache(maxsize=None)
def cuda_supports_clusters() -> bool:
    """Thread-block clusters need sm_90+; assume them when no device can be asked (cross-compiling)."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_capability() >= (9, 0)
    except Exception:  # noqa: BLE001 - a broken driver means "can't tell", not an error here
        pass
    return True


@functools.lru_cache(maxsize=None)
def sm_count(device) -> int:
    """The multiprocessors of CUDA ``device`` (asked once a device)."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


# ---------------------------------------------------------------------------------- CUDA


def _cuda_row_configs(n_rows: int, n_cols: int, dtype: str) -> list[dict]:
    vec = cuda_kernels.vector_width(n_cols, dtype)
    out = []
    for threads in (128, 256, 512, 1024):
        for block_m in (1, 2, 4, 8, 16, MAX_BLOCK_M):
            if block_m > _row_cap(n_rows) or cuda_kernels.check_launch(n_cols, dtype, 0, 1, block_m, threads):
                continue
            tpr = threads // block_m
            tile = cuda_kernels.tile_width(n_cols, dtype, 0, block_m, threads)
            per_thread = tile // tpr
            # Each thread holds at least 2 vectors (fewer leaves threads idle for nothing), at most
            # the register budget, and padding may not waste more than 1/8 of the tile.
            if per_thread > MAX_ELEMS_PER_THREAD or per_thread < 2 * vec or (tile - n_cols) * 8 > tile:
                continue
            out.append({"block_m": block_m, "threads": threads, "tile_n": 0, "cluster": 1})
    return out


def _cuda_split_configs(n_cols: int, dtype: str) -> list[dict]:
    """Cluster-split configs: chunks that cover the row in one read, then looped (two-read) ones for long rows."""
    vec = cuda_kernels.vector_width(n_cols, dtype)
    clusters = (2, 4, 8) if cuda_supports_clusters() else ()
    single_read, looped = [], []
    for threads in (256, 512, 1024):
        for per_thread in (8, 16, 32):
            if per_thread < vec:
                continue
            tile = per_thread * threads
            need = -(-n_cols // tile)
            for cluster in clusters:
                if cluster == need and (cluster * tile - n_cols) * 8 <= cluster * tile:
                    single_read.append({"block_m": 1, "threads": threads, "tile_n": tile, "cluster": cluster})
            # Looped (two-read) variants, for rows no cluster covers and to compare against on long rows.
            if need > 8 and per_thread == 16:
                looped.append({"block_m": 1, "threads": threads, "tile_n": tile, "cluster": clusters[-1] if clusters else 1})
    return single_read + looped


def _split_rank(cfg: dict, n_cols: int) -> tuple:
    """Order of preference among split configs, from the H200 measurements (bf16 softmax, run 1).

    Up to 128K columns: read the row once, 256 threads x 32 values per CTA (64K: 2.53 TB/s,
    against 1.57 for 512 x 16 and 0.75 for 1024 x 8 -- fewer, fatter threads win). Beyond: the
    looped 8-CTA cluster with 512 threads x 16 (256K: 2.43 TB/s, against 1.87 for the one-read
    1024 x 32), whose second read mostly hits L2.
    """
    per_thread = cfg["tile_n"] // (cfg["threads"] // cfg["block_m"])
    looped = cfg["cluster"] * cfg["tile_n"] < n_cols
    if n_cols <= 131072:
        return (looped, cfg["threads"], -per_thread, cfg["cluster"])
    return (not looped, (cfg["threads"], per_thread) != (512, 16), cfg["cluster"], -cfg["threads"])


def _cuda_smem_configs(op: str, n_cols: int, dtype: str) -> list[dict]:
    """Chunk-in-shared-memory configs (``smem_rows``): a row in 1-16 chunks (one CTA each, a cluster
    where more than one) of 16-64 KB, 128 or 256 threads, at most 1/8 of the covered row padding;
    for softmax of rows longer than 32K, each of up to eight chunks also with ``keep``
    (:data:`KEEP_MIN_COLS`)."""
    if not cuda_supports_clusters():  # measured on sm_90 only, where its exchange runs
        return []
    size = DTYPE_BYTES[dtype]
    out = []
    for cluster in (1, 2, 4, 8, 16):
        for threads in (256, 128):
            cfg = _smem_config(n_cols, dtype, cluster, threads)
            tile = cfg["tile_n"]
            if SMEM_MIN_BYTES <= tile * size <= SMEM_MAX_BYTES and (cluster * tile - n_cols) * 8 <= cluster * tile \
                    and smem_rows.check_launch(n_cols, dtype, tile, cluster, 1, threads) is None:
                out.append(cfg)
    if op == "softmax" and n_cols > KEEP_MIN_COLS:
        out += [dict(c, keep=1) for c in out if c["cluster"] <= 8]
    return out


def fit_config(n_cols: int, dtype: Any, config: Mapping[str, Any]) -> dict:
    """``config`` for rows of ``n_cols``: a chunk-in-shared-memory config's chunk is its cluster's
    share of the row (``smem_rows.fit_chunk``; the cluster halved where the share, rounded up,
    would leave a CTA nothing of the row or hold less than ``smem_rows.MIN_CHUNK_BYTES``),
    whatever row it was raced or tuned on, so that a
    decision kept for a bucket (N up to the next power of two) serves every N of it; the same
    config on the row it was made for. Other configs, and values that validation refuses anyway,
    are returned as they are."""
    config = dict(config)
    if config.get("smem") != 1 or n_cols <= 0:
        return config
    try:
        cluster, threads = int(config["cluster"]), int(config["threads"])
    except (KeyError, TypeError, ValueError):
        return config
    if 1 <= cluster <= smem_rows.MAX_CLUSTER and threads > 0 and DTYPE_BYTES.get(dtype_name(dtype)):
        config["tile_n"], config["cluster"] = smem_rows.fit_chunk(n_cols, dtype_name(dtype), cluster, threads,
                                                                  smem_rows.MIN_CHUNK_BYTES)
    return config


def _smem_config(n_cols: int, dtype: str, cluster: int, threads: int, keep: bool = False) -> dict:
    """The config of a row in ``cluster`` chunks, each its share of the row rounded up to a vector a thread."""
    tile = cuda_kernels.share(n_cols, cluster, (16 // DTYPE_BYTES[dtype]) * threads)
    cfg = {"block_m": 1, "threads": threads, "tile_n": tile, "cluster": cluster, "smem": 1}
    return {**cfg, "keep": 1} if keep else cfg


def cuda_config_space(op: str, n_rows: int, n_cols: int, dtype: str, smem: bool = True) -> list[dict]:
    """Candidate CUDA configs: the default first, whole-row ones while a row fits a CTA, cluster-split
    and (with ``smem``: dense rows written in their own dtype) chunk-in-shared-memory ones from 8K columns."""
    configs = [cuda_default_config(op, n_rows, n_cols, dtype, smem)]
    if n_cols <= ROW_FAMILY_MAX_COLS:
        configs += _cuda_row_configs(n_rows, n_cols, dtype)
    if n_cols >= 8192:
        configs += _cuda_split_configs(n_cols, dtype) + (_cuda_smem_configs(op, n_cols, dtype) if smem else [])
    return unique_configs(configs)


# Calls of this many rows or fewer: a row's chunks are about all the CTAs there are, so the default
# cuts rows into more of them (``_smem_default``; measured at 1 and 8 rows).
FEW_ROWS = 8
# ... in chunks of about this many columns (or more, up to eight chunks).
FEW_ROWS_CHUNK = 8192


def _smem_default(op: str, n_rows: int, n_cols: int, dtype: str) -> dict | None:
    """The chunk-in-shared-memory default, where it led on the H200 (bf16 softmax, us; the register
    families' default and Triton's in brackets; benchmarks/results/current/rows_kernels/smem_rows/):

    * rows of 16K-32K: one CTA's chunk (2048 x 16384: 38.3 [41.2, 44.2]; 2048 x 32768: 73.1 [97.3, 83.7]);
    * up to 128K: chunks of 16K columns a cluster (1024 x 65536: 88.8 [106.6, 88.0]; 512 x 131072:
      87.3 [118.2, 95.0]);
    * up to 256K: eight chunks (256 x 262144: 94.3 [110.6, 98.0]).

    log_softmax of rows of 32K-128K takes up to eight chunks of at least 8K columns, 128 threads for
    chunks of up to 10K, else 256 (runs of every config,
    benchmarks/results/current/rows_kernels/smem_rows/log_softmax_default/: 1024 x 65536 in chunks
    of 8K, 82.9-83.8 us in three runs where chunks of 16K took 90.5-93.3; 512 x 131072 in chunks of
    16K at 256 threads, 82.7-83.6 in two where 128 threads took 91.0-91.6; Triton 87.3-89.4; rows of
    40960, 49152 and 98304 level with softmax's rule or ahead, where eight chunks of 5-6K lost up to 15%).
    softmax of rows of 32K-128K takes the same chunks, 128 threads for chunks of up to 12K, and
    keeps its exponentials in shared memory (``keep``): one H100, us, against the rule before,
    1638 x 40960 105.6 against 107.6, 1365 x 49152 105.6 / 108.5, 1024 x 65536 100.9 / 109.3,
    682 x 98304 101.1 / 104.3, 512 x 131072 101.5 / 104.6; Triton 103.1-111.5
    (benchmarks/results/current/rows_kernels/smem_rows/keep/). A few rows' chunks (below) keep
    too: 8 x 98304 8.4 against 9.1, 4 x 131072 8.6 / 9.2, 8 x 128256 9.4 / 10.3, level at 65536.
    Not measured on an H200; not past 128K, where it took 0-6% more at every config measured.

    The best of them had each thread copy 256 bytes (16 vectors); fp32 rows (at best level with
    the register families), odd rows (no 16-byte copies) and GPUs older than sm_90 (not measured)
    keep the register families.

    Calls of :data:`FEW_ROWS` rows or fewer leave most of the GPU idle under those rules (one CTA
    for a row of 32000): their rows go in chunks of about 8K columns, up to eight (longer chunks
    past 64K), 128 threads for chunks of up to 8K, else 256 (H100, device time in us, the rule's
    config against the one before, softmax / logsumexp: 1 x 32000 8.0 / 7.1 against 10.3 / 8.1,
    8 x 128256 11.1 / 9.4 against 11.7 / 10.5; 1 x 262144 as before;
    benchmarks/results/current/rows_kernels/few_rows/)."""
    if DTYPE_BYTES[dtype] != 2 or n_cols % 8 or not SMEM_MIN_COLS <= n_cols <= SMEM_MAX_COLS:
        return None
    if not cuda_supports_clusters():
        return None
    log_rows = op == "log_softmax" and 32768 < n_cols <= 131072
    kept = op == "softmax" and KEEP_MIN_COLS < n_cols <= 131072
    if n_cols <= 32768:
        cluster = 1
    elif log_rows or kept:
        cluster = min(8, 1 << ((n_cols // 8192).bit_length() - 1))  # chunks of at least 8K columns
    elif n_cols <= 131072:
        cluster = _pow2_ceil(-(-n_cols // 16384))
    else:
        cluster = 8
    threads = 128 if -(-n_cols // cluster) <= (10240 if log_rows else 12288 if kept else 16384) else 256
    cfg = _smem_config(n_cols, dtype, cluster, threads, keep=kept)
    if n_rows <= FEW_ROWS:
        few = max(cluster, min(8, _pow2_ceil(-(-n_cols // FEW_ROWS_CHUNK))))
        wide = 128 if -(-n_cols // few) <= FEW_ROWS_CHUNK else 256
        for t in (wide, 384 - wide):  # the other where this one's rounding leaves the last CTA nothing
            cand = _smem_config(n_cols, dtype, few, t, keep=kept)
            if smem_rows.check_launch(n_cols, dtype, cand["tile_n"], few, 1, t) is None:
                return cand
    return cfg if smem_rows.check_launch(n_cols, dtype, cfg["tile_n"], cluster, 1, threads) is None else None


def cuda_default_config(op: str, n_rows: int, n_cols: int, dtype: str, smem: bool = True) -> dict:
    """A good untuned CUDA config: ~16-32 fp32 per thread, rows too short for a warp at two vectors a
    thread a part of a warp each in CTAs of 128 threads, long rows cluster-split.

    Short rows (H200, bf16 and fp32, N = 64..256, benchmarks/results/current/short_rows/): a warp a
    row padded them (bf16 N = 64 is a quarter of a 256-wide tile) and ran at 1084-3637 GB/s bf16;
    two vectors a thread and 128 threads a CTA ran at 3875-3894, the best of every row config.
    2-byte rows of 16K-256K (a multiple of 8; with ``smem``, dense rows written in their own dtype):
    the chunk-in-shared-memory family (``_smem_default``)."""
    chunked = _smem_default(op, n_rows, n_cols, dtype) if smem else None
    if chunked is not None:
        return chunked
    if n_cols <= ROW_FAMILY_MAX_COLS:
        vec = cuda_kernels.vector_width(n_cols, dtype)
        tpr = min(1024, max(32, _pow2_ceil(-(-n_cols // 32))))
        while tpr > 4 and tpr * vec * 2 > _pow2_ceil(n_cols):  # >= 2 vectors a thread, >= 4 threads a row
            tpr //= 2
        block_m = max(1, min((128 if tpr < 32 else 256) // tpr, MAX_BLOCK_M, _row_cap(n_rows)))
        tpr = max(tpr, 32 // block_m)  # too few rows for a warp at that width: wider rows (a CTA is >= a warp)
        return {"block_m": block_m, "threads": tpr * block_m, "tile_n": 0, "cluster": 1}
    split = _cuda_split_configs(n_cols, dtype)
    if split:
        return dict(min(split, key=lambda c: _split_rank(c, n_cols)))
    # Very long rows on a GPU without clusters: one CTA walks the row in tiles (two reads).
    return {"block_m": 1, "threads": 1024, "tile_n": 16 * 1024, "cluster": 1}


# ----------------------------------------------------------------------------------- CPU


def check_cpu_config(n_cols: int, config: dict) -> str | None:
    """Why ``config`` cannot run on the C target, or None."""
    block_m, tile_n = config.get("block_m"), config.get("tile_n", 0)
    if not isinstance(block_m, int) or block_m < 1:
        return f"block_m must be a positive int (got {block_m!r})"
    if not isinstance(tile_n, int) or tile_n < 0:
        return f"tile_n must be a non-negative int (got {tile_n!r})"
    tile = n_cols if tile_n == 0 or tile_n >= n_cols else tile_n
    if block_m * tile > CPU_MAX_TILE_ELEMS:
        return f"block_m * tile = {block_m * tile} floats exceeds the {CPU_MAX_TILE_ELEMS}-float stack tile; use tile_n > 0"
    return None


def cpu_config_space(op: str, n_rows: int, n_cols: int, dtype: str) -> list[dict]:
    """Candidate C-target configs: the default first, whole-row tiles for short rows, tiled ones for long rows."""
    out = [cpu_default_config(op, n_rows, n_cols, dtype)]
    if n_cols <= CPU_ROW_FAMILY_MAX_COLS:
        for block_m in (1, 4, 16):
            cfg = {"block_m": block_m, "tile_n": 0}
            if block_m <= _row_cap(n_rows) and check_cpu_config(n_cols, cfg) is None:
                out.append(cfg)
    for tile_n in CPU_TILE_CHOICES:
        if tile_n < n_cols:
            for block_m in (1, 4):
                if block_m <= _row_cap(n_rows):
                    out.append({"block_m": block_m, "tile_n": tile_n})
    return unique_configs(out)


def cpu_default_config(op: str, n_rows: int, n_cols: int, dtype: str) -> dict:
    """A good untuned C-target config."""
    if n_cols <= 2048:
        return {"block_m": max(1, min(4, _row_cap(n_rows))), "tile_n": 0}
    if n_cols <= CPU_ROW_FAMILY_MAX_COLS:
        return {"block_m": 1, "tile_n": 0}
    return {"block_m": 1, "tile_n": CPU_TILE_CHOICES[-1]}


# -------------------------------------------------------------------------------- lookup


def config_space(op: str, n_rows: int, n_cols: int, dtype: Any, target: str, row_stride: int = 0,
                 out_dtype: Any = None) -> list[dict]:
    """Candidate configs for ``op`` on ``(n_rows, n_cols)`` inputs of ``dtype``: the default first,
    deterministic order. Rows ``row_stride`` apart (0: dense) and an output of another dtype than
    the input's (``out_dtype``; None: the same) leave out the chunk-in-shared-memory family."""
    _check_op(op)
    _check_target(target)
    if target == "cuda":
        return cuda_config_space(op, n_rows, max(1, n_cols), dtype_name(dtype), _smem_serves(dtype, row_stride, out_dtype))
    return cpu_config_space(op, n_rows, max(1, n_cols), dtype_name(dtype))


def default_config(op: str, n_rows: int, n_cols: int, dtype: Any, target: str, row_stride: int = 0,
                   out_dtype: Any = None) -> dict:
    """The config to use untuned (the first entry of ``config_space``)."""
    _check_op(op)
    _check_target(target)
    if target == "cuda":
        return cuda_default_config(op, n_rows, max(1, n_cols), dtype_name(dtype),
                                   smem=_smem_serves(dtype, row_stride, out_dtype))
    return cpu_default_config(op, n_rows, max(1, n_cols), dtype_name(dtype))


def _smem_serves(dtype: Any, row_stride: int, out_dtype: Any) -> bool:
    """The chunk-in-shared-memory family reads dense rows and writes its input's dtype."""
    return not row_stride and (out_dtype is None or dtype_name(out_dtype) == dtype_name(dtype))


def split_config(config: Mapping[str, Any], target: str) -> tuple[dict, dict]:
    """``(jit_kwargs, build_keys)``: what the JIT program takes, and what picks the program (defaults filled in)."""
    _check_target(target)
    config = dict(config)
    build = {"tile_n": int(config.pop("tile_n", 0))}
    if target == "cuda":
        build["cluster"] = int(config.pop("cluster", 1))
        build["smem"] = int(config.pop("smem", 0))
        build["keep"] = int(config.pop("keep", 0))
    unknown = set(config) - set(JIT_PARAMS[target])
    if unknown:
        raise ValueError(f"unknown config key(s) {sorted(unknown)} for target {target!r}; expected {JIT_PARAMS[target] + BUILD_KEYS[target]}")
    return config, build


def keep_refused(op: str, build: Mapping[str, int]) -> str | None:
    """Why a config's build keys (:func:`split_config`) may not ask for ``keep``, or None."""
    if build.get("keep") and not (build.get("smem") and op == "softmax"):
        return (f"keep=1 keeps a softmax's exponentials in the chunk-in-shared-memory family (smem=1): "
                f"not {op} with smem={build.get('smem', 0)}; leave keep out")
    return None


def families(configs: list[Mapping[str, Any]], target: str) -> dict[tuple, list[dict]]:
    """Group configs by their build-time keys: each group is one JIT program, tuned on its own."""
    groups: dict[tuple, list[dict]] = {}
    for cfg in configs:
        _, build_keys = split_config(cfg, target)
        groups.setdefault(tuple(sorted(build_keys.items())), []).append(dict(cfg))
    return groups


def validate_config(op: str, n_cols: int, in_dtype: Any, config: Mapping[str, Any], target: str,
                    row_stride: int = 0) -> str | None:
    """Why ``config`` cannot build for this call (rows ``row_stride`` apart on CUDA, 0 dense), or None."""
    try:
        jit_kwargs, build = split_config(config, target)
    except ValueError as exc:
        return str(exc)
    missing = [k for k in JIT_PARAMS[target] if k not in jit_kwargs]
    if missing:
        return f"config {dict(config)!r} lacks {missing}"
    if target == "c":
        return check_cpu_config(n_cols, {**jit_kwargs, **build})
    if build["cluster"] > 1 and not cuda_supports_clusters():
        return "thread-block clusters (cluster > 1) need an sm_90+ GPU"
    if build["smem"] not in (0, 1):
        return f"smem must be 0 or 1 (got {build['smem']})"
    if build["keep"] not in (0, 1):
        return f"keep must be 0 or 1 (got {build['keep']})"
    if (why := keep_refused(op, build)) is not None:
        return why
    if build["smem"]:
        if not cuda_supports_clusters():
            return "the chunk-in-shared-memory family (smem=1) runs on sm_90+ GPUs (it was measured there only)"
        if row_stride:
            return f"the chunk-in-shared-memory family (smem=1) reads dense rows only (got row_stride={row_stride})"
        return smem_rows.check_launch(n_cols, dtype_name(in_dtype), build["tile_n"], build["cluster"],
                                      jit_kwargs["block_m"], jit_kwargs["threads"])
    return cuda_kernels.check_launch(n_cols, dtype_name(in_dtype), build["tile_n"], build["cluster"],
                                     jit_kwargs["block_m"], jit_kwargs["threads"], row_stride)
