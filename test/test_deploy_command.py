"""Streaming a chunk at the actuator rate: alignment to the observation stamp, limits, holds, blending."""

import numpy as np
import pytest

from embodied_ros.deploy import ActionMapping, CommandLogic, JointLimits, TimedChunk
from embodied_ros.deploy.command import (
    CHUNK_RAN_OUT, FUTURE_CHUNK, INPUT_STATUS_SILENT, WAITING_FOR_CHUNK, WAITING_FOR_FRESH_CHUNK,
)
from embodied_ros.deploy.limits import NON_FINITE_CHUNK
from embodied_ros.deploy.messages import command_positions, float64_multi_array, joint_trajectory

MS = 1_000_000


def _chunk(stamp_ms, rows, period_ms=20):
    return TimedChunk(stamp_ns=stamp_ms * MS, period_ns=period_ms * MS, positions=np.asarray(rows, np.float64))


def _logic(n=1, **kwargs):
    return CommandLogic(JointLimits.from_lists(n), period_ns=20 * MS, **kwargs)


def test_row_i_is_for_stamp_plus_i_plus_one_periods_and_between_rows_is_linear():
    chunk = _chunk(1000, [[1.0], [2.0], [4.0]])
    assert chunk.sample(1020 * MS)[0] == 1.0
    assert chunk.sample(1040 * MS)[0] == 2.0
    assert chunk.sample(1050 * MS)[0] == pytest.approx(3.0)
    assert chunk.sample(1060 * MS)[0] == 4.0
    assert chunk.sample(1000 * MS)[0] == 1.0  # before row 0: row 0
    assert chunk.sample(1061 * MS) is None  # ran out


def test_actions_already_in_the_past_are_skipped():
    logic = _logic()
    logic.accept_chunk(_chunk(1000, [[1.0], [2.0], [3.0], [4.0]]), now_ns=1070 * MS)
    # the chunk arrives 70 ms after its observation: the first command is row 2 (for 1060 ms) onwards
    assert logic.tick(1060 * MS).positions[0] == 3.0
    assert logic.tick(1080 * MS).positions[0] == 4.0


def test_holds_when_the_chunk_runs_out_and_resumes_with_a_new_one():
    logic = _logic()
    logic.accept_chunk(_chunk(0, [[1.0], [2.0]]), now_ns=0)
    assert logic.tick(40 * MS).positions[0] == 2.0
    held = logic.tick(60 * MS)
    assert held.holding and held.reason == CHUNK_RAN_OUT and held.positions[0] == 2.0
    logic.accept_chunk(_chunk(60, [[5.0], [6.0]]), now_ns=60 * MS)
    resumed = logic.tick(80 * MS)
    assert not resumed.holding and resumed.positions[0] == 5.0


def test_after_running_out_only_a_chunk_planned_after_the_stop_moves_the_arm():
    logic = _logic()
    logic.accept_chunk(_chunk(0, [[1.0], [2.0]]), now_ns=0)  # its rows end at 40 ms
    assert logic.tick(40 * MS).positions[0] == 2.0
    assert logic.tick(60 * MS).reason == CHUNK_RAN_OUT
    # planned from an observation before the arm stopped (a link back after a cut delivers it late):
    # its rows are still ahead, but they continue a motion the arm did not make
    logic.accept_chunk(_chunk(30, [[3.0]] * 10), now_ns=70 * MS)
    held = logic.tick(80 * MS)
    assert held.holding and held.reason == CHUNK_RAN_OUT and held.positions[0] == 2.0
    logic.accept_chunk(_chunk(100, [[5.0]] * 10), now_ns=110 * MS)  # before the stale one's rows end
    assert logic.tick(120 * MS).positions[0] == 5.0


