"""A node process stops on SIGINT even when the KeyboardInterrupt never reaches its spin loop:
rclpy's C++ side, interrupted while converting a call's arguments, raises a RuntimeError instead."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import os, signal, sys
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from embodied_ros.nodes.run import stop_requested, stopped_by_signals
from embodied_ros.node_infra.spinning import spin_until_shutdown

calls = []

def tick():
    calls.append(1)
    if len(calls) == 3:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass  # the handler runs here and its KeyboardInterrupt is swallowed below
        except KeyboardInterrupt:
            raise RuntimeError("Unable to convert call argument '0' to Python object")

with stopped_by_signals(sys.argv):
    node = Node("signal_probe")
    node.create_timer(0.01, tick)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spin_until_shutdown(executor, lambda: not stop_requested())
    print("stopped after", len(calls), "ticks", flush=True)
    node.destroy_node()
"""


def test_a_swallowed_interrupt_still_ends_the_spin_loop():
    result = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "stopped after 3 ticks" in result.stdout
    assert "callback failed" not in result.stderr  # the stop is not reported as a callback's bug


POLLED_CHILD = r"""
import os, signal, sys
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from embodied_ros.nodes import run
from embodied_ros.node_infra.spinning import spin_until_shutdown

interrupted = []

def tick():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
    except KeyboardInterrupt:
        interrupted.append(1)

with run.stopped_by_signals(sys.argv):
    node = Node("signal_probe")
    node.create_timer(0.01, tick)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    run._POLLED.set()  # as run_node does around its spin loop
    spin_until_shutdown(executor, lambda: not run.stop_requested())
    print("stopped; interrupted inside a callback:", bool(interrupted), flush=True)
    node.destroy_node()
"""


def test_a_spin_loop_that_checks_the_stop_is_not_interrupted_inside_rclpy():
    result = subprocess.run([sys.executable, "-c", POLLED_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "stopped; interrupted inside a callback: False" in result.stdout
