"""The strided kernel's configs: the tuned space, the defaults chosen from H200 sweeps, and their checks.

A config names the tunables (:data:`TUNABLES`: the column block ``BLOCK_I``, the chunk of R
``BLOCK_R``, the programs sharing R ``SPLIT_R``, the warps) and any kernel variants
(:data:`VARIANTS`, :mod:`~dispatch_triton.strided_jit`). :func:`default_config` is the pick with
tuning off; :func:`config_space` the candidates a tune races, the default first;
:func:`variant_space` more, for sweeps; :func:`validate` checks a config before
:class:`~dispatch_triton.strided.StridedLauncher` builds on it.
"""

from __future__ import annotations

import torch

from dispatch.backend import StridedPlan, unique_configs

from .configs import _cdiv, _device_l2_bytes, _device_sms, _np2
from . import _interpreting

TUNABLES = ("BLOCK_I", "BLOCK_R", "SPLIT_R", "num_warps")
# Kernel variants a config may also name (absent: off, and Triton's default num_stages); see
# :mod:`~dispatch_triton.strided_jit`. The tuned space holds EVEN, ONE_PASS, ACC_2D, PREFETCH and (on
# a GPU) FAST_EXP and KEEP_X; benchmarks/sweep_strided_configs.py compares all of them on a GPU.
VARIANTS = ("num_stages", "EVEN", "ONE_PASS", "TAIL", "I32", "ACC_2D", "PREFETCH", "TMA", "FAST_EXP", "REVERSE",
            "KEEP_X", "COOP")
_COOP_ALONE = ("ONE_PASS", "TAIL", "ACC_2D", "PREFETCH", "TMA", "REVERSE", "KEEP_X")  # what COOP does not combine with
_MAX_SPLIT_R = 128  # programs sharing one column block's R that split_for picks (the width of the partials merge)
_MAX_SPLIT_R_CONFIG = 256  # the most a config may name (a merge of SPLIT_R x BLOCK_I partials per program)
_TILE_MAX = 4096  # elements of a [BLOCK_R, BLOCK_I] tile held in registers
_MERGE_TILE = 8192  # partials (max and sum) a finish program merges in one step


def _cfg(block_i: int, block_r: int, warps: int, split_r: int = 1) -> dict:
    return {"BLOCK_I": int(block_i), "BLOCK_R": int(block_r), "SPLIT_R": int(split_r), "num_warps": int(warps)}


