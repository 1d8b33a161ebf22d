"""The TileLang backend's calls over a dim that is not unit-stride: which it serves, their configs, their kernel.

A call is served when its plan (:func:`dispatch.backend.strided_plan`) exists: the input is read
in place, through a flat view of its span, by the column kernels of :mod:`.strided_kernels`, or
on CUDA sm_90+, where the input is contiguous over a leading dim (:func:`tile_view`), by the
tiles in shared memory of :mod:`.smem_cols` (its verdict then names the card's ``"tiles"``
figures). For the column kernels, on CUDA the reduced dim must not be the unit-stride one (a
column per thread would put a whole row on each thread, every load of a warp in another row):
rows one stride apart, a slice ``x[:, :n]`` of wider rows, go to the row kernels instead, so what
is refused here is a unit-stride reduced dim whose rows don't collapse to one stride (leading
dims permuted, the unit-stride dim not the last one, dims reduced together, broadcast or
overlapping rows). There must also be columns enough to fill the GPU (:data:`MIN_CUDA_COLUMNS`);
the C target serves every plan (strided rows included: its row kernels take dense rows only).

logsumexp over reduced dims that don't collapse to one dim runs in steps
(:func:`dispatch.backend.logsumexp_steps`): the first step's kernel reads the input in place, each
later one the previous step's fp32 result; every step must be one these kernels serve, or one
that reads rows (:func:`row_view`: its reduced dim unit-stride, rows one stride apart, dense on
the C target), which the row kernels of :mod:`.build` serve. The first step's config is the
call's (tuned); the later ones, each over a fraction of the input, run their default.
"""

from __future__ import annotations

import threading

import torch

from dispatch.backend import StridedPlan, StridedStep, Verdict, logsumexp_steps, strided_plan
from dispatch.backend import row_view as rows_of_plan

from .availability import dtype_name

TUNABLES = {"cuda": ("threads",), "c": ("block_i",)}
BUILD_KEYS = {"cuda": ("block_r", "smem", "block_i", "cluster"), "c": ("block_r",)}
MIN_CUDA_COLUMNS = 16384  # 128 programs of 128 threads: about one per SM of an H200
TILES_CARD = "tiles"  # the card figures of calls the tiles in shared memory serve by default


def _np2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def plan_of(spec) -> StridedPlan | tuple[StridedStep, ...] | str:
    """The call's (outer, R, inner) plan; for logsumexp over dims that don't collapse, its steps;
    or why there is neither."""
    p = strided_plan(spec.shape, spec.stride, spec.dims, reduced_output=spec.op == "logsumexp",
                     one_dim=spec.op != "logsumexp")
    if isinstance(p, str) and spec.op == "logsumexp" and len(spec.dims) > 1:
        return logsumexp_steps(spec.shape, spec.stride, spec.dims)
    return p


def _first(p) -> StridedPlan:
    return p[0].plan if isinstance(p, tuple) else p


def row_view(p: StridedPlan, target: str) -> tuple[int, int, int] | None:
    """``(rows, row length, row stride)`` where a step's plan reads rows that ``target``'s row
    kernels take (:func:`dispatch.backend.row_view`; on the C target dense rows only); else None."""
    rows = rows_of_plan(p)
    if rows is None or (target == "c" and rows[2] != rows[1]):
        return None
    return rows


def _refusal(p: StridedPlan, target: str) -> str | None:
    """Why these kernels can't read one plan on ``target``, or None."""
    from .strided_kernels import MAX_SPAN, input_span, plan_key

    if target == "cuda" and p.R > 1 and p.x_strides[1] == 1:
        return ("the reduced dim is unit-stride but its rows are not one stride apart (leading dims permuted, a "
                "transposed view reduced over its unit-stride dim, dims reduced together, broadcast or overlapping "
                "rows): a thread per row would read a whole row alone, and the row kernels take the last dim of rows "
                "one stride apart")
    if target == "cuda" and 0 < p.outer * p.inner * p.R and p.outer * p.inner < MIN_CUDA_COLUMNS:  # empty: no launch
        return (f"{p.outer * p.inner} columns of {p.R}: a thread per column would leave most of the GPU idle (these "
                f"kernels take {MIN_CUDA_COLUMNS} columns or more; H200: 3-5% of copy bandwidth at dim 0 of "
                "4096x4096)")
    if input_span(plan_key(p)) > MAX_SPAN or p.outer * p.inner * p.R > MAX_SPAN:
        return "input or output spans 2**31 elements or more (32-bit offsets)"
    return None


def check(spec, target: str) -> Verdict:
    p = plan_of(spec)
    if isinstance(p, str):
        return Verdict.no(p)
    if not isinstance(p, tuple):
        if _tiles_default(p, target, spec.dtype, spec.out_dtype) is not None:
            return Verdict.yes(f"read in place: tiles of the ({p.outer}, {p.R}, {p.inner}) view in shared memory, a "
                               "cluster of CTAs a column tile", card=TILES_CARD)
        why = _refusal(p, target)
        return Verdict.no(why) if why else Verdict.yes("read in place, a column of the (outer, R, inner) view per "
                                                       "thread")
    kinds = []
    for i, st in enumerate(p):
        if row_view(st.plan, target):
            kinds.append(f"step {i + 1}: the row kernels")
            continue
        why = _refusal(st.plan, target)
        if why:
            return Verdict.no(f"logsumexp in {len(p)} steps, step {i + 1} (dims {list(st.dims)} of "
                              f"{list(st.shape)}): {why}")
        kinds.append(f"step {i + 1}: a column of its (outer, R, inner) view per thread")
    return Verdict.yes(f"logsumexp in {len(p)} steps, the first reading the input in place ({'; '.join(kinds)})")