def test_non_finite_chunk_is_refused_and_the_arm_holds():
    logic = _logic()
    logic.accept_chunk(_chunk(0, [[1.0], [2.0], [3.0]]), now_ns=0)
    assert logic.tick(20 * MS).positions[0] == 1.0
    logic.accept_chunk(_chunk(20, [[np.nan], [2.0], [3.0]]), now_ns=20 * MS)
    held = logic.tick(40 * MS)
    assert held.holding and held.reason.startswith(NON_FINITE_CHUNK) and held.positions[0] == 1.0


def test_a_chunk_from_the_future_is_refused_and_does_not_shut_out_later_chunks():
    logic = _logic()
    logic.accept_chunk(_chunk(0, [[1.0], [2.0], [3.0]]), now_ns=0)
    assert logic.tick(20 * MS).positions[0] == 1.0
    logic.accept_chunk(_chunk(3_600_000, [[9.0], [9.0], [9.0]]), now_ns=20 * MS)  # observation stamped 1 h ahead
    held = logic.tick(40 * MS)
    assert held.holding and held.reason.startswith(FUTURE_CHUNK) and held.positions[0] == 1.0
    logic.accept_chunk(_chunk(40, [[4.0], [5.0], [6.0]]), now_ns=40 * MS)
    resumed = logic.tick(60 * MS)
    assert not resumed.holding and resumed.positions[0] == 4.0
    logic.accept_chunk(_chunk(150, [[7.0], [8.0]]), now_ns=60 * MS)  # 90 ms ahead: within the 100 ms allowed
    assert not logic.tick(80 * MS).holding


def test_without_any_chunk_it_holds_the_measured_position_or_sends_nothing():
    logic = _logic(n=2)
    assert logic.tick(0) is None
    logic.observe_positions(np.array([0.5, -0.5]))
    held = logic.tick(0)
    assert held.holding and held.reason == WAITING_FOR_CHUNK
    np.testing.assert_array_equal(held.positions, [0.5, -0.5])


def test_input_fault_holds_at_once_and_recovery_waits_for_a_chunk_from_fresh_inputs():
    logic = _logic(input_timeout_ns=100 * MS)
    logic.set_input_status(True, "", now_ns=0)
    logic.accept_chunk(_chunk(0, [[1.0]] * 10), now_ns=0)
    assert not logic.tick(20 * MS).holding
    logic.set_input_status(False, "front: newest message is 300 ms old", now_ns=30 * MS)
    held = logic.tick(40 * MS)
    assert held.holding and held.reason == "inputs: front: newest message is 300 ms old"
    logic.set_input_status(True, "", now_ns=50 * MS)
    assert logic.tick(60 * MS).reason == WAITING_FOR_FRESH_CHUNK  # the chunk in hand predates the fault
    logic.accept_chunk(_chunk(55, [[1.0]] * 10), now_ns=70 * MS)
    assert not logic.tick(80 * MS).holding


def test_silent_input_monitor_makes_it_hold():
    logic = _logic(input_timeout_ns=100 * MS)
    logic.set_input_status(True, "", now_ns=0)
    logic.accept_chunk(_chunk(0, [[1.0]] * 50), now_ns=0)
    assert not logic.tick(100 * MS).holding
    assert logic.tick(101 * MS).reason == INPUT_STATUS_SILENT


def test_rate_and_position_limits_bound_every_command():
    limits = JointLimits.from_lists(2, lower=[-1.0, -1.0], upper=[1.0, 0.5], max_velocity=[10.0, 1.0])
    logic = CommandLogic(limits, period_ns=20 * MS)
    logic.observe_positions(np.array([0.0, 0.9]))  # joint 2 measured beyond its limit
    logic.accept_chunk(_chunk(0, [[1.0, 0.5]] * 5), now_ns=0)  # within the limits, far from the arm
    first = logic.tick(20 * MS)
    np.testing.assert_allclose(first.positions, [0.2, 0.5])  # 10 units/s * 20 ms; joint 2 (0.88) clamped at 0.5
    assert first.limited
    np.testing.assert_allclose(logic.tick(40 * MS).positions, [0.4, 0.5])


