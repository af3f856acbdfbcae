"""The composed container: every node of the graph in one process (`embodied-ros-container`).

    embodied-ros-container --config config/pi05.yaml [--bundle B] [--set KEY=VALUE ...] [--ros-args ...]

rclpy has no component containers for Python nodes, so this executable is how the graph runs
composed under `launch` (ComposedNode is C++-only). ROS arguments (namespace, remaps) apply to
every node. The container configures and activates its nodes itself. A graph that cannot start
(no bundle, a bad setting) ends it with one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

import rclpy
import rclpy.logging
import yaml
from rclpy.signals import SignalHandlerOptions
from rclpy.utilities import remove_ros_args

from embodied_ros.graph.composed import ComposedGraph
from embodied_ros.graph.config import GraphConfig, load_config
from embodied_ros.graph.paths import default_config
from embodied_ros.graph.spinning import interrupts_ignored
from embodied_ros.pipeline.stages import Runtime

PROG = "embodied-ros-container"
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # launch stops a process with SIGINT, then SIGTERM


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="graph config YAML (default: config/pi05.yaml)")
    parser.add_argument("--bundle", help="model bundle file (overrides the config's `bundle`)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    return parser.parse_args(argv)


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
    leaves the arm holding) before the context goes down. `runtime`: an already loaded one."""
    # rclpy's own handlers would shut the context down from their thread at the first Ctrl-C,
    # racing the deactivation below; here a signal only ends the wait
    rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    previous = {number: signal.signal(number, signal.default_int_handler) for number in ENDING_SIGNALS}
    logger = rclpy.logging.get_logger(PROG)
    graph = ComposedGraph(config, context=rclpy.get_default_context(), runtime=runtime)
    failure = ""
    try:
        graph.start()
        logger.info(f"graph active: {', '.join(graph.nodes)}")
        while rclpy.ok():
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    except (OSError, ValueError, RuntimeError) as error:
        failure = _one_line(error)
    finally:
        with interrupts_ignored():  # launch's SIGINT, then its escalation, must not cut the teardown short
            not_deactivated = graph.stop()
            if not_deactivated:
                logger.error(f"could not deactivate {not_deactivated}")
            elif not failure:
                logger.info("every node deactivated")
            rclpy.try_shutdown()
        for number, handler in previous.items():
            signal.signal(number, handler)
    if failure:
        sys.exit(f"{PROG}: {failure}")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    main()
