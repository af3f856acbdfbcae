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
from typing import Any, Callable

from rclpy.timer import Timer

from embodied_ros.node_infra.node_table import NODE_NAMES, stages_fed_by, upstream_of
from embodied_ros.node_infra.polled import take_all
from embodied_ros.node_infra.priority import lower_this_thread
from embodied_ros.node_infra.schedule import FreeRunTrigger, LockstepGate
from embodied_ros.node_infra.topics import stage_topic
from embodied_ros.node_infra.transport import decode_output, encode_output
from embodied_ros.inputs.stamps import seconds_to_ns, time_to_ns
from embodied_ros.msg import StageOutput
from embodied_ros.nodes.base import GraphNode
from embodied_ros.nodes.runtime_cache import acquire_runtime


HANDOVER_S = 0.05  # a stage output's way to the stage that reads it (a publish, an executor's wake)


class ModelCallTurns:
    """compute.stage_turns: one model call at a time in this process, in the order the calls asked for
    the turn; a re-solve on unchanged input runs only when nobody else wants it. A call whose output
    feeds another stage hands the turn down (`hand_down`): for `handover_s` after it ends, only a call
    further down the pipeline may take it, the nearest first. Without that, the vision tower, waiting
    since its timer fired, took the turn in the moment before the action head heard of the prefix it
    waits on: on two cores a released-size SmolVLA chunk was 17 s old when published, for 9 s of
    compute; and a fresh observation's prefix, preferred as the call furthest down, kept the vision
    tower from ever taking it until its embeddings were too old to use."""

    def __init__(self, handover_s: float = HANDOVER_S) -> None:
        self.handover_s = handover_s
        self._changed = threading.Condition()
        self._busy = False
        self._waiting: list[int] = []  # pipeline positions of the calls waiting
        self._last: int | None = None  # the position that took the last turn
        self._hand_down = False  # the holder's output feeds a stage further down
        self._handed_down_until: float | None = None  # monotonic time the hand-over ends

    def _handover_left_s(self) -> float | None:
        if self._handed_down_until is None:
            return None
        left = self._handed_down_until - time.monotonic()
        if left <= 0:
            self._handed_down_until = None
            return None
        return left

    def _next(self) -> int | None:
        if self._handover_left_s() is not None:
            return min((p for p in self._waiting if p > self._last), default=None)
        return self._waiting[0] if self._waiting else None

    def turn(self, position: int):
        """The turn of a call at pipeline `position`, once it comes (a context manager)."""
        with self._changed:
            self._waiting.append(position)
            while self._busy or position != self._next():
                self._changed.wait(self._handover_left_s())
            self._waiting.remove(position)
            self._take(position)
        return self._held()

    def turn_if_free(self, position: int):
        """The turn if nobody has it, waits for it or is handed it, else None: a re-solve on unchanged
        input gives way instead of holding its thread behind calls that have new input."""
        with self._changed:
            if self._busy or self._waiting or self._handover_left_s() is not None:
                return None
            self._take(position)
        return self._held()

    def hand_down(self) -> None:
        """Called by the holder whose output feeds a stage further down: the next turn is that stage's."""
        self._hand_down = True

    def _take(self, position: int) -> None:
        self._busy, self._last, self._hand_down, self._handed_down_until = True, position, False, None

    @contextlib.contextmanager
    def _held(self):
        try:
            yield self
        finally:
            with self._changed:
                self._busy = False
                if self._hand_down:
                    self._handed_down_until = time.monotonic() + self.handover_s
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
        self.runtime = acquire_runtime(self.config, self.injected_runtime)
        self.spec = self.runtime.spec
        schedule = self.config.schedule
        self.period = schedule.period_of(self.stage)
        self.upstreams = self.upstream_stages()
        self.feeds_stages = bool(stages_fed_by(self.stage, self.spec.has_world_model))
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
        self._upstream_subscriptions = {
            name: self.subscribe(StageOutput, stage_topic(name), partial(self._on_upstream, name), self.drive.stage_qos())
            for name in self.upstreams}
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
        self._read_upstream(name, msg, self._decode_upstream(name, msg))

    def _decode_upstream(self, name: str, msg: StageOutput) -> Any:
        try:
            output = decode_output(msg, self.store)
        except (LookupError, ValueError) as error:
            self.stats.record_error(f"{name}: {error}")
            output = None
        self.upstream_arrived(name, output)
        return output

    def _upstream_of_step(self, name: str, msg: StageOutput, output: Any) -> None:
        self.gate.on_upstream(name, msg.step, output)
        self._drain()

    def _newest_upstream(self, name: str, msg: StageOutput, output: Any) -> None:
        if self._keep_newest(name, msg, output):
            self._run_on_newest()

    def _keep_newest(self, name: str, msg: StageOutput, output: Any) -> bool:
        """Keep `output` as `name`'s newest; True when it should start a run now."""
        if output is None:
            return False
        self.latest[name] = (time_to_ns(msg.header.stamp), output)
        return self.trigger.arrived(name, self.now_ns())

    def _take_waiting_upstream(self) -> None:
        """The upstream outputs that came while this node's thread waited for the turn (its executor
        could not hand them over), kept as the newest without starting another run."""
        for name, subscription in self._upstream_subscriptions.items():
            for msg, _ in take_all(subscription):
                self._keep_newest(name, msg, self._decode_upstream(name, msg))

    def _drain(self) -> None:
        while (ready := self.gate.next_ready()) is not None:
            step, inputs = ready
            self._in_turn(partial(self._run, step, inputs, self.step_clock.stamp_of(step)))

    def _on_timer(self) -> None:
        if self.trigger.timer_fired(self.now_ns()):
            self._run_on_newest()

    def _run_on_newest(self) -> None:
        fresh = self._newest_versions() != self.used_versions
        if not (fresh or self.runs_on_unchanged_input):
            return  # nothing new upstream since the last run
        now_ns = self.now_ns()
        problem = self._input_problem(self._newest_inputs(), now_ns)
        if problem:  # no wait for the turn on input that cannot be used, and no run to space the next from:
            self._skip(0, now_ns, problem, error=False)  # the input it lacks may come at once
            return
        self.trigger.ran(now_ns)
        if self._timer is not None:
            self._timer.reset()  # the timer counts from this run
        self._in_turn(self._run_newest, fresh=fresh)

    def _run_newest(self) -> bool:
        self._take_waiting_upstream()
        versions = self._newest_versions()
        if self._run(0, self._newest_inputs(), self.now_ns()):
            self.used_versions = versions
            return True
        return False

    def _newest_versions(self) -> dict[str, int]:
        return {name: version for name, (version, _) in self.latest.items()}

    def _newest_inputs(self) -> dict[str, Any]:
        return {name: output for name, (_, output) in self.latest.items()}

    def _in_turn(self, run: Callable[[], bool], fresh: bool = True) -> None:
        """`run()` in this process's turn for model calls (compute.stage_turns); fresh: something
        upstream changed since the last run (a re-solve on the same input runs only when no other
        call wants the turn). A run that published hands the turn to the stages it feeds."""
        lower_this_thread(self.config.compute.stage_nice)
        if not self.config.compute.stage_turns:
            run()
            return
        turn = MODEL_CALL_TURNS.turn(NODE_NAMES.index(self.stage)) if fresh else MODEL_CALL_TURNS.turn_if_free(-1)
        if turn is None:
            return  # a re-solve on unchanged input gives way to calls with new input
        with turn as held:
            if run() and self.feeds_stages:
                held.hand_down()

    def _run(self, step: int, inputs: dict[str, Any], now_ns: int) -> bool:
        problem = self._input_problem(inputs, now_ns)
        if problem:
            return self._skip(step, now_ns, problem, error=False)
        result, failure = None, None
        started = time.perf_counter()  # in the turn: compute_ms is the call alone
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