def split_for(p: StridedPlan, block_i: int, block_r: int, device: torch.device | None = None) -> int:
    """Programs to share R so that the launch has about four programs per SM (a power of two, at
    most 128 and at most ``8192 // block_i``, the partials a finish program merges; each with four
    chunks of R at least); 1 when the column blocks fill the device."""
    programs = max(1, p.outer * _cdiv(p.inner, block_i))
    want = _cdiv(4 * _device_sms(device), programs)
    most = min(max(1, p.R // (4 * block_r)), _MAX_SPLIT_R, max(1, 8192 // block_i))
    split = 1
    while split * 2 <= min(want, most):
        split *= 2
    return split


def merge_block(p: StridedPlan, block_i: int, device: torch.device | None = None) -> int:
    """Columns per program of logsumexp's finish, which only merges the partials of R's splits (it
    reads no input): ``block_i`` halved (16 at least) until the finish has two programs per SM.
    With the partials' own blocks, dim 0 of 4096 x 4096 in blocks of 2048 columns left two
    programs to merge 256 partials of 2048 columns each."""
    want = 2 * _device_sms(device)
    fi = block_i
    while fi > 16 and p.outer * _cdiv(p.inner, fi) < want:
        fi //= 2
    return fi


def merge_warps(block_s: int, block_i: int) -> int:
    """Warps of logsumexp's finish: about 16 partials a thread (1 to 4 warps). Four warps on a
    merge of 2 x 256 partials took 5.3 us against 2.7 with one; one warp on 128 x 16 took 4.3
    against 2.9 with four (dim 1 of 64 x 256 x 56 x 56 and dim 0 of 4096 x 4096)."""
    return max(1, min(4, block_s * block_i // 512))


def config_space(p: StridedPlan, device: torch.device | None = None, itemsize: int = 2) -> list[dict]:
    """Candidates, the default (:func:`default_config`) first: column blocks of 16-256 (no wider
    than the inner dim's next power of two, but at least 16), chunks of R of 8-64 rows, tiles of
    512-4096 elements, 4 or 8 warps, each with R shared by :func:`split_for` programs, plain and
    with a running max and sum per tile element and the next chunk's load in flight (``ACC_2D``,
    ``PREFETCH``, ``EVEN``); and tiles holding all of R (``ONE_PASS``, 8-64 columns, more where R
    is under 32 for tiles of up to 2K elements, 64 elements a thread) where R is short, and where
    two tiles (``TAIL``) pad R less, those of 16-512 columns at 96 elements a thread or less; on a GPU
    each with ``FAST_EXP`` (and ``KEEP_X`` where the default has it); for logsumexp,
    :func:`_wide_config`'s wide blocks where it has them."""
    out = [default_config(p, device, itemsize)]
    wide = _wide_config(p, itemsize, _device_sms(device)) if p.out_strides[1] == 0 else None
    if wide is not None:
        out.append(wide)
    top = max(16, min(256, _np2(p.inner)))
    for bi in (16, 32, 64, 128, 256):
        if bi > top:
            continue
        for br in (8, 16, 32, 64):
            if not 512 <= bi * br <= _TILE_MAX:
                continue
            for w in (4, 8):
                plain = _cfg(bi, br, w, split_for(p, bi, br, device))
                out += [plain, dict(plain, ACC_2D=1, PREFETCH=1, EVEN=1)]
    r2 = _np2(p.R)
    for bi in (8, 16, 32, 64, 128, 256, 512, 1024):
        if r2 * bi <= _ONE_PASS_MAX and bi <= max(16, _np2(p.inner)) and bi <= max(64, 2 * _ONE_PASS_SMALL // r2):
            out.append(_one_pass_tile(bi, r2))
    head, tail = head_tail(p.R)
    if tail and head + tail < r2:  # R in two tiles: the fewest warps that hold 96 elements a thread or less
        for bi in (16, 32, 64, 128, 256, 512):
            w = _fewest_warps(bi * (head + tail), _TWO_TILE_PER_THREAD)
            if bi <= max(16, _np2(p.inner)) and bi * (head + tail) <= min(_ONE_PASS_MAX, _TWO_TILE_PER_THREAD * 32 * w):
                out.append(dict(_cfg(bi, head, w), ONE_PASS=1, EVEN=1, TAIL=tail))
    if not _interpreting():  # as the default: every candidate with FAST_EXP on a GPU (and KEEP_X)
        keep = dict(KEEP_X=1) if out[0].get("KEEP_X") else {}
        out = [dict(c, FAST_EXP=1, **({} if c.get("ONE_PASS") else keep)) for c in out]
    return unique_configs(out)


_ONE_PASS_R = 1024  # the longest R the default reads in one tile
_ONE_PASS_TILE = 8192  # elements of a tile holding all of R that the default widens its column block to
_ONE_PASS_TILE_LSE = 2048  # the same for logsumexp (R of 64 or less), which writes one value a column
_ONE_PASS_SMALL = 1024  # elements of a tile that the column block of an R under 16 may widen to past 64 columns
_ONE_PASS_MAX = 32768  # elements of the largest such tile in the tuned space (64 a thread at 16 warps)


def head_tail(R: int) -> tuple[int, int]:
    """``(BLOCK_R, TAIL)`` of R held in two tiles (``ONE_PASS`` with ``TAIL``): the largest power of
    two below R, and the next power of two of the rest; ``(R, 0)`` where R is a power of two (one
    tile, nothing padded) or under 3."""
    head = 1 << (max(1, int(R)).bit_length() - 1)
    return (int(R), 0) if head == R or R < 3 else (head, _np2(R - head))


def _one_pass_warps(tile: int) -> int:
    """Warps of a tile holding all of R: 64 elements a thread, 1 to 16 warps."""
    return max(1, min(16, tile // (64 * 32)))


def _one_pass_tile(block_i: int, r2: int) -> dict:
    """The config of a ``block_i``-column tile holding all of R (``r2``, a power of two), read once."""
    return dict(_cfg(block_i, r2, _one_pass_warps(block_i * r2)), ONE_PASS=1, EVEN=1)


def default_config(p: StridedPlan, device: torch.device | None = None, itemsize: int = 2) -> dict:
    """The pick with tuning off, from H200 sweeps (``benchmarks/sweep_strided_configs.py``; bf16
    softmax and logsumexp over dim 0 of 4096 x 4096 and of 65536 x 128, dim 1 of 32 x 1024 x 64 x 64
    and a transposed 4096 x 4096):

    * softmax and log_softmax with R of 1024 or less (logsumexp: 64 or less; 128 or less where R is
      held in two tiles, 256 or less in 4-byte types) and column blocks of 16 for two programs per
      SM: all of R in one tile (``ONE_PASS``, read once), :func:`_one_pass_config`'s tile of 64
      elements a thread; in 2-byte types where two tiles pad R less (:func:`_two_tiles`),
      :func:`_two_tile_config`'s (``TAIL``: R = 150 as 128 + 32 rows, one warp);
    * otherwise 64 columns (fewer where the inner dim is narrower, 16 at least) by 64 rows at 4
      warps, 32 elements a thread: a running max and sum per tile element (``ACC_2D``), the next
      chunk's load in flight (``PREFETCH``), R shared by :func:`split_for` programs. Against the
      16-column tiles picked before, this ran dim 0 of 4096 x 4096 in 41 us instead of 61
      (softmax) and 25.5 instead of 36 (logsumexp), 65536 x 128 in 28 instead of 34, the
      transposed view's softmax in 42 instead of 47 (all of R in one tile, picked before for an
      output that runs along R), and logsumexp over dim 1 of 32 x 1024 x 64 x 64 in 109 instead
      of 177 (``ONE_PASS``: logsumexp writes nothing along R, so reading once gains nothing there).

    * logsumexp with R over 64, the inner dim unit-stride and 256 columns at least, where R is
      long enough to share among a program per SM: :func:`_wide_config`'s blocks of 256 columns.
      Against the tiles above: dim 1 of 32 x 1024 x 64 x 64 in 88.6 us instead of 112.7 (bf16)
      and 137.2 instead of 158.8 (fp32), dim 1 of 64 x 256 x 56 x 56 in 49.0 instead of 69.8
      (bf16) and 64.3 instead of 76.1 (fp32) (``--grid wide``); dim 0 of 4096 x 4096 (16 blocks, R
      shared by 128) once the finish merged in its own narrow blocks (:func:`merge_block`): the
      partials kernel in 15.0 us instead of 18.1 (``benchmarks/profile_strided.py``).
    * logsumexp of at most 256K elements where the tiles above would share R (partials and a second
      launch to merge them): :func:`_one_launch_config`'s one tile of all of R, one launch (the
      second step of logsumexp over dims that don't collapse, the fp32 (A, B) of step one over A,
      is such an input).

    ``EVEN`` (no masks) is set throughout; it takes effect only where every chunk is full. On a GPU
    so is ``FAST_EXP`` (one ``ex2.approx.ftz`` per exp): 1-9% faster on each of those cases
    (``--grid flags``), where ``REVERSE`` changed the time by -1 to +4%; and ``KEEP_X`` where
    softmax or log_softmax reads x twice and x fits in L2 (dim 0 of 4096 x 4096 in bf16: 37.3 us
    instead of 41.1, the second read's launch 14.9 instead of 18.5; dim 0 of a transposed
    16384 x 4096, 128 MB, 3% slower with it; ``benchmarks/profile_strided.py``)."""
    sms = _device_sms(device)
    r2, i2 = _np2(p.R), _np2(p.inner)
    writes_r = p.out_strides[1] != 0  # softmax, log_softmax (logsumexp's output has no R dim)
    two = _two_tiles(p, itemsize)
    # logsumexp holds all of R where it is short: 64 or less, in two tiles 128 or less, in fp32 256 or less
    lse_one = r2 <= 64 or (two and p.R <= 128) or (itemsize >= 4 and r2 <= 256)
    wide = _wide_config(p, itemsize, sms) if not writes_r and not lse_one else None
    if wide is not None:
        cfg = wide
    elif (writes_r or lse_one) and r2 <= _ONE_PASS_R and p.outer * _cdiv(p.inner, 16) >= 2 * sms:
        cfg = _two_tile_config(p, sms) if two else _one_pass_config(p, itemsize, sms, writes_r)
    else:
        bi = max(16, min(64, i2))
        split = split_for(p, bi, 64, device)
        one = _one_launch_config(p) if split > 1 and not writes_r else None
        cfg = one or dict(_cfg(bi, 64, 4, split), ACC_2D=1, PREFETCH=1, EVEN=1)
    if cfg.get("ONE_PASS") and not cfg.get("TAIL") and itemsize <= 2 and cfg["num_warps"] >= 4:
        cfg["I32"] = 1  # offsets in 32 bits: 5-8% faster at R = 256 in bf16, within 2% at 512 and 1024
    if _interpreting():
        return cfg
    cfg = dict(cfg, FAST_EXP=1)
    if writes_r and not cfg.get("ONE_PASS") and p.outer * p.R * p.inner * itemsize <= _device_l2_bytes(device):
        cfg["KEEP_X"] = 1
    return cfg


_ONE_LAUNCH_MAX = 1 << 18  # elements of a logsumexp that _one_launch_config reads in one launch


def _one_launch_config(p: StridedPlan) -> dict | None:
    """logsumexp of an input of at most ``_ONE_LAUNCH_MAX`` elements whose default would share R
    among programs (partials, then a second launch to merge them): all of R in one tile of 16
    columns (8 where R is over 2048), one launch, or None where no such tile is in the tuned space.

    On an H200 (Dec 6), as the second step of logsumexp over dims 0 and 2 of (A, 64, C), an fp32
    (A, 64) over dim 0: A = 512 in 5.8 us instead of 11.7 (both steps' device time 19.7 instead
    of 24.0 in bf16, 25.5 instead of 30.2 in fp32), A = 4096 in 9.3 instead of 11.8 (both steps
    33.6 instead of 34.0, fp32 46.0 instead of 47.0)
    (benchmarks/results/current/layouts/several_dims_second_step/)."""
    if p.outer * p.R * p.inner > _ONE_LAUNCH_MAX:
        return None
    r2 = _np2(p.R)
    for bi in (16, 8):
        if bi * r2 <= _ONE_PASS_MAX:
            return _one_pass_tile(bi, r2)
    return None


def _one_pass_config(p: StridedPlan, itemsize: int, sms: int, writes_r: bool) -> dict:
    """The default tile holding all of R (``ONE_PASS``): 64 elements a thread (1-16 warps); 32
    columns (16 where R is over 512, but for 4-byte types where R is a power of two), or as many
    more, up to 64 (a 1K-element tile's worth where R is under 16), as an 8K-element tile holds
    (4K for 2-byte types with R of 65 to 128, 2K for logsumexp) while there are two programs per
    SM.

    Against 16 columns or as many as a 16K-element tile held, at 8 warps (4 under 8K elements),
    over dim 1 of (B, R, H, W) (``benchmarks/sweep_strided_configs.py --grid one_pass``), softmax
    in bf16: (8, 19, 256, 512) in 28.8 us instead of 90.5 (``benchmarks/bench_layouts.py``, same
    machine start), (256, 64, 64, 64) in 68.8 instead of 172.9, (128, 96, 56, 56) in 50.4 instead
    of 86.3, (128, 128, 64, 64) in 72.5 instead of 111.9, (64, 256, 56, 56) in 60.3 instead of
    65.9; fp32 (32, 1024, 64, 64) in 274.3 instead of 289.8; logsumexp in bf16 (8, 19, 256, 512)
    in 26.4 instead of 121.9. Over the 69 cases, ops and dtypes of four sweeps with R of 3 to 1024
    it is within 2.5% of the best tile of its sweep but for R = 3 (6.0-7.4 us, up to 9% off) and
    R = 384 in bf16 (3.7%). In bf16, R of 80 and 96 in 32-column tiles at 2 warps ran 12-14%
    faster than in 64-column ones at 4 (R = 128: 2% slower); in fp32, R of 640 and 768 in
    16-column tiles at 8 warps 11-20% faster than in 32-column ones at 16 (R = 1024: 5% slower,
    so there it keeps 32)."""
    r2, i2 = _np2(p.R), _np2(p.inner)
    # 16 columns where R is over 512, but 32 for 4-byte types where R is a power of two
    least = 16 if r2 > 512 and (itemsize <= 2 or p.R < r2) else 32
    most = min(i2, max(64, _ONE_PASS_SMALL // r2))
    tile = _ONE_PASS_TILE if writes_r or r2 > 64 else _ONE_PASS_TILE_LSE
    if itemsize <= 2 and r2 == 128:
        tile //= 2  # 2-byte types, R of 65 to 128: 32 columns at 2 warps
    bi = 16
    while bi * 2 <= most and (bi * 2 <= least or (
            bi * 2 * r2 <= tile and p.outer * _cdiv(p.inner, bi * 2) >= 2 * sms)):
        bi *= 2
    return _one_pass_tile(bi, r2)


_TWO_TILE_PER_THREAD = 96  # elements a thread of the default's two tiles (TAIL)


def _fewest_warps(tile: int, per_thread: int) -> int:
    """The fewest warps (1 to 16, a power of two) that hold ``tile`` elements at ``per_thread`` a thread or less."""
    warps = 1
    while tile > per_thread * 32 * warps and warps < 16:
        warps *= 2
    return warps


def _two_tiles(p: StridedPlan, itemsize: int) -> bool:
    """Whether the default holds R in two tiles (:func:`head_tail`): 2-byte types, R over 16 where the
    two tiles pad it less than its next power of two does, R of 256 or less or padded to 5/8 of
    that power of two or less (R = 640: 512 + 128 rows, not 1024; not R = 384 or 768, 3/4; not R =
    200, 128 + 128)."""
    head, tail = head_tail(p.R)
    r2 = _np2(p.R)
    return itemsize <= 2 and p.R > 16 and 0 < tail and head + tail < r2 and (p.R <= 256 or 8 * (head + tail) <= 5 * r2)


def _two_tile_config(p: StridedPlan, sms: int) -> dict:
    """The default tile of R in two (``TAIL``): the fewest warps that hold 16 columns at 96 elements a
    thread or less, the column block as wide as those warps hold at 96 a thread while there are
    two programs per SM.

    From the ``--grid tail`` sweep (bf16, dim 1 of (B, R, H, W), us, against the one-tile default):
    softmax at R = 19 in 25.1 instead of 28.4 (128 columns, 1 warp), R = 80 in 28.9 instead of 34.0,
    R = 96 in 46.3 instead of 50.6 (32 columns, 1 warp), R = 150 in 33.0 instead of 35.8 (16
    columns, 1 warp), R = 640 in 67.6 instead of 76.6 (16 columns, 4 warps); logsumexp at R = 19
    in 19.3 instead of 26.4, at R = 96 in 34.0 instead of 43.0 (wide blocks). One warp a program
    keeps the column reductions in the warp (no shared memory, no barrier): at R = 150, 16
    columns took 33.0 us at 1 warp, 41.0 at 2 and 42.5 at 4. In fp32 the two tiles ran level with
    one (within 2-7%)."""
    head, tail = head_tail(p.R)
    rows, most = head + tail, _TWO_TILE_PER_THREAD * 32
    warps = _fewest_warps(16 * rows, _TWO_TILE_PER_THREAD)
    bi = 16
    while (bi * 2 <= _np2(p.inner) and bi * 2 * rows <= most * warps and bi * 2 * rows <= _ONE_PASS_MAX
           and p.outer * _cdiv(p.inner, bi * 2) >= 2 * sms):
        bi *= 2
    return dict(_cfg(bi, head, warps), ONE_PASS=1, EVEN=1, TAIL=tail)


_WIDE_I = 256  # columns of a wide block: one warp's 16-byte loads in bf16, two warps' in fp32
_WIDE_I_NARROW = 128  # the same where the inner dim holds 128 to 255 columns (one warp)
_WIDE_R = 8  # rows of a wide block's chunk
_WIDE_WARPS_PER_SM = 12  # what the --grid wide sweep found best (bf16: 12-16 one-warp programs, fp32: 4-6 of two)


def _wide_config(p: StridedPlan, itemsize: int, sms: int) -> dict | None:
    """Blocks of 256 columns (128 where the inner dim holds 128 to 255) by 8 rows a chunk, each warp
    on its own columns (16-byte loads, a chunk's rows in one thread, so a chunk reduces over its
    rows without leaving the thread), R shared by the fewest programs (a power of two) that bring
    about 12 warps to each SM, each with four chunks at least; None where the inner dim is not
    unit-stride or narrower than 128, or where those programs are fewer than the SMs (R too short
    to share). Every other row of (32, 512, 64, 128) (an inner dim of 128 columns): 59.5 us in
    bf16 and 77.9 in fp32 in blocks of 128 against 73.1 and 91.2 in 64 x 64 tiles (``--grid wide``)."""
    bi = _WIDE_I if p.inner >= _WIDE_I else _WIDE_I_NARROW
    warps = max(1, bi * itemsize // (32 * 16))  # 16 bytes a thread
    blocks = p.outer * _cdiv(p.inner, bi)
    if p.x_strides[2] != 1 or p.inner < bi:
        return None
    split, want = 1, _WIDE_WARPS_PER_SM * sms // warps
    while split * blocks < want and split * 2 <= _MAX_SPLIT_R and p.R // (split * 2) >= 4 * _WIDE_R:
        split *= 2
    if split * blocks < sms:
        return None
    return dict(_cfg(bi, _WIDE_R, warps, split), PREFETCH=1, EVEN=1)


def validate(config: dict) -> tuple[int, int, int, int]:
    """``(BLOCK_I, BLOCK_R, num_warps, SPLIT_R)`` of ``config``, checked (``SPLIT_R`` defaults to 1),
    and its :data:`VARIANTS` checked (``num_stages`` 1 to 8, the flags 0 or 1)."""
    try:
        bi, br, w = (int(config[k]) for k in ("BLOCK_I", "BLOCK_R", "num_warps"))
    except KeyError as exc:
        raise ValueError(f"a strided config needs {TUNABLES} (got {sorted(config)})") from exc
    split = int(config.get("SPLIT_R", 1))
    for name, v in (("BLOCK_I", bi), ("BLOCK_R", br), ("num_warps", w)):
        if v < 1 or v & (v - 1):
            raise ValueError(f"'{name}' must be a power of two (got {v})")
    if not 1 <= split <= _MAX_SPLIT_R_CONFIG:
        raise ValueError(f"'SPLIT_R' must be 1 to {_MAX_SPLIT_R_CONFIG} (got {split})")
    if "num_stages" in config and not 1 <= int(config["num_stages"]) <= 8:
        raise ValueError(f"'num_stages' must be 1 to 8 (got {config['num_stages']})")
    for flag in ("EVEN", "ONE_PASS", "I32", "ACC_2D", "PREFETCH", "TMA", "FAST_EXP", "REVERSE", "KEEP_X", "COOP"):
        if int(config.get(flag, 0)) not in (0, 1):
            raise ValueError(f"'{flag}' must be 0 or 1 (got {config[flag]})")
    if int(config.get("COOP", 0)):
        with_ = [f for f in _COOP_ALONE if int(config.get(f, 0))]
        if with_:
            raise ValueError(f"'COOP' holds one tile a program and reads it once: it takes EVEN, I32, FAST_EXP and "
                             f"num_stages, not {', '.join(with_)}")
    if int(config.get("ONE_PASS", 0)) and split != 1:
        raise ValueError(f"'ONE_PASS' reads all of R in one program: 'SPLIT_R' must be 1 (got {split})")
    tail = int(config.get("TAIL", 0))
    if tail and (tail < 0 or tail & (tail - 1) or not int(config.get("ONE_PASS", 0))):
        raise ValueError(f"'TAIL' is the rows of a second tile of 'ONE_PASS': a power of two, with ONE_PASS=1 "
                         f"(got TAIL {tail}, ONE_PASS {int(config.get('ONE_PASS', 0))})")
    return bi, br, w, split


def variant_space(p: StridedPlan, device: torch.device | None = None, *, tile_max: int = 16384,
                  stages=(2, 3, 4), warps=(4, 8, 16)) -> list[dict]:
    """Candidates beyond :func:`config_space`, for sweeps on a GPU: tiles up to ``tile_max``
    elements (16-row chunks at least, 4 to 16 elements per thread), each with ``num_stages``
    of ``stages`` and R shared by :func:`split_for`; each of those with ``ACC_2D``, ``PREFETCH``,
    both or neither, and each again with ``EVEN`` where the chunks are all full; and ``ONE_PASS``
    tiles holding all of R (the column block as wide as ``tile_max`` allows, 16 at least), for R
    up to ``tile_max // 16``."""
    top = max(16, min(256, _np2(p.inner)))
    out = []
    for bi in (16, 32, 64, 128, 256):
        if bi > top:
            continue
        for br in (16, 32, 64, 128, 256):
            tile = bi * br
            if not 1024 <= tile <= tile_max:
                continue
            for w in warps:
                if tile < 32 * w * 4 or tile > 32 * w * 16:
                    continue
                split = split_for(p, bi, br, device)
                even = p.R % br == 0 and p.inner % bi == 0
                for st in stages:
                    base = dict(_cfg(bi, br, w, split), num_stages=st)
                    for acc, pre in ((0, 0), (1, 0), (0, 1), (1, 1)):
                        flags = dict(ACC_2D=1) if acc else {}
                        if pre:
                            flags["PREFETCH"] = 1
                        out.append(dict(base, **flags))
                        if even:
                            out.append(dict(base, EVEN=1, **flags))
    r2 = _np2(p.R)
    if p.R >= 1 and r2 * 16 <= tile_max:
        bi = 16
        while bi * 2 * r2 <= tile_max and bi * 2 <= top and p.outer * _cdiv(p.inner, bi * 2) >= _device_sms(device):
            bi *= 2
        for w in warps:
            if r2 * bi <= 32 * w * 64:
                base = dict(_cfg(bi, r2, w), ONE_PASS=1)
                out.append(base)
                if p.R == r2 and p.inner % bi == 0:
                    out.append(dict(base, EVEN=1))
    return out
