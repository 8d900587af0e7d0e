import gc
import threading
import time

import pytest
import torch

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


def test_settling_waits_for_a_busy_thread_to_stop():
    """The busy thread is one long matrix product outside the GIL, as a runtime's spinning threads are."""
    torch.set_num_threads(1)
    a = torch.randn(1024, 1024)
    start = time.perf_counter()
    torch.mm(a, a)
    alone = time.perf_counter() - start
    started = threading.Event()

    def busy():
        started.set()
        torch.mm(a, a)

    thread = threading.Thread(target=busy)
    thread.start()
    started.wait()
    start = time.perf_counter()
    wait_until_others_idle()
    assert time.perf_counter() - start > 0.5 * alone
    thread.join()
