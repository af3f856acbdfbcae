"""Watches a running graph from outside: stage timings, controller diagnostics, the command stream.
Feeds the live summary and the final report of `embodied-ros up` (and the latency tests).

It takes what came ten times a second, not a callback per message: in `up` it shares the graph's
process, and a wake of its interpreter for each of the controller's 50 commands a second would
compete with the stages for the interpreter and the cores. Arrival times are the middleware's
reception stamps, so the command stream's timing does not depend on when the messages are taken.

Its memory does not grow with the run (`up --duration 0` may run for days): the live summary reads
the rows of the last seconds (`RecentRows`), the final report the whole run's counts and times
exactly and its percentiles from a uniform sample of at most RUN_SAMPLE_ROWS rows per stage and
for the commands (`RunRows`; exact while a run has fewer, within about 0.2 percentile points beyond)."""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter, defaultdict, deque

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from embodied_ros.node_infra.node_table import NODE_NAMES, NODES
from embodied_ros.node_infra.polled import PolledGroup, ignore_message, take_all
from embodied_ros.node_infra.stats import percentiles, reason_kind
from embodied_ros.node_infra.topics import DIAGNOSTICS, TIMING, command_topic
from embodied_ros.inputs.stamps import reception_ns, time_to_ns
from embodied_ros.msg import StageTiming

STAGES = tuple(node.name for node in NODES if node.schedule_key)  # the model's stages
STARTUP_WAIT = re.compile(r"no \w+ output yet")  # a stage's reason to skip while the graph starts

POLL_PERIOD_S = 0.1
RECENT_S = 10.0  # the longest window a live summary reads
RUN_SAMPLE_ROWS = 10_000  # per stage, and for the commands: 17 minutes of a 10 Hz stage, 3 of 50 Hz commands


