"""Threads that spin an executor, or call something on a period, and stop cleanly.

rclpy 9.1.2's `Executor.shutdown` destroys its guard condition without waiting for callbacks
still running, which then fail ("cannot use Destroyable ..."). Here the thread stops spinning
first (callbacks run inline on it), then the executor shuts down with nothing in flight.

An executor here waits with no timeout: it wakes for work only, and `stop()` wakes it. A wait
with a timeout costs rclpy a new timer and wait set every time it runs out (0.6-1 ms of CPU a
wake measured on the 2-core machine): at 20 Hz per executor that was a tenth of a core for the
six executors of a composed graph, taken from the model.
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import threading
import time
import traceback
from typing import Callable

import rclpy.logging
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.task import Future

class StallWatch:
    """Ends the process when its interpreter stays held for `limit_s`, which Python itself cannot see:
    a thread re-arms faulthandler's timer several times within the limit, and faulthandler's own C
    thread, which needs no interpreter, fires when no re-arm came, writes every thread's stack to
    stderr (the node's log) and exits with status 1, for launch's respawn or a supervisor to restart
    the process. Seen after kill -9 and a restart of the inference host's processes, about once in
    30 restarts (9 in 275): a restarted
    stage's take_message in rmw_fastrtps never returned, holding the interpreter (py-spy: its spin
    thread "active+gil" at the take, ~90% of a core; every other thread, timers and /diagnostics
    included, stopped), so the process was alive and served nothing. Processes keep the watch through
    their teardown: a test robot once ignored launch's SIGINT and SIGTERM for a minute."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.beat_s = min(1.0, limit_s / 4)  # re-arms well inside the limit
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="stall-watch", daemon=True)

    def start(self) -> None:
        if self.limit_s > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self.beat_s)
        faulthandler.cancel_dump_traceback_later()

    def _beat(self) -> None:
        while not self._stopped.is_set():
            faulthandler.dump_traceback_later(self.limit_s, exit=True)
            self._stopped.wait(self.beat_s)


class SpinThread:
    def __init__(self, executor: Executor, name: str, on_exit: Callable[[], None] = lambda: None,
                 prepare: Callable[[], None] = lambda: None):
        """`prepare` runs on the thread before it spins; `on_exit` once spinning ends, whether by
        stop(), the context's shutdown or an error (`failure` then says which)."""
        self.executor = executor
        self.on_exit = on_exit
        self.prepare = prepare
        self.failure = ""  # why the thread ended on its own: `prepare` or the executor raised
        self._stopped: Future = Future()
        self._thread = threading.Thread(target=self._spin, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        if not self._stopped.done():
            self._stopped.set_result(None)  # wakes the executor (spin_until_future_complete's done callback)
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)
        self.executor.shutdown(timeout_sec=timeout_s)

    def _spin(self) -> None:
        try:
            self.prepare()
            self._spin_until_stopped()
        except BaseException as error:  # the thread ends here: whoever waits on it is told why
            self.failure = f"{self._thread.name} failed: {type(error).__name__}: {error}"
            rclpy.logging.get_logger("embodied_ros.graph").fatal(
                f"{self.failure}; its executor spins no more:\n{traceback.format_exc()}")
        finally:
            self.on_exit()

    def _spin_until_stopped(self) -> None:
        """Spin until stop() or the executor's context shuts down (Ctrl-C).

        An error while the context goes down or once stopped (a callback publishing through the
        closed context, the wait set failing, a stop signal that rclpy's C++ side turned into a
        RuntimeError) ends the spin quietly: it is the shutdown, not a failure. A callback that
        raises otherwise is logged with its traceback and spinning goes on: one callback's bug
        must not stop every node the executor serves."""
        executor, stopped = self.executor, self._stopped
        # rclpy's C++ EventsExecutor (not an Executor subclass) never returns from a wait with no
        # timeout, even once the future is done; its timed wait costs nothing per wake, unlike the
        # Python executors' (see above)
        timeout_s = None if isinstance(executor, Executor) else 3600.0
        while not stopped.done() and executor.context.ok():
            try:
                executor.spin_until_future_complete(stopped, timeout_sec=timeout_s)
            except ExternalShutdownException:
                return
            except Exception:
                if not executor.context.ok() or stopped.done():
                    return
                rclpy.logging.get_logger("embodied_ros.graph").error(
                    f"callback failed on {self._thread.name}:\n{traceback.format_exc()}", throttle_duration_sec=5.0)


class PeriodicThread:
    """Calls `callback` at every `period_s` of the monotonic clock from start() on, on its own
    thread, until stopped; `prepare` runs first on that thread (e.g. real-time scheduling). The
    calls keep to that grid: a late call does not delay the next ones, and calls missed by more
    than a period are dropped, not made up in a burst. A call that raises is logged and the calls
    go on; so do they when `prepare` raises.

    A node's /diagnostics go out this way, not from a timer of its executor: a stage's executor
    thread is busy while the stage computes, and a multi-threaded executor costs rclpy so much
    Python per callback that on a 2-core machine the command stream lost its rate. The
    controller's ticks too (nodes/controller.py)."""

    def __init__(self, period_s: float, callback: Callable[[], None], name: str,
                 prepare: Callable[[], None] = lambda: None):
        self.period_ns = round(period_s * 1e9)
        self.callback = callback
        self.prepare = prepare
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
        try:
            self.prepare()
        except Exception:
            rclpy.logging.get_logger("embodied_ros.graph").error(
                f"preparing {self._thread.name} failed; its calls go on:\n{traceback.format_exc()}")
        due_ns = time.monotonic_ns() + self.period_ns
        while not self._stopped.wait(max(0, due_ns - time.monotonic_ns()) / 1e9):
            try:
                self.callback()
            except Exception:
                rclpy.logging.get_logger("embodied_ros.graph").error(
                    f"call failed on {self._thread.name}:\n{traceback.format_exc()}", throttle_duration_sec=5.0)
            due_ns += self.period_ns
            behind_ns = time.monotonic_ns() - due_ns
            if behind_ns > self.period_ns:
                due_ns += behind_ns // self.period_ns * self.period_ns


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
