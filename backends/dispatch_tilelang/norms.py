"""rms_norm and layer_norm on TileLang, host side: verdicts, config spaces, compiled kernels and tuning.

A config is a dict. C target: ``block_m`` (tunable JIT parameter) and ``tile_n`` (build key: 0 =
whole row in one tile). CUDA: ``block_m`` and ``threads`` (tunable JIT parameters) and ``tile_n``
(build key: 0 = whole rows in registers, up to 32768 elements; longer rows, up to ``MAX_N``: a CTA
per row walking it in ``tile_n`` chunks, ``block_m`` 1). With ``smem: 1`` (and ``cluster``, build
keys present only there; sm_90+, dense rows a whole number of 16-byte vectors): a row in
``cluster`` chunks of ``tile_n`` held in shared memory, one CTA each, exchanging their partial
statistics in the cluster (:mod:`.smem_norms`); ``tile_n`` is then the cluster's share of the
call's row, whatever row the config was chosen on. Rows may be ``row_stride`` elements apart
(a slice of wider rows): they are read in place, through a strided view, by a kernel of that
stride. Programs are in :mod:`dispatch_tilelang.norm_kernels` and :mod:`.smem_norms`.
"""

from __future__ import annotations

import threading

import torch

NORM_OPS = ("rms_norm", "layer_norm")
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
TUNABLES = {"cuda": ("block_m", "threads"), "c": ("block_m",)}
BUILD_KEYS = {"cuda": ("tile_n", "cluster", "smem"), "c": ("tile_n",)}
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



def check(spec, target: str):
    """Can the TileLang norm kernels serve this call on ``target``? A verdict with a reason."""
    from dispatch.backend import Verdict, dtype_name, norm_layout_refusal, norm_size

    if spec.dtype not in DTYPES:
        return Verdict.no(f"input dtype {dtype_name(spec.dtype)} not served; float32, float16 and bfloat16 are")
    for t in spec.tensors[1:]:
        if t.present and (t.dtype != spec.dtype or not t.dense):
            return Verdict.no(f"{t.name} must be contiguous and of the input's dtype ({dtype_name(spec.dtype)}); "
                              f"got {dtype_name(t.dtype)}, strides {list(t.stride)}")
    n = norm_size(spec)
    if n > MAX_N:
        return Verdict.no(f"normalized size {n} > {MAX_N}, the longest row these kernels walk")
    refusal = norm_layout_refusal(spec)
    if refusal is not None:
        return Verdict.no(refusal)
    if target == "cuda":
        from dispatch.backend import norm_rows

        config = space(spec, target)[1]
        card = smem_card(norm_rows(spec), n, config, DTYPES[spec.dtype])
        if config.get("smem") == 1:
            return Verdict.yes(f"rows in shared memory, {config['cluster']} CTAs a row", card=card)
    return Verdict.yes()


def space(spec, target: str) -> tuple[list[dict], dict]:
    """The call's config space and its default (the space's first)."""
    from dispatch.backend import norm_rows, norm_size

    configs = config_space(norm_rows(spec), norm_size(spec), target, DTYPES[spec.dtype], row_stride(spec))
    return configs, dict(configs[0])


def row_stride(spec) -> int:
    """The kernels' ``row_stride`` for ``spec``: 0 for dense rows (or a single row), else the
    elements between consecutive rows."""
    from dispatch.backend import norm_row_stride, norm_rows, norm_size

    stride, n = norm_row_stride(spec), norm_size(spec)
    return 0 if stride is None or stride == n or norm_rows(spec) <= 1 else int(stride)


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
                if cuda_check(n, bm, threads) is None and bm <= max(1, 4 * _np2(max(m, 1))):
                    cfg = {"block_m": bm, "threads": threads, "tile_n": 0}
                    if cfg not in out:
                        out.append(cfg)
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
    of up to 16K and fp32 rows were level or behind); else none."""
    from .cuda_kernels import DTYPE_BYTES

    if config.get("smem") == 1 and DTYPE_BYTES[dtype] == 2 and n > 16384 and m * int(config["cluster"]) >= 512:
        return "smem"
    return ""


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


# -- compiled kernels ---------------------------------------------------------------------------

_BUILT: dict[tuple, object] = {}
_LOCK = threading.Lock()


def _program(op, n, dtype, has_weight, has_bias, eps, target, stride, config):
    """The ``@tilelang.jit`` program of ``config``'s family (its build keys)."""
    from . import norm_kernels

    tile_n = int(config.get("tile_n", 0))
    if target == "c":
        return norm_kernels.cpu_program(op, n, dtype, has_weight, has_bias, eps, tile_n, stride)
    import os

    arch = os.environ.get("DISPATCH_TILELANG_CUDA_ARCH") or None
    if config.get("smem") == 1:
        from . import smem_norms

        reason = smem_refusal(n, dtype, stride, config)
        if reason is not None:
            raise ValueError(reason)
        return smem_norms.program(op, n, dtype, has_weight, has_bias, eps, tile_n, int(config["cluster"]), arch)
    if tile_n > 0:
        return norm_kernels.cuda_chunked_program(op, n, dtype, has_weight, has_bias, eps, tile_n, arch, stride)
    return norm_kernels.cuda_program(op, n, dtype, has_weight, has_bias, eps, arch, stride)


