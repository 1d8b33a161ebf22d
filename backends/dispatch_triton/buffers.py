"""The Triton kernels' scratch buffers: per (device, stream), zeroed once and left zeroed (or
moved on by an epoch) by every launch, and private ones for launches captured into a CUDA graph.

The row kernel's arrival counters (``sync``), logsumexp's split-path workspace (``ws``) and the
tagged partials that programs of one row exchange (``slots``, :mod:`dispatch_triton.exchange`)
live here; :mod:`dispatch_triton.launch` and the norm launchers ask for them per launch, or keep
them per stream themselves (:func:`per_stream`: one dictionary look-up a call)."""

from __future__ import annotations

import threading

import torch

from dispatch.backend import lasting_zeros

from .lse_chunks import _ROW_OFF

_SLOT_OFF = 64  # the tagged partials in the int64 slot buffer (word 0: epoch << 32 | ticket)
_EPOCH_RESET = 1 << 14  # launches of a slot buffer before it is zeroed (packed words' tags are 15-bit)

_SYNC_LOCK = threading.Lock()
_SYNC: dict = {}
_WS: dict = {}  # logsumexp's split-path workspace per (device, stream)
_SLOTS: dict = {}


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # device index -> current stream handle
_is_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)


def _stream_key(device: torch.device):
    if device.type == "cuda":  # the raw handle: no Stream object made per call
        index = device.index if device.index is not None else torch.cuda.current_device()
        return (device, _raw_stream(index))
    return (device, 0)


def per_stream(device: torch.device, make):
    """``current()``: what ``make(key)`` built for the current stream of ``device`` (a CUDA device;
    ``key`` as the per-stream tables key it), built the first time ``current()`` runs on that
    stream: for a launcher that binds its launches to a stream's buffers once, so that a call
    costs one look-up, not the shared tables' lock and checks. None while that stream is capturing
    a CUDA graph (a captured launch takes buffers of its own; see :func:`_stream_capturing`).

    What ``make`` holds stays alive as long as the launcher: if the stream's shared buffer grows
    for another launcher, this one keeps launching into its own (launches on one stream run in
    order, and each buffer keeps its own epoch). Two threads meeting a stream at once may both
    build; one result is kept. ``current()`` takes no lock (``make`` may take ``_SYNC_LOCK``).
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    raw, table = _raw_stream, {}

    def current():
        s = raw(index)
        if s and _capturing():  # 0: the legacy default stream, never captured (_stream_capturing)
            return None
        got = table.get(s)
        if got is None:
            got = table.setdefault(s, make((device, s)))
        return got

    return current


def _per_stream(table: dict, key, need: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``table[key]``, a zeroed ``dtype`` buffer of at least ``need`` elements (grown, never shrunk)."""
    buf = table.get(key)
    if buf is None or buf.numel() < need:
        with _SYNC_LOCK:
            buf = table.get(key)
            if buf is None or buf.numel() < need:
                buf = lasting_zeros(max(need, 2 * (buf.numel() if buf is not None else 0), 1 << 12), dtype, device)
                table[key] = buf
    return buf


def _capturing() -> bool:
    """Whether the current CUDA stream is capturing a CUDA graph (torch's own check, without its
    Python frame where torch has it)."""
    if _is_capturing is not None:
        return _is_capturing()
    return torch.cuda.is_current_stream_capturing()


def _stream_capturing(key) -> bool:
    """Whether the stream of ``key`` (device, raw stream handle), the current one, is capturing a CUDA
    graph. The legacy default stream (handle 0, torch's default stream) never is: CUDA refuses to
    capture it and torch captures on a side stream. On it the question, which costs about 0.3 us of
    host time a call on an H200 host, is not asked."""
    return key[0].type == "cuda" and key[1] != 0 and _capturing()


