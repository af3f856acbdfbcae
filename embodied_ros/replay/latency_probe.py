"""A ROS node that measures a running graph from outside, as the latency tests do.

It publishes stamped observations (every camera and the joint state of one tick carry the same
header stamp, so the ActionChunk's observation_stamp tells which tick it answers), records when each
chunk arrives (once the controller streams: chunks before its first command are not counted), and
records the arrival times of the controller's commands and each stage's compute times. The graph may have been
started by `ros2 launch` (launch_testing) or by the project's CLI (pytest twins); the probe does not
care, which is what makes the two tests the same test.
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

import numpy as np

from embodied_ros.inputs.stamps import reception_ns
from embodied_ros.replay.latency import LatencyBudget, LatencyMeasurement, end_to_end_ms
from embodied_ros.sim.robot import render_view
from embodied_ros.replay.topics import TopicMap


class LatencyProbe:
    def __init__(self, cameras: Mapping[str, tuple[int, int]], joint_names: Sequence[str], *,
                 topic_map: TopicMap | None = None, command_output: str = "joint_trajectory",
                 instruction: str = "pick up the red cube", context=None, namespace: str = "") -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import Float64MultiArray, String
        from trajectory_msgs.msg import JointTrajectory

        from embodied_ros.node_infra.topics import TIMING
        from embodied_ros.msg import ActionChunk, StageTiming

        self.cameras = dict(cameras)
        self.joint_names = tuple(joint_names)
        self.instruction = instruction
        self.topics = topic_map or TopicMap.for_cameras(self.cameras)
        self.node = rclpy.create_node("embodied_latency_probe", namespace=namespace, context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        out_qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)  # matches either kind of subscriber
        in_qos = QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT)  # matches either kind of publisher
        self._image_pubs = {name: self.node.create_publisher(Image, self._rel(self.topics.cameras[name]), out_qos)
                            for name in self.cameras}
        self._joint_pub = self.node.create_publisher(JointState, self._rel(self.topics.joint_states), out_qos)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)  # the graph's instruction is latched
        self._instruction_pub = self.node.create_publisher(String, self._rel(self.topics.instruction), latched)
        command_type, command_topic = ((JointTrajectory, self.topics.trajectory) if command_output == "joint_trajectory"
                                       else (Float64MultiArray, self.topics.array))
        self._chunk_topic = self._rel(self.topics.action_chunk)
        self.node.create_subscription(ActionChunk, self._chunk_topic, self._on_chunk, in_qos)
        self.node.create_subscription(command_type, self._rel(command_topic), self._on_command, in_qos)
        self.node.create_subscription(StageTiming, self._rel(TIMING), self._on_timing, in_qos)
        self.warmup_chunks = 0  # stage timings count once this many chunks answered the probe
        self.sent: set[int] = set()
        self.measurement = LatencyMeasurement()
        self._ticks = 0

    @staticmethod
    def _rel(topic: str) -> str:
        """Topics relative to the probe's namespace, so a namespaced graph is probed in its namespace."""
        return topic.lstrip("/")

    def _on_chunk(self, msg) -> None:
        received = time.time_ns()
        if not self.measurement.command_stamps_ns:
            return  # the controller is not streaming yet (it may run in a process that starts later)
        observation = int(msg.observation_stamp.sec) * 1_000_000_000 + int(msg.observation_stamp.nanosec)
        latency = end_to_end_ms(self.sent, observation, received)
        if latency is None:
            self.measurement.unmatched_chunks += 1
        else:
            self.measurement.end_to_end_ms.append(latency)

    def _on_command(self, msg, info) -> None:
        received = reception_ns(info)
        header = getattr(msg, "header", None)
        sent = int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec) if header is not None else 0
        self.measurement.command_stamps_ns.append(sent or received)
        self.measurement.command_arrivals_ns.append(received)

    def _on_timing(self, msg) -> None:
        if msg.sequence > 0 and len(self.measurement.end_to_end_ms) >= self.warmup_chunks:
            self.measurement.stage_compute_ms.setdefault(msg.stage, []).append(float(msg.compute_ms))

    def publish_observation(self) -> int:
        """Publish one stamped observation (images, joint state, and the instruction); returns its stamp."""
        from builtin_interfaces.msg import Time
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        from embodied_ros.inputs import array_to_image

        stamp = time.time_ns()
        positions = 0.5 * np.sin(0.3 * self._ticks + np.arange(len(self.joint_names)))
        for view, (name, size) in enumerate(self.cameras.items()):
            image = array_to_image(render_view(view, positions, size), "rgb8", stamp, frame_id=name)
            self._image_pubs[name].publish(image)
        joint_state = JointState(name=list(self.joint_names), position=positions.tolist())
        joint_state.header.stamp = Time(sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000)
        self._joint_pub.publish(joint_state)
        self._instruction_pub.publish(String(data=self.instruction))
        self.sent.add(stamp)
        self._ticks += 1
        return stamp

    def wait_for_graph(self, timeout_s: float) -> None:
        """Spin until the graph subscribes to every input and publishes chunks; TimeoutError names what is missing."""
        deadline = time.monotonic() + timeout_s
        while True:
            missing = [pub.topic_name for pub in (*self._image_pubs.values(), self._joint_pub, self._instruction_pub)
                       if pub.get_subscription_count() == 0]
            if not self.node.count_publishers(self.node.resolve_topic_name(self._chunk_topic)):
                missing.append(f"{self._chunk_topic} (no publisher)")
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"graph not up after {timeout_s:.0f} s; nobody on: {', '.join(missing)}")
            self.executor.spin_once(timeout_sec=0.05)

    def measure(self, budget: LatencyBudget) -> LatencyMeasurement:
        """Publish at the budget's input rate until enough chunks came back (or the timeout); the result
        holds what was measured either way, so a failing run still reports its numbers."""
        deadline = time.monotonic() + budget.timeout_s
        self.warmup_chunks = budget.warmup_chunks
        self.wait_for_graph(budget.timeout_s)
        period = 1.0 / budget.input_rate_hz
        next_tick = time.monotonic()
        wanted = budget.chunks + budget.warmup_chunks
        while len(self.measurement.end_to_end_ms) < wanted and time.monotonic() < deadline:
            if time.monotonic() >= next_tick:
                self.publish_observation()
                next_tick += period
            self.executor.spin_once(timeout_sec=max(0.0, min(0.005, next_tick - time.monotonic())))
        return self.measurement

    def close(self) -> None:
        self.executor.remove_node(self.node)
        self.node.destroy_node()
        self.executor.shutdown()


