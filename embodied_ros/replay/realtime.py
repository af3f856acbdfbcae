"""Realtime replay: the recorded inputs published at their recorded pace into the free-running graph.

A player node publishes every recorded frame, joint state and instruction when its (scaled) bag time
comes, stamped with the wall clock at that moment, so the graph sees a live robot; a recorder in the
same process takes the chunks, commands, stage timings and input statuses the graph publishes. Wall
stamps map back to bag time linearly: bag = bag_start + (wall - wall_start) * speed.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, replace

import numpy as np

from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.replay.episode import Episode
from embodied_ros.replay.record import ReplayRecord, StageRun
from embodied_ros.replay.steps import StateSelector
from embodied_ros.replay.topics import TopicMap


@dataclass(frozen=True)
class _Timeline:
    bag_start_ns: int
    wall_start_ns: int
    speed: float

    def to_bag(self, wall_ns: int) -> int:
        return self.bag_start_ns + round((wall_ns - self.wall_start_ns) * self.speed)

    def to_wall(self, bag_ns: int) -> int:
        return self.wall_start_ns + round((bag_ns - self.bag_start_ns) / self.speed)


def _playlist(episode: Episode, selector: StateSelector, first_ns: int):
    """(bag time, kind, key, value) of every input at or after `first_ns`, in time order."""
    events = [(int(t), 0, camera, i) for camera, stream in episode.cameras.items()
              for i, t in enumerate(stream.stamps_ns) if t >= first_ns]
    if episode.joint_states is not None and selector.columns is not None:
        joints = episode.joint_states
        for i, t in enumerate(joints.stamps_ns):
            values = joints.positions[i, selector.columns]
            if t >= first_ns and np.isfinite(values).all():
                events.append((int(t), 1, "joint_states", values))
    events.extend((max(int(t), first_ns), 2, "instruction", text) for t, text in episode.instructions)
    return sorted(events, key=lambda e: (e[0], e[1]))


class _Recorder:
    """Subscriptions of the replay: what the graph publishes, on the bag's time axis."""

    def __init__(self, node, config: GraphConfig, record: ReplayRecord, timeline_ref: list) -> None:
        from diagnostic_msgs.msg import DiagnosticStatus
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory

        from embodied_ros.node_infra import topics
        from embodied_ros.msg import ActionChunk, StageTiming

        self.record, self.timeline_ref, self.lock = record, timeline_ref, threading.Lock()
        self.frames_sent: dict[str, list[tuple[int, int]]] = {}  # camera -> [(wall stamp, frame bag stamp)]
        command_type = JointTrajectory if config.controller.output == "joint_trajectory" else Float64MultiArray
        node.create_subscription(ActionChunk, topics.ACTION_CHUNK, self._on_chunk, 50)
        node.create_subscription(command_type, topics.COMMAND_TOPICS[config.controller.output], self._on_command, 200)
        node.create_subscription(StageTiming, topics.TIMING, self._on_timing, 200)
        node.create_subscription(DiagnosticStatus, topics.INPUT_STATUS, self._on_status, 50)
        self._ok = DiagnosticStatus.OK

    closed = False  # set when playback is over: what the graph does on stale inputs is not the episode's
    newest_answered_ns = 0  # newest observation stamp a chunk has answered

    def _bag(self, wall_ns: int) -> int | None:
        """Bag time of a wall stamp; None outside the playback window (before it starts, after it ends)."""
        timeline = self.timeline_ref[0]
        if timeline is None or self.closed or wall_ns < timeline.wall_start_ns:
            return None
        return timeline.to_bag(wall_ns)

    def _on_chunk(self, msg) -> None:
        from embodied_ros.node_infra.transport import msg_to_chunk
        from embodied_ros.inputs.stamps import time_to_ns

        received = time.time_ns()
        chunk = msg_to_chunk(msg)
        if chunk is None or self._bag(received) is None or self._bag(chunk.stamp_ns) is None:
            return
        with self.lock:
            latency_ms = (received - chunk.stamp_ns) / 1e6
            self.newest_answered_ns = max(self.newest_answered_ns, chunk.stamp_ns)
            self.record.chunks.append((self._bag(time_to_ns(msg.header.stamp)),
                                       replace(chunk, stamp_ns=self._bag(chunk.stamp_ns))))
            self.record.end_to_end_ms.append(latency_ms)
            self.record.input_age_ms.append(latency_ms)

    def _on_command(self, msg) -> None:
        from embodied_ros.deploy.messages import command_positions

        received = time.time_ns()
        if self._bag(received) is not None:
            with self.lock:
                if not self.record.command_joints and hasattr(msg, "joint_names"):
                    self.record.command_joints = tuple(msg.joint_names)
                self.record.commands.append((self._bag(received), command_positions(msg)))

    def _on_timing(self, msg) -> None:
        from embodied_ros.inputs.stamps import time_to_ns

        produced, observed = self._bag(time_to_ns(msg.header.stamp)), self._bag(time_to_ns(msg.observation_stamp))
        if produced is None or observed is None or msg.sequence == 0:
            return
        with self.lock:
            self.record.stage_runs.append(StageRun(msg.stage, produced, observed, float(msg.compute_ms)))
            if msg.stage == "perception":
                for camera, sent in self.frames_sent.items():
                    index = bisect_right(sent, (time_to_ns(msg.observation_stamp), 2**63)) - 1
                    if index >= 0:
                        self.record.used_frames.setdefault(camera, []).append(sent[index][1])

    def _on_status(self, msg) -> None:
        values = {kv.key: kv.value for kv in msg.values}
        bag = self._bag(time.time_ns())
        if "step" in values and msg.level != self._ok and bag is not None:
            with self.lock:
                self.record.refused.append((bag, msg.message))


