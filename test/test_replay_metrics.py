"""Replay metrics on hand-made series whose answers are known."""

import numpy as np
import pytest

from embodied_ros.replay.episode import JointSeries
from embodied_ros.replay.metrics import (PredictedChunk, action_errors, command_smoothness, distribution_ms,
                                         frame_usage, period_stats, staleness_stats)

MS = 1_000_000


def test_distribution_percentiles_and_empty_input():
    stats = distribution_ms(np.arange(1, 101, dtype=float))
    assert stats["count"] == 100 and stats["min"] == 1 and stats["max"] == 100
    assert stats["p50"] == pytest.approx(50.5) and stats["p99"] == pytest.approx(99.01)
    assert distribution_ms([np.nan])["p50"] is None and distribution_ms([])["count"] == 0


def test_period_stats_count_jitter_and_missed_commands():
    stamps = np.cumsum([0, 20, 20, 21, 19, 45, 20]) * MS  # one late command (45 ms: one period missed)
    stats = period_stats(stamps, 0.020)
    assert stats["nominal_ms"] == 20.0
    assert stats["missed"] == 1
    assert stats["period_ms"]["max"] == pytest.approx(45.0)
    assert stats["error_ms"]["p50"] == pytest.approx(0.5)
    assert stats["jitter_ms"] == pytest.approx(np.std([20, 20, 21, 19, 45, 20]))
    with pytest.raises(ValueError, match="positive"):
        period_stats(stamps, 0.0)


def _reference(names=("a", "b")):
    # targets: a(t) = t in seconds, b(t) = -2 t, recorded every 10 ms over 1 s
    stamps = np.arange(0, 1001, 10) * MS
    seconds = stamps / 1e9
    return JointSeries("/cmd", stamps, tuple(names), np.stack([seconds, -2 * seconds], axis=1))


def test_action_errors_compare_each_row_with_the_target_at_its_instant():
    period = 0.1
    rows = np.arange(1, 4)[:, None] * period  # chunk at t=0.2 s: rows for 0.3, 0.4, 0.5 s
    exact = np.hstack([0.2 + rows, -2 * (0.2 + rows)])
    off = exact + np.array([[0.0, 0.0], [0.1, 0.0], [0.0, -0.3]])
    chunks = [PredictedChunk(200 * MS, exact, period), PredictedChunk(200 * MS, off, period)]
    result = action_errors(chunks, ("a", "b"), _reference())
    assert result["available"] and result["compared_rows"] == 6
    assert result["per_joint"]["a"]["max_abs"] == pytest.approx(0.1)
    assert result["per_joint"]["b"]["max_abs"] == pytest.approx(0.3)
    assert result["per_offset"]["max_abs"] == pytest.approx([0.0, 0.1, 0.3])
    assert result["per_offset"]["mse"][1] == pytest.approx(0.1**2 / 4)
    assert result["mse"] == pytest.approx((0.1**2 + 0.3**2) / 12)


def test_action_errors_skip_rows_outside_the_recording_and_match_joints_by_name():
    chunk = PredictedChunk(900 * MS, np.zeros((3, 2)), 0.05)  # rows at 0.95, 1.0, 1.05 s
    result = action_errors([chunk], ("b", "a"), _reference())
    assert result["compared_rows"] == 2 and result["total_rows"] == 3
    assert result["per_offset"]["mse"][2] is None
    assert result["per_joint"]["b"]["max_abs"] == pytest.approx(2.0)  # b(1.0 s) = -2


def test_action_errors_say_why_they_are_unavailable():
    chunk = PredictedChunk(0, np.zeros((2, 2)), 0.1)
    assert "no usable recorded commands" in action_errors([chunk], ("a", "b"), None)["reason"]
    assert "lacks joints ['c']" in action_errors([chunk], ("a", "c"), _reference())["reason"]
    unnamed = JointSeries("/arr", np.array([0, 10**9]), (), np.zeros((2, 3)))
    assert "3 unnamed values" in action_errors([chunk], ("a", "b"), unnamed)["reason"]
    assert action_errors([chunk], ("a", "b"), JointSeries("/arr", np.array([0, 10**9]), (), np.zeros((2, 2))))[
        "available"]