def config_space(spec, target: str) -> list[dict]:
    """The configs of a call (of its first step, for logsumexp in steps; none to choose from where
    the first step runs the row kernels, at their default: the default alone)."""
    p = plan_of(spec)
    if isinstance(p, tuple) and row_view(p[0].plan, target):
        return [_default(p[0].plan, target)]
    if isinstance(p, tuple):
        return _space(p[0].plan, target)
    return _space(p, target, spec.dtype, spec.out_dtype)


def _space(p: StridedPlan, target: str, dtype: torch.dtype | None = None,
           out_dtype: torch.dtype | None = None) -> list[dict]:
    from .strided_kernels import BLOCK_RS, THREADS

    tiles = []  # where the tiles are the default, the column kernels (1.5-2x slower where measured) are not offered
    if dtype is not None and _tiles_default(p, target, dtype, out_dtype) is not None:
        from .smem_cols import configs

        tiles = [{"smem": 1, **c} for c in configs(tile_view(p, target, dtype), dtype_name(dtype))]
    r = max(1, p.R)
    rs = [b for b in BLOCK_RS if b <= _np2(r)] or [BLOCK_RS[0]]
    if target == "cuda":
        return tiles or [{"block_r": b, "threads": t} for t in THREADS for b in reversed(rs)]
    return [{"block_r": b, "block_i": 8} for b in reversed(rs)]


def default_config(spec, target: str) -> dict:
    """Where :func:`tile_view` takes the call and :func:`.smem_cols.default_config` has a tile for
    it, the tiles in shared memory (then the space holds tiles only); else a column a thread, 16
    values of R at a time (all of R when it fits), 128 threads: more programs for a small
    ``inner``."""
    p = plan_of(spec)
    if not isinstance(p, tuple):
        tiles = _tiles_default(p, target, spec.dtype, spec.out_dtype)
        if tiles is not None:
            return tiles
    return _default(_first(p), target)


def _tiles_default(p: StridedPlan, target: str, dtype: torch.dtype, out_dtype: torch.dtype) -> dict | None:
    key = tile_view(p, target, dtype)
    if key is None or out_dtype != dtype:  # casts: measured and tested in the input's dtype only
        return None
    from .smem_cols import default_config as tiles_default

    cfg = tiles_default(key, dtype_name(dtype))
    return None if cfg is None else {"smem": 1, **cfg}


def tile_view(p: StridedPlan, target: str, dtype: torch.dtype) -> tuple[int, int, int] | None:
    """``(outer, R, inner)`` where the tiles-in-shared-memory kernels (:mod:`.smem_cols`) can read the
    plan: CUDA sm_90+ (clusters), a contiguous input and output, ``inner`` a whole number of
    32 bytes; else None."""
    from .configs import cuda_supports_clusters

    outer, R, inner = p.outer, p.R, p.inner
    if target != "cuda" or p.outer1 or min(outer, R, inner) < 1 or inner * dtype.itemsize % 32:
        return None
    if p.x_strides[1:] != (inner, 1) or (outer > 1 and p.x_strides[0] != R * inner):
        return None
    out = p.out_strides
    if out[2] != 1 or (outer > 1 and out[0] != (inner if out[1] == 0 else R * inner)) or out[1] not in (0, inner):
        return None
    if outer * R * inner > 2**31 - 1 or not cuda_supports_clusters():
        return None
    return outer, R, inner


def _default(p: StridedPlan, target: str) -> dict:
    space = _space(p, target)
    for cfg in space:
        if cfg["block_r"] <= 16:
            return dict(cfg)
    return dict(space[-1])


_BUILT: dict[tuple, object] = {}
_LOCK = threading.Lock()


def build(op: str, key: tuple, in_dtype: str, out_dtype: str, target: str, config: dict):
    """The compiled kernel of one layout and config (cached in-process; TileLang caches on disk)."""
    from dispatch.backend import PARSE_LOCK

    from .build import cuda_arch
    from .strided_kernels import program

    cache_key = (op, key, in_dtype, out_dtype, target, tuple(sorted(config.items())))
    kernel = _BUILT.get(cache_key)
    if kernel is None:
        with _LOCK:
            kernel = _BUILT.get(cache_key)
            if kernel is None:
                arch = cuda_arch() if target == "cuda" else None
                jit = {k: int(v) for k, v in config.items() if k in TUNABLES[target]}
                with PARSE_LOCK:  # TileLang parses kernel sources with ast (see build._TRACE_LOCK)
                    if config.get("smem"):
                        from . import smem_cols

                        made = smem_cols.program(op, key, in_dtype, out_dtype, int(config["block_i"]),
                                                 int(config["tile_r"]), int(config["cluster"]), arch)
                    else:
                        made = program(op, key, in_dtype, out_dtype, target, int(config["block_r"]), arch)
                kernel = _BUILT[cache_key] = made(**jit)
    return kernel


