"""rms_norm and layer_norm on TileLang: the config spaces and their defaults (host side, no kernels).

C target: ``block_m`` rows a program, ``tile_n`` 0 (a whole row in one tile) or the chunk a
program walks. CUDA: rows in registers (``tile_n`` 0, ``threads // block_m`` threads a row), longer
rows walked by a CTA in ``tile_n`` chunks, and, with ``smem: 1`` and ``cluster`` (sm_90+, dense rows
a whole number of 16-byte vectors), a row in ``cluster`` chunks of ``tile_n`` held in shared memory,
one CTA each (:mod:`.smem_norms`), its chunk refit to each call's row (:func:`fit`). Which family
serves by default, and which calls name the shared-memory family's card figures
(:func:`smem_card`), follow the H200 measurements in benchmarks/results/current/norms/.
"""

from __future__ import annotations

CUDA_MAX_N = 1024 * 32  # whole rows in registers: 1024 threads x 32 values
MAX_N = 1 << 20  # longest row served (CUDA: in chunks past CUDA_MAX_N)
CUDA_TILES = (8192, 4096)  # the chunks of rows past CUDA_MAX_N (default first)
CPU_ONE_TILE_MAX_N = 8192
CPU_TILE = 2048
CPU_MAX_TILE_ELEMS = 16384  # two (block_m, tile) fp32 tiles on the stack
SMEM_MIN_N = 4096  # the chunk-in-shared-memory configs, from rows of this length
SMEM_CLUSTERS = (1, 2, 4, 8, 16)
SMEM_CHUNK_BYTES = (8 << 10, 64 << 10)  # a chunk's bytes in the config space (smallest, largest)


def _np2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)




