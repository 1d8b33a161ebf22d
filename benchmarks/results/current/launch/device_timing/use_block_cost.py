"""Host cost of a ``use(timing="device")`` block on a CPU: a call outside any block, a call in a block
entered for it, calls inside one block, and entering an empty block; us per call, best of 5 runs of
20000 (``python3 use_block_cost.py``; no GPU needed)."""

from __future__ import annotations

import time

import torch

import dispatch


def per_call_us(fn, n: int = 20000) -> float:
    for _ in range(2000):
        fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def main() -> None:
    x = torch.randn(4, 64)

    def block_per_call():
        with dispatch.use(timing="device"):
            return dispatch.softmax(x, -1)

    def empty_block():
        with dispatch.use(timing="device"):
            pass

    print(f"dispatch.softmax, no block:      {per_call_us(lambda: dispatch.softmax(x, -1)):.2f} us")
    print(f"a block entered for each call:   {per_call_us(block_per_call):.2f} us")
    with dispatch.use(timing="device"):
        print(f"calls inside one block:          {per_call_us(lambda: dispatch.softmax(x, -1)):.2f} us")
    print(f"entering and leaving a block:    {per_call_us(empty_block):.2f} us")


if __name__ == "__main__":
    main()