def run_realtime(episode: Episode, config: GraphConfig, selector: StateSelector, topic_map: TopicMap, options, *,
                 runtime, domain_id: int | None) -> ReplayRecord:
    """Start the composed graph free-running, play the episode into it, record what comes out."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    from embodied_ros.graph.composed import ComposedGraph

    config = replace(config, schedule=replace(config.schedule, mode="realtime"))
    record = ReplayRecord(mode="realtime", command_joints=tuple(config.controller.joints))
    context = Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = rclpy.create_node("replay_player", context=context)
    timeline_ref: list = [None]
    recorder = _Recorder(node, config, record, timeline_ref)
    player = _Player(node, episode, selector)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True, name="replay-player")
    spinner.start()
    graph = ComposedGraph(config, context=context, runtime=runtime)
    try:
        graph.start()
        period_ns = round(config.schedule.step_period_s * 1e9)
        last_sent_ns = player.play(timeline_ref, recorder, options.speed,
                                   None if options.max_steps is None else options.max_steps * period_ns)
        # wait for the chunk answering the last observation; later chunks reuse it on stale inputs
        deadline = time.monotonic() + 5.0
        while recorder.newest_answered_ns < last_sent_ns and time.monotonic() < deadline:
            time.sleep(0.01)
        recorder.closed = True
    finally:
        graph.stop()
        executor.shutdown(timeout_sec=5.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        spinner.join(timeout=5.0)
    with recorder.lock:
        record.chunks.sort(key=lambda item: item[0])
        record.steps = sum(1 for run in record.stage_runs if run.stage == "observation")
    return record


class _Player:
    def __init__(self, node, episode: Episode, selector: StateSelector) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import String

        from embodied_ros.node_infra import topics

        self.episode, self.selector, self.node = episode, selector, node
        qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)  # matches best-effort subscribers too
        self.images = {c: node.create_publisher(Image, topics.camera_topic(c), qos) for c in episode.cameras}
        self.joints = node.create_publisher(JointState, topics.JOINT_STATES, qos)
        self.instruction = node.create_publisher(String, topics.INSTRUCTION, topics.INSTRUCTION_QOS)

    def play(self, timeline_ref: list, recorder: _Recorder, speed: float, duration_ns: int | None) -> int:
        """Publish every input at its (scaled) recorded time; `duration_ns` bag time from the first frame.
        Returns the wall stamp of the last input published."""
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        from embodied_ros.inputs import array_to_image
        from embodied_ros.inputs.stamps import ns_to_time

        firsts = [int(s.stamps_ns[0]) for s in self.episode.cameras.values()]
        first_ns = max(firsts) if firsts else self.episode.start_ns
        events = _playlist(self.episode, self.selector, first_ns)
        if duration_ns is not None:
            events = [e for e in events if e[0] <= first_ns + duration_ns]
        timeline = _Timeline(first_ns, time.time_ns() + 200_000_000, speed)
        timeline_ref[0] = timeline
        for bag_ns, _, key, value in events:
            delay = (timeline.to_wall(bag_ns) - time.time_ns()) / 1e9
            if delay > 0:
                time.sleep(delay)
            stamp = time.time_ns()
            if key == "instruction":
                self.instruction.publish(String(data=value))
            elif key == "joint_states":
                msg = JointState(name=list(self.selector.state_names), position=[float(v) for v in value])
                msg.header.stamp = ns_to_time(stamp)
                self.joints.publish(msg)
            else:
                frame = self.episode.cameras[key]
                self.images[key].publish(array_to_image(frame.frames[value], "rgb8", stamp, frame_id=key))
                with recorder.lock:
                    recorder.frames_sent.setdefault(key, []).append((stamp, int(frame.stamps_ns[value])))
        return stamp
