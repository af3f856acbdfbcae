"""Controller node (layer 5 as a node): streams the newest action chunk to the arm at the actuator rate.

Commands go to a JointTrajectoryController (one-point JointTrajectory reached one period later)
or a forward command controller (Float64MultiArray); in a dry run on embodied/command_preview only.
It holds, and says why on /diagnostics at once, when the inputs are bad or stale, the chunk runs out
or breaks a limit (deploy/limits.py). It starts with a ramp from the measured position (deploy/ramp.py).
Every command is also published on embodied/commanded as a JointState stamped with its tick.
Lock-step, step k's commands are the ticks in [t_k, t_k+1), computed when step k's chunk and
input status are in; its StageTiming `sequence` counts the commands sent so far.

Free-running, it ticks on a thread of its own on the monotonic clock (with real-time scheduling
in a process of its own), as a ros2_control loop runs beside its executor: the executor only
takes chunks, input status and services, and a tick is due whether or not it wakes. A lock keeps
a tick and those callbacks apart. With use_sim_time (a replay's /clock) the ticks are a ROS timer instead.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from embodied_ros.deploy import ActionMapping, Command, CommandLogic, JointLimits, TimedChunk
from embodied_ros.deploy.continuation import merge
from embodied_ros.deploy.mapping import chunk_column_names
from embodied_ros.deploy.messages import commanded_joint_state, float64_multi_array, joint_trajectory
from embodied_ros.node_infra.priority import realtime_scheduling
from embodied_ros.node_infra.schedule import LockstepGate
from embodied_ros.node_infra.spinning import PeriodicThread
from embodied_ros.node_infra.stats import PeriodStats, diagnostic_status, reason_kind, status_values
from embodied_ros.node_infra.topics import (
    ACTION_CHUNK, COMMANDED, INPUT_STATUS, JOINT_STATES, command_topic,
)
from embodied_ros.node_infra.transport import msg_to_chunk
from embodied_ros.inputs import InputError, JointStateSelector
from embodied_ros.inputs.stamps import seconds_to_ns, time_to_ns
from embodied_ros.msg import ActionChunk
from embodied_ros.nodes.base import HARDWARE_ID, GraphNode
from embodied_ros.nodes.state_log import StateLog
from embodied_ros.pipeline.types import ActionChunkResult

DEACTIVATED = "controller deactivated"
TICK_SWITCH_INTERVAL_S = 0.0005
WAITING_FOR_FIRST_CHUNK = "waiting for the first action chunk"  # start-up: no warning
# the warnings about unset limits given in this process, each given once: a lock-step evaluation
# builds a controller per episode (diagnostics keep naming the unset limits: `unset_limits`)
_UNSET_LIMITS_WARNED: set[str] = set()


class ControllerNode(GraphNode):
    stage = "controller"
    executor_thread: int | None = None  # run alone: the native id of the thread spinning its executor

    def setup(self) -> None:
        settings = self.config.controller
        self.mapping = ActionMapping(settings.joints, settings.action_columns)
        self.period_ns = seconds_to_ns(1.0 / settings.rate_hz)
        self.lead_ns = self.period_ns if settings.output == "joint_trajectory" else 0
        self.ticks_per_step = max(1, round(self.config.schedule.step_period_s * settings.rate_hz))
        self.period_stats = PeriodStats(1.0 / settings.rate_hz)
        self.logic: CommandLogic | None = None
        self.selector: JointStateSelector | None = None
        self.joint_names: tuple[str, ...] = ()
        self._status: tuple[bool, str, int] | None = None
        self._last_chunk: ActionChunkResult | None = None
        self._queued: ActionChunkResult | None = None  # lock-step: the newest chunk queued to land
        self._landing: deque[tuple[int, ActionChunkResult]] = deque()  # lock-step: (step it lands, chunk)
        self._last_joint_state: JointState | None = None
        self.hold_reason: str | None = None
        self.state_log = StateLog(self.get_logger())
        self.commands_sent = self.holds = self.limited = 0
        self._timer = None
        self._ticker: PeriodicThread | None = None
        self._lock = threading.Lock()  # a tick, or a chunk or status taken by the executor, at a time
        if settings.joints:
            self._build_logic(settings.joints)
        self.gate = LockstepGate(1, {"action": self.config.schedule.period_of("action"), "status": 1})
        self._read_chunk = self.drive.reader(by_step=self._chunk_of_step, newest=self._newest_chunk)
        self._read_status = self.drive.reader(by_step=self._status_of_step, newest=self._newest_status)
        self.subscribe(ActionChunk, ACTION_CHUNK, self._on_chunk, self.drive.stage_qos())
        self.subscribe_newest(JointState, JOINT_STATES, self._on_joint_state,
                              self.drive.sensor_qos(self.config.inputs.reliability))
        self.subscribe(DiagnosticStatus, INPUT_STATUS, self._on_status, self.drive.status_qos())
        message_type = JointTrajectory if settings.output == "joint_trajectory" else Float64MultiArray
        self.command_publisher = self.lifecycle_publisher(
            message_type, command_topic(settings.output, settings.dry_run), self.drive.command_qos())
        self.commanded_publisher = self.lifecycle_publisher(JointState, COMMANDED, self.drive.command_qos())
        if self.executor_thread is not None:  # a lifecycle manager's configure, on that thread
            self._realtime(below=1, thread=self.executor_thread)

    def start(self) -> None:
        # no chunk at activation: that state reported and logged now, as a process's first diagnostics
        # report and first log line cost 7-17 ms (numpy's and rclpy's first calls), which the ticks
        # would otherwise pay, the first of them while streaming
        with self._lock:
            self._note_hold(WAITING_FOR_FIRST_CHUNK)
        period_s = 1.0 / self.config.controller.rate_hz
        if self.get_parameter("use_sim_time").value:  # lock-step (no timer: the steps command), or a replay
            self._timer = self.drive.timer(self, period_s, self._on_tick)
            return
        self._ticker = PeriodicThread(period_s, self._on_tick, f"{self.get_name()}-ticks", prepare=self._prepare_ticks)
        self._ticker.start()

    def _prepare_ticks(self) -> None:
        """On the ticks' thread, before the first tick: in a process of its own, real-time scheduling."""
        if not self.runs_alone:
            return
        # the process's other threads (the executor, diagnostics, the middleware's callbacks into
        # Python) hand the interpreter to a due tick within this, not the default 5 ms
        sys.setswitchinterval(TICK_SWITCH_INTERVAL_S)
        refused = self._realtime(below=0)
        if refused:
            priority = self.config.controller.realtime_priority
            self.get_logger().warning(f"real-time scheduling (SCHED_FIFO {priority}) not permitted: {refused}; "
                                      "ticking at normal priority (grant rtprio to this user, or set "
                                      "controller.realtime_priority: 0)")

    def prepare_spin_thread(self) -> None:
        """The executor's thread real-time too, one below the ticks: a tick waiting for the interpreter
        or the lock while that thread takes a chunk must not also wait for the model's processes to
        give it a core back (refused, the ticks' thread says so). Its priority comes with the
        configuration: set here when autostart configured the node already, else by configure."""
        self.executor_thread = threading.get_native_id()
        if self.configured:
            self._realtime(below=1, thread=self.executor_thread)

    def prepare_diagnostics_thread(self) -> None:
        """The diagnostics thread real-time too, below the executor's, for the same reason: it holds
        the interpreter while it builds a report."""
        if self.runs_alone:
            self._realtime(below=2)

    def _realtime(self, below: int, thread: int | None = None) -> str:
        """SCHED_FIFO for `thread` (default: the calling one), `below` under
        controller.realtime_priority (0: none asked); "" when done or not asked, else why not."""
        priority = self.config.controller.realtime_priority
        return realtime_scheduling(max(1, priority - below), thread) if priority > 0 else ""

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        if self._timer is not None:
            self.drop(self._timer)
            self._timer = None
        with self._lock:
            self._landing.clear()
            self._queued = None
            if self.logic is not None:  # leave the arm holding where it is; on activation start up again
                self._publish(self.logic.hold(self.now_ns(), DEACTIVATED), self.now_ns())
                self.logic.restart()

    # inputs -------------------------------------------------------------------------------------

    def _on_chunk(self, msg: ActionChunk) -> None:
        if not self.active:
            return
        try:
            chunk = msg_to_chunk(msg)
        except ValueError as error:
            self.stats.record_error(f"action chunk: {error}")
            chunk = None
        with self._lock:
            self._read_chunk(msg, chunk)

    def _chunk_of_step(self, msg: ActionChunk, chunk: ActionChunkResult | None) -> None:
        step = self.step_clock.step_of(time_to_ns(msg.header.stamp))
        if step is not None:
            self.gate.on_upstream("action", step, chunk)
            self._drain()

    def _newest_chunk(self, msg: ActionChunk, chunk: ActionChunkResult | None) -> None:
        if chunk is not None:
            self._accept(chunk, self.now_ns())

    def _on_joint_state(self, msg: JointState) -> None:
        self._last_joint_state = msg
        if self.selector is None:
            return  # joints are known once the first chunk names them
        try:
            self.logic.observe_positions(self.selector.select(msg, JOINT_STATES))
        except InputError:
            pass  # the observation node reports bad joint states; holding uses the last good one

    def _on_status(self, msg: DiagnosticStatus) -> None:
        values = status_values(msg)
        if not self.active or "step" not in values:
            return  # only the once-per-step input status counts
        with self._lock:
            self._read_status(values["step"], msg.level == DiagnosticStatus.OK, msg.message)

    def _status_of_step(self, step: str, ok: bool, reason: str) -> None:
        self.gate.on_upstream("status", int(step), (ok, reason))
        self._drain()

    def _newest_status(self, step: str, ok: bool, reason: str) -> None:
        self._set_status(ok, reason, self.now_ns())

    # commanding ---------------------------------------------------------------------------------

    def _on_tick(self) -> None:
        tick_ns = self.now_ns()  # the tick's time, before anything that may wait (the lock)
        self.period_stats.tick(time.monotonic_ns())
        with self._lock:
            self._command(tick_ns)
            self.poll_newest()  # the arm's newest joint state, for the next tick to hold at or ramp from

    def on_step(self, step: int) -> None:
        self.gate.on_step(step)
        self._drain()

    def _drain(self) -> None:
        while (ready := self.gate.next_ready()) is not None:
            step, inputs = ready
            step_ns = self.step_clock.stamp_of(step)
            started = time.perf_counter()
            if inputs["status"] is not None:
                self._set_status(*inputs["status"], step_ns)
            chunk = inputs["action"]
            if chunk is not None and chunk is not self._queued:
                self._queued = chunk
                executing = self.logic is not None and self.logic.chunk is not None
                delay = self.drive.landing_delay_steps if executing else 0
                self._landing.append((step + delay, chunk))
            while self._landing and self._landing[0][0] <= step:
                self._accept(self._landing.popleft()[1], step_ns)
            for tick in range(self.ticks_per_step):
                self._command(step_ns + tick * self.period_ns)
            compute_ms = (time.perf_counter() - started) * 1e3
            stamp_ns = chunk.stamp_ns if chunk is not None else 0
            staleness_ms = (step_ns - stamp_ns) / 1e6 if chunk is not None else float("nan")
            self.publish_timing(step, self.commands_sent, stamp_ns, compute_ms, staleness_ms, step_ns)

    def _command(self, tick_ns: int) -> None:
        if self.logic is None:
            self._note_hold(WAITING_FOR_FIRST_CHUNK)
            return
        command = self.logic.tick(tick_ns + self.lead_ns)
        if command is None:
            self._note_hold(self.logic.hold_reason(tick_ns + self.lead_ns) + " (no position known to hold)")
            return
        self._publish(command, tick_ns)
        self.limited += int(command.limited)
        self._note_hold(command.reason if command.holding else "")

    def _publish(self, command: Command | None, tick_ns: int) -> None:
        if command is None:
            return
        if self.config.controller.output == "joint_trajectory":
            points = command.positions
            later = self.config.controller.trajectory_points - 1
            if later and not command.holding:
                points = np.vstack([points, self.logic.upcoming(command.target_ns, later)])
            message = joint_trajectory(self.joint_names, points, tick_ns, self.lead_ns, self.period_ns)
        else:
            message = float64_multi_array(command.positions)
        self.command_publisher.publish(message)
        self.commanded_publisher.publish(commanded_joint_state(self.joint_names, command.positions, tick_ns))
        self.commands_sent += 1

    def _accept(self, chunk: ActionChunkResult, now_ns: int) -> None:
        self._last_chunk = chunk
        names = chunk_column_names(chunk)
        try:
            if self.logic is None:
                self._build_logic(self.mapping.joint_names(names))
            columns = self.mapping.column_index(names)
            timed = TimedChunk(chunk.stamp_ns, seconds_to_ns(chunk.action_period_s),
                               np.asarray(chunk.actions, dtype=np.float64)[:, columns])
            if self.config.rtc.enabled:
                timed = merge(timed, now_ns)
        except ValueError as error:
            self.stats.record_error(f"action chunk: {error}")
            return
        self.logic.accept_chunk(timed, now_ns)

    def _build_logic(self, joint_names: tuple[str, ...]) -> None:
        settings = self.config.controller
        limits = JointLimits.from_lists(len(joint_names), settings.position_lower, settings.position_upper,
                                        settings.max_velocity, joint_names, settings.max_jump)
        warning = (f"no limits in {', '.join(f'controller.{n}' for n in limits.unset())} for joints "
                   f"{list(joint_names)}: chunks are not checked against them")
        if limits.unset() and warning not in _UNSET_LIMITS_WARNED:
            _UNSET_LIMITS_WARNED.add(warning)
            self.get_logger().warning(warning)
        self.logic = CommandLogic(limits, self.period_ns, seconds_to_ns(settings.blend_s),
                                  seconds_to_ns(settings.input_timeout_s), seconds_to_ns(self.config.inputs.max_future_s),
                                  settings.ramp_s, settings.ramp_max_velocity)
        self.selector = JointStateSelector(joint_names)
        self.joint_names = tuple(joint_names)
        if self._status is not None:
            self.logic.set_input_status(*self._status)
        if self._last_joint_state is not None:
            self._on_joint_state(self._last_joint_state)

    def _set_status(self, ok: bool, reason: str, now_ns: int) -> None:
        self._status = (ok, reason, now_ns)
        if self.logic is not None:
            self.logic.set_input_status(ok, reason, now_ns)

    def _note_hold(self, reason: str) -> None:
        """The state of this tick: holding for `reason`, or streaming ("")."""
        new_state = self.hold_reason is None or reason_kind(reason) != reason_kind(self.hold_reason)
        self.hold_reason = reason
        if new_state:  # not a mere new age in the same reason
            self.holds += int(bool(reason))
            self.publish_diagnostics()  # a change of state is reported at once, not at the next period
        self.state_log.update(f"holding: {reason}" if reason else "streaming the action chunk",
                              "warning" if reason and reason != WAITING_FOR_FIRST_CHUNK else "info")

    # diagnostics --------------------------------------------------------------------------------

    def diagnostic_status(self) -> DiagnosticStatus:
        name = f"{self.get_fully_qualified_name()}: {self.stage}"
        values = {key: f"{value:.3f}" for key, value in self.period_stats.summary().items()}
        values.update(commands=str(self.commands_sent), holds=str(self.holds), limited=str(self.limited),
                      hold_reason=self.hold_reason or "", joints=",".join(self.joint_names),
                      dry_run=str(self.config.controller.dry_run).lower())
        if self.logic is not None:
            values["unset_limits"] = ",".join(self.logic.limits.unset())
        if self._last_chunk is not None:
            values["chunk_age_ms"] = f"{(self.now_ns() - self._last_chunk.stamp_ns) / 1e6:.1f}"
        if self.logic is not None and self.logic.chunk is not None:  # the observation behind the chunk it follows
            values["chunk_stamp_ns"] = str(self.logic.chunk.stamp_ns)
        if not self.active:
            return diagnostic_status(name, HARDWARE_ID, DiagnosticStatus.WARN, "inactive", values)
        if self.hold_reason:
            return diagnostic_status(name, HARDWARE_ID, DiagnosticStatus.WARN, f"holding: {self.hold_reason}",
                                     values)
        level = self.stats.level if self.stats.problem else DiagnosticStatus.OK
        streaming = "streaming (dry run: on the preview topic only)" if self.config.controller.dry_run else "streaming"
        return diagnostic_status(name, HARDWARE_ID, level, self.stats.problem or streaming, values)


def main(args=None) -> None:
    from embodied_ros.nodes.run import run_node

    run_node(ControllerNode, args)


if __name__ == "__main__":
    main()
