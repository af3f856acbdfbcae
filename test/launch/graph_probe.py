"""Watches a graph that `ros2 launch` started, from outside, for test/launch/real_ros_checks.sh.

    python3 test/launch/graph_probe.py --config pi05.yaml --layout separate [--timeout 150] [--window 3]

Waits until every node of the graph is active, then until the controller's commands arrive at the
configured rate (at least `--min-rate` of it over `--window` seconds), and checks that the robot's
joint states change (the synthetic arm follows the commands). Prints one JSON line with the times
from its own start; exit status 0 when all three hold.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState

from embodied_ros.graph.composed import graph_nodes
from embodied_ros.node_infra.config import load_config
from embodied_ros.graph.monitor import GraphMonitor
from embodied_ros.graph.readiness import wait_for_state
from embodied_ros.node_infra.spinning import SpinThread
from embodied_ros.node_infra.topics import JOINT_STATES
from embodied_ros.pipeline.stages import read_spec
from embodied_ros.share import share_path

MOVED_RAD = 1e-3  # a joint that changed by more than this has moved


class JointWatch:
    def __init__(self, node):
        self.first: dict[str, float] = {}
        self.latest: dict[str, float] = {}
        node.create_subscription(JointState, JOINT_STATES, self._on_state, qos_profile_sensor_data)

    def _on_state(self, msg: JointState) -> None:
        positions = dict(zip(msg.name, msg.position))
        if not self.first:
            self.first = positions
        self.latest = positions

    def largest_change(self) -> float:
        changes = [abs(self.latest[name] - value) for name, value in self.first.items() if name in self.latest]
        return float(max(changes, default=0.0))


def probe(config_path: Path, layout: str, timeout_s: float, window_s: float, min_rate: float) -> dict:
    started = time.monotonic()
    config = load_config(config_path)
    # launch starts one process per node in the separate layout (the world node too, idle for models
    # without a world model); the container hosts only the nodes the model needs
    names = graph_nodes(True) if layout == "separate" else graph_nodes(read_spec(config.bundle).has_world_model)
    context = Context()
    rclpy.init(context=context)
    monitor = GraphMonitor(config.controller.rate_hz, config.controller.output, recent_s=window_s, context=context)
    joints = JointWatch(monitor)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(monitor)
    spinner = SpinThread(executor, "probe")
    spinner.start()
    result = {"layout": layout, "config": config_path.name, "active_s": None, "streaming_s": None,
              "command_rate_hz": 0.0, "joint_change": 0.0, "problem": ""}
    deadline = started + timeout_s
    try:
        try:
            wait_for_state(monitor, names, "", timeout_s, lambda: time.sleep(0.05))
        except TimeoutError as error:
            result["problem"] = str(error)
            return result
        result["active_s"] = round(time.monotonic() - started, 2)
        while time.monotonic() < deadline:
            time.sleep(0.25)
            rate = monitor.command_summary(window_s)["rate_hz"]
            result["command_rate_hz"] = round(rate, 1)
            if rate >= min_rate * config.controller.rate_hz and time.monotonic() - started - result["active_s"] >= window_s:
                result["streaming_s"] = round(time.monotonic() - started, 2)
                break
        else:
            result["problem"] = (f"commands at {result['command_rate_hz']} Hz after {timeout_s:.0f} s, "
                                 f"want {min_rate * config.controller.rate_hz:.0f} Hz")
            return result
        result["joint_change"] = round(joints.largest_change(), 4)
        if not result["joint_change"] > MOVED_RAD:
            result["problem"] = f"the joint states did not change (largest change {result['joint_change']})"
        return result
    finally:
        spinner.stop()
        monitor.destroy_node()
        rclpy.try_shutdown(context=context)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="graph config: a path, or a file name in share/embodied_ros/config")
    parser.add_argument("--layout", choices=["composed", "separate"], required=True)
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds to reach every check")
    parser.add_argument("--window", type=float, default=3.0, help="seconds over which the command rate is measured")
    parser.add_argument("--min-rate", type=float, default=0.9, help="fraction of controller.rate_hz that counts as at rate")
    options = parser.parse_args()
    config_path = Path(options.config)
    if not config_path.is_file():
        config_path = share_path("config", options.config)
    result = probe(config_path, options.layout, options.timeout, options.window, options.min_rate)
    print(json.dumps(result), flush=True)
    return 0 if not result["problem"] else 1


if __name__ == "__main__":
    sys.exit(main())