class RecentRows:
    """Rows (t_s, value, ...) of the last `window_s` seconds."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self._rows: deque[tuple[float, ...]] = deque()

    def add(self, row: tuple[float, ...]) -> None:
        self._rows.append(row)
        while self._rows[0][0] < row[0] - self.window_s:
            self._rows.popleft()

    def since(self, t_s: float) -> tuple[int, float, np.ndarray]:
        """(count, span in s, the rows as an array [count, columns]) of the rows from `t_s` on."""
        rows = np.asarray([row for row in self._rows if row[0] >= t_s], dtype=np.float64)
        return (len(rows), float(rows[-1, 0] - rows[0, 0]), rows) if len(rows) else (0, 0.0, rows)


class RunRows:
    """Rows (t_s, value, ...) of a whole run in bounded memory: their count and time span exactly,
    and for percentiles a uniform sample of at most `capacity` rows (reservoir sampling; every row
    while there are no more). Seeded: the same stream gives the same report."""

    def __init__(self, columns: int, capacity: int = RUN_SAMPLE_ROWS):
        self.count = 0
        self._first_s = self._last_s = 0.0
        self._sample = np.empty((capacity, columns))
        self._random = random.Random(0)

    def add(self, row: tuple[float, ...]) -> None:
        if self.count == 0:
            self._first_s = row[0]
        self._last_s = row[0]
        slot = self.count if self.count < len(self._sample) else self._random.randrange(self.count + 1)
        if slot < len(self._sample):
            self._sample[slot] = row
        self.count += 1

    def summary(self) -> tuple[int, float, np.ndarray]:
        """(count, span in s, a copy of the sampled rows [sampled, columns])."""
        return self.count, self._last_s - self._first_s, self._sample[:min(self.count, len(self._sample))].copy()


class GraphMonitor(Node):
    def __init__(self, command_rate_hz: float, output: str, dry_run: bool = False, recent_s: float = RECENT_S,
                 **node_kwargs):
        """`recent_s`: the longest window a summary of recent rows may ask for."""
        super().__init__("graph_monitor", **node_kwargs)
        self.period_ms = 1e3 / command_rate_hz
        self.recent_s = recent_s
        self.lock = threading.Lock()
        # rows: stage runs (arrival monotonic s, compute ms, staleness ms); commands (arrival monotonic s,
        # period error ms at the controller (JointTrajectory stamps only), period error ms on arrival)
        self.recent_runs: dict[str, RecentRows] = {}
        self.run_runs: dict[str, RunRows] = {}
        self.recent_commands = RecentRows(recent_s)
        self.run_commands = RunRows(3)
        self._previous_command: tuple[int, int | None] | None = None  # (reception wall ns, tick stamp ns)
        self.first_action_s: float | None = None  # arrival of the action stage's first timing
        self.controller_message = ""
        self.input_problem = ""  # the observation node's newest complaint about the inputs
        self.inputs_refused = False  # whether that complaint is the observation node's current state
        self.hold_reasons: Counter[str] = Counter()
        self.stage_problems: defaultdict[str, Counter[str]] = defaultdict(Counter)  # stage -> reason kind -> reports
        message_type = JointTrajectory if output == "joint_trajectory" else Float64MultiArray
        inbox, no_events = PolledGroup(), SubscriptionEventCallbacks(use_default_callbacks=False)
        self._inbox = []  # (subscription, handler(msg, received wall ns, arrived monotonic ns))
        for msg_type, topic, depth, handle in ((StageTiming, TIMING, 200, self._on_timing),
                                               (DiagnosticArray, DIAGNOSTICS, 50, self._on_diagnostics),
                                               (message_type, command_topic(output, dry_run), 100, self._on_command)):
            subscription = self.create_subscription(msg_type, topic, ignore_message, depth, callback_group=inbox,
                                                    event_callbacks=no_events)
            self._inbox.append((subscription, handle))
        self.create_timer(POLL_PERIOD_S, self.take_messages)

    def take_messages(self) -> None:
        """Hand every message that came since the last call to its handler, with when it arrived
        (monotonic ns, from the middleware's reception stamp)."""
        monotonic_minus_wall_ns = time.monotonic_ns() - time.time_ns()
        for subscription, handle in self._inbox:
            for msg, info in take_all(subscription):
                received_ns = reception_ns(info)
                handle(msg, received_ns, received_ns + monotonic_minus_wall_ns)

    def start_run(self) -> None:
        """The run starts now: the summaries without a window cover the rows from here on."""
        with self.lock:
            self.run_runs = {stage: RunRows(3) for stage in self.run_runs}
            self.run_commands = RunRows(3)

    def _on_timing(self, msg: StageTiming, received_ns: int, arrived_ns: int) -> None:
        if msg.sequence <= 0:
            return
        row = (arrived_ns / 1e9, msg.compute_ms, msg.staleness_ms)
        with self.lock:
            if msg.stage not in self.recent_runs:
                self.recent_runs[msg.stage], self.run_runs[msg.stage] = RecentRows(self.recent_s), RunRows(3)
            self.recent_runs[msg.stage].add(row)
            self.run_runs[msg.stage].add(row)
            if msg.stage == "action" and self.first_action_s is None:
                self.first_action_s = row[0]

    def _on_command(self, msg, received_ns: int, arrived_ns: int) -> None:
        stamp_ns = time_to_ns(msg.header.stamp) if isinstance(msg, JointTrajectory) else None
        with self.lock:
            tick_error = arrival_error = float("nan")
            if self._previous_command is not None:
                previous_received_ns, previous_stamp_ns = self._previous_command
                arrival_error = abs((received_ns - previous_received_ns) / 1e6 - self.period_ms)
                if stamp_ns is not None and previous_stamp_ns is not None:
                    tick_error = abs((stamp_ns - previous_stamp_ns) / 1e6 - self.period_ms)
            self._previous_command = (received_ns, stamp_ns)
            row = (arrived_ns / 1e9, tick_error, arrival_error)
            self.recent_commands.add(row)
            self.run_commands.add(row)

    def _on_diagnostics(self, msg: DiagnosticArray, received_ns: int, arrived_ns: int) -> None:
        for status in msg.status:
            if status.name.endswith(": controller"):
                with self.lock:
                    changed = reason_kind(status.message) != reason_kind(self.controller_message)
                    self.controller_message = status.message
                    if changed and status.message.startswith("holding: "):  # a new hold, not a new age
                        self.hold_reasons[reason_kind(status.message[len("holding: "):])] += 1
            elif status.name.endswith(": observation"):
                with self.lock:
                    self.inputs_refused = status.level == DiagnosticStatus.ERROR
                    if self.inputs_refused:
                        self.input_problem = status.message
            elif (stage := status.name.rsplit(": ", 1)[-1]) in STAGES and status.level != DiagnosticStatus.OK:
                reason = reason_kind(status.message)
                if reason != "inactive" and not STARTUP_WAIT.fullmatch(reason):  # a stage that cannot run
                    with self.lock:
                        self.stage_problems[stage][reason] += 1

    def current_input_problem(self) -> str:
        """The observation node's reason for refusing its inputs, while it refuses them; "" otherwise."""
        with self.lock:
            return self.input_problem if self.inputs_refused else ""

    def first_chunk_s(self, since_s: float) -> float | None:
        """Seconds from `since_s` (monotonic) to the first action chunk's timing; None if none came."""
        with self.lock:
            return max(0.0, self.first_action_s - since_s) if self.first_action_s is not None else None

    def stage_summary(self, window_s: float | None = None) -> dict[str, dict[str, float]]:
        """Per stage: runs, rate, compute and staleness percentiles over the last `window_s` seconds
        (at most `recent_s`), or with None over the whole run since `start_run()`."""
        summary = {}
        with self.lock:
            rows = {stage: self._rows(window_s, self.recent_runs[stage], self.run_runs[stage])
                    for stage in self.recent_runs}
        for stage in sorted(rows, key=lambda s: NODE_NAMES.index(s) if s in NODE_NAMES else len(NODE_NAMES)):
            count, span_s, sample = rows[stage]
            if not count:
                continue
            compute, staleness = percentiles(sample[:, 1]), percentiles(sample[:, 2])
            summary[stage] = {"runs": count, "rate_hz": _rate(count, span_s),
                              "compute_ms_p50": compute[0], "compute_ms_p99": compute[1],
                              "staleness_ms_p50": staleness[0], "staleness_ms_p99": staleness[1]}
        return summary

    def command_summary(self, window_s: float | None = None) -> dict[str, float]:
        """The command stream over the last `window_s` seconds (at most `recent_s`), or with None the
        whole run since `start_run()`: count, rate and period error (|interval - period|) p50/p99,
        from the controller's tick stamps and from their reception here (stamped by the middleware)."""
        with self.lock:
            count, span_s, sample = self._rows(window_s, self.recent_commands, self.run_commands)
        result = {"commands": float(count), "rate_hz": _rate(count, span_s)}
        for column, name in ((1, "tick"), (2, "arrival")):
            p50, p99 = percentiles(sample[:, column] if count else [])
            result[f"{name}_period_error_ms_p50"], result[f"{name}_period_error_ms_p99"] = p50, p99
        return result

    @staticmethod
    def _rows(window_s: float | None, recent: RecentRows, run: RunRows) -> tuple[int, float, np.ndarray]:
        return run.summary() if window_s is None else recent.since(time.monotonic() - window_s)


def _rate(count: int, span_s: float) -> float:
    return (count - 1) / span_s if count >= 2 and span_s > 0 else 0.0
