"""Thread priorities: the stages' compute thread runs below the graph's other threads (compute.stage_nice);
the controller run alone asks for SCHED_FIFO where permitted (controller.realtime_priority) for its
ticks, one below its executor and two below its diagnostics."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from embodied_ros.node_infra.priority import lower_this_thread, realtime_scheduling
from embodied_ros.node_infra.spinning import SpinThread
from graph_harness import configure_and_activate


def _nice_in_new_thread(*steps):
    seen = []

    def body():
        for nice in steps:
            lower_this_thread(nice)
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return seen[0]


def test_a_stage_thread_lowers_itself_once_and_leaves_the_others():
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert _nice_in_new_thread(3) == min(19, base + 3)
    assert _nice_in_new_thread(3, 3, 3) == min(19, base + 3)  # once per thread, not once per run
    assert _nice_in_new_thread(0) == base
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base


def test_the_kernels_threads_a_stage_starts_inherit_its_priority():
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = []

    def stage():
        lower_this_thread(4)
        worker = threading.Thread(target=lambda: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        worker.start()
        worker.join()

    thread = threading.Thread(target=stage)
    thread.start()
    thread.join()
    assert seen == [min(19, base + 4)]


def test_realtime_scheduling_takes_effect_or_says_why_for_the_calling_thread_only():
    seen = {}

    def controller_thread():
        me = threading.get_native_id()
        refused = realtime_scheduling(20)
        seen["refused"], seen["policy"] = refused, os.sched_getscheduler(me)
        seen["priority"] = os.sched_getparam(me).sched_priority

    thread = threading.Thread(target=controller_thread)
    thread.start()
    thread.join()
    if seen["refused"]:  # an ordinary user without an rtprio limit
        assert "not permitted" in seen["refused"].lower() and seen["policy"] == os.SCHED_OTHER
    else:
        assert (seen["policy"], seen["priority"]) == (os.SCHED_FIFO, 20)
    assert os.sched_getscheduler(threading.get_native_id()) == os.SCHED_OTHER  # only that thread changed


def _fifo_priorities(pid: int) -> list[int]:
    """The SCHED_FIFO priorities of a process's threads, highest first."""
    priorities = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            if os.sched_getscheduler(int(task)) == os.SCHED_FIFO:
                priorities.append(os.sched_getparam(int(task)).sched_priority)
        except OSError:  # the thread ended meanwhile
            pass
    return sorted(priorities, reverse=True)


@pytest.mark.parametrize("started_by", ["autostart", "a lifecycle client"])
def test_a_controller_run_alone_ticks_at_its_priority_takes_chunks_one_below_and_reports_two_below(
        ros_domain_id, started_by):
    """Only the threads that take the interpreter, which a tick may wait for (the ticks', the
    executor's: also the lock; the diagnostics'), are real-time; the middleware's threads are not.
    The same whether the node configures itself or a lifecycle manager configures it over its
    services once its executor spins."""
    root = Path(__file__).resolve().parents[1]
    environment = {**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"}
    autostart = str(started_by == "autostart").lower()
    process = subprocess.Popen([sys.executable, "-m", "embodied_ros.nodes.controller", "--ros-args", "-p",
                                f"autostart:={autostart}", "-p", "controller.realtime_priority:=30"],
                               env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if started_by == "a lifecycle client":
            _configure_and_activate_from_outside("controller")
        output = ""
        for line in process.stdout:
            output += line
            if "waiting for the first action chunk" in line or "not permitted" in line:
                break
        time.sleep(0.5)  # both threads have run their preparation by now
        priorities = _fifo_priorities(process.pid)
        alive = process.poll() is None
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert alive, output + process.stdout.read()
    if "not permitted" in output:
        assert priorities == [], output
    else:
        assert priorities == [30, 29, 28], output


def _configure_and_activate_from_outside(name: str) -> None:
    context = Context()
    rclpy.init(context=context)
    client = Node("lifecycle_client", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(client)
    spinner = SpinThread(executor, "lifecycle-client")
    spinner.start()
    try:
        configure_and_activate(client, [name], 60.0)
    finally:
        spinner.stop()
        client.destroy_node()
        rclpy.try_shutdown(context=context)
