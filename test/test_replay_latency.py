"""Latency budgets, their evaluation, and the probe the latency tests share (against a stand-in graph)."""

import threading
import time

import numpy as np
import pytest

from embodied_ros.replay.latency import (LatencyBudget, LatencyMeasurement, PercentileBound,
                                         evaluate, load_budget)
from embodied_ros.share import share_path

MS = 1_000_000


def _budget(**overrides):
    values = dict(deployment="test", end_to_end=PercentileBound(100.0, 200.0), command_period_s=0.02,
                  command_period_error=PercentileBound(2.0, 10.0), chunks=5, warmup_chunks=1)
    values.update(overrides)
    return LatencyBudget(**values)


def test_every_shipped_budget_loads():
    names = sorted(p.stem for p in share_path("config", "budgets").glob("*.yaml"))
    assert "ci" in names
    for name in names:
        budget = load_budget(name)
        assert budget.deployment == name
        assert budget.end_to_end.p50_ms <= budget.end_to_end.p99_ms


def test_budget_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="known deployments: .*'ci'"):
        load_budget("no-such-deployment")
    path = tmp_path / "bad.yaml"
    path.write_text("end_to_end_ms: {p50: 10, p99: 5}\ncommand_period: {nominal_s: 0.02, error_p50_ms: 1, error_p99_ms: 2}\n")
    with pytest.raises(ValueError, match="p50_ms=10, p99_ms=5"):
        load_budget(path)
    path.write_text("end_to_end_ms: {p50: 1, p99: 5}\nlatency: 3\n")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['latency'\]"):
        load_budget(path)
    path.write_text("end_to_end_ms: {p50: 1, p99: 5}\n")
    with pytest.raises(ValueError, match="malformed budget"):
        load_budget(path)


def _commands(periods_ms):
    return list(np.cumsum([0, *periods_ms]).astype(np.int64) * MS)


def test_evaluate_passes_within_budget_and_reports_numbers():
    measurement = LatencyMeasurement(end_to_end_ms=[500.0] + [40.0] * 10, command_stamps_ns=_commands([20] * 50))
    result = evaluate(measurement, _budget())
    assert result.passed, result.failures
    assert result.summary["end_to_end_ms"]["count"] == 10  # the warm-up chunk is not counted
    assert result.summary["end_to_end_ms"]["p99"] == pytest.approx(40.0)
    text = result.report()
    assert "PASS" in text and "p50=40.00" in text and "nominal=20.0 ms" in text


def test_evaluate_names_each_exceeded_bound():
    measurement = LatencyMeasurement(end_to_end_ms=[0.0] + [150.0] * 9 + [900.0],
                                     command_stamps_ns=_commands([20] * 40 + [60] * 2))
    result = evaluate(measurement, _budget())
    assert not result.passed
    assert any(f.startswith("end-to-end p50 150.00 ms > 100.00 ms") for f in result.failures)
    assert any(f.startswith("end-to-end p99") for f in result.failures)
    assert any(f.startswith("command period |error| p99") for f in result.failures)
    assert "FAIL" in result.report() and "over budget" in result.report()


def test_evaluate_checks_commands_as_received_and_stage_ratios():
    budget = _budget(arrival_error_p99_ms=3.0, stage_ratio={"action": 1.3, "world": 1.3})
    sent = _commands([20] * 50)
    on_time = LatencyMeasurement(end_to_end_ms=[40.0] * 11, command_stamps_ns=sent, command_arrivals_ns=sent,
                                 stage_compute_ms={"action": [10.0, 12.0, 12.5]}, stage_alone_ms={"action": 10.0})
    result = evaluate(on_time, budget)
    assert result.passed, result.failures  # a world bound for a model without a world stage is not a failure
    assert result.summary["stage_ratio"]["action"]["ratio"] == pytest.approx(1.2)
    assert "compute p50 in the graph 12.00 ms, alone 10.00 ms: ratio 1.20" in result.report()
    late = LatencyMeasurement(end_to_end_ms=[40.0] * 11, command_stamps_ns=sent,
                              command_arrivals_ns=_commands([20] * 45 + [25] * 5),
                              stage_compute_ms={"action": [14.0] * 3}, stage_alone_ms={"action": 10.0})
    failures = evaluate(late, budget).failures
    assert any(f.startswith("command period |error| p99 as received 5.00 ms > 3.00 ms") for f in failures)
    assert any(f.startswith("action stage compute in the graph 14.00 ms, 1.40x its 10.00 ms alone > 1.30x + 0.00 ms")
               for f in failures)
    never_ran = LatencyMeasurement(end_to_end_ms=[40.0] * 11, command_stamps_ns=sent, stage_alone_ms={"action": 10.0})
    assert any("action stage: no compute time measured" in f for f in evaluate(never_ran, budget).failures)
    allowing = _budget(stage_ratio={"action": 1.3, "world": 1.3}, stage_allowance_ms=0.5)
    short_calls = LatencyMeasurement(end_to_end_ms=[40.0] * 11, command_stamps_ns=sent,
                                     stage_compute_ms={"action": [0.3] * 3, "world": [14.0] * 3},
                                     stage_alone_ms={"action": 0.05, "world": 10.0})
    failures = evaluate(short_calls, allowing).failures  # 0.3 ms <= 1.3 x 0.05 + 0.5; 14 ms > 1.3 x 10 + 0.5
    assert len(failures) == 1 and failures[0].startswith("world stage compute in the graph 14.00 ms, 1.40x")
    assert evaluate(short_calls, budget).failures[0].startswith("action stage compute in the graph 0.30 ms, 6.00x")


