"""Thread priorities. The stages' compute runs below the rest of the graph: a stage thread lowers
its own priority (raises its nice value, which needs no privilege) before its first model call,
and the OpenMP threads its parallel kernels start inherit it. On a small computer the stages keep
every core busy; then the threads that wait most of the time (the inputs, the middleware's
receive threads, the controller's process) still get a core as soon as they wake. A busy process
of the same niceness elsewhere on the computer takes the cores from the stages in proportion.

The controller, in a process of its own, asks for real-time scheduling (SCHED_FIFO) for the
thread that ticks, and one priority below for its executor's thread, where the system permits
it: both sleep between ticks and chunks, so they take little, and get a core at once when one
is due; a tick that waits for the executor's thread (the lock, the interpreter) does not also
wait for the stages to give that thread a core back.
"""

from __future__ import annotations

import os
import threading

_lowered = threading.local()


def lower_this_thread(nice: int) -> None:
    """Add `nice` to the calling thread's nice value, once per thread (0: leave it)."""
    if nice <= 0 or getattr(_lowered, "done", False):
        return
    _lowered.done = True
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + nice))
    except OSError:  # a platform without per-thread priorities: the stages run as they are
        pass


def realtime_scheduling(priority: int, thread: int | None = None) -> str:
    """Put a thread of this process (its native id; default the calling thread) under SCHED_FIFO at
    `priority`; "" when done, else why not."""
    try:
        os.sched_setscheduler(thread or threading.get_native_id(), os.SCHED_FIFO, os.sched_param(priority))
    except (OSError, AttributeError) as error:  # EPERM without the privilege; no SCHED_FIFO on this platform
        return f"{getattr(error, 'strerror', None) or error}"
    return ""
