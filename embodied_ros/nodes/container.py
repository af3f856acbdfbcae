"""The composed container: every node of the graph in one process (`embodied-ros-container`).

    embodied-ros-container --config config/pi05.yaml [--bundle B] [--set KEY=VALUE ...] [--ros-args ...]

rclpy has no component containers for Python nodes, so this executable is how the graph runs
composed under `launch` (ComposedNode is C++-only). ROS arguments (namespace, remaps) apply to
every node. The container configures and activates its nodes itself; the controller, on the
realtime schedule, runs in a child process of the container (graph/composed.py says why).
"""

from __future__ import annotations

import argparse
import time

import rclpy
import yaml
from rclpy.utilities import remove_ros_args

from embodied_ros.graph.composed import ComposedGraph
from embodied_ros.graph.config import load_config
from embodied_ros.graph.paths import default_config
from embodied_ros.graph.spinning import interrupts_ignored


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="embodied-ros-container", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="graph config YAML (default: config/pi05.yaml)")
    parser.add_argument("--bundle", help="model bundle file (overrides the config's `bundle`)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    return parser.parse_args(argv)


def ros_arguments(argv: list[str]) -> list[str]:
    """The ROS arguments of a command line: what follows each --ros-args, up to a lone --."""
    found, inside = [], False
    for token in argv[1:]:
        if token in ("--ros-args", "--"):
            inside = token == "--ros-args"
        elif inside:
            found.append(token)
    return found


def main(args=None) -> None:
    import sys

    argv = sys.argv if args is None else args
    options = parse_arguments(remove_ros_args(argv)[1:])
    overrides = {key: yaml.safe_load(value) for key, _, value in (item.partition("=") for item in options.set)}
    if options.bundle:
        overrides["bundle"] = options.bundle
    config = load_config(options.config or default_config(), {**overrides, "layout": "composed"})
    rclpy.init(args=argv)
    ros_args = ros_arguments(argv)  # the controller's own process takes the same namespace and remaps
    graph = ComposedGraph(config, context=rclpy.get_default_context(),
                          cli_args=["--ros-args", *ros_args] if ros_args else ())
    try:
        graph.start()
        while rclpy.ok():
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        with interrupts_ignored():  # launch's SIGINT, then its escalation, must not cut the teardown short
            graph.stop()
            rclpy.try_shutdown()


if __name__ == "__main__":
    main()