def build(op: str, n: int, dtype: str, has_weight: bool, has_bias: bool, eps: float, target: str, stride: int,
          config: dict):
    """The compiled kernel of one family and config (cached in-process; TileLang caches on disk)."""
    key = (op, n, dtype, has_weight, has_bias, eps, target, stride, tuple(sorted(config.items())))
    kernel = _BUILT.get(key)
    if kernel is None:
        with _LOCK:
            kernel = _BUILT.get(key)
            if kernel is None:
                jit = {k: v for k, v in config.items() if k in TUNABLES[target]}
                kernel = _program(op, n, dtype, has_weight, has_bias, eps, target, stride, config)(**jit)
                _BUILT[key] = kernel
    return kernel


def build_all(op: str, n: int, dtype: str, has_weight: bool, has_bias: bool, eps: float, target: str, stride: int,
              configs: list[dict], workers: int | None = None) -> list[tuple[dict, str]]:
    """Build every config at once, the compiles overlapping on a thread pool
    (:func:`dispatch_tilelang.build.compile_program`); the kernels land where :func:`build` finds
    them. Returns ``(config, reason)`` for each config that failed."""
    from dispatch.backend import Config, compile_all

    from .build import compile_program

    parts = (op, n, dtype, has_weight, has_bias, eps, target, stride)

    def one(config: Config) -> None:
        cfg = config.as_dict()
        if (*parts, tuple(sorted(cfg.items()))) in _BUILT:
            return
        jit = {k: v for k, v in cfg.items() if k in TUNABLES[target]}
        adopt(parts, cfg, compile_program(lambda: _program(*parts, cfg), jit))

    report = compile_all([Config.of(c) for c in configs], one, workers)
    return [(f.config.as_dict(), f.reason) for f in report.failures]


def adopt(key_parts: tuple, config: dict, kernel) -> None:
    """Keep a kernel compiled by TileLang's autotuner as the build of ``config``."""
    _BUILT.setdefault((*key_parts, tuple(sorted(config.items()))), kernel)


def _parts(spec, target: str) -> tuple:
    from dispatch.backend import norm_eps, norm_size

    present = [t.present for t in spec.tensors[1:]] + [False]
    return (spec.op, norm_size(spec), DTYPES[spec.dtype], present[0], present[1], float(norm_eps(spec)), target,
            row_stride(spec))


