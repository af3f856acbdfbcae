"""Observation node (layer 1 as a node): cameras, joint states and instruction -> one Observation.

Every step it checks each input (decodable, finite, fresh), publishes the Observation for the
stages and an input status (diagnostic_msgs/DiagnosticStatus on embodied/input_status) that the
controller holds on. Free-running, each step takes the newest image and joint state then (no
callback per message at the camera's or arm's rate; diagnostics give the inputs' ages as of that
step); lock-step, step k's observation is made from the inputs stamped at step k.
A publisher whose QoS cannot match an input's subscription is named (topic, policy, offered and
requested) in the reason the input is missing, and in a warning.
"""

from __future__ import annotations

import time
from functools import partial

from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.event_handler import QoSSubscriptionMatchedInfo, SubscriptionEventCallbacks
from rclpy.qos import DurabilityPolicy, QoSPolicyKind
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String

from embodied_ros.node_infra.stats import diagnostic_status
from embodied_ros.node_infra.topics import (
    INPUT_STATUS, INSTRUCTION, INSTRUCTION_ANY_QOS, INSTRUCTION_QOS, JOINT_STATES, camera_topic, stage_topic,
)
from embodied_ros.node_infra.transport import encode_output
from embodied_ros.inputs import ImageConversion, InputBuffer, InputError, JointStateSelector, image_to_rgb8
from embodied_ros.inputs.compressed import compressed_to_rgb8
from embodied_ros.inputs.instruction import NewestPerPublisher, instruction_from_msg
from embodied_ros.inputs.latest import InputSample
from embodied_ros.inputs.stamps import seconds_to_ns, time_to_ns
from embodied_ros.msg import StageOutput
from embodied_ros.nodes.base import HARDWARE_ID, GraphNode
from embodied_ros.nodes.input_qos import InputMismatches
from embodied_ros.nodes.state_log import StateLog
from embodied_ros.pipeline.stages import read_spec
from embodied_ros.pipeline.types import Observation