def smem_config(n: int, dtype: str, cluster: int, threads: int) -> dict:
    """The chunk-in-shared-memory config of rows of ``n`` in ``cluster`` chunks: each the cluster's
    share of the row, rounded up to a 16-byte vector a thread."""
    from .cuda_kernels import DTYPE_BYTES, share

    tile = share(n, cluster, (16 // DTYPE_BYTES[dtype]) * threads)
    return {"block_m": 1, "threads": threads, "tile_n": tile, "cluster": cluster, "smem": 1}


def smem_refusal(n: int, dtype: str, stride: int, config: dict | None = None) -> str | None:
    """Why the chunk-in-shared-memory family cannot serve rows of ``n`` (with ``config``, that
    config), or None."""
    from .configs import cuda_supports_clusters
    from .cuda_kernels import DTYPE_BYTES
    from .smem_rows import check_launch

    if not cuda_supports_clusters():
        return "the chunk-in-shared-memory norms (smem=1) run on sm_90+ GPUs (thread-block clusters)"
    if stride:
        return f"the chunk-in-shared-memory norms (smem=1) read dense rows only (got rows {stride} elements apart)"
    vec = 16 // DTYPE_BYTES[dtype]
    if n % vec:
        return (f"the chunk-in-shared-memory norms (smem=1) copy 16-byte vectors: rows of {n} are not a whole "
                f"number of {vec}-element vectors")
    if config is None:
        return None
    return check_launch(n, dtype, int(config["tile_n"]), int(config["cluster"]), int(config["block_m"]),
                        int(config["threads"]))


def _smem_configs(n: int, dtype: str) -> list[dict]:
    """Chunk-in-shared-memory configs: a row in 1-16 chunks of 8-64 KB, 128 or 256 threads, at most
    1/8 of the covered row padding."""
    from .cuda_kernels import DTYPE_BYTES

    out = []
    for cluster in SMEM_CLUSTERS:
        for threads in (256, 128):
            cfg = smem_config(n, dtype, cluster, threads)
            tile = cfg["tile_n"]
            if SMEM_CHUNK_BYTES[0] <= tile * DTYPE_BYTES[dtype] <= SMEM_CHUNK_BYTES[1] \
                    and (cluster * tile - n) * 8 <= cluster * tile and smem_refusal(n, dtype, 0, cfg) is None:
                out.append(cfg)
    return out


def config_space(m: int, n: int, target: str, dtype: str = "float32", stride: int = 0) -> list[dict]:
    """Candidates, default first, deterministic."""
    from .norm_kernels import cuda_check

    out: list[dict] = []
    if target == "c":
        tile = 0 if n <= CPU_ONE_TILE_MAX_N else CPU_TILE
        width = n if tile == 0 else tile
        for bm in (1, 4, 16):
            if bm * max(width, 1) <= CPU_MAX_TILE_ELEMS and (bm == 1 or bm <= _np2(max(m, 1))):
                out.append({"block_m": bm, "tile_n": tile})
        return out or [{"block_m": 1, "tile_n": tile}]
    smem = _smem_configs(n, dtype) if n >= SMEM_MIN_N and smem_refusal(n, dtype, stride) is None else []
    default = _smem_default(m, n, dtype, smem)
    if n > CUDA_MAX_N:  # a CTA per row, walking it in chunks
        from .norm_kernels import chunked_check

        out = [{"block_m": 1, "threads": threads, "tile_n": tile} for tile in CUDA_TILES
               for threads in (512, 1024, 256) if chunked_check(tile, 1, threads) is None]
    else:
        vec_need = max(n, 1)
        for per in (8, 16, 32):
            tpr = _np2(_cdiv(vec_need, per))
            for threads in (128, 256, 512, 1024):
                if tpr > threads:
                    continue
                bm = threads // tpr
                if cuda_check(n, bm, threads) is None:
                    cfg = {"block_m": bm, "threads": threads, "tile_n": 0}
                    if cfg not in out:
                        out.append(cfg)
        # a block of at most 4x the rows (to a power of two); where every block is larger (a few
        # rows this short) the smallest
        few = [c for c in out if c["block_m"] <= max(1, 4 * _np2(max(m, 1)))]
        out = few or sorted(out, key=lambda c: c["block_m"])[:1]
        for cfg in out:  # 16 values per thread, 256-512 threads: the softmax kernels' sweet spot
            if cfg["threads"] in (256, 512) and _cdiv(n, cfg["threads"] // cfg["block_m"]) <= 16:
                out.remove(cfg)
                out.insert(0, cfg)
                break
    out += [c for c in smem if c not in out]
    if default is not None:
        out.remove(default)
        out.insert(0, default)
    return out


def _smem_default(m: int, n: int, dtype: str, smem: list[dict]) -> dict | None:
    """The chunk-in-shared-memory config that serves by default, or None (the other families). It
    took less time than TileLang's other families at every row of 4K-256K measured (H200, rms_norm
    and layer_norm, bf16 and fp32; benchmarks/results/current/norms/smem_norms/): a row of up to
    64 KB in one CTA (128 threads up to 8 KB, else 256); longer rows in 8 chunks up to 256 KB, 16
    beyond (128 threads, 2-byte rows of 16 chunks 256: the faster there, and with few rows). The
    first of these that the row allows (no CTA left without columns), or None."""
    from .cuda_kernels import DTYPE_BYTES

    if not smem:
        return None
    size = DTYPE_BYTES[dtype]
    nbytes = n * size
    if nbytes <= 64 << 10:
        wanted = [(1, 128 if nbytes <= 8 << 10 else 256)]
    elif nbytes <= 256 << 10:
        wanted = [(8, 128), (4, 128), (16, 128)]
    else:
        wanted = [(16, 256 if size == 2 else 128), (8, 256 if size == 2 else 128)]
    for cluster, threads in wanted:
        cfg = smem_config(n, dtype, cluster, threads)
        if cfg in smem:
            return cfg
    return None


def smem_card(m: int, n: int, config: dict, dtype: str) -> str:
    """The verdict card of a call served by ``config``: ``"smem"`` where the chunk-in-shared-memory
    kernels took less time than Triton's on the H200: 2-byte rows longer than 16K with at least 512
    CTAs (rows x cluster; with fewer, 4 x 262144 and 32 x 151936, Triton's were the faster; rows
    of up to 16K and fp32 rows were level or behind); ``"smem_walked"`` for ``_WALKED_ROWS`` rows
    or more of up to 64K among those, which Triton walks twice in chunks, the second read from L2,
    in less time: 23.7 us against 26.1 at 256 x 65536, 24.4 against 25.6 at 512 x 32768 (device
    time, Dec 5), so that its figures rank below Triton's and above torch's; else none."""
    from .cuda_kernels import DTYPE_BYTES

    if config.get("smem") != 1 or DTYPE_BYTES[dtype] != 2 or n <= 16384 or m * int(config["cluster"]) < 512:
        return ""
    return "smem_walked" if n <= 65536 and m >= _WALKED_ROWS else "smem"


_WALKED_ROWS = 256  # smem_card: from here rows of up to 64K rank below Triton's (its chunked walk)


def default_config(m: int, n: int, target: str, dtype: str = "float32", stride: int = 0) -> dict:
    return dict(config_space(m, n, target, dtype, stride)[0])


def fit(n: int, dtype: str, config: dict) -> dict:
    """``config`` for rows of ``n``: a chunk-in-shared-memory config's chunk is its cluster's share of
    the row (``smem_rows.fit_chunk``: the cluster halved where the share would leave a CTA nothing
    of the row), so that a config chosen on another row of the bucket serves this one; other
    configs as they are."""
    if config.get("smem") != 1:
        return config
    from .smem_rows import fit_chunk

    tile, cluster = fit_chunk(n, dtype, int(config["cluster"]), int(config["threads"]))
    return {**config, "tile_n": tile, "cluster": cluster}
