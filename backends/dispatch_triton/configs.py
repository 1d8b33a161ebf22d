"""Config spaces and the default pick of the Triton kernels, and the config-dict helpers.

A config is a plain dict: ``path`` (rows, onepass, online, split_online, split, split_pipe, chunks), ``BLOCK_N``,
``ROWS``, ``SPLIT``, ``num_warps``, ``num_stages``, and on a GPU ``FAST_EXP`` (1: one ``ex2.approx``
per exp; absent means 0) and ``maxnreg`` (registers a thread, 24-255: more programs an SM, for what
spills; absent or 0: no cap; none of the spaces below has one yet, a benchmark's sweep may).
:func:`config_space` lists the candidates of a shape,
:func:`default_config` picks one without measuring.
"""

from __future__ import annotations

import functools

import torch

from dispatch.backend import rows_bucket

from . import _interpreting

# op and path names, and the codes of the kernel's OP / PATH constexprs
OPS = ("softmax", "log_softmax", "logsumexp")
_OP_CODE = {"softmax": 0, "log_softmax": 1, "logsumexp": 2}
_PATH_CODE = {"rows": 0, "onepass": 0, "online": 1, "split_online": 1, "split": 2, "split_pipe": 3, "chunks": 4}

MAX_SPLIT = 128  # programs per row in the split paths (width of the partials gather)
# logsumexp's chunks (BLOCK_N, num_warps), 64 elements a thread: in the H200 sweeps the best, or
# within 2% of it, on bf16 and fp32 rows of 32K-256K
LSE_CHUNKS = ((2048, 1), (4096, 2), (8192, 4), (16384, 8))


def _check_op(op: str) -> None:
    if op not in _OP_CODE:
        raise ValueError(f"unknown op {op!r}; expected one of {OPS}")


def _np2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.lru_cache(maxsize=None)
def _l2_size(index: int) -> int:
    return int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0))


def _cuda_index(device: torch.device | None) -> int | None:
    """The CUDA device index of ``device`` (None: the current CUDA device); None when it is not a GPU."""
    if device is not None and device.type == "cuda":
        return device.index if device.index is not None else torch.cuda.current_device()
    if device is None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return None


def _device_l2_bytes(device: torch.device | None = None) -> int:
    """L2 bytes of ``device`` (or the current CUDA device); 0 when there is no GPU."""
    index = _cuda_index(device)
    return 0 if index is None else _l2_size(index)


def _device_sms(device: torch.device | None = None) -> int:
    """SMs of ``device`` (or the current CUDA device); 132 (an H100/H200) when there is no GPU."""
    index = _cuda_index(device)
    return 132 if index is None else _sm_count(index)


def _cfg(path, block_n, rows=1, split=1, warps=4, stages=1, fast_exp=0) -> dict:
    c = {"path": path, "BLOCK_N": int(block_n), "ROWS": int(rows), "SPLIT": int(split),
         "num_warps": int(warps), "num_stages": int(stages)}
    if fast_exp:  # absent means 0, so configs stored before the flag existed keep their meaning
        c["FAST_EXP"] = 1
    return c


def _warps_for(tile: int, per_thread: int) -> int | None:
    w = tile // (32 * per_thread)
    return w if 1 <= w <= 32 else None


def _n_split(path_code: int, n: int, block_n: int, split: int) -> int:
    nblocks = _cdiv(n, block_n)
    if path_code >= 2:  # split, split_pipe: one chunk per program
        return nblocks
    ns0 = max(1, min(split, nblocks))
    bps = _cdiv(nblocks, ns0)
    return _cdiv(nblocks, bps)