def probe_inputs(config, spec=None) -> tuple[dict[str, tuple[int, int]], tuple[str, ...]]:
    """Cameras (name -> image size) and joint names a graph with this config (and model) listens to."""
    if spec is None:
        from embodied_ros.nodes.runtime_cache import acquire_runtime

        spec = acquire_runtime(config).spec
    cameras = {name: tuple(spec.image_size) for name in (config.inputs.cameras or spec.camera_names)}
    state = tuple(config.inputs.state_joints or spec.state_names)
    commanded = tuple(config.controller.joints or spec.action_names)
    # a robot reports the commanded joints too: the controller holds them when a chunk runs out
    return cameras, state + tuple(name for name in commanded if name not in state)


def measure_latency(budget: LatencyBudget, config, *, spec=None, domain_id: int | None = None, namespace: str = "",
                    stage_alone_ms: dict[str, float] | None = None):
    """Probe a running graph (started by whoever: launch, `embodied-ros up`, a test) against `budget`.
    `spec`: the model's ModelSpec (default: from the config's bundle). `stage_alone_ms`: each stage's
    call timed alone (`embodied_ros.pipeline.timing.stage_times_ms`), for the budget's stage ratios.
    Prints the measured numbers and returns the LatencyResult; the caller asserts `result.passed`."""
    import rclpy
    from rclpy.context import Context

    from embodied_ros.replay.latency import evaluate

    cameras, joints = probe_inputs(config, spec)
    context = Context()
    rclpy.init(context=context, domain_id=domain_id)
    probe = LatencyProbe(cameras, joints, command_output=config.controller.output, context=context,
                         namespace=namespace)
    try:
        measurement = probe.measure(budget)
    except TimeoutError as error:
        measurement = probe.measurement
        measurement.problem = str(error)
    finally:
        probe.close()
        rclpy.try_shutdown(context=context)
    measurement.stage_alone_ms = dict(stage_alone_ms or {})
    result = evaluate(measurement, budget)
    print(result.report(), flush=True)
    return result
