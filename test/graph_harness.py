"""Helpers for tests that run a free-running graph: a synthetic robot with fault switches and a
probe that records what the graph reports, each in its own rclpy context and domain."""

from __future__ import annotations

import threading
import time
from collections import Counter

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from trajectory_msgs.msg import JointTrajectory

from embodied_ros.graph.readiness import wait_for_state
from embodied_ros.node_infra.spinning import SpinThread
from embodied_ros.node_infra.stats import status_values
from embodied_ros.node_infra.topics import ACTION_CHUNK, COMMAND_TOPICS, DIAGNOSTICS, INPUT_STATUS, TIMING
from embodied_ros.inputs.stamps import time_to_ns
from embodied_ros.msg import ActionChunk, StageTiming
from embodied_ros.nodes.synthetic import SyntheticRobot


class FaultyRobot(SyntheticRobot):
    """The synthetic robot, plus switches that break its messages."""

    nan_joint: str | None = None
    truncated_camera: str | None = None
    stamp_offset_ns: int = 0  # stamps images and joint states ahead of (or behind) the clock

    def make_image(self, camera, stamp_ns):
        msg = super().make_image(camera, stamp_ns + self.stamp_offset_ns)
        if camera == self.truncated_camera:
            msg.data = msg.data[: len(msg.data) // 2]
        return msg

    def make_joint_state(self, stamp_ns):
        msg = super().make_joint_state(stamp_ns + self.stamp_offset_ns)
        if self.nan_joint is not None:
            msg.position[msg.name.index(self.nan_joint)] = float("nan")
        return msg


class Probe(Node):
    """Records controller diagnostics, input statuses, timings and commands as they arrive."""

    def __init__(self, **kwargs):
        super().__init__("probe", **kwargs)
        self.lock = threading.Lock()
        self.controller_states: list[tuple[int, str]] = []  # (stamp ns, message)
        self.input_statuses: list[tuple[int, bytes, str]] = []  # (stamp ns, level, message)
        self.timings: list[StageTiming] = []
        self.command_times: list[int] = []
        self.chunk_ends: list[tuple[int, int]] = []  # (arrival ROS ns, instant the chunk runs out)
        self.statuses: dict[str, DiagnosticStatus] = {}
        self.status_counts: Counter[str] = Counter()  # status name -> diagnostics received
        self.create_subscription(DiagnosticArray, DIAGNOSTICS, self._on_diagnostics, 50)
        self.create_subscription(DiagnosticStatus, INPUT_STATUS, self._on_input_status, 50)
        self.create_subscription(StageTiming, TIMING, lambda m: self._append(self.timings, m), 200)
        self.create_subscription(ActionChunk, ACTION_CHUNK, self._on_chunk, 50)
        self.create_subscription(JointTrajectory, COMMAND_TOPICS["joint_trajectory"],
                                 lambda m: self._append(self.command_times, time_to_ns(m.header.stamp)), 50)

    def _append(self, target, item):
        with self.lock:
            target.append(item)

    def _on_chunk(self, msg: ActionChunk) -> None:
        end_ns = time_to_ns(msg.observation_stamp) + msg.horizon * time_to_ns(msg.action_period)
        self._append(self.chunk_ends, (self.get_clock().now().nanoseconds, end_ns))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        with self.lock:
            for status in msg.status:
                self.statuses[status.name] = status
                self.status_counts[status.name] += 1
                if status.name.endswith(": controller"):
                    self.controller_states.append((time_to_ns(msg.header.stamp), status.message))

    def _on_input_status(self, msg: DiagnosticStatus) -> None:
        values = status_values(msg)
        if "step" in values:
            self._append(self.input_statuses, (int(values["stamp_ns"]), msg.level, msg.message))

    def status_of(self, suffix: str) -> DiagnosticStatus | None:
        """The newest diagnostics of the node whose status name ends with `suffix` (e.g. ": action")."""
        with self.lock:
            return next((s for name, s in self.statuses.items() if name.endswith(suffix)), None)

    def status_count(self, suffix: str) -> int:
        """How many diagnostics came from the node whose status name ends with `suffix`."""
        with self.lock:
            return sum(n for name, n in self.status_counts.items() if name.endswith(suffix))

    def states_between(self, start_ns: int, end_ns: int) -> list[str]:
        with self.lock:
            return [m for t, m in self.controller_states if start_ns <= t <= end_ns]

    def controller_message(self) -> str:
        with self.lock:
            return self.controller_states[-1][1] if self.controller_states else ""

    def first_controller_state(self, predicate, after_ns: int = 0) -> tuple[int, str] | None:
        with self.lock:
            return next(((t, m) for t, m in self.controller_states if t >= after_ns and predicate(m)), None)

    def first_input_error(self, after_ns: int = 0) -> tuple[int, bytes, str] | None:
        with self.lock:
            return next((s for s in self.input_statuses if s[0] >= after_ns and s[1] != DiagnosticStatus.OK), None)


def streaming_since(probe: Probe, since_ns: int) -> bool:
    return probe.first_controller_state(lambda m: m == "streaming", since_ns) is not None


def wait_for(condition, timeout_s: float, what: str) -> None:
    """Poll `condition` until true; fail with `what` after `timeout_s` (never hang)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.02)


class Outside:
    """The robot and the probe in their own context, executor and thread (the world outside the graph)."""

    def __init__(self, config, spec, domain_id: int, robot_class=FaultyRobot):
        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        cameras = {name: spec.image_size for name in (config.inputs.cameras or spec.camera_names)}
        state_joints = config.inputs.state_joints or spec.state_names
        command_joints = config.controller.joints or spec.action_names
        self.robot = robot_class(config, cameras, state_joints, command_joints, context=self.context)
        self.probe = Probe(context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.robot)
        self.executor.add_node(self.probe)
        self.spinner = SpinThread(self.executor, "outside")
        self.spinner.start()

    def now_ns(self) -> int:
        return self.robot.get_clock().now().nanoseconds

    def close(self) -> None:
        self.spinner.stop()
        self.robot.destroy_node()
        self.probe.destroy_node()
        rclpy.try_shutdown(context=self.context)



def configure_and_activate(node: Node, names, timeout_s: float, pump=lambda: time.sleep(0.05)) -> None:
    """What launch and `ros2 lifecycle set` do to node processes: request configure, then activate,
    over each node's change_state service. Each state is awaited over get_state, which asks again
    for an answer a node dropped (graph/readiness.py). Another thread spins `node`; `pump` waits a
    little (and may raise to give up)."""
    wait_for_state(node, names, "", timeout_s, pump, state="unconfigured")
    clients = [node.create_client(ChangeState, f"/{name}/change_state") for name in names]
    try:
        for transition, reached in ((Transition.TRANSITION_CONFIGURE, "inactive"),
                                    (Transition.TRANSITION_ACTIVATE, "active")):
            for client in clients:
                assert client.wait_for_service(timeout_sec=timeout_s), f"no {client.srv_name} service"
                client.call_async(ChangeState.Request(transition=Transition(id=transition)))
            wait_for_state(node, names, "", timeout_s, pump, state=reached)
    finally:
        for client in clients:
            node.destroy_client(client)
