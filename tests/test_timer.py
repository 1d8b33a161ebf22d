"""The protocol's timer on the CPU: contenders timed in turns meet the same drift of the host."""

from __future__ import annotations

import pytest
import torch

from dispatch.autotune import timer
from dispatch.autotune.timer import interleaved_wall

CPU = torch.device("cpu")


class _Clock:
    """A host whose calls slow down as time goes on, on a clock of its own (so the test does not
    depend on how busy the machine running it is): a call of ``base`` us takes ``base`` plus 5 us
    for every millisecond gone since ``start``."""

    def __init__(self):
        self.now = self.start = 0.0

    def perf_counter(self) -> float:
        return self.now

    def call(self, base_us: float):
        def run():
            self.now += (base_us + (self.now - self.start) * 5000.0) * 1e-6
        return run


def test_contenders_timed_in_turns_are_ranked_by_their_own_cost_while_the_host_slows_down(monkeypatch):
    """The host slows every call down more and more as the timing goes on (as a GPU machine's host
    drifts within a minute). Timed one after the other, the contender timed later takes the blame
    and the cheaper call (100 against 200 us) comes out dearer; timed in turns, both meet the same
    drift and the cheaper call ranks first."""
    clock = _Clock()
    monkeypatch.setattr(timer, "time", clock)
    runs = {"dear": clock.call(200.0), "cheap": clock.call(100.0)}
    in_turns = interleaved_wall(runs, CPU, rounds=5)
    assert in_turns["cheap"].median_us < in_turns["dear"].median_us, in_turns
    assert all(t.reps == 5 and t.config["name"] == name for name, t in in_turns.items())

    clock.start = clock.now  # the same drift from the start, the contenders timed one after the other
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
