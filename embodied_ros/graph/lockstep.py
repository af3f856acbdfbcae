"""Drive a graph step by step: deterministic, as fast as the stages compute.

    with LockstepGraph(config) as graph:
        for images, joints in episode:
            out = graph.step(images, joints, instruction="pick up the cube")
            out.chunk, out.commands, out.timings

`config.layout` separate runs one process per node instead (stage outputs serialized).
Step k publishes /clock = start + k * step_period, then the step's images and joint state stamped
with that time on the graph's input topics, and waits until every stage scheduled at step k has
reported (StageTiming), the action chunk of step k (if the action head runs) and the controller's
commands are in. The same inputs give the same chunks and commands, run after run, composed or
in separate processes.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String

from embodied_ros.graph.composed import ComposedGraph
from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.node_infra.node_table import graph_nodes
from embodied_ros.node_infra.paths import using_dds_environment
from embodied_ros.graph.processes import SeparateGraph
from embodied_ros.graph.readiness import wait_for_state
from embodied_ros.node_infra.schedule import StepClock, runs_on
from embodied_ros.node_infra.stats import status_values
from embodied_ros.node_infra.topics import (
    ACTION_CHUNK, CLOCK, COMMANDED, INPUT_STATUS, INSTRUCTION, INSTRUCTION_QOS, JOINT_STATES, TIMING,
    camera_topic, lockstep_qos,
)
from embodied_ros.node_infra.transport import msg_to_chunk
from embodied_ros.inputs.errors import InputError
from embodied_ros.inputs.compressed import rgb8_to_compressed
from embodied_ros.inputs.image import array_to_image
from embodied_ros.inputs.instruction import instruction_from_msg
from embodied_ros.inputs.stamps import ns_to_time, seconds_to_ns, time_to_ns
from embodied_ros.msg import ActionChunk, StageTiming
from embodied_ros.nodes.runtime_cache import acquire_runtime
from embodied_ros.pipeline.stages import Runtime
from embodied_ros.pipeline.types import ActionChunkResult


@dataclass(frozen=True)
class StepCommand:
    stamp_ns: int  # the controller tick it was sent for: the step's stamp + j / controller.rate_hz
    positions: np.ndarray  # in the controller's joint order


@dataclass
class StepOutput:
    step: int
    stamp_ns: int
    chunk: ActionChunkResult | None  # None when the action head did not run (or skipped) this step
    commands: list[StepCommand]  # the controller's commands of this step, in tick order
    timings: dict[str, StageTiming]  # stage -> its timing for this step (sequence 0: skipped)
    input_problem: str = ""  # why the observation was refused this step ("" when it was fine)


@dataclass
class _Inbox:
    timings: dict[int, dict[str, StageTiming]] = field(default_factory=dict)
    chunks: dict[int, ActionChunk] = field(default_factory=dict)
    statuses: dict[int, DiagnosticStatus] = field(default_factory=dict)
    commands: list[StepCommand] = field(default_factory=list)
    instruction_echo: tuple[str, str] | None = None  # the observation node's (instruction, problem) after a message


class LockstepGraph:
    def __init__(self, config: GraphConfig, *, runtime: Runtime | None = None, domain_id: int | None = None,
                 namespace: str = "", timeout_s: float = 60.0, log_dir: str | None = None):
        """The graph of `config` (composed in this process, or one process per node when
        `config.layout` is separate, each logging to `log_dir`), driven step by step.
        `runtime`: an already loaded runtime (composed nodes use it; default: the config's bundle)."""
        self.config = replace(config, schedule=replace(config.schedule, mode="lockstep"))
        self.runtime = runtime
        self.domain_id = domain_id
        self.namespace = namespace
        self.timeout_s = timeout_s
        self.log_dir = log_dir
        schedule = self.config.schedule
        self.clock = StepClock(seconds_to_ns(schedule.lockstep_start_s), seconds_to_ns(schedule.step_period_s))
        self.next_step = 0
        self.graph: ComposedGraph | SeparateGraph | None = None
        self.driver: Node | None = None
        self._commands_taken = 0
        self._instruction: str | None = None

    # lifetime -----------------------------------------------------------------------------------

    def __enter__(self) -> "LockstepGraph":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        runtime = acquire_runtime(self.config, self.runtime)
        self.spec = runtime.spec
        self.node_names = graph_nodes(self.spec.has_world_model)
        self.cameras = self.config.inputs.cameras or self.spec.camera_names
        self.state_joints = self.config.inputs.state_joints or self.spec.state_names
        separate = self.config.layout == "separate"
        with using_dds_environment() if separate else contextlib.nullcontext():  # the nodes' transports
            self.context = Context()
            rclpy.init(context=self.context, domain_id=self.domain_id)
            self.driver = Node("lockstep_driver", context=self.context, namespace=self.namespace)
        try:
            self.executor = SingleThreadedExecutor(context=self.context)
            self.executor.add_node(self.driver)
            self.inbox = _Inbox()
            self._make_topics()
            if separate:
                self.graph = SeparateGraph(self.config, self.node_names, namespace=self.namespace,
                                           domain_id=self.domain_id, log_dir=self.log_dir)
                self.graph.start()
                self._wait_until_active()
            else:
                self.graph = ComposedGraph(self.config, context=self.context, runtime=runtime,
                                           namespace=self.namespace)
                self.graph.start()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.graph is not None:
            self.graph.stop()
            self.graph = None
        if self.driver is not None:
            self.executor.shutdown()
            self.driver.destroy_node()
            self.driver = None
        if getattr(self, "context", None) is not None:
            rclpy.try_shutdown(context=self.context)
            self.context = None

    # stepping -----------------------------------------------------------------------------------

    def step(self, images: Mapping[str, np.ndarray | Image | CompressedImage],
             joint_state: JointState | Mapping[str, float] | np.ndarray, instruction: str | None = None) -> StepOutput:
        """Run one step on these inputs (RGB arrays or Image messages; with `inputs.image_transport:
        compressed`, CompressedImage messages, and arrays go as lossless PNG; the state as a
        JointState, {joint: position} or an array in the model's state order)."""
        if instruction is not None and instruction != self._instruction:
            self._send_instruction(instruction)
        step = self.next_step
        stamp_ns = self.clock.stamp_of(step)
        self.clock_publisher.publish(Clock(clock=ns_to_time(stamp_ns)))
        for camera in self.cameras:
            if camera not in images:
                raise ValueError(f"step {step}: no image for camera {camera!r} (cameras: {list(self.cameras)})")
            stamped = _stamped_compressed_image if self.compressed else _stamped_raw_image
            self.camera_publishers[camera].publish(stamped(images[camera], stamp_ns))
        self.joint_publisher.publish(self._joint_state(joint_state, stamp_ns))
        output = self._collect(step, stamp_ns)
        self.next_step += 1
        return output

    def run(self, observations: Sequence[tuple[Mapping, object]], instruction: str) -> list[StepOutput]:
        return [self.step(images, state, instruction) for images, state in observations]

    # internals ----------------------------------------------------------------------------------

    def _make_topics(self) -> None:
        node, qos = self.driver, lockstep_qos()
        self.clock_publisher = node.create_publisher(Clock, CLOCK, qos)
        transport = self.config.inputs.image_transport
        self.compressed = transport == "compressed"
        image_type = CompressedImage if self.compressed else Image
        self.camera_publishers = {c: node.create_publisher(image_type, camera_topic(c, transport), qos)
                                  for c in self.cameras}
        self.joint_publisher = node.create_publisher(JointState, JOINT_STATES, qos)
        self.instruction_publisher = node.create_publisher(String, INSTRUCTION, INSTRUCTION_QOS)
        inbox = self.inbox
        node.create_subscription(StageTiming, TIMING, self._on_timing, lockstep_qos(depth=100))
        node.create_subscription(ActionChunk, ACTION_CHUNK, self._on_chunk, qos)
        node.create_subscription(DiagnosticStatus, INPUT_STATUS, self._on_status, qos)
        node.create_subscription(JointState, COMMANDED, lambda msg: inbox.commands.append(
            StepCommand(time_to_ns(msg.header.stamp), np.asarray(msg.position, dtype=np.float64))), qos)

    def _on_timing(self, msg: StageTiming) -> None:
        self.inbox.timings.setdefault(msg.step, {})[msg.stage] = msg

    def _on_chunk(self, msg: ActionChunk) -> None:
        step = self.clock.step_of(time_to_ns(msg.header.stamp))
        if step is not None:
            self.inbox.chunks[step] = msg

    def _on_status(self, msg: DiagnosticStatus) -> None:
        values = status_values(msg)
        if "step" in values:
            self.inbox.statuses[int(values["step"])] = msg
        else:
            problem = msg.message if msg.level != DiagnosticStatus.OK else ""
            self.inbox.instruction_echo = (values.get("instruction", ""), problem)

    def _expected_stages(self, step: int) -> list[str]:
        return [name for name in self.node_names if runs_on(step, self.config.schedule.period_of(name))]

    def _collect(self, step: int, stamp_ns: int) -> StepOutput:
        expected = self._expected_stages(step)
        inbox = self.inbox

        def missing() -> list[str]:
            timings = inbox.timings.get(step, {})
            absent = [f"{name} timing" for name in expected if name not in timings]
            if "action" in expected and step not in inbox.chunks:
                absent.append("action chunk")
            if "controller" in timings:
                owed = timings["controller"].sequence - self._commands_taken
                if len(inbox.commands) < owed:
                    absent.append(f"commands ({len(inbox.commands)} of {owed})")
            return absent

        self._spin_until(lambda: not missing(), lambda: f"step {step}: still waiting for {missing()}")
        timings = inbox.timings.pop(step)
        owed = timings["controller"].sequence - self._commands_taken
        commands, inbox.commands = inbox.commands[:owed], inbox.commands[owed:]
        self._commands_taken += owed
        chunk_msg = inbox.chunks.pop(step, None)
        status = inbox.statuses.pop(step, None)
        problem = status.message if status is not None and status.level != DiagnosticStatus.OK else ""
        chunk = msg_to_chunk(chunk_msg) if chunk_msg is not None else None
        return StepOutput(step, stamp_ns, chunk, commands, timings, problem)

    def _send_instruction(self, text: str) -> None:
        """Publish the instruction and wait until the observation node has taken it (stripped of
        surrounding whitespace) or refused it (empty, too long: its observations are then refused),
        so the step that follows sees that state whatever the message timing."""
        try:
            taken, problem = instruction_from_msg(String(data=text), INSTRUCTION), ""
        except InputError as error:
            taken, problem = None, str(error)  # refused: the node keeps its previous instruction
        self.inbox.instruction_echo = None
        self.instruction_publisher.publish(String(data=text))

        def acknowledged() -> bool:
            echo = self.inbox.instruction_echo
            return echo is not None and echo[1] == problem and (taken is None or echo[0] == taken)

        shown = text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"
        self._spin_until(acknowledged, lambda: f"the observation node did not acknowledge the instruction {shown!r}")
        self._instruction = text

    def _joint_state(self, state, stamp_ns: int) -> JointState:
        if isinstance(state, JointState):
            msg = JointState(name=list(state.name), position=state.position, velocity=state.velocity,
                             effort=state.effort)
        elif isinstance(state, Mapping):
            msg = JointState(name=list(state), position=[float(v) for v in state.values()])
        else:
            values = np.asarray(state, dtype=np.float64).reshape(-1)
            if values.size != len(self.state_joints):
                raise ValueError(f"state has {values.size} values for {len(self.state_joints)} joints "
                                 f"{list(self.state_joints)}")
            msg = JointState(name=list(self.state_joints), position=values.tolist())
        msg.header.stamp = ns_to_time(stamp_ns)
        return msg

    def _spin_until(self, done, describe) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{describe()} after {self.timeout_s:.0f} s; is every node of the graph running?")
            self.executor.spin_once(timeout_sec=0.01)

    def _wait_until_active(self) -> None:
        """Separate processes: wait until every node reports the lifecycle state `active`."""
        wait_for_state(self.driver, self.node_names, self.namespace, self.timeout_s,
                       lambda: self.executor.spin_once(timeout_sec=0.01))


def _stamped_compressed_image(image: np.ndarray | CompressedImage, stamp_ns: int) -> CompressedImage:
    if isinstance(image, CompressedImage):
        msg = CompressedImage(format=image.format, data=image.data)
        msg.header.frame_id = image.header.frame_id
    else:
        msg = rgb8_to_compressed(np.asarray(image), "png")
    msg.header.stamp = ns_to_time(stamp_ns)
    return msg


def _stamped_raw_image(image: np.ndarray | Image, stamp_ns: int) -> Image:
    if isinstance(image, Image):
        msg = Image(height=image.height, width=image.width, encoding=image.encoding,
                    is_bigendian=image.is_bigendian, step=image.step, data=image.data)
        msg.header.frame_id = image.header.frame_id
    else:
        msg = array_to_image(np.asarray(image), "rgb8")
    msg.header.stamp = ns_to_time(stamp_ns)
    return msg
