"""The launch plan of the rms_norm and layer_norm backward on Triton: how a call shape runs
(:func:`backward_plan`), the overrides a caller may give and their checks. Host side, no kernels;
the backward that runs a plan is :func:`dispatch_triton.norm_backward.make_backward`.

Rows of up to 8192 elements are held in registers by a persistent grid (16 elements a thread, 8
for fp32 rows shorter than 4096; tiles of at least 4 KB; 16 warps a multiprocessor at 128
registers; each program loads its next tile before it works on the current one): x and dy read
once, dx written once, the statistics recomputed in registers, and the dweight/dbias partials
accumulated in registers (one row of partials per program; on a GPU with 128 programs or more,
their column sums are taken in the same launch by the programs that finish last, ``FINISH``:
rms_norm's backward 1-7% faster on an H200 at N = 1024-8192, layer_norm's 2-3% at N = 1024,
where it is on). On an H200 this plan took the bf16 backward of 16384 x 1024 from 104-188 us to
37-39 us.

Longer rows run on a GPU by default (``COOP``) in one launch whose groups of programs each hold a
row's chunks, exchange their partials (four words for layer_norm, two for rms_norm, in one vector
exchange) and read x and dy once, pipelined one row ahead (a program publishes its next row's sums
before it awaits this row's). The chunks: 2048 elements at 4 warps (fp32: 8) and 128 registers a
thread, with three exceptions: rows over 65536 at 32 rows or fewer (layer_norm's, and rms_norm's
fp32 rows) in 1024-element chunks at 4 warps; layer_norm's 2-byte rows in 2048-element chunks at 168
registers (128 where the row's chunks would not all fit at once at 168); rms_norm's fp32 rows over
65536, from 64 rows, at 80 (10-12% faster on an H200). On an
H200 the one launch ran 1.08-1.30x faster than two at N = 16384..262144 (bf16 and fp32) with four
scalar exchanges a chunk; the exchange as it is now took another 20-27% off rms_norm and 5-13% off
layer_norm (bf16). Two launches remain for the interpreter and for rows whose chunks do not all fit
on the device at once: over (row groups, 2048-element chunks, two waves of programs), the per-row
sums, then dx and the partials, re-reading x and dy newest first (L2; for 2-byte dtypes the first
launch's loads are marked evict_last and each program loads its next row ahead). Given each row's
statistics by the forward (``SAVED``), a chunk exchanges sum g * xhat (and layer_norm's sum g) and
nothing about x: on an H200 the backward of 16384..262144-long rows ran 2-10% (rms_norm) and 11-22%
(layer_norm) faster, and a training step's forward plus backward 2-13% (but rms_norm fp32 64 x
262144, 1.2% slower: its forward's store costs more than its backward saves). The partials are
reduced over the programs in a fixed order (deterministic) by one more launch, or in the one launch
by its 256 programs that finish last (``FINISH``, as the rows' launch does; not for fp32 rows of up
to 16384, where it ran 1-3% slower). ``benchmarks/sweep_norm_backward.py`` times plan variants on a
GPU.
"""

from __future__ import annotations

import torch

from . import _interpreting
from .launch import programs_an_sm
from .norm_configs import _cdiv, _np2, _sms

_MAX_ONE_PASS_BWD = 8192  # backward holds x, dy, w and two accumulators per element
_BWD_CHUNK = 2048  # the chunk of long rows in the backward
_SPLIT_FINISH = 256  # the programs of the long rows' one launch that take its column sums
_FEW_ROWS = 32  # long rows in 1024-element chunks up to this many rows (backward_plan)


_PLAN_KEYS = {"rows": ("ROWS", "num_warps", "G", "maxnreg", "num_stages", "EVICT", "PREFETCH", "STAGES", "FINISH"),
              "split": ("BLOCK_N", "num_warps", "GR", "maxnreg", "num_stages", "HINTS", "PREFETCH", "COOP",
                        "SAVED", "FINISH")}


_FLAGS = ("EVICT", "PREFETCH", "HINTS", "COOP", "SAVED")  # the plan's bool entries