def test_frame_usage_and_staleness():
    usage = frame_usage({"front": np.array([1, 2, 3, 4])}, {"front": [2, 4, 4]})
    assert usage == {"front": {"recorded": 4, "used": 2, "dropped": 2}}
    stats = staleness_stats([10.0, 20.0, 150.0], stale_after_ms=100.0)
    assert stats["stale"] == 1 and stats["max"] == 150.0


def test_smoothness_separates_the_jump_where_a_new_chunk_took_over():
    stamps = np.arange(8) * 20 * MS
    positions = np.array([[0.0, 0.0], [1, 0], [2, 0], [3, 0], [10, -1], [11, -1], [12, -1], [13, -1]])
    result = command_smoothness(stamps, positions, switches_ns=[70 * MS, 500 * MS], joint_names=("a", "b"))
    assert result["count"] == 8 and result["switches"] == 1  # the second arrival is after the last command
    assert result["max_abs_step"] == 7.0
    assert result["max_abs_step_at_switch"] == 7.0 and result["max_abs_step_within_chunk"] == 1.0
    assert result["per_joint_max_abs_step"] == {"a": 7.0, "b": 1.0}
    assert result["mean_abs_step_at_switch"] == 7.0 and result["mean_abs_step_within_chunk"] == 1.0


def test_jerk_of_a_cubic_is_its_third_derivative():
    t_s = np.arange(12) * 0.02
    positions = np.stack([t_s**3, 2 * t_s**2], axis=1)  # jerk 6 and 0
    result = command_smoothness(np.round(t_s * 1e9).astype(np.int64), positions)
    assert result["jerk"]["max_abs"] == pytest.approx(6.0, rel=1e-3)
    assert result["jerk"]["rms"] == pytest.approx(6.0 / np.sqrt(2), rel=1e-3)
    assert result["switches"] == 0 and result["max_abs_step_at_switch"] is None


def test_smoothness_of_too_few_commands_is_empty_not_an_error():
    assert command_smoothness([], [])["max_abs_step"] is None
    one = command_smoothness([5], [[1.0, 2.0]])
    assert one["count"] == 1 and one["jerk"]["max_abs"] is None


def test_recorded_commands_on_the_robots_joint_names_are_compared_through_the_controller_mapping():
    from embodied_ros.deploy.mapping import ActionMapping
    from embodied_ros.pipeline.types import ActionChunkResult
    from embodied_ros.replay.episode import Episode
    from embodied_ros.replay.record import ReplayRecord, compute_metrics

    stamps = np.arange(0, 2000 * MS, 20 * MS)
    seconds = stamps / 1e9
    # the robot records (elbow, shoulder); the model predicts (a0, a1, a2); a2 drives shoulder, a0 elbow
    recorded = JointSeries("/teleop/command", stamps, ("elbow", "shoulder"),
                           np.stack([1.0 - seconds, 0.5 * seconds], axis=1))
    episode = Episode("bag", "mcap", 0, int(stamps[-1]), {}, None, (), recorded, "/teleop/command")
    rows = np.arange(10)
    chunks = []
    for observation_ns in (100 * MS, 500 * MS):
        instants = (observation_ns + (rows + 1) * 20 * MS) / 1e9
        actions = np.stack([1.0 - instants, np.full(10, 7.0), 0.5 * instants], axis=1).astype(np.float32)
        chunks.append((observation_ns, ActionChunkResult(observation_ns, actions, 0.02, ("a0", "a1", "a2"))))
    record = ReplayRecord(mode="lockstep", chunks=chunks, command_joints=("shoulder", "elbow"))
    mapping = ActionMapping(("shoulder", "elbow"), ("a2", "a0"))

    actions = compute_metrics(episode, record, stale_after_ms=500, command_period_s=0.02, mapping=mapping)["actions"]
    assert actions["available"], actions.get("reason")
    assert actions["joint_names"] == ["shoulder", "elbow"] and actions["compared_rows"] == 20
    assert actions["mse"] < 1e-12

    unmapped = compute_metrics(episode, record, stale_after_ms=500, command_period_s=0.02,
                               mapping=ActionMapping(("shoulder", "elbow"), ("a2", "a9")))["actions"]
    assert not unmapped["available"] and "a9" in unmapped["reason"]
