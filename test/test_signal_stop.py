"""A node process spins its executor on a thread that waits for work with no timeout, while the
main thread sleeps on the stop: SIGINT ends the spin at once, even with nothing to wake the
executor, and never lands inside a callback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IDLE_CHILD = r"""
import sys, time
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from embodied_ros.nodes.run import spin_until_stopped, stopped_by_signals

with stopped_by_signals(sys.argv):
    node = Node("idle_probe")  # no timers, no subscriptions: only the stop can wake its executor
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    print("spinning", flush=True)
    spin_until_stopped(executor)
    print(f"stopped at {time.monotonic():.6f}", flush=True)
    node.destroy_node()
"""


def test_an_idle_executor_stops_at_once_on_sigint():
    child = subprocess.Popen([sys.executable, "-c", IDLE_CHILD], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "spinning"
        time.sleep(0.3)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 0, err[-2000:]
    stopped = float(out.split("stopped at ")[1])
    assert stopped - sent < 0.5  # the stop wakes the waiting executor; no timeout runs out first


CALLBACK_CHILD = r"""
import os, signal, sys
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from embodied_ros.nodes.run import spin_until_stopped, stopped_by_signals

calls, interrupted = [], []

def tick():
    calls.append(1)
    if len(calls) == 3:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100000):
                pass  # a handler running on this thread would raise here
        except KeyboardInterrupt:
            interrupted.append(1)

with stopped_by_signals(sys.argv):
    node = Node("signal_probe")
    node.create_timer(0.01, tick)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spin_until_stopped(executor)
    print("stopped; interrupted inside a callback:", bool(interrupted), flush=True)
    node.destroy_node()
"""


def test_a_signal_raised_by_a_callback_stops_the_process_outside_the_callback():
    result = subprocess.run([sys.executable, "-c", CALLBACK_CHILD], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "stopped; interrupted inside a callback: False" in result.stdout
    assert "callback failed" not in result.stderr  # the stop is not reported as a callback's bug
