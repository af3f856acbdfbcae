"""An executor spun on its own thread that stops cleanly.

rclpy 9.1.2's `Executor.shutdown` destroys its guard condition without waiting for callbacks
still running, which then fail ("cannot use Destroyable ..."). Here the thread stops spinning
first (callbacks run inline on it), then the executor shuts down with nothing in flight.
`spin_until_shutdown` is the one spin loop, for these threads and for a node's own process.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import traceback
from typing import Callable

import rclpy.logging

from rclpy.executors import Executor, ExternalShutdownException


class SpinThread:
    def __init__(self, executor: Executor, name: str):
        self.executor = executor
        self._running = False
        self._thread = threading.Thread(target=self._spin, name=name, daemon=True)

    def start(self) -> None:
        self._running = True
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._running = False
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)
        self.executor.shutdown(timeout_sec=timeout_s)

    def _spin(self) -> None:
        spin_until_shutdown(self.executor, lambda: self._running, self._thread.name)


def spin_until_shutdown(executor: Executor, keep_spinning: Callable[[], bool] = lambda: True,
                        name: str = "main") -> None:
    """Spin until `keep_spinning()` is false or the executor's context shuts down (Ctrl-C).

    An error while the context goes down or once `keep_spinning()` turned false (a callback
    publishing through the closed context, the wait set failing, a stop signal that rclpy's C++
    side turned into a RuntimeError) ends the spin quietly: it is the shutdown, not a failure. A callback that
    raises otherwise is logged with its traceback and spinning goes on: one callback's bug must
    not stop every node the executor serves."""
    logger = rclpy.logging.get_logger("embodied_ros.graph")
    while keep_spinning() and executor.context.ok():
        try:
            executor.spin_once(timeout_sec=0.05)
        except ExternalShutdownException:
            return
        except Exception:
            if not executor.context.ok() or not keep_spinning():
                return
            logger.error(f"callback failed on {name}:\n{traceback.format_exc()}", throttle_duration_sec=5.0)


class PeriodicThread:
    """Calls `callback` every `period_s` seconds (monotonic clock) on its own thread until stopped.

    A node's /diagnostics go out this way, not from a timer of its executor: a stage's executor
    thread is busy while the stage computes, and a multi-threaded executor costs rclpy so much
    Python per callback that on a 2-core machine the command stream lost its rate."""

    def __init__(self, period_s: float, callback, name: str):
        self.period_s = period_s
        self.callback = callback
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop; returns once a call in progress has finished."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)

    def _loop(self) -> None:
        while not self._stopped.wait(self.period_s):
            self.callback()


@contextlib.contextmanager
def interrupts_ignored():
    """SIGINT and SIGTERM ignored within the block (main thread only; elsewhere signals cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
