"""Running nodes as processes: one node per process (`main` of each node module) and the shared
start-up sequence used by the composed container."""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
import threading
import time
from typing import Callable, Iterable

import rclpy
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.signals import SignalHandlerOptions
from rclpy.utilities import remove_ros_args

from embodied_ros.kernels.cpu.jit import share_cores_with_other_processes
from embodied_ros.node_infra.node_table import NODE_NAMES, node_spec
from embodied_ros.node_infra.config import ComputeConfig
from embodied_ros.node_infra.shared_memory import remove_dead_segments
from embodied_ros.node_infra.spinning import SpinThread, StallWatch

ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_STOP = threading.Event()  # set by the first ending signal, whether or not its KeyboardInterrupt arrives
# set while a stop is only recorded, not raised in the main thread: while it waits on _STOP
# (spin_until_stopped), and while it activates a node (an interrupt inside that transition would
# leave the node "activating", which cannot be deactivated: the controller would not hold the arm)
_STOP_ONLY_RECORDED = threading.Event()
PARENT_PID = "EMBODIED_ROS_PARENT_PID"  # set by graph/processes.py: its node processes end with it
PARENT_POLL_S = 0.5


def parse_node_arguments(node_class, argv: list[str]) -> None:
    """A node takes only ROS arguments: `--help` describes the node and exits, anything else is refused."""
    summary = (sys.modules[node_class.__module__].__doc__ or "").strip().partition("\n")[0]
    listed = node_class.stage in NODE_NAMES
    parser = argparse.ArgumentParser(
        prog=node_spec(node_class.stage).executable if listed else node_class.stage, description=summary,
        epilog="Settings are ROS parameters, e.g. --ros-args -p bundle:=model.gguf -p autostart:=true "
               "(every graph setting: `ros2 param describe`, docs/graph.md). Without autostart a lifecycle "
               "manager (launch, `ros2 lifecycle set`) configures and activates the node.")
    parser.parse_args(remove_ros_args(argv)[1:])


def bring_up(nodes: Iterable[LifecycleNode], before_activating: Callable[[], None] = lambda: None) -> list[str]:
    """Configure every node, then (after `before_activating`) activate each configured one, in
    order; the names of the nodes that failed."""
    nodes = list(nodes)
    failed = [node.get_name() for node in nodes if node.trigger_configure() != TransitionCallbackReturn.SUCCESS]
    before_activating()
    for node in nodes:
        if node.get_name() not in failed and node.trigger_activate() != TransitionCallbackReturn.SUCCESS:
            failed.append(node.get_name())
    return failed


@contextlib.contextmanager
def stopped_by_signals(argv: list[str]):
    """rclpy for a process that SIGINT or SIGTERM ends (launch sends both, in turn): either raises
    KeyboardInterrupt in the main thread while the context stays up until the block ends, so the
    process deactivates its nodes first (the controller leaves the arm holding). rclpy's own
    handlers would shut the context down from their thread at once, racing that deactivation.
    For the main function of a process: once the block ends both signals stay ignored, so a late
    one (the terminal's Ctrl-C after launch's SIGINT) cannot turn exit status 0 into a signal's.
    First it removes the shared-memory segments of Fast DDS participants whose process is gone."""
    removed, freed = remove_dead_segments()
    rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    if removed:
        rclpy.logging.get_logger("embodied_ros").info(
            f"removed {removed} shared-memory segments of ended processes ({freed / 2**20:.0f} MiB)")
    _STOP.clear()
    _STOP_ONLY_RECORDED.clear()
    for number in ENDING_SIGNALS:
        signal.signal(number, _stop_once)
    _end_with_parent()
    try:
        yield
    finally:
        ignore_ending_signals()
        rclpy.try_shutdown()
        for number in ENDING_SIGNALS:  # Python's exit would put back the default handlers, that end the process
            signal.signal(number, signal.SIG_IGN)