def _check_overrides(overrides: dict, kind: str) -> None:
    """Raise ValueError for a key that a ``kind`` plan does not have or a value it cannot take."""
    for key, value in overrides.items():
        if key not in _PLAN_KEYS[kind]:
            raise ValueError(f"backward plan override {key}={value!r}: not a key of a {kind!r} plan "
                             f"(those are {', '.join(_PLAN_KEYS[kind])})")
        if key in _FLAGS:
            ok = isinstance(value, bool)
        elif key == "FINISH":
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0 and not value & (value - 1)
        else:
            ok = (value is None and key == "maxnreg") or (isinstance(value, int) and not isinstance(value, bool)
                                                          and value > 0)
        if not ok:
            wanted = "a positive int or None" if key == "maxnreg" else "a positive int"
            if key in _FLAGS:
                wanted = "a bool"
            elif key == "FINISH":
                wanted = "0 or a power of two"
            raise ValueError(f"backward plan override {key}={value!r}: {wanted} is wanted")


def _resident_per_sm(warps: int, maxnreg: int | None) -> int:
    """Programs of ``warps`` warps resident on a multiprocessor at ``maxnreg`` registers a thread
    (no ``maxnreg``: counted as 64), within its warp and program limits (:func:`launch.programs_an_sm`)."""
    return programs_an_sm(maxnreg or 64, warps)