def _space(op: str, np2: int, esz: int, sms: int) -> list[dict]:
    # Pruned with the H200 sweeps (benchmarks/results/history/2026-11/triton_kernels_h200.md): 4 or fewer
    # elements per thread never won, nor tiles wider than two rows (or 2K elements); the split
    # paths beat onepass only beyond 16K elements and did best at 32 elements per thread; the
    # streamed path never beat split for softmax/log_softmax, so it is kept only where split
    # cannot go (rows too long for it).
    out: list[dict] = []
    cap = min(MAX_SPLIT, sms)
    # rows / onepass: the whole row in registers; tiles of 1K-16K elements, 8-32 per thread
    if np2 <= 32768:
        bn = max(np2, 16)
        tiles = [t for t in (1024, 2048, 4096, 8192, 16384) if bn <= t <= max(2048, 2 * bn)] or [bn]
        for t in tiles:
            rows = t // bn
            for per in (8, 16, 32):
                w = _warps_for(t, per)
                if w is not None:
                    out.append(_cfg("rows" if rows > 1 else "onepass", bn, rows, 1, w))
    if op != "logsumexp":
        # split: a row across programs, each chunk in registers, one chunk a program (split) or
        # persistent programs loading the next row while they finish one (split_pipe); on the
        # H200 each wins some long rows (default_config says which)
        if np2 >= 32768:
            for path, bn, w in (("split_pipe", 4096, 4), ("split_pipe", 2048, 4), ("split", 4096, 4)):
                if 2 <= np2 // bn <= cap:
                    out.append(_cfg(path, bn, 1, 1, w))
            if esz == 2 and np2 <= 65536:  # 64 per thread: odd-length rows (default_config)
                out.append(_cfg("split", 8192, 1, 1, 4))
            if np2 // 4096 > cap:  # rows too long for 4096-element chunks: bigger ones, 32 per thread
                bn = next((b for b in (8192, 16384) if np2 // b <= cap), None)
                if bn is not None:
                    out.append(_cfg("split_pipe", bn, 1, 1, bn // 1024))
        # rows longer than split can hold (no hard cap on N): streamed, alone or cut over programs
        if np2 > 16384 * cap:
            out.append(_cfg("online", 4096, 1, 1, 8, 2))
            for sp in (16, 64):
                if sp <= cap:
                    out.append(_cfg("split_online", 2048, 1, sp, 4, 2))
    else:
        # logsumexp reads once: streamed, one program per row or a row cut over a few
        if np2 >= 16384:
            for bn, w in ((1024, 4), (2048, 4), (4096, 8)):
                out.append(_cfg("online", bn, 1, 1, w, 2))
        if np2 >= 65536:
            for bn, w, sp in ((4096, 8, 4), (2048, 4, 16), (2048, 4, 32)):
                if sp <= cap:
                    out.append(_cfg("split_online", bn, 1, sp, w, 2))
        if np2 >= 32768:
            # a row cut into chunks held in registers, one chunk per program: read once, nothing
            # waits (the last chunk of a row to arrive combines)
            for path in ("split", "chunks"):
                for bn, w in LSE_CHUNKS:
                    if 2 <= np2 // bn <= cap:
                        out.append(_cfg(path, bn, 1, 1, w))
    if not _interpreting():
        # one ex2.approx per exp: on the H200, 3-7% faster on bf16 rows of 32K-256K, 7-16% on bf16
        # logsumexp of shorter rows, -1% to +4% elsewhere (benchmarks/results/current/rows_kernels/);
        # inline PTX, a GPU only
        out = [dict(c, FAST_EXP=1) for c in out]
    return out


def config_space(op: str, n_rows: int, n_cols: int, dtype: torch.dtype) -> list[dict]:
    """Candidate configs for an (n_rows, n_cols) input of ``dtype``, in a deterministic order.

    Depends on the row length only through its next power of two (the autotune key's bucket),
    so every row length of a bucket has the same candidates; ``n_rows`` is accepted for the
    protocol but does not prune. Configs that cannot fit (a row wider than the registers of one
    program, a split wider than the device can hold at once) or cannot win (a streamed path for
    a row that fits in registers) are left out.
    """
    _check_op(op)
    esz = torch.empty((), dtype=dtype).element_size()
    return _space(op, _np2(max(int(n_cols), 1)), esz, _device_sms())


LSE_SPLIT_MAX = 1 << 23  # elements: logsumexp of long 2-byte rows one program a chunk up to here (default_config)


def default_config(op: str, n_rows: int, n_cols: int, dtype: torch.dtype) -> dict:
    """The heuristic pick, fitted to the H200 sweeps (benchmarks/results/history/2026-11/triton_kernels_h200.md).

    softmax/log_softmax: rows of <= 512 in 1K-element tiles (several rows per program) at 8 per
    thread; rows that fit in registers one per program at 16 (2-byte) or 8-32 (fp32) per
    thread; longer rows split over programs in chunks, one a program or pipelined (the body says
    which). logsumexp (read-only, it wants more in flight per thread): 32 per thread on short
    rows; rows longer than 16K cut into chunks of 64 per thread, through the chunks path for
    2-byte rows and one program a chunk for fp32 (benchmarks/results/current/rows_kernels/).
    """
    space = config_space(op, n_rows, n_cols, dtype)
    np2 = _np2(max(int(n_cols), 1))
    esz = torch.empty((), dtype=dtype).element_size()
    sms = _device_sms()
    lse = op == "logsumexp"
    want: dict | None = None
    if np2 <= 512:
        bn = max(np2, 16)
        want = _cfg("rows", bn, 1024 // bn, 1, 1 if lse else 4)
    elif np2 <= 16384:
        if lse and esz == 2:
            want = _cfg("rows", 1024, 2, 1, 2) if np2 == 1024 else _cfg("onepass", np2, 1, 1, np2 // 1024)
        elif esz == 2:
            want = _cfg("onepass", np2, 1, 1, max(1, min(32, np2 // 512)))
        else:
            want = _cfg("onepass", np2, 1, 1, max(1, min(16, np2 // 256)))
    elif lse:
        # a row in chunks of 64 elements a thread: the largest chunk (up to 8192 for fp32, 4096 for
        # 2-byte rows) that still gives every SM two; fp32 one program a chunk (``split``), 2-byte
        # rows of inputs over 8M elements persistent programs whose next chunk loads while they
        # reduce one (``chunks``; on an H200 3105 GB/s against split's 2913 at 256x262144). Up to 8M
        # elements 2-byte rows take ``split`` too: when ``chunks`` took two launches it cost a
        # caller twice the host time (bf16 32x151936 7.6 us a call against 14.0), and in one launch
        # it is still 1-14% slower there on an H100 (64x65536 11.6 us against 11.2,
        # benchmarks/results/current/rows_kernels/lse_one_launch/)
        sizes = (8192, 4096) if esz == 4 else (4096,)
        bn = next((b for b in sizes if int(n_rows) * _cdiv(int(n_cols), b) >= 2 * sms), 2048)
        one_program_a_chunk = esz == 4 or int(n_rows) * int(n_cols) <= LSE_SPLIT_MAX
        want = _with_fast_exp(_cfg("split" if one_program_a_chunk else "chunks", bn, 1, 1, bn // 2048))
        if want not in space:  # rows too long for chunks: streamed, cut over programs when rows are few
            want = _cfg("split_online", 2048, 1, 32, 4, 2) if n_rows < 4 * sms else _cfg("online", 4096, 1, 1, 8, 2)
    else:
        # The H200 sweep of Dec 2 2026, bf16 and fp32 (fp16 takes bf16's;
        # benchmarks/results/current/rows_kernels/long_rows_sweep.md): 2-byte rows in 4096-element
        # chunks one a program (``split``; softmax 11-24% ahead of the pipelined path, log_softmax
        # 1-6% up to 64K), pipelined for log_softmax beyond (11% ahead there); fp32 rows pipelined
        # in chunks of 2048 (1-7% ahead of 4096). 2-byte rows of an odd length (off the 16-byte
        # grid, read through aligned windows) up to 64K: chunks of 8192, 64 per thread (4-10%
        # ahead of 4096 at 30001 and 50257; benchmarks/results/current/rows_kernels/odd_rows/)
        if esz == 2 and np2 <= 65536 and int(n_cols) % 8:
            want = _cfg("split", 8192, 1, 1, 4)
        elif esz == 2:
            want = _cfg("split_pipe" if op == "log_softmax" and np2 > 65536 else "split", 4096, 1, 1, 4)
        else:
            want = _cfg("split_pipe", 2048, 1, 1, 4)
        if _with_fast_exp(want) not in space:
            want = next((c for c in space if c["path"] == "split_pipe"), want)
        if _with_fast_exp(want) not in space:
            # beyond what split can hold: stream, over several programs per row when rows are few
            path = "split_online" if n_rows < 4 * sms else "online"
            want = next((c for c in space if c["path"] == path), None)
    want = _with_fast_exp(want) if want is not None else None
    if want in space:
        return dict(want)
    return dict(space[0])


def _with_fast_exp(c: dict) -> dict:
    """``c`` as the space holds it: with ``FAST_EXP`` on a GPU (see :func:`config_space`)."""
    return dict(c) if _interpreting() else dict(c, FAST_EXP=1)


def prune(op: str, n_rows: int, n_cols: int, dtype: torch.dtype, configs: list[dict],
          default: dict) -> tuple[list[dict], list[tuple[dict, str]]]:
    """``(kept, pruned)``: the candidates of ``configs`` worth compiling for this many rows, and the
    others with why. The default is always kept. Dropped: tiles of several rows when the input
    has fewer rows than a tile holds (the rest of the tile is idle), and logsumexp's rows cut
    over several programs when there are rows enough to fill the device one program per row.
    Rows are taken by their bucket (:func:`dispatch.backend.rows_bucket`), whose tune every input
    of the bucket shares."""
    lo, hi = rows_bucket(n_rows)
    sms = _device_sms()
    kept, pruned = [], []
    for c in configs:
        why = None
        if c != default:
            if c["path"] == "rows" and c["ROWS"] > hi:
                why = f"a tile of {c['ROWS']} rows, for inputs of at most {hi} row(s)"
            elif c["path"] == "split_online" and op == "logsumexp" and lo >= 4 * sms:
                why = f"a row cut over {c['SPLIT']} programs, but {lo}+ rows fill the {sms} SMs one program per row"
        if why is None:
            kept.append(c)
        else:
            pruned.append((c, why))
    return kept, pruned


def _universe(op: str) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for k in range(0, 32):
        for esz in (2, 4):
            for sms in {_device_sms()}:
                for c in _space(op, 1 << k, esz, sms):
                    seen.setdefault(_cfg_key(c), c)
    return list(seen.values())


def _cfg_key(c: dict) -> tuple:
    return (c["path"], c["BLOCK_N"], c["ROWS"], c["SPLIT"], c["num_warps"], c["num_stages"], int(c.get("FAST_EXP", 0)),
            int(c.get("maxnreg") or 0))

