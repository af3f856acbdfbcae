"""The composed container: every node of the graph in one process (`embodied-ros-container`).

    embodied-ros-container --config config/pi05.yaml [--bundle B] [--set KEY=VALUE ...] [--ros-args ...]

rclpy has no component containers for Python nodes, so this executable is how the graph runs
composed under `launch` (ComposedNode is C++-only). ROS arguments (namespace, remaps) apply to
every node. The container configures and activates its nodes itself; the controller, on the
realtime schedule, runs in a child process of the container (graph/composed.py says why). A graph that cannot start
(no bundle, a bad setting), or that stops serving its nodes (the controller's process ended), ends it with one line on
stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time

import rclpy
import rclpy.logging
import yaml
from rclpy.utilities import remove_ros_args

from embodied_ros.graph.composed import ComposedGraph
from embodied_ros.node_infra.config import GraphConfig, load_config
from embodied_ros.node_infra.paths import default_config
from embodied_ros.node_infra.spinning import StallWatch
from embodied_ros.nodes.run import ignore_ending_signals, stop_requested, stopped_by_signals
from embodied_ros.pipeline.stages import Runtime

PROG = "embodied-ros-container"


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
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
    argv = sys.argv if args is None else args
    options = parse_arguments(remove_ros_args(argv)[1:])
    overrides = {key: yaml.safe_load(value) for key, _, value in (item.partition("=") for item in options.set)}
    if options.bundle:
        overrides["bundle"] = options.bundle
    try:
        config = load_config(options.config or default_config(), {**overrides, "layout": "composed"})
    except (OSError, ValueError, yaml.YAMLError) as error:
        sys.exit(f"{PROG}: {_one_line(error)}")
    serve(config, argv)


def serve(config: GraphConfig, argv: list[str], runtime: Runtime | None = None) -> None:
    """Run the composed graph until SIGINT or SIGTERM, then deactivate every node (the controller
    leaves the arm holding) before the context goes down. `runtime`: an already loaded one. A graph
    that stops serving its nodes (a spinning thread failed, the controller's process ended) is
    stopped too, and ends the process with exit status 1."""
    failure = ""
    with stopped_by_signals(argv):
        logger = rclpy.logging.get_logger(PROG)
        ros_args = ros_arguments(argv)  # the controller's own process takes the same namespace and remaps
        graph = ComposedGraph(config, context=rclpy.get_default_context(), runtime=runtime,
                              cli_args=["--ros-args", *ros_args] if ros_args else ())
        watch = StallWatch(config.compute.stall_exit_s)
        try:
            graph.start()
            logger.info(f"graph active: {', '.join(graph.nodes)}")
            watch.start()
            while rclpy.ok() and not stop_requested() and not (failure := graph.failure()):
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        except (OSError, ValueError, RuntimeError) as error:
            failure = _one_line(error)
        finally:
            ignore_ending_signals()
            not_deactivated = graph.stop()
            watch.stop()  # only now: a teardown that hangs in the middleware ends the process too
            if not_deactivated:
                logger.error(f"could not deactivate {not_deactivated}")
            elif not failure:
                logger.info("every node deactivated")
    if failure:
        sys.exit(f"{PROG}: {failure}")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    main()