def _end_with_parent() -> None:
    """A node process a graph of this project started (PARENT_PID in its environment) stops as on
    SIGTERM once that parent is gone, even killed by SIGKILL: the controller deactivates and holds
    instead of running on, orphaned, with nothing upstream."""
    parent = os.environ.get(PARENT_PID, "")
    if not parent.isdigit():
        return

    def watch() -> None:
        _wait_for_parent_exit(int(parent))
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _wait_for_parent_exit(parent: int) -> None:
    """Returns once this process's parent `parent` is gone. The wait is on a pidfd, with the
    interpreter released and no wake until then (a poll's wakes would take the interpreter from a
    real-time controller tick); where pidfds are missing (Linux before 5.3), a poll every PARENT_POLL_S."""
    try:
        pidfd = os.pidfd_open(parent)
    except ProcessLookupError:
        return
    except OSError:  # no pidfds here (ENOSYS), or not allowed
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        return
    try:
        if os.getppid() == parent:  # the pidfd is of this parent, not of a process given its number since
            select.select([pidfd], [], [])  # readable once it has exited
    finally:
        os.close(pidfd)


STALL_LIMIT = "compute.stall_exit_s"

class SpinFailed(RuntimeError):
    """The thread spinning a process's executor ended with an error."""


def spin_until_stopped(executor: Executor, prepare: Callable[[], None] = lambda: None) -> None:
    """Spin `executor` until SIGINT or SIGTERM (or the context's shutdown), in the main thread's
    process under `stopped_by_signals`. The executor spins on a thread of its own, waiting for work
    with no timeout (node_infra/spinning.py); the main thread, where Python runs signal handlers,
    sleeps on the stop, so a signal ends the spin at once and never lands inside a callback or
    rclpy's C++ side. `prepare` runs on the spinning thread first. SpinFailed when that thread
    ended with an error: the process must not go on, or end, as if it served its nodes."""
    spinner = SpinThread(executor, "spin", on_exit=_STOP.set, prepare=prepare)
    _STOP_ONLY_RECORDED.set()
    try:
        spinner.start()
        _STOP.wait()
    finally:
        _STOP_ONLY_RECORDED.clear()
        spinner.stop()
    if spinner.failure:
        raise SpinFailed(spinner.failure)


def stop_requested() -> bool:
    """True once SIGINT or SIGTERM asked this process to stop."""
    return _STOP.is_set()


def _stop_once(signum, frame) -> None:
    """The first SIGINT or SIGTERM stops the process; any later one is ignored. The stop is
    recorded; the main thread is interrupted too unless _STOP_ONLY_RECORDED, e.g. while a node
    configures (loading a bundle, compiling kernels)."""
    ignore_ending_signals()
    _STOP.set()
    if not _STOP_ONLY_RECORDED.is_set():
        raise KeyboardInterrupt


def _ignore(signum, frame) -> None:
    """A signal while the process stops already."""


def ignore_ending_signals() -> None:
    """From here on SIGINT and SIGTERM are ignored: the process is stopping, and a second signal
    must not cut its teardown short. (A Python handler that does nothing, not SIG_IGN: a signal
    already pending would find SIG_IGN and print "ignored due to race condition".)"""
    for number in ENDING_SIGNALS:
        signal.signal(number, _ignore)


def run_node(node_class, args=None) -> None:
    """Spin one node until SIGINT or SIGTERM, then deactivate it; with the `autostart` parameter it
    configures and activates itself. A spinning thread that failed ends the process with exit
    status 1 once the node is deactivated."""
    argv = sys.argv if args is None else args
    parse_node_arguments(node_class, argv)
    share_cores_with_other_processes()
    failure = ""
    watch = None  # made once the node is: loading holds the interpreter
    with stopped_by_signals(argv):
        node = None
        try:
            node = node_class()
            node.runs_alone = True
            if node.get_parameter("autostart").value and bring_up([node], _STOP_ONLY_RECORDED.set):
                node.get_logger().fatal("could not start; see the error above")
                sys.exit(1)
            executor = SingleThreadedExecutor()  # diagnostics have their own thread (nodes/base.py)
            executor.add_node(node)
            watch = StallWatch(node.get_parameter(STALL_LIMIT).value if node.has_parameter(STALL_LIMIT)
                               else ComputeConfig().stall_exit_s)  # a node of the graph, or another
            watch.start()
            spin_until_stopped(executor, getattr(node, "prepare_spin_thread", lambda: None))
        except KeyboardInterrupt:
            pass
        except SpinFailed as error:
            failure = str(error)
        finally:
            ignore_ending_signals()
            if getattr(node, "active", False):
                if rclpy.ok() and node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS:
                    node.get_logger().info("deactivated")
                else:
                    node.get_logger().error("could not deactivate")
            if node is not None:
                node.destroy_node()
            if watch is not None:
                watch.stop()  # only now: a teardown that hangs in the middleware ends the process too
    if failure:
        sys.exit(f"{node_class.stage}: {failure}")