def aligned(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a copy of it where its data pointer is not 16-byte aligned: the CUDA programs load
    and store 16-byte vectors from each tensor's start (a view that starts mid-vector, e.g. rows
    ``x[1:]`` of a flat buffer, would fault); a fresh allocation is aligned, and the copy keeps
    ``t``'s strides (rows of a wider buffer stay that far apart). The user's tensor is never handed
    over misaligned nor written."""
    if not t.data_ptr() & 15:
        return t
    if t.dim() == 2 and not t.is_contiguous():  # strided rows: into rows of the same stride
        m, n = t.shape
        buf = torch.empty((m, t.stride(0)), dtype=t.dtype, device=t.device)[:, :n]
        return buf.copy_(t)
    return t.clone()


def rows_of(x: torch.Tensor, m: int, n: int, stride: int) -> torch.Tensor:
    """``x`` as the (m, n) view the programs take: dense rows, or rows ``stride`` apart (the
    strides a kernel of that stride checks; a single row is given dense strides)."""
    rows = x.reshape(m, n)  # the leading dims collapse to one stride (the check said so): a view
    return rows.as_strided((m, n), (n, 1)) if m <= 1 and not stride else rows


def kernel(spec, config, target: str):
    """``run(x, weight, bias)`` for calls of ``spec``; on CUDA a misaligned tensor is copied first (:func:`aligned`)."""
    from dispatch.backend import norm_rows, placeholder

    parts = _parts(spec, target)
    n, m = parts[1], norm_rows(spec)
    cfg = fit(n, parts[2], dict(config.as_dict())) if config else default_config(m, n, target, parts[2], parts[-1])
    dtype, out_shape = spec.dtype, spec.out_shape
    if m == 0 or n == 0:
        def run_empty(x, weight=None, bias=None):
            return torch.empty(out_shape, dtype=dtype, device=x.device)
        return run_empty
    compiled = build(*parts, cfg)
    bits = target == "c" and dtype == torch.bfloat16

    cuda, stride = target == "cuda", parts[-1]

    def prepare(x, weight=None, bias=None):
        ph = placeholder(x, dtype, (n,))
        args = (rows_of(x, m, n, stride), ph if weight is None else weight.reshape(n),
                ph if bias is None else bias.reshape(n))
        return tuple(aligned(a) for a in args) if cuda else args

    if cuda:  # the executable's call once checked (direct.NormCallPath): the adapter's costs host time
        from .direct import NormCallPath

        return NormCallPath(compiled, target, m, n, out_shape, dtype, prepare).run

    def run(x, weight=None, bias=None):
        args = prepare(x, weight, bias)
        if bits:
            return compiled(*(a.view(torch.int16) for a in args)).view(torch.bfloat16).view(out_shape)
        return compiled(*args).view(out_shape)

    return run


def native_tune(spec, space, example, settings):
    """CUDA: TileLang's ``autotune`` over the family (tunables seeded from the default config and kept
    out of specialization by ``tune_native``), the winner timed by the protocol. None for strided
    rows: TileLang's autotuner compiles its candidates with a packed ABI that refuses a strided
    input (dispatch's sweep times those configs instead)."""
    if row_stride(spec):
        return None
    import torch.nn.functional as F

    from dispatch.autotune import Config, TuneResult, measure

    from .native_tune import tune_native

    target = "cuda"
    parts = _parts(spec, target)
    op, n, eps = parts[0], parts[1], parts[5]
    from dispatch.backend import norm_rows

    m = norm_rows(spec)
    x, weight, bias = (list(example) + [None])[:3]
    ph = torch.zeros(n, dtype=spec.dtype, device=x.device)
    inputs = [aligned(rows_of(x, m, n, parts[-1])), ph if weight is None else weight.reshape(n),
              ph if bias is None else bias.reshape(n)]
    has_w, has_b = parts[3], parts[4]

    def ref_prog(a, w, b):
        wf = w.float() if has_w else None
        if op == "rms_norm":
            return F.rms_norm(a.float(), (n,), wf, eps).to(a.dtype)
        return F.layer_norm(a.float(), (n,), wf, b.float() if has_b else None, eps).to(a.dtype)

    default = space.default.as_dict()  # one program: the default's family (its build keys)
    configs = [c.as_dict() for c in space.configs
               if all(c.as_dict().get(k) == default.get(k) for k in BUILD_KEYS[target])]
    program = _program(*parts, default)
    best, _, tuned = tune_native(program, configs, space.default.as_dict(), space.tunables, space.aliases,
                                 settings.warmup, settings.rep, inputs=inputs, ref_prog=ref_prog, return_kernel=True)
    adopt(parts, best, tuned)
    config = Config.of(best)
    run = kernel(spec, config, target)
    measured = measure(lambda: run(*example), spec.device, settings, config)
    return TuneResult(config=config, latency_us=measured.median_us, spread_us=measured.spread_us,
                      timings=(measured,), source="tilelang.autotune")


def backward(spec, target: str):
    """The backward kernel of a norm call (:mod:`dispatch_tilelang.norm_backward`), or None where
    its rows don't fit one program (then autograd runs through the reference)."""
    from dispatch.backend import norm_rows

    from . import norm_backward

    parts = _parts(spec, target)
    op, n, eps = parts[0], parts[1], parts[5]
    if not check(spec, target) or not norm_backward.serves(n, target):
        return None
    return norm_backward.make_backward(op, norm_rows(spec), n, spec.dtype, parts[3], parts[4], eps, target)