def backward_plan(m: int, n: int, dtype: torch.dtype, device: torch.device,
                  split: tuple[int, int] | None = None, overrides: dict | None = None, grads: int = 1,
                  op: str = "") -> dict:
    """How the backward of ``m`` rows of ``n`` runs: ``kind`` "rows" (rows in registers: ``BLOCK_N``,
    ``ROWS`` per tile, ``G`` persistent programs, ``num_warps``, ``EVICT``: x and dy loaded
    evict_first, ``PREFETCH``: a program's next tile loaded before it works on the current one,
    in registers; ``STAGES``: the tile loop pipelined by Triton in that many stages, the next
    tiles' loads going to shared memory, with ``PREFETCH`` False; ``FINISH``: see ``grads``) or
    "split" (long rows: ``GR`` row groups times ``S`` chunks of ``BLOCK_N``; ``HINTS``: L2
    hints, ``PREFETCH``: the next row loaded ahead, ``COOP``: one launch whose groups exchange
    their sums, on a GPU where a group of ``S`` programs fits at once); both with the launch
    options ``maxnreg`` (None: none) and ``num_stages``.

    ``split``: ``(row groups, chunk length)`` forces the long-row path (tests reach it with short rows).
    ``overrides``: entries that replace the computed ones (a "rows" plan: ``ROWS``, ``num_warps``,
    ``G``, ``maxnreg``, ``num_stages``, ``EVICT``, ``PREFETCH``, ``STAGES``, ``FINISH``; a "split" plan:
    ``BLOCK_N``, ``num_warps``, ``GR``, ``maxnreg``, ``num_stages``, ``HINTS``, ``PREFETCH``, ``COOP``,
    ``SAVED``, ``FINISH``); ``FINISH``: the column sums taken in the launch, by that many of the
    programs that finish last (0: by a second launch; a "split" plan's only with ``COOP``);
    ``grads``: the parameter gradients wanted (1: dweight; 2: dweight and dbias), which decide the
    rows' ``FINISH``; ``op``: "rms_norm" or "layer_norm" where known (their long rows' registers
    differ). ``G``/``GR`` not given are recomputed from the
    overridden warps and registers (the programs resident at once). A key the plan's kind does
    not have, or a value it cannot take, raises ValueError."""
    cuda = device.type == "cuda"
    sms = _sms(device)
    bn = max(_np2(max(n, 1)), 16)
    esz = torch.empty((), dtype=dtype).element_size()
    over = dict(overrides or {})
    stages = over.get("num_stages", 1)
    if split is None and bn <= _MAX_ONE_PASS_BWD:
        # tiles of at least 4 KB (several short rows), 16 elements a thread (8 for fp32 rows
        # shorter than 4096), the next tile loaded ahead (evict_first for 2-byte dtypes only: fp32
        # ran 1-6% faster without), and as many programs as are resident at 128 registers a
        # thread (``maxnreg``) (the H200 backward sweep's best at N = 1024..4096)
        _check_overrides(over, "rows")
        maxnreg = over.get("maxnreg", 128)
        rows = over.get("ROWS", max(1, 4096 // (bn * esz)))
        if rows * bn & (rows * bn - 1):
            raise ValueError(f"backward plan override ROWS={rows}: ROWS * BLOCK_N = {rows} * {bn} is not a power "
                             "of two")
        per_thread = 16 if esz <= 2 or bn >= 4096 else 8
        warps = over.get("num_warps", max(1, min(32, bn * rows // (32 * per_thread))))
        tiles = _cdiv(m, rows)
        g = over.get("G", min(tiles, _resident_per_sm(warps, maxnreg) * sms if cuda else 4))
        pipelined = over.get("STAGES", 1)
        prefetch = over.get("PREFETCH", pipelined == 1)
        if prefetch and pipelined > 1:
            raise ValueError(f"backward plan override STAGES={pipelined}: the tile loop's pipeline loads ahead "
                             "itself; give PREFETCH=False with it (or STAGES=1)")
        g = max(1, g)
        # FINISH on a GPU, with 128 programs or more: 128 of them (at most BLOCK_N) for dweight alone;
        # 64 for dweight and dbias of rows of up to 1024 (twice the columns' work), else a second
        # launch. On an H200 (sweep_norm_backward.py, Dec 4) rms_norm's backward took 1-7% less time
        # at N = 1024-8192 (M*N = 16M), layer_norm's 2-3% less at N = 1024 and as much or more
        # beyond; at 32 x 4096 (32 programs) 0.5-1.0 us more
        auto = (min(128, bn) if grads == 1 else (64 if bn <= 1024 else 0)) \
            if cuda and not _interpreting() and g >= 128 else 0
        finish = over.get("FINISH", auto)
        if finish > bn or (finish > g and (cuda or _interpreting())):  # (a CPU plan's G on a GPU host: no bound)
            raise ValueError(f"backward plan override FINISH={finish}: at most the programs (G={g}) and the "
                             f"columns (BLOCK_N={bn}) can finish the column sums")
        if finish > 1 and _interpreting():
            raise ValueError(f"backward plan override FINISH={finish}: the interpreter runs one program after "
                             "another, where only the last can finish the column sums (FINISH=1)")
        return dict(kind="rows", BLOCK_N=bn, ROWS=rows, G=g, num_warps=warps, maxnreg=maxnreg,
                    num_stages=stages, EVICT=over.get("EVICT", esz <= 2), PREFETCH=prefetch, STAGES=pipelined,
                    FINISH=finish)
    # long rows: (row groups) x (chunks) programs, 8 elements a thread, two waves of resident
    # programs (each walks its group's rows: the dweight/dbias partials are a row per group);
    # 2-byte dtypes with the L2 hints and the next row loaded ahead (7-15% faster on the H200 at
    # N = 16384..262144; fp32 ran as fast or faster without)
    _check_overrides(over, "split")
    can_coop = cuda and not _interpreting()
    want = over.get("COOP", can_coop and split is None)
    # rows longer than 65536, 32 rows or fewer, in the one launch (layer_norm's, and rms_norm's
    # fp32 rows): chunks of 1024 at 8 elements a thread (2-byte rows: twice the chunks, half the row
    # groups; built for sm_90 at 128 registers, layer_norm's kernel keeps 200 bytes on the stack at
    # 16 elements a thread, none at 8; fp32 rows: 8 elements a thread either way, at 4 warps, not 8).
    # On an H100 (ab_few_bwd.py and ab_rounds.py, Dec 7) 2-byte layer_norm 7-18% less at 4-32 rows of
    # 131072-262144 (8 x 131072: 14.1 us against 17.3), fp32 1-19% less at 18 of 20 calls of 2-32
    # rows of 100000-262144 (rms_norm 4 x 131072: 13.0 against 15.9), 0.5-2% more at layer_norm's
    # 2 and 8 x 262144; rms_norm's 2-byte rows ran from 13% less to 9% more. Rows of 16K-64K keep 2048
    few = (want and can_coop and split is None and "BLOCK_N" not in over and n > 65536 and m <= _FEW_ROWS
           and (op == "layer_norm" or (op == "rms_norm" and esz == 4)))
    groups, block = split if split is not None else (0, _BWD_CHUNK)
    block = over.get("BLOCK_N", block)
    if block & (block - 1):
        raise ValueError(f"backward plan override BLOCK_N={block}: not a power of two")
    # COOP (the default on a GPU): one launch whose groups of programs exchange their sums, 16
    # elements a thread (fp32: 8; 16 spilled 30-68 registers, 5-15% slower on the H200 at
    # N = 16384..262144) at 128 registers (every program resident at once, so a group of the row's
    # chunks must fit); else two launches, 8 elements a thread at 64 registers. rms_norm's fp32 rows
    # longer than 65536, 64 rows or more, exchange at 80 registers (three programs a multiprocessor,
    # not two: more row groups). On an H200 that took 12% off 64 x 262144 (71.7 against 81.4 us) and
    # 10% off 128 x 131072 (72.3 against 80.0); 8 x 131072 ran 16% slower (a group's two rows
    # either way, at 8 registers spilled), and layer_norm's kernel spills 24-28 and ran 10-19% slower.
    # layer_norm's 2-byte rows in 2048-element chunks exchange at 168 registers (three programs a
    # multiprocessor, not four: fewer row groups), where the row's chunks still fit at once (built
    # for sm_90, its kernel keeps 200 bytes on the stack at 128, 40 at 168). On an H100 3-6% less
    # at N = 10240..16384 (1024 x 16384: 54.6 us against 57.6; the H200: 3%) and (ab_rounds.py,
    # Dec 7, medians of five interleaved rounds) 0.4-13% less at 13 of 13 calls of 8-2048 rows of
    # 32768-262144 (512 x 32768: 52.4 us against 60.1; 64 x 262144: 57.4 against 60.3), where an
    # earlier sweep had rows past 16384 1-4% slower. rms_norm's rows ran 1-8% slower at 168
    def launch_shape(exchange: bool, roomy: bool = False) -> tuple[int, int, int]:  # (maxnreg, warps, resident)
        lean = exchange and op == "rms_norm" and esz == 4 and n > 65536 and m >= 64
        maxnreg = over.get("maxnreg", (80 if lean else 168 if roomy else 128) if exchange else 64)
        fit = _resident_per_sm(1, maxnreg)  # warps a multiprocessor's registers hold
        per_warp = 512 if exchange and esz <= 2 and not few else 256  # 16 elements a thread, or 8
        warps = over.get("num_warps", max(1, min(32, fit, block // per_warp)))
        return maxnreg, warps, _resident_per_sm(warps, maxnreg) * sms

    if few:  # where all of a row's 1024-element chunks fit on the device at once; else 2048, as above
        block = _BWD_CHUNK // 2
        if launch_shape(True)[2] < _cdiv(n, block):
            few, block = False, _BWD_CHUNK
    chunks = _cdiv(n, block)
    roomy = want and op == "layer_norm" and esz <= 2 and not few
    maxnreg, warps, resident = launch_shape(want, roomy)
    if roomy and resident < chunks:  # at 168 the row would leave the one launch: 128 keeps it there
        maxnreg, warps, resident = launch_shape(want)
    coop = want and can_coop and resident >= chunks
    if want and not coop:
        maxnreg, warps, resident = launch_shape(False)
    groups = over.get("GR", groups)
    if coop:
        groups = min(groups if groups > 0 else m, resident // chunks)
    elif groups <= 0:
        groups = 2 * _cdiv(resident, chunks) if cuda else 2
    groups = max(1, min(groups, m))
    # FINISH (the one launch only): the column sums taken by that many of its programs, those
    # that finish last: 256 of them (or every program, if fewer), but for fp32 rows of up to 16384.
    # On an H200 (sweep_norm_backward.py --keys FINISH, Dec 4) that took 0-11% off the backward
    # of bf16 rows of 16K-256K and fp32 rows of 64K-256K (most where few groups leave most of the
    # device to the second launch: 64 x 262144); fp32 1024 x 16384 ran 1-3% slower with it
    auto = min(_SPLIT_FINISH, 1 << (groups * chunks).bit_length() - 1) if coop and (esz <= 2 or n > 16384) else 0
    finish = over.get("FINISH", auto)
    if finish and not coop and (cuda or _interpreting()):  # (a CPU plan on a GPU host: checked on the GPU)
        raise ValueError(f"backward plan override FINISH={finish}: the long rows' column sums are finished in "
                         "the launch only by the one-launch exchange (COOP), which this plan does not use (COOP "
                         "off, a row's chunks more than the device holds at once, or the interpreter); give "
                         "FINISH=0")
    if finish > groups * chunks and coop:
        raise ValueError(f"backward plan override FINISH={finish}: at most the launch's {groups * chunks} "
                         f"programs (GR={groups} x S={chunks}) can finish the column sums")
    return dict(kind="split", BLOCK_N=block, GR=groups, S=chunks, num_warps=warps, maxnreg=maxnreg,
                num_stages=stages, HINTS=over.get("HINTS", esz <= 2), PREFETCH=over.get("PREFETCH", esz <= 2),
                COOP=coop, SAVED=over.get("SAVED", True), FINISH=finish)

