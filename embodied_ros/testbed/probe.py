"""What the robot's host sees of a split graph, as JSON lines on stdout: run it in the robot's namespace.

    python -m embodied_ros.testbed.probe [--duration S]

One line per event, times in ns on this machine's clock (every namespace shares it):
  {"kind": "state", "t": T, "message": "streaming", "chunk_stamp": STAMP}  the controller's /diagnostics
                                                                         (STAMP: its chunk's observation)
  {"kind": "chunk", "t": ARRIVAL, "stamp": OBSERVATION_STAMP, "end": LAST_ROW_INSTANT}
  {"kind": "command", "t": TICK, "positions": [...]}                       embodied/commanded
It ends after `--duration` seconds (default: until SIGINT or SIGTERM); `testbed/recording.py`
reads the lines back.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import JointState

from embodied_ros.inputs.stamps import time_to_ns
from embodied_ros.msg import ActionChunk
from embodied_ros.node_infra.topics import ACTION_CHUNK, COMMANDED, DIAGNOSTICS, DIAGNOSTICS_QOS, stage_topic
from embodied_ros.node_infra.stats import status_values
from embodied_ros.node_infra.topics import command_qos, stage_qos


class RobotSideProbe(Node):
    def __init__(self, out=sys.stdout):
        super().__init__("testbed_probe")
        self.out = out
        self.create_subscription(DiagnosticArray, DIAGNOSTICS, self._on_diagnostics, DIAGNOSTICS_QOS)
        self.create_subscription(ActionChunk, ACTION_CHUNK, self._on_chunk, stage_qos(lockstep=False))
        self.create_subscription(JointState, COMMANDED, self._on_command, command_qos(lockstep=False))

    def _emit(self, **event) -> None:
        self.out.write(json.dumps(event) + "\n")
        self.out.flush()

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.endswith(": controller"):
                stamp = status_values(status).get("chunk_stamp_ns")
                self._emit(kind="state", t=time_to_ns(msg.header.stamp), message=status.message,
                           chunk_stamp=int(stamp) if stamp else None)

    def _on_chunk(self, msg: ActionChunk) -> None:
        if msg.horizon == 0:
            return
        stamp_ns = time_to_ns(msg.observation_stamp)
        self._emit(kind="chunk", t=time.time_ns(), stamp=stamp_ns,
                   end=stamp_ns + msg.horizon * time_to_ns(msg.action_period))

    def _on_command(self, msg: JointState) -> None:
        self._emit(kind="command", t=time_to_ns(msg.header.stamp), positions=list(msg.position))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=0.0, help="seconds to record (0: until stopped)")
    args = parser.parse_args(argv)
    stop = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.append(True))
    rclpy.init()
    node = RobotSideProbe()
    deadline = time.monotonic() + args.duration if args.duration > 0 else float("inf")
    try:
        while not stop and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
