import gc

import pytest

from phaseconv.runtimes import timing
from phaseconv.runtimes.timing import interleaved_times, wait_until_others_idle


def test_every_runner_runs_once_per_round_after_the_warmup():
    calls = []
    times = interleaved_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, runs=3, warmup=2)
    assert calls == ["a", "b"] * 5
    assert [len(samples) for samples in times.values()] == [3, 3]


def test_the_collector_is_off_while_timed_and_back_on_after():
    seen = []
    interleaved_times({"a": lambda: seen.append(gc.isenabled())}, runs=2, warmup=1)
    assert seen == [True, False, False]
    assert gc.isenabled()


def test_the_collector_is_back_on_after_a_runner_fails():
    def failing():
        if not gc.isenabled():
            raise ValueError("timed call")

    with pytest.raises(ValueError, match="timed call"):
        interleaved_times({"a": failing}, runs=1, warmup=1)
    assert gc.isenabled()


def test_every_timed_call_follows_a_settle():
    events = []
    runners = {"a": lambda: events.append("a"), "b": lambda: events.append("b")}
    interleaved_times(runners, runs=2, warmup=1, settle=lambda: events.append("settle"))
    assert events == ["a", "b"] + ["settle", "a", "settle", "b"] * 2


class BusyClock:
    """The process's clocks while another thread burns a core until `busy_until` s: each reading
    moves the wall clock 1 ms, this thread's CPU time 1 ms and the other thread's 1 ms more."""

    def __init__(self, busy_until: float):
        self.busy_until, self.wall, self.cpu = busy_until, 0.0, 0.0

    def perf_counter(self) -> float:
        self.wall += 0.001
        self.cpu += 0.002 if self.wall < self.busy_until else 0.001
        return self.wall

    def process_time(self) -> float:
        return self.cpu


@pytest.mark.parametrize(("busy_until", "returns_by"), [(0.1, 0.13), (1.0, 0.22)])
def test_settling_waits_for_a_busy_thread_to_stop(monkeypatch, busy_until, returns_by):
    """It returns in the first quiet window after the other thread stops, or at its limit."""
    clock = BusyClock(busy_until)
    monkeypatch.setattr(timing, "time", clock)
    wait_until_others_idle(window=0.01, limit=0.2)
    assert min(busy_until, 0.2) <= clock.wall <= returns_by
