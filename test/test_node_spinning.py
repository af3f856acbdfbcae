"""node_infra/spinning.py: an executor's thread waits with no timeout and still stops at once
(rclpy's Python executors and its C++ EventsExecutor alike), and one that fails says why; a
periodic thread keeps its grid through a late call and a failing one or preparation."""

import threading
import time

import pytest
import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.experimental import EventsExecutor

from embodied_ros.node_infra.spinning import PeriodicThread, SpinThread
from domains import next_domain
from graph_harness import wait_for

PERIOD_S = 0.02


@pytest.fixture
def context():
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    yield context
    rclpy.try_shutdown(context=context)


@pytest.mark.parametrize("make_executor", [SingleThreadedExecutor, EventsExecutor], ids=["python", "events"])
def test_a_spinning_thread_runs_its_timer_and_stops_at_once(context, make_executor):
    node = rclpy.create_node("spun", context=context)
    ticks = []
    node.create_timer(PERIOD_S, lambda: ticks.append(time.monotonic()))
    executor = make_executor(context=context)
    executor.add_node(node)
    prepared_on = []
    exited = threading.Event()
    spinner = SpinThread(executor, "spun-thread", on_exit=exited.set,
                         prepare=lambda: prepared_on.append(threading.current_thread().name))
    spinner.start()
    try:
        wait_for(lambda: len(ticks) >= 5, 5, "the timer to fire on the spinning thread")
        started = time.monotonic()
        spinner.stop()
        assert time.monotonic() - started < 1.0  # woken by the stop, not by a timeout running out
        assert exited.is_set() and not spinner._thread.is_alive()
        assert prepared_on == ["spun-thread"]
    finally:
        spinner.stop()
        node.destroy_node()


def test_a_spinning_thread_that_fails_says_why_and_still_calls_its_exit(context, capfd):
    exited = threading.Event()
    spinner = SpinThread(SingleThreadedExecutor(context=context), "doomed", on_exit=exited.set,
                         prepare=lambda: 1 / 0)
    spinner.start()
    try:
        assert exited.wait(5)
        assert spinner.failure == "doomed failed: ZeroDivisionError: division by zero"
        assert "Traceback" in capfd.readouterr().err
    finally:
        spinner.stop()


def _calls_of(callback, run_s: float, prepare=lambda: None) -> list[float]:
    times: list[float] = []

    def record():
        times.append(time.monotonic())
        callback(len(times))

    ticker = PeriodicThread(PERIOD_S, record, "periodic", prepare=prepare)
    ticker.start()
    time.sleep(run_s)
    ticker.stop()
    return times


def test_a_late_call_neither_shifts_the_grid_nor_is_made_up_in_a_burst():
    stall_s = 3.5 * PERIOD_S
    times = _calls_of(lambda n: time.sleep(stall_s) if n == 5 else None, 0.6)
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    assert max(gaps) >= stall_s  # the stall happened
    assert sum(gap < PERIOD_S / 4 for gap in gaps) <= 1  # at most the one call due during it, at once
    # the calls after the stall are on the grid the calls before it kept: calls are only ever late, so the
    # earliest of their implied origins is the grid's (a first call the scheduler delayed is not)
    start = min(t - i * PERIOD_S for i, t in enumerate(times[:5]))
    phases = [((t - start) / PERIOD_S) % 1.0 for t in times[6:]]
    assert sum(min(phase, 1 - phase) < 0.25 for phase in phases) >= 0.8 * len(phases)
    grid_points = round((times[-1] - start) / PERIOD_S) + 1
    assert len(times) <= grid_points - 2  # the calls missed in the stall (all but one) are dropped


def test_a_failing_call_is_logged_and_the_calls_go_on(capfd):
    def fail_first(n):
        if n == 1:
            raise RuntimeError("first call fails")

    prepared_on = []
    times = _calls_of(fail_first, 0.3, prepare=lambda: prepared_on.append(threading.current_thread().name))
    assert len(times) > 5
    assert prepared_on == ["periodic"]
    err = capfd.readouterr().err
    assert "call failed on periodic" in err and "first call fails" in err


def test_a_failing_preparation_is_logged_and_the_calls_go_on(capfd):
    times = _calls_of(lambda n: None, 0.3, prepare=lambda: 1 / 0)
    assert len(times) > 5
    err = capfd.readouterr().err
    assert "preparing periodic failed; its calls go on" in err and "ZeroDivisionError" in err


def test_stop_waits_for_the_call_in_progress():
    inside = threading.Event()
    finished = []

    def slow():
        inside.set()
        time.sleep(0.2)
        finished.append(1)

    ticker = PeriodicThread(PERIOD_S, slow, "slow")
    ticker.start()
    assert inside.wait(2)
    ticker.stop()
    assert finished  # stop() returned after the call it found in progress
    count = len(finished)
    time.sleep(3 * PERIOD_S)
    assert len(finished) == count