def test_limits_from_config_are_checked():
    with pytest.raises(ValueError, match=r"position_lower has 1 values for 2 joints \['a', 'b'\]"):
        JointLimits.from_lists(2, lower=[0.0], joint_names=["a", "b"])
    with pytest.raises(ValueError, match=r"position_lower > position_upper for \['b'\]"):
        JointLimits.from_lists(2, lower=[0, 1], upper=[1, 0], joint_names=["a", "b"])


def test_blending_moves_from_the_executing_chunk_to_the_new_one():
    logic = _logic(blend_ns=40 * MS)
    logic.accept_chunk(_chunk(0, [[0.0]] * 20), now_ns=0)
    logic.accept_chunk(_chunk(10, [[1.0]] * 20), now_ns=20 * MS)
    assert logic.tick(20 * MS).positions[0] == pytest.approx(0.0)
    assert logic.tick(40 * MS).positions[0] == pytest.approx(0.5)
    assert logic.tick(60 * MS).positions[0] == pytest.approx(1.0)
    assert logic.tick(80 * MS).positions[0] == pytest.approx(1.0)


def test_mapping_picks_action_columns_for_joints_by_name():
    mapping = ActionMapping(joints=["arm_2", "arm_1"], action_columns=["j2", "j1"])
    np.testing.assert_array_equal(mapping.column_index(["j1", "j2", "grip"]), [1, 0])
    assert ActionMapping().joint_names(["j1", "j2"]) == ("j1", "j2")
    with pytest.raises(ValueError, match=r"\['j9'\] are not in the chunk's columns"):
        ActionMapping(joints=["a"], action_columns=["j9"]).column_index(["j1"])


def test_command_messages_carry_the_positions():
    trajectory = joint_trajectory(["a", "b"], np.array([1.0, 2.0]), stamp_ns=5 * MS, time_from_start_ns=20 * MS)
    assert trajectory.joint_names == ["a", "b"]
    assert trajectory.points[0].time_from_start.nanosec == 20 * MS
    np.testing.assert_array_equal(command_positions(trajectory), [1.0, 2.0])
    np.testing.assert_array_equal(command_positions(float64_multi_array(np.array([3.0]))), [3.0])


def test_trajectory_points_are_stamped_for_their_instants():
    points = np.array([[1.0, 2.0], [1.5, 2.5], [2.0, 3.0]])
    trajectory = joint_trajectory(["a", "b"], points, stamp_ns=5 * MS, time_from_start_ns=20 * MS,
                                  point_period_ns=20 * MS)
    assert (trajectory.header.stamp.sec, trajectory.header.stamp.nanosec) == (0, 5 * MS)  # never 0: "start now"
    assert [p.time_from_start.nanosec for p in trajectory.points] == [20 * MS, 40 * MS, 60 * MS]
    np.testing.assert_array_equal([p.positions for p in trajectory.points], points)
    np.testing.assert_array_equal(command_positions(trajectory), [1.0, 2.0])
    with pytest.raises(ValueError, match="positive period"):
        joint_trajectory(["a", "b"], points, stamp_ns=0, time_from_start_ns=20 * MS)


def test_upcoming_points_follow_the_chunk_under_the_limits_and_hold_where_it_runs_out():
    logic = CommandLogic(JointLimits.from_lists(1, max_velocity=[10.0]), period_ns=20 * MS)  # 0.2 per period
    logic.observe_positions(np.zeros(1))
    logic.accept_chunk(_chunk(0, [[1.0], [1.0], [1.1], [1.1]]), now_ns=0)  # starts 1.0 from the arm
    command = logic.tick(20 * MS)
    upcoming = logic.upcoming(command.target_ns, 4)
    np.testing.assert_allclose(upcoming[:, 0], [0.4, 0.6, 0.8, 0.8])  # rate-limited, then held past the end
    assert logic.tick(40 * MS).positions[0] == pytest.approx(0.4)  # previewing sent nothing: on from 0.2
