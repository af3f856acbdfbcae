"""A pipeline stage as a node: reads upstream outputs, runs its runtime call on schedule, publishes.

Free-running, the stage runs on the newest upstream outputs at most once per `period` steps, as
soon as new input arrives (`FreeRunTrigger`), or on a fallback timer when upstreams fall silent.
It skips when nothing changed upstream, or when the observation behind its inputs is too old.
Lock-step, it runs each of its steps once every upstream output scheduled for that step is in.
"""

from __future__ import annotations

import contextlib
import threading
import time
from functools import partial
from typing import Any

from rclpy.timer import Timer

from embodied_ros.node_infra.node_table import NODE_NAMES, upstream_of
from embodied_ros.node_infra.priority import lower_this_thread
from embodied_ros.node_infra.schedule import FreeRunTrigger, LockstepGate
from embodied_ros.node_infra.topics import stage_topic
from embodied_ros.node_infra.transport import decode_output, encode_output
from embodied_ros.inputs.stamps import seconds_to_ns, time_to_ns
from embodied_ros.msg import StageOutput
from embodied_ros.nodes.base import GraphNode
from embodied_ros.nodes.runtime_cache import acquire_runtime


class ModelCallTurns:
    """compute.stage_turns: one model call at a time in this process. Of the stages waiting for their
    turn, the one furthest down the pipeline goes first, and no position takes two turns in a row
    while another waits; a re-solve on unchanged input runs only when nobody else wants the turn. With a
    plain lock a slow vision tower took the turn back before the action head that waits on the
    prefix it had just fed: on two cores a released-size SmolVLA chunk was 5 s old when published,
    for 2 s of compute."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._busy = False
        self._waiting: list[int] = []  # pipeline positions of the calls waiting
        self._last: int | None = None  # the position that took the last turn

    def _next(self) -> int:
        others = [p for p in self._waiting if p != self._last]
        return max(others or self._waiting)

    def turn(self, position: int):
        """The turn of a call at pipeline `position`, once it comes (a context manager)."""
        with self._changed:
            self._waiting.append(position)
            while self._busy or position != self._next():
                self._changed.wait()
            self._waiting.remove(position)
            self._busy, self._last = True, position
        return self._held()

    def turn_if_free(self, position: int):
        """The turn if nobody has it or waits for it, else None: a re-solve on unchanged input gives
        way instead of holding its thread behind calls that have new input."""
        with self._changed:
            if self._busy or self._waiting:
                return None
            self._busy, self._last = True, position
        return self._held()

    @contextlib.contextmanager
    def _held(self):
        try:
            yield self
        finally:
            with self._changed:
                self._busy = False
                self._changed.notify_all()


MODEL_CALL_TURNS = ModelCallTurns()


class StageNode(GraphNode):
    runs_on_unchanged_input = False  # True: re-solve on unchanged input (the action head: new noise)

    def upstream_stages(self) -> tuple[str, ...]:
        """Nodes whose outputs this one reads (the node table's, for this model)."""
        return upstream_of(self.stage, self.spec.has_world_model)

    def compute(self, step: int, inputs: dict[str, Any]) -> Any:
        """The runtime call; returns a StageResult (or ActionChunkResult for the action head)."""
        raise NotImplementedError

    def upstream_arrived(self, name: str, output: Any) -> None:
        """Every upstream output as it arrives (None: a skip marker or undecodable), also on the
        steps this stage does not run."""

    def publish_result(self, step: int, sequence: int, result: Any, now_ns: int) -> None:
        """Publish `result` (None: the skip marker of a lock-step step)."""
        store = self.store if self.config.by_reference else None
        self.output_publisher.publish(encode_output(self.stage, sequence, step, result, now_ns, store,
                                                    self.config.transport))

    def make_output_publisher(self):
        return self.lifecycle_publisher(StageOutput, stage_topic(self.stage), self.drive.stage_qos())

    # ---------------------------------------------------------------------------------------------

    def setup(self) -> None:
        self.runtime = self.injected_runtime or acquire_runtime(self.config)
        self.spec = self.runtime.spec
        schedule = self.config.schedule
        self.period = schedule.period_of(self.stage)
        self.upstreams = self.upstream_stages()
        self.gate = LockstepGate(self.period, {name: schedule.period_of(name) for name in self.upstreams})
        self.latest: dict[str, tuple[int, Any]] = {}  # name -> (version, output), free-running
        self.used_versions: dict[str, int] = {}
        self.sequence = 0
        self.max_age_ns = seconds_to_ns(self.config.stages.max_input_age_s)
        step_ns = seconds_to_ns(schedule.step_period_s)
        self.trigger = FreeRunTrigger(self.period * step_ns,
                                      {name: schedule.period_of(name) * step_ns for name in self.upstreams},
                                      slack_ns=step_ns // 2, resolves=self.runs_on_unchanged_input)
        self._timer: Timer | None = None
        self._read_upstream = self.drive.reader(by_step=self._upstream_of_step, newest=self._newest_upstream)
        for name in self.upstreams:
            self.subscribe(StageOutput, stage_topic(name), partial(self._on_upstream, name), self.drive.stage_qos())
        self.output_publisher = self.make_output_publisher()

    def start(self) -> None:
        self._timer = self.drive.timer(self, self.trigger.timer_period_ns / 1e9, self._on_timer)

    def stop(self) -> None:
        if self._timer is not None:
            self.drop(self._timer)
            self._timer = None

    def on_step(self, step: int) -> None:
        self.gate.on_step(step)
        self._drain()

    def _on_upstream(self, name: str, msg: StageOutput) -> None:
        if not self.active:
            return
        try:
            output = decode_output(msg, self.store)
        except (LookupError, ValueError) as error:
            self.stats.record_error(f"{name}: {error}")
            output = None
        self.upstream_arrived(name, output)
        self._read_upstream(name, msg, output)

    def _upstream_of_step(self, name: str, msg: StageOutput, output: Any) -> None:
        self.gate.on_upstream(name, msg.step, output)
        self._drain()

    def _newest_upstream(self, name: str, msg: StageOutput, output: Any) -> None:
        if output is None:
            return
        self.latest[name] = (time_to_ns(msg.header.stamp), output)
        if self.trigger.arrived(name, self.now_ns()):
            self._run_on_newest()

    def _drain(self) -> None:
        while (ready := self.gate.next_ready()) is not None:
            step, inputs = ready
            self._run(step, inputs, self.step_clock.stamp_of(step))

    def _on_timer(self) -> None:
        if self.trigger.timer_fired(self.now_ns()):
            self._run_on_newest()

    def _run_on_newest(self) -> None:
        versions = {name: version for name, (version, _) in self.latest.items()}
        if not self.runs_on_unchanged_input and versions == self.used_versions:
            return  # nothing new upstream since the last run
        self.trigger.ran(self.now_ns())
        if self._timer is not None:
            self._timer.reset()  # the timer counts from this run
        inputs = {name: output for name, (_, output) in self.latest.items()}
        if self._run(0, inputs, self.now_ns(), fresh=versions != self.used_versions):
            self.used_versions = versions

    def _run(self, step: int, inputs: dict[str, Any], now_ns: int, fresh: bool = True) -> bool:
        """fresh: something upstream changed since the last run (a re-solve on the same input runs only
        when no other call wants the turn)."""
        problem = self._input_problem(inputs, now_ns)
        if problem:
            return self._skip(step, now_ns, problem, error=False)
        lower_this_thread(self.config.compute.stage_nice)
        result, failure = None, None
        turn = contextlib.nullcontext()
        if self.config.compute.stage_turns:
            turn = MODEL_CALL_TURNS.turn(NODE_NAMES.index(self.stage)) if fresh else MODEL_CALL_TURNS.turn_if_free(-1)
            if turn is None:
                return False  # a re-solve on unchanged input gives way to calls with new input
        with turn:
            started = time.perf_counter()  # after the wait for the turn: compute_ms is the call alone
            try:
                result = self.compute(step, inputs)
            except Exception as error:  # a failing model call is reported; the node keeps serving
                failure = error
            compute_ms = (time.perf_counter() - started) * 1e3
        if failure is not None:
            return self._skip(step, now_ns, f"{type(failure).__name__}: {failure}", error=True)
        if result is None:
            return self._skip(step, now_ns, f"the runtime's {self.stage} stage returned nothing", error=True)
        published_ns = self.drive.output_stamp(now_ns, self.now_ns)
        self.sequence += 1
        self.publish_result(step, self.sequence, result, published_ns)
        staleness_ms = (published_ns - result.stamp_ns) / 1e6
        self.publish_timing(step, self.sequence, result.stamp_ns, compute_ms, staleness_ms, published_ns)
        self.stats.record_run(time.monotonic_ns(), compute_ms, staleness_ms)
        return True

    def _skip(self, step: int, now_ns: int, reason: str, error: bool) -> bool:
        if error:
            self.stats.record_error(reason)
            self.get_logger().error(reason, throttle_duration_sec=5.0)
        else:
            self.stats.record_skip(reason)
        self.drive.skipped(self, step, now_ns)
        return False

    def publish_skip_marker(self, step: int, now_ns: int) -> None:
        self.publish_result(step, 0, None, now_ns)
        super().publish_skip_marker(step, now_ns)

    def _input_problem(self, inputs: dict[str, Any], now_ns: int) -> str:
        for name in self.upstreams:
            output = inputs.get(name)
            if output is None:
                return f"no {name} output yet"
            age_ns = now_ns - output.stamp_ns
            if self.drive.too_old(age_ns, self.max_age_ns):
                return f"{name} output is {age_ns / 1e6:.0f} ms old (limit {self.max_age_ns / 1e6:.0f} ms)"
        return ""
