"""The protocol's timer on the CPU: contenders timed in turns meet the same drift of the host."""

from __future__ import annotations

import time

import pytest
import torch

from dispatch.autotune.timer import interleaved_wall

CPU = torch.device("cpu")


def _spin(us: float) -> None:
    until = time.perf_counter() + us * 1e-6
    while time.perf_counter() < until:
        pass


def test_contenders_timed_in_turns_are_ranked_by_their_own_cost_while_the_host_slows_down():
    """The host slows every call down more and more as the timing goes on (as a GPU machine's host
    drifts within a minute). Timed one after the other, the contender timed later takes the blame
    and the cheaper call (100 against 200 us) comes out dearer; timed in turns, both meet the same
    drift and the cheaper call ranks first."""
    begun = [time.perf_counter()]

    def drift() -> float:  # 0 us at the start, growing 5 us a millisecond
        return (time.perf_counter() - begun[0]) * 5000.0

    runs = {"dear": lambda: _spin(200.0 + drift()), "cheap": lambda: _spin(100.0 + drift())}
    in_turns = interleaved_wall(runs, CPU, rounds=5)
    assert in_turns["cheap"].median_us < in_turns["dear"].median_us, in_turns
    assert all(t.reps == 5 and t.config["name"] == name for name, t in in_turns.items())

    begun[0] = time.perf_counter()  # the same drift, the contenders timed one after the other
    one_by_one = {**interleaved_wall({"dear": runs["dear"]}, CPU, rounds=5),
                  **interleaved_wall({"cheap": runs["cheap"]}, CPU, rounds=5)}
    assert one_by_one["cheap"].median_us > one_by_one["dear"].median_us, one_by_one  # the drift decides there


def test_each_contender_is_called_in_every_round_in_a_rotating_order():
    order: list[str] = []
    runs = {name: (lambda name=name: order.append(name)) for name in ("a", "b", "c")}
    interleaved_wall(runs, CPU, rounds=3)
    # a burst is a run of one name: the sizing bursts (a, b, c), then three rounds of three bursts
    runs_of = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    firsts = runs_of[3::3]  # the first burst of each round
    assert runs_of[:3] == ["a", "b", "c"] and firsts == ["a", "b", "c"], runs_of
    assert len(runs_of) == 3 + 3 * 3


def test_rounds_must_be_positive():
    with pytest.raises(ValueError, match="rounds"):
        interleaved_wall({"a": lambda: None}, CPU, rounds=0)
