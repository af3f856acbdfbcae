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
import signal
import threading
import time
import traceback
from typing import Callable

import rclpy.logging
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.task import Future

# a subscription found ready with nothing to take at this many waits in a row, over this long, is stuck
STUCK_EMPTY_TAKES = 200
STUCK_FOR_S = 2.0


class GraphExecutor(SingleThreadedExecutor):
    """The executor of the graph's nodes: a SingleThreadedExecutor that notices a stuck subscription,
    one the wait set calls ready at every wait while it has nothing to take, and hands it to its
    node's `renew_subscription`. After kill -9 and a restart of the inference host's processes, a
    restarted stage's Fast DDS reader was seen in that state in 1-2 restarts of 25: the executor spun
    at ~90% of a core in take_message, the callback never ran, the stage never ran again. (It
    overrides rclpy's private `_take_subscription`; an rclpy without it spins as before.)"""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._empty_takes: dict[int, tuple[int, float]] = {}  # id(subscription) -> (count, since when)

    def _take_subscription(self, sub):
        call = super()._take_subscription(sub)
        if call is not None:
            self._empty_takes.pop(id(sub), None)
            return call
        count, since = self._empty_takes.get(id(sub), (0, time.monotonic()))
        self._empty_takes[id(sub)] = count + 1, since
        if count + 1 >= STUCK_EMPTY_TAKES and time.monotonic() - since >= STUCK_FOR_S:
            del self._empty_takes[id(sub)]
            owner = next((node for node in self.get_nodes() if sub in node.subscriptions), None)
            renew = getattr(owner, "renew_subscription", None)
            if renew is not None:
                renew(sub)
        return None


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