def test_budget_bounds_on_arrival_and_ratios_are_checked(tmp_path):
    with pytest.raises(ValueError, match="stage_ratio bounds must be >= 1"):
        _budget(stage_ratio={"action": 0.5})
    with pytest.raises(ValueError, match="stage_allowance_ms must be >= 0"):
        _budget(stage_allowance_ms=-1.0)
    with pytest.raises(ValueError, match="arrival_error_p99_ms must be positive"):
        _budget(arrival_error_p99_ms=0.0)
    budget = load_budget("two-core")
    assert budget.arrival_error_p99_ms == 3.0 and budget.stage_ratio == {"action": 1.3, "world": 1.3}
    assert budget.stage_allowance_ms == 1.0
    assert budget.command_period_error.p99_ms == 2.0


def test_evaluate_fails_when_too_little_was_measured():
    result = evaluate(LatencyMeasurement(end_to_end_ms=[10.0] * 3), _budget())
    assert not result.passed
    assert any("only 2 chunks measured" in f for f in result.failures)
    assert any("only 0 commands received" in f for f in result.failures)


class _StandInGraph:
    """Answers every joint state with an ActionChunk carrying its stamp, and streams commands at 50 Hz."""

    def __init__(self, context):
        import rclpy
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image, JointState
        from std_msgs.msg import String
        from trajectory_msgs.msg import JointTrajectory

        from embodied_ros.msg import ActionChunk

        self.node = rclpy.create_node("stand_in_graph", context=context)
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
        self.chunks = self.node.create_publisher(ActionChunk, "/embodied/action_chunk", 10)
        self.commands = self.node.create_publisher(JointTrajectory, "/joint_trajectory_controller/joint_trajectory", 10)
        self.node.create_subscription(JointState, "/joint_states", self._on_state, qos)
        self.node.create_subscription(Image, "/camera/front/image_raw", lambda _m: None, qos)
        self.node.create_subscription(String, "/instruction", lambda _m: None, qos)
        self.node.create_timer(0.02, lambda: self.commands.publish(JointTrajectory()))

    def _on_state(self, msg):
        from embodied_ros.msg import ActionChunk

        self.chunks.publish(ActionChunk(observation_stamp=msg.header.stamp))


def test_probe_matches_chunks_to_the_stamps_it_sent():
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from embodied_ros.replay.latency_probe import LatencyProbe

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=77)
    graph = _StandInGraph(context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(graph.node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        probe = LatencyProbe({"front": (16, 16)}, ("a", "b"), context=context)
        budget = _budget(chunks=5, warmup_chunks=1, input_rate_hz=50.0, timeout_s=30.0)
        started = time.monotonic()
        measurement = probe.measure(budget)
        probe.close()
    finally:
        executor.shutdown()
        rclpy.shutdown(context=context)
        spinner.join(timeout=5)
    assert time.monotonic() - started < 30
    assert len(measurement.end_to_end_ms) >= 6
    assert all(0.0 < v < 30_000.0 for v in measurement.end_to_end_ms)
    assert measurement.unmatched_chunks == 0
    assert len(measurement.command_stamps_ns) >= 2
    print(evaluate(measurement, budget).report())


def test_a_graph_that_never_came_up_is_reported_as_such():
    measurement = LatencyMeasurement(problem="graph not up after 5 s; nobody on: camera/front/image_raw")
    result = evaluate(measurement, _budget())
    assert not result.passed and result.failures[0].startswith("graph not up")
