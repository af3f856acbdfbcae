"""Running nodes as processes: one node per process (`main` of each node module) and the shared
start-up sequence used by the composed container."""

from __future__ import annotations

import sys
from typing import Iterable

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn


def bring_up(nodes: Iterable[LifecycleNode]) -> list[str]:
    """Configure then activate each node, in order; the names of the nodes that failed."""
    failed = []
    for node in nodes:
        if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            failed.append(node.get_name())
            continue
        if node.trigger_activate() != TransitionCallbackReturn.SUCCESS:
            failed.append(node.get_name())
    return failed


def run_node(node_class, args=None) -> None:
    """Spin one node until shutdown; with the `autostart` parameter it configures and activates itself."""
    rclpy.init(args=args)
    node = node_class()
    try:
        if node.get_parameter("autostart").value and bring_up([node]):
            node.get_logger().fatal("could not start; see the error above")
            sys.exit(1)
        executor = SingleThreadedExecutor()  # diagnostics have their own thread (nodes/base.py)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