class ObservationNode(GraphNode):
    stage = "observation"

    def setup(self) -> None:
        if not (self.injected_runtime or self.config.bundle):
            raise ValueError("no bundle configured: set the `bundle` parameter to a model bundle file")
        spec = self.injected_runtime.spec if self.injected_runtime else read_spec(self.config.bundle)
        inputs = self.config.inputs
        self.cameras = inputs.cameras or spec.camera_names
        unknown = [c for c in self.cameras if c not in spec.camera_names]
        if unknown:
            raise ValueError(f"inputs.cameras {unknown} are not cameras of the model {list(spec.camera_names)}")
        state_joints = inputs.state_joints or spec.state_names
        if len(state_joints) != len(spec.state_names):
            raise ValueError(f"inputs.state_joints has {len(state_joints)} names, the model's state has "
                             f"{len(spec.state_names)} {list(spec.state_names)}")
        self.selector = JointStateSelector(state_joints)
        self.conversion = ImageConversion(inputs.mono_max or None)
        self.max_age_ns = seconds_to_ns(inputs.max_age_s)
        self.max_future_ns = seconds_to_ns(inputs.max_future_s)
        self.buffer = InputBuffer([*(_camera_input(c) for c in self.cameras), JOINT_STATES])
        self.instruction = ""
        self.instruction_error: InputError | None = InputError(f"{INSTRUCTION}: no message received yet")
        self.instruction_deliveries = NewestPerPublisher()
        self.instruction_received = False
        self.latched_instruction = None  # made once a latched instruction publisher is seen
        self.mismatches = InputMismatches(self, self.subscribe, self._note_mismatch, self._mismatch_hint)
        self.sequence = 0
        self.state_log = StateLog(self.get_logger(), initial="inputs ok")
        self.pending_steps: list[int] = []
        self._timer = None
        qos = self.drive.sensor_qos(inputs.reliability)
        image_type, self.to_rgb8 = _IMAGE_TRANSPORTS[inputs.image_transport]
        for camera in self.cameras:
            self.mismatches.subscribe(_camera_input(camera), image_type, camera_topic(camera, inputs.image_transport),
                                      partial(self._on_image, camera), qos, via=self.subscribe_newest)
        self.mismatches.subscribe(JOINT_STATES, JointState, JOINT_STATES, self._on_joint_state, qos,
                                  via=self.subscribe_newest)
        self.mismatches.subscribe(INSTRUCTION, String, INSTRUCTION, self._on_instruction, INSTRUCTION_ANY_QOS,
                                  matched=self._on_instruction_matched)
        self.output_publisher = self.lifecycle_publisher(StageOutput, stage_topic(self.stage), self.drive.stage_qos())
        self.status_publisher = self.lifecycle_publisher(DiagnosticStatus, INPUT_STATUS, self.drive.status_qos())

    def start(self) -> None:
        self._timer = self.drive.timer(self, self.config.schedule.step_period_s, self._on_timer)

    def stop(self) -> None:
        if self._timer is not None:
            self.drop(self._timer)
            self._timer = None

    # inputs -------------------------------------------------------------------------------------

    def _on_image(self, camera: str, msg: Image | CompressedImage) -> None:
        stamp_ns = time_to_ns(msg.header.stamp)
        try:
            sample = InputSample(stamp_ns, value=self.to_rgb8(msg, _camera_input(camera), self.conversion))
        except InputError as error:
            sample = InputSample(stamp_ns, error=error)
        self.buffer.put(_camera_input(camera), sample)
        self._drain()

    def _on_joint_state(self, msg: JointState) -> None:
        stamp_ns = time_to_ns(msg.header.stamp)
        try:
            sample = InputSample(stamp_ns, value=self.selector.select(msg, JOINT_STATES))
        except InputError as error:
            sample = InputSample(stamp_ns, error=error)
        self.buffer.put(JOINT_STATES, sample)
        self._drain()

    def _on_instruction(self, msg: String, info: dict) -> None:  # info: rclpy MessageInfo
        publisher = info.get("publisher_gid") or {}
        if not self.instruction_deliveries.is_new(bytes(publisher.get("data", b"")),
                                                  info.get("publication_sequence_number")):
            return  # a latched message that came by both subscriptions
        self.instruction_received = True
        try:
            self.instruction, self.instruction_error = instruction_from_msg(msg, INSTRUCTION), None
        except InputError as error:
            self.instruction_error = error
        if self.active:
            self._publish_status(str(self.instruction_error or ""), step=None, stamp_ns=self.now_ns())

    def _on_instruction_matched(self, event: QoSSubscriptionMatchedInfo) -> None:
        """Once a latched publisher matches, subscribe latched too: it replays what it published before."""
        if self.latched_instruction is not None or event.current_count_change <= 0:
            return
        topic = self.mismatches.requested[INSTRUCTION].topic
        if any(info.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
               for info in self.get_publishers_info_by_topic(topic)):
            # a publisher this one cannot reach (volatile) reaches the first: nothing to report
            quiet = SubscriptionEventCallbacks(incompatible_qos=lambda event: None)
            self.latched_instruction = self.subscribe(String, INSTRUCTION, self._on_instruction, INSTRUCTION_QOS,
                                                      quiet)

    def _note_mismatch(self, name: str, explanation: str) -> None:
        """Join a publisher that cannot reach the input to the reason it is missing or old, until it has a message."""
        if name != INSTRUCTION:
            self.buffer.note_silence(name, explanation)
        elif not self.instruction_received:
            self.instruction_error = InputError(f"{INSTRUCTION}: no message received yet ({explanation})")

    def _mismatch_hint(self, name: str, policy: QoSPolicyKind) -> str:
        if name != INSTRUCTION and self.drive.input_reliability_configurable and policy == QoSPolicyKind.RELIABILITY:
            return "set inputs.reliability: best_effort to accept it"
        return ""

    def _silent(self, name: str) -> bool:
        return not self.instruction_received if name == INSTRUCTION else name in self.buffer.silence_notes

    # free-running -------------------------------------------------------------------------------

    def _on_timer(self) -> None:
        self.poll_newest()
        self.mismatches.name_unnamed(self._silent)
        now_ns = self.now_ns()
        try:
            samples = self.buffer.newest_usable(self.buffer.names, now_ns, self.max_age_ns, self.max_future_ns)
            observation = self._observation(samples, max(s.stamp_ns for s in samples.values()))
        except InputError as error:
            self._refuse(str(error), step=0, now_ns=now_ns)
            return
        self._publish(observation, step=0, now_ns=now_ns)

    # lock-step ----------------------------------------------------------------------------------

    def on_step(self, step: int) -> None:
        self.pending_steps.append(step)
        self._drain()

    def _drain(self) -> None:
        while self.active and self.pending_steps:  # steps come in lock-step only
            step = self.pending_steps[0]
            stamp_ns = self.step_clock.stamp_of(step)
            try:
                samples = self.buffer.stamped_at(self.buffer.names, stamp_ns)
                if samples is None:
                    return  # this step's inputs are still on their way
                observation = self._observation(samples, stamp_ns)
            except InputError as error:
                self.pending_steps.pop(0)
                self._refuse(str(error), step, stamp_ns)
                continue
            self.pending_steps.pop(0)
            self._publish(observation, step, stamp_ns)

    # output -------------------------------------------------------------------------------------

    def _observation(self, samples: dict[str, InputSample], stamp_ns: int) -> Observation:
        if self.instruction_error is not None:
            raise self.instruction_error
        return Observation(stamp_ns=stamp_ns, images={c: samples[_camera_input(c)].value for c in self.cameras},
                           state=samples[JOINT_STATES].value, instruction=self.instruction)

    def _publish(self, observation: Observation, step: int, now_ns: int) -> None:
        started = time.perf_counter()
        self.sequence += 1
        store = self.store if self.config.by_reference else None
        self.output_publisher.publish(encode_output(self.stage, self.sequence, step, observation, now_ns, store,
                                                    self.config.transport))
        compute_ms = (time.perf_counter() - started) * 1e3
        staleness_ms = (now_ns - observation.stamp_ns) / 1e6
        self._publish_status("", step, now_ns)
        self.state_log.update("inputs ok")
        self.publish_timing(step, self.sequence, observation.stamp_ns, compute_ms, staleness_ms, now_ns)
        self.stats.record_run(time.monotonic_ns(), compute_ms, staleness_ms)

    def _refuse(self, reason: str, step: int, now_ns: int) -> None:
        self.stats.record_skip(reason, DiagnosticStatus.ERROR)
        self._publish_status(reason, step, now_ns)  # before the log line, which can take tens of ms
        if self.sequence:
            self.state_log.update(f"inputs refused: {reason}", "warning")
        else:  # start-up: nothing has come yet, or not everything
            self.state_log.update(f"waiting for inputs: {reason}", "info")
        self.drive.skipped(self, step, now_ns)

    def publish_skip_marker(self, step: int, now_ns: int) -> None:
        self.output_publisher.publish(encode_output(self.stage, 0, step, None, now_ns, None))
        super().publish_skip_marker(step, now_ns)

    def _publish_status(self, problem: str, step: int | None, stamp_ns: int) -> None:
        """OK or ERROR with the reason; `step` only on the once-per-step status the controller counts on."""
        values = {"stamp_ns": str(stamp_ns), "instruction": self.instruction}
        if step is not None:
            values["step"] = str(step)
        level = DiagnosticStatus.ERROR if problem else DiagnosticStatus.OK
        self.status_publisher.publish(diagnostic_status("inputs", HARDWARE_ID, level, problem or "ok", values))

    def extra_diagnostics(self) -> dict[str, str]:
        now_ns = self.now_ns()
        ages = {}
        for name in self.buffer.names:
            sample = self.buffer.latest(name)
            ages[f"age_ms/{name}"] = "never" if sample is None else f"{(now_ns - sample.stamp_ns) / 1e6:.1f}"
        return ages


# inputs.image_transport -> the camera message type and its decoder to (H, W, 3) uint8 RGB
_IMAGE_TRANSPORTS = {"raw": (Image, image_to_rgb8), "compressed": (CompressedImage, compressed_to_rgb8)}


def _camera_input(camera: str) -> str:
    """The camera's name in input errors and diagnostics."""
    return f"camera {camera}"


def main(args=None) -> None:
    from embodied_ros.nodes.run import run_node

    run_node(ObservationNode, args)


if __name__ == "__main__":
    main()
