"""An eager call on a side stream whose input was written on another stream, with and without the wait.

The pattern of ``tests/test_gpu_launch.py``'s concurrent-replay helper, made deterministic: the
input's memory is left holding NaN (a freed block the allocator hands out again), and a
``torch.cuda._sleep`` on the current stream holds back the kernel that writes the input. An
eager call on a side stream that does not wait for the current stream then reads the stale
NaN; with ``side.wait_stream(current)`` it reads the input. Every backend is run the same way.

    python3 stream_order.py
"""

from __future__ import annotations

import torch

import dispatch
from dispatch.tolerance import mismatch

SHAPE = (4, 262144)


def trial(backend: str, op: str, wait: bool) -> str | None:
    stale = torch.full(SHAPE, float("nan"), device="cuda", dtype=torch.bfloat16)
    del stale  # its block goes back to the allocator's pool, NaN inside
    torch.cuda._sleep(50_000_000)  # holds the current stream for tens of milliseconds
    g = torch.Generator(device="cuda").manual_seed(3)
    x = (torch.randn(SHAPE, device="cuda", generator=g) * 4).to(torch.bfloat16)
    side = torch.cuda.Stream()
    if wait:
        side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = getattr(dispatch, op)(x, -1, backend=backend)
    torch.cuda.synchronize()
    return mismatch(got, getattr(torch, op)(x, -1))


def main() -> None:
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16 {SHAPE}")
    for backend in [n for n, info in dispatch.backends().items() if info.available]:
        for op in ("softmax", "log_softmax"):
            getattr(dispatch, op)(torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16), -1, backend=backend)
            for wait in (False, True):
                bad = trial(backend, op, wait)
                print(f"{backend:9s} {op:12s} side stream waits: {str(wait):5s} -> {bad or 'matches torch'}")


if __name__ == "__main__":
    main()