def kernel(spec, config, target: str):
    """``run(x)`` for every ``x`` of exactly ``spec``: its flat view to the kernel, the output in torch's layout."""
    p = plan_of(spec)
    cfg = dict(config.as_dict()) if config else default_config(spec, target)
    if not isinstance(p, tuple):
        return _plan_run(spec.op, p, spec.dtype, spec.out_dtype, tuple(spec.out_shape), target, cfg)
    runs = []
    for i, st in enumerate(p):
        last = i == len(p) - 1
        out_shape = tuple(spec.out_shape) if last else tuple(s for j, s in enumerate(st.shape) if j not in st.dims)
        in_dtype, out_dtype = spec.dtype if i == 0 else torch.float32, spec.out_dtype if last else torch.float32
        rows = row_view(st.plan, target)
        if rows:
            runs.append(_rows_run(spec.op, rows, in_dtype, out_dtype, out_shape, target))
        else:
            runs.append(_plan_run(spec.op, st.plan, in_dtype, out_dtype, out_shape, target,
                                  cfg if i == 0 else _default(st.plan, target)))
    steps = tuple(runs)

    def run(x):
        for step in steps:
            x = step(x)
        return x

    return run


def _rows_run(op: str, rows: tuple[int, int, int], in_dtype: torch.dtype, out_dtype: torch.dtype,
              out_shape: tuple, target: str):
    """``run(x)`` of a step that reads rows (:func:`row_view`): the row kernels, their default config,
    given the rows as they lie in memory (x's own dims may be in another order)."""
    from .build import build
    from .configs import default_config
    from .direct import call_path

    m, n, stride = rows
    cfg = default_config(op, m, n, in_dtype, target)
    compiled = build(op, m, n, in_dtype, out_dtype, cfg, target, 0 if stride == n else stride)
    path = call_path(compiled, m, n, out_shape, True)

    def run(x):
        return path(x.as_strided((m, n), (stride, 1)))

    return run


def _plan_run(op: str, p: StridedPlan, in_dtype: torch.dtype, out_dtype: torch.dtype, out_shape: tuple, target: str,
              cfg: dict):
    """``run(x)`` of one plan: the input's flat view to its kernel, the output viewed as ``out_shape``."""
    from .strided_kernels import input_span, plan_key

    if p.outer * p.inner == 0 or p.R == 0:  # nothing to read: torch's answers, no launch
        fill = float("-inf") if op == "logsumexp" else None

        def run_empty(x):
            out = torch.empty(out_shape, dtype=out_dtype, device=x.device)
            return out.fill_(fill) if fill is not None and out.numel() else out
        return run_empty
    if cfg.get("smem"):
        return _tiles_run(op, p, in_dtype, out_dtype, out_shape, target, cfg)
    key = plan_key(p)
    compiled = build(op, key, dtype_name(in_dtype), dtype_name(out_dtype), target, cfg)
    flat = (input_span(key),)
    bits_in = target == "c" and in_dtype == torch.bfloat16
    bits_out = target == "c" and out_dtype == torch.bfloat16

    def run(x):
        view = x.as_strided(flat, (1,))
        y = compiled(view.view(torch.int16) if bits_in else view)
        return (y.view(torch.bfloat16) if bits_out else y).view(out_shape)

    return run


def _tiles_run(op: str, p: StridedPlan, in_dtype: torch.dtype, out_dtype: torch.dtype, out_shape: tuple,
               target: str, cfg: dict):
    """``run(x)`` of a plan the tiles-in-shared-memory kernels read: ``x`` viewed as ``(outer, R, inner)``
    (copied first where it starts mid-vector: the kernels copy 16 bytes at a time)."""
    from .smem_cols import check_config, tile_rows

    key = tile_view(p, target, in_dtype)
    if key is None:
        raise ValueError(f"config {cfg}: the tiles in shared memory (smem=1) read a contiguous input reduced over a "
                         f"dim whose inner extent is a whole number of 32 bytes on sm_90+; this call's (outer, R, "
                         f"inner) view {(p.outer, p.R, p.inner)} with strides {p.x_strides} is not one (smem=0 "
                         "configs serve it)")
    dtype = dtype_name(in_dtype)
    why = check_config(key, dtype, cfg)
    if why is not None:
        raise ValueError(f"config {cfg} for the (outer, R, inner) view {key}: {why}")
    rows = tile_rows(key[1], dtype, int(cfg["block_i"]), int(cfg["cluster"]), int(cfg["threads"]))
    compiled = build(op, key, dtype, dtype_name(out_dtype), target, {**cfg, "tile_r": rows})

    strides = (key[1] * key[2], key[2], 1)

    def run(x):
        if x.data_ptr() & 15:
            x = x.clone()  # dense as x was, and aligned
        return compiled(x.as_strided(key, strides)).view(out_shape)

    return run
