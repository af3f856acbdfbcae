"""Watches a running graph from outside: stage timings, controller diagnostics, the command stream.
Feeds the live summary and the final report of `embodied-ros up` (and the latency tests).

It takes what came ten times a second, not a callback per message: in `up` it shares the graph's
process, and a wake of its interpreter for each of the controller's 50 commands a second would
compete with the stages for the interpreter and the cores. Arrival times are the middleware's
reception stamps, so the command stream's timing does not depend on when the messages are taken."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from embodied_ros.node_infra.node_table import NODE_NAMES
from embodied_ros.node_infra.polled import PolledGroup, ignore_message, take_all
from embodied_ros.node_infra.stats import percentiles, reason_kind
from embodied_ros.node_infra.topics import DIAGNOSTICS, TIMING, command_topic
from embodied_ros.inputs.stamps import reception_ns, time_to_ns
from embodied_ros.msg import StageTiming

POLL_PERIOD_S = 0.1


class GraphMonitor(Node):
    def __init__(self, command_rate_hz: float, output: str, dry_run: bool = False, **node_kwargs):
        super().__init__("graph_monitor", **node_kwargs)
        self.period_ms = 1e3 / command_rate_hz
        self.lock = threading.Lock()
        self.runs: dict[str, list[tuple[float, float, float]]] = defaultdict(list)  # (monotonic s, compute, staleness)
        self.command_stamps: list[int] = []  # controller tick stamps (JointTrajectory only)
        self.command_arrivals: list[int] = []  # monotonic ns at arrival
        self.command_receptions: list[int] = []  # wall ns at arrival, taken by the middleware (reception_ns)
        self.controller_message = ""
        self.input_problem = ""  # the observation node's newest complaint about the inputs
        self.inputs_refused = False  # whether that complaint is the observation node's current state
        self.hold_reasons: Counter[str] = Counter()
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

    def _on_timing(self, msg: StageTiming, received_ns: int, arrived_ns: int) -> None:
        if msg.sequence > 0:
            with self.lock:
                self.runs[msg.stage].append((arrived_ns / 1e9, msg.compute_ms, msg.staleness_ms))

    def _on_command(self, msg, received_ns: int, arrived_ns: int) -> None:
        with self.lock:
            self.command_arrivals.append(arrived_ns)
            self.command_receptions.append(received_ns)
            if isinstance(msg, JointTrajectory):
                self.command_stamps.append(time_to_ns(msg.header.stamp))

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

    def current_input_problem(self) -> str:
        """The observation node's reason for refusing its inputs, while it refuses them; "" otherwise."""
        with self.lock:
            return self.input_problem if self.inputs_refused else ""

    def first_chunk_s(self, since_s: float) -> float | None:
        """Seconds from `since_s` (monotonic) to the first action chunk's timing; None if none came."""
        with self.lock:
            runs = self.runs.get("action")
            return max(0.0, runs[0][0] - since_s) if runs else None

    def stage_summary(self, since_s: float = 0.0) -> dict[str, dict[str, float]]:
        """Per stage: rate, compute and staleness percentiles of the runs after `since_s` (monotonic)."""
        summary = {}
        with self.lock:
            runs = {stage: [r for r in rows if r[0] >= since_s] for stage, rows in self.runs.items()}
        for stage in sorted(runs, key=lambda s: NODE_NAMES.index(s) if s in NODE_NAMES else len(NODE_NAMES)):
            rows = runs[stage]
            if not rows:
                continue
            span = rows[-1][0] - rows[0][0]
            compute = percentiles([r[1] for r in rows])
            staleness = percentiles([r[2] for r in rows])
            summary[stage] = {"runs": len(rows), "rate_hz": (len(rows) - 1) / span if span > 0 else 0.0,
                              "compute_ms_p50": compute[0], "compute_ms_p99": compute[1],
                              "staleness_ms_p50": staleness[0], "staleness_ms_p99": staleness[1]}
        return summary

    def command_summary(self, since_ns: int = 0) -> dict[str, float]:
        """The command stream: rate and period error (|interval - period|) p50/p99, from the controller's
        tick stamps and from their reception here (stamped by the middleware)."""
        with self.lock:
            count = sum(1 for t in self.command_arrivals if t >= since_ns)
            arrivals = np.asarray(self.command_receptions[-count:] if count else [], dtype=np.float64)
            stamps = np.asarray(self.command_stamps[-count:] if count else [], dtype=np.float64)
        result = {"commands": float(len(arrivals)), "rate_hz": 0.0}
        if len(arrivals) >= 2:
            result["rate_hz"] = (len(arrivals) - 1) / ((arrivals[-1] - arrivals[0]) / 1e9)
        for name, times in (("tick", stamps), ("arrival", arrivals)):
            errors = np.abs(np.diff(times) / 1e6 - self.period_ms) if len(times) >= 2 else []
            p50, p99 = percentiles(errors)
            result[f"{name}_period_error_ms_p50"], result[f"{name}_period_error_ms_p99"] = p50, p99
        return result