def _captured_zeros(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zeroed buffer private to one launch being captured into a CUDA graph.

    Its zeroing is captured with the launch, so every replay finds it as a first eager launch
    finds a new per-stream buffer, and no other launch (eager, another graph, a replay on
    another stream) shares it: replays of different graphs may run concurrently.
    """
    return torch.zeros(max(int(n), 1), dtype=dtype, device=device)


def _sync_buffer(device: torch.device, rows_needed: int) -> torch.Tensor:
    """A zeroed int32 buffer per (device, stream) that every launch leaves zeroed again."""
    return _per_stream(_SYNC, _stream_key(device), int(_ROW_OFF) + max(int(rows_needed), 0), torch.int32, device)


def _lse_buffers(device: torch.device, rows: int, partials: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sync, ws)`` of the current stream for logsumexp's split and chunks paths: the arrival counters and the
    fp32 workspace of ``partials`` (max, sum) pairs; while a CUDA graph is captured, ones private to
    the captured launch.

    Per stream, as launches on one stream run in order: every launch writes a row's partials
    before its last arriver reads them and leaves the counters zeroed, so the next launch on the
    stream finds them as it needs them, while launches on another stream get buffers of their own.
    """
    key = _stream_key(device)
    if _stream_capturing(key):
        return (_captured_zeros(int(_ROW_OFF) + rows, torch.int32, device),
                torch.empty(2 * partials, dtype=torch.float32, device=device))
    return _lse_stream_buffers(key, rows, partials)


def _lse_stream_buffers(key, rows: int, partials: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sync, ws)`` of the stream ``key`` (device, stream) for logsumexp's split and chunks paths."""
    device = key[0]
    return (_per_stream(_SYNC, key, int(_ROW_OFF) + rows, torch.int32, device),
            _per_stream(_WS, key, 2 * partials, torch.float32, device))


def _slot_words(partials: int) -> int:
    """Words of the slot buffer for ``partials`` partials: the epoch word's block, then two words each."""
    return _SLOT_OFF + 2 * max(int(partials), 0)


def _split_slots(device: torch.device, partials: int) -> torch.Tensor:
    """The slot buffer for a launch of the split paths: the stream's, or while a CUDA graph is
    captured one private to the captured launch."""
    key = _stream_key(device)
    if _stream_capturing(key):
        return _captured_zeros(_slot_words(partials), torch.int64, device)
    return _counted_slots(key, partials)


def _slot_buffer(device: torch.device, partials_needed: int) -> torch.Tensor:
    """The int64 buffer of tagged partials per (device, stream); word 0 is (epoch << 32 | ticket).

    Each launch of the split path moves the epoch on (on the device), and a partial counts only
    when it carries the launch's tag, so stale words from earlier launches are never mistaken
    for fresh ones. The buffer is zeroed every ``_EPOCH_RESET`` launches, before a packed word's
    15-bit tag could come round again (:func:`_tick`, once per launch; :mod:`dispatch_triton.exchange`).
    """
    return _counted_slots(_stream_key(device), partials_needed)


def _counted_slots(key, partials_needed: int) -> torch.Tensor:
    """The slot buffer of ``key`` (device, stream), this launch counted into it (:func:`_slot_buffer`)."""
    entry = _slot_entry(key, partials_needed)
    with _SYNC_LOCK:
        _tick(entry)
    return entry[0]


def _slot_entry(key, partials_needed: int) -> list:
    """``[buffer, launches]`` of the slot buffer of ``key`` (device, stream), grown to hold
    ``partials_needed`` partials (a grown buffer is a new entry; whoever holds the old one keeps
    launching into it, and counts those launches in it)."""
    need = _slot_words(partials_needed)
    with _SYNC_LOCK:
        entry = _SLOTS.get(key)
        if entry is None or entry[0].numel() < need:
            old = entry[0].numel() if entry is not None else 0
            entry = [lasting_zeros(max(need, 2 * old, 1 << 12), torch.int64, key[0]), 0]
            _SLOTS[key] = entry
        return entry


def _tick(entry: list) -> None:
    """Count a launch into ``entry``'s buffer: every ``_EPOCH_RESET`` launches it is zeroed (on the
    current stream, ahead of the launch)."""
    entry[1] += 1
    if entry[1] >= _EPOCH_RESET:
        entry[0].zero_()
        entry[1] = 0
