"""Running nodes as processes: one node per process (`main` of each node module) and the shared
start-up sequence used by the composed container."""

from __future__ import annotations

import argparse
import sys
from typing import Iterable

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.utilities import remove_ros_args

from embodied_ros.graph.node_table import NODE_NAMES, node_spec
from embodied_ros.graph.spinning import spin_until_shutdown


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
    argv = sys.argv if args is None else args
    parse_node_arguments(node_class, argv)
    rclpy.init(args=argv)
    node = node_class()
    try:
        if node.get_parameter("autostart").value and bring_up([node]):
            node.get_logger().fatal("could not start; see the error above")
            sys.exit(1)
        executor = SingleThreadedExecutor()  # diagnostics have their own thread (nodes/base.py)
        executor.add_node(node)
        spin_until_shutdown(executor)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
