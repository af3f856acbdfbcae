"""Safety of the command stream: hostile chunks are refused and the arm holds with the reason; the
start-up ramp leaves the measured position smoothly; limits and ramp settings are checked."""

import numpy as np
import pytest

from embodied_ros.deploy import CommandLogic, JointLimits, TimedChunk
from embodied_ros.deploy.command import CHUNK_RAN_OUT, WAITING_FOR_JOINT_STATE
from embodied_ros.deploy.limits import NO_JOINT_STATE_TO_CHECK, NON_FINITE_CHUNK, chunk_violation
from embodied_ros.deploy.ramp import StartRamp
from embodied_ros.node_infra.config import load_config
from embodied_ros.node_infra.stats import reason_kind

MS = 1_000_000
NAMES = ("shoulder", "elbow")


def _chunk(stamp_ms, rows, period_ms=20):
    return TimedChunk(stamp_ns=stamp_ms * MS, period_ns=period_ms * MS, positions=np.asarray(rows, np.float64))


def _limits(**lists):
    return JointLimits.from_lists(2, joint_names=NAMES, **lists)


def _streaming(limits, measured=(0.0, 0.0), **kwargs):
    """Logic streaming a good chunk (0.1, 0.1 held for 1 s) at t = 20 ms."""
    logic = CommandLogic(limits, period_ns=20 * MS, **kwargs)
    logic.observe_positions(np.asarray(measured))
    logic.accept_chunk(_chunk(0, [[0.1, 0.1]] * 50), now_ns=0)
    assert not logic.tick(20 * MS).holding
    return logic


def _refused(logic, rows, measured=None):
    """Offer a hostile chunk at 40 ms; the next command must hold at the last one, with the reason."""
    if measured is not None:
        logic.observe_positions(np.asarray(measured))
    before = logic.tick(40 * MS).positions
    logic.accept_chunk(_chunk(40, rows), now_ns=40 * MS)
    held = logic.tick(60 * MS)
    assert held.holding
    np.testing.assert_array_equal(held.positions, before)
    return held.reason


def test_a_chunk_that_jumps_away_from_the_joint_state_is_refused():
    logic = _streaming(_limits(max_jump=[0.3, 0.3]))
    reason = _refused(logic, [[0.1, 0.9]] * 10, measured=[0.1, 0.1])
    assert reason == "action chunk starts 0.8 away from the joint state on elbow (max_jump 0.3)"


def test_a_chunk_that_jumps_between_rows_is_refused():
    logic = _streaming(_limits(max_jump=[0.3, 0.3]))
    reason = _refused(logic, [[0.1, 0.1], [0.1, 0.2], [0.7, 0.2]], measured=[0.1, 0.1])
    assert reason == "action chunk jumps 0.6 on shoulder between rows 1 and 2 (max_jump 0.3)"


def test_a_chunk_beyond_a_position_limit_is_refused_not_clamped():
    logic = _streaming(_limits(lower=[-1.0, -1.0], upper=[1.0, 0.5]))
    reason = _refused(logic, [[0.1, 0.1], [0.2, 0.3], [0.3, 0.6]])
    assert reason == "action chunk leaves the position limits: elbow at 0.6 in row 2 (position_upper 0.5)"
    assert "position_lower -1" in _refused(_streaming(_limits(lower=[-1.0, -1.0])), [[-1.5, 0.0]])


def test_a_chunk_faster_than_the_velocity_limit_is_refused():
    logic = _streaming(_limits(max_velocity=[2.0, 2.0]))
    reason = _refused(logic, [[0.1, 0.1], [0.1, 0.2]])  # 0.1 in 20 ms: 5 units/s
    assert reason == "action chunk moves elbow at 5/s between rows 0 and 1 (max_velocity 2)"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_row_is_refused_and_named(bad):
    logic = _streaming(_limits())
    reason = _refused(logic, [[0.1, 0.1], [0.1, 0.1], [0.1, bad]])
    assert reason.startswith(NON_FINITE_CHUNK) and "(row 2, elbow = " in reason


def test_after_a_refusal_the_next_good_chunk_streams_and_the_reason_kind_is_stable():
    logic = _streaming(_limits(max_jump=[0.3, 0.3]))
    first = _refused(logic, [[0.1, 0.9]] * 10, measured=[0.1, 0.1])
    logic.accept_chunk(_chunk(50, [[0.1, 0.95]] * 10), now_ns=60 * MS)
    assert reason_kind(logic.tick(70 * MS).reason) == reason_kind(first)  # a new size, the same kind of hold
    logic.accept_chunk(_chunk(60, [[0.15, 0.15]] * 10), now_ns=70 * MS)
    resumed = logic.tick(80 * MS)
    assert not resumed.holding and resumed.positions == pytest.approx([0.15, 0.15])


def test_a_jump_limit_without_any_joint_state_refuses_rather_than_guesses():
    limits = _limits(max_jump=[0.3, 0.3])
    assert chunk_violation(limits, np.zeros((3, 2)), 0.02, None) == NO_JOINT_STATE_TO_CHECK
    assert chunk_violation(limits, np.zeros((3, 2)), 0.02, np.zeros(2)) == ""
    assert chunk_violation(_limits(), np.zeros((3, 2)), 0.02, None) == ""  # nothing to check against


def test_chunks_just_inside_the_limits_stream():
    limits = _limits(lower=[0.0, 0.0], upper=[1.0, 1.0], max_velocity=[5.0, 5.0], max_jump=[0.1, 0.1])
    rows = np.stack([np.linspace(0.0, 0.99, 12)] * 2, axis=1)  # steps of 0.09 in 20 ms: 4.5 units/s
    assert chunk_violation(limits, rows, 0.02, np.array([0.05, 0.0])) == ""


def test_ramp_goes_from_the_measured_position_into_the_chunk_over_ramp_s():
    logic = CommandLogic(_limits(), period_ns=20 * MS, ramp_s=0.1)
    logic.observe_positions(np.array([0.0, 1.0]))
    logic.accept_chunk(_chunk(0, [[0.5, 0.5]] * 50), now_ns=0)
    commands = [logic.tick(t * MS) for t in range(20, 200, 20)]
    assert not any(c.holding for c in commands)
    positions = np.stack([c.positions for c in commands])  # ticks at 20 .. 180 ms; the ramp 20 -> 120 ms
    np.testing.assert_allclose(positions[0], [0.0, 1.0])
    np.testing.assert_allclose(positions[:, 0], [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(positions[:, 1], [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.5, 0.5, 0.5])


def test_ramp_max_velocity_lengthens_the_ramp_for_a_far_first_command():
    ramp = StartRamp.towards(np.array([0.0, 0.0]), np.array([2.0, 0.5]), start_ns=0, min_duration_s=0.5,
                             max_velocity=1.0)
    assert ramp.duration_ns == 2000 * MS  # 2 units at 1 unit/s, longer than the 0.5 s asked for
    np.testing.assert_allclose(ramp.target(1000 * MS, np.array([2.0, 0.5])), [1.0, 0.25])
    np.testing.assert_allclose(ramp.target(2000 * MS, np.array([2.1, 0.5])), [2.1, 0.5])
    near = StartRamp.towards(np.zeros(2), np.full(2, 0.1), start_ns=0, min_duration_s=0.5, max_velocity=1.0)
    assert near.duration_ns == 500 * MS


def test_ramp_waits_for_a_joint_state_and_restarts_after_deactivation():
    logic = CommandLogic(_limits(), period_ns=20 * MS, ramp_s=0.04)
    logic.accept_chunk(_chunk(0, [[0.5, 0.5]] * 50), now_ns=0)
    assert logic.tick(20 * MS) is None and logic.hold_reason(20 * MS) == WAITING_FOR_JOINT_STATE
    logic.observe_positions(np.array([0.0, 0.0]))
    assert [logic.tick(t * MS).positions[0] for t in (40, 60, 80)] == pytest.approx([0.0, 0.25, 0.5])
    logic.restart()  # deactivated; the arm is moved meanwhile
    logic.observe_positions(np.array([1.0, 1.0]))
    assert logic.hold(100 * MS, "deactivated").positions == pytest.approx([1.0, 1.0])
    assert [logic.tick(t * MS).positions[0] for t in (100, 120, 140)] == pytest.approx([1.0, 0.75, 0.5])


def test_a_hold_during_the_ramp_starts_it_again_from_the_arm():
    logic = CommandLogic(_limits(), period_ns=20 * MS, ramp_s=0.08)
    logic.observe_positions(np.array([0.0, 0.0]))
    logic.accept_chunk(_chunk(0, [[0.8, 0.8]] * 3), now_ns=0)
    assert [logic.tick(t * MS).positions[0] for t in (20, 40, 60)] == pytest.approx([0.0, 0.2, 0.4])
    assert logic.tick(80 * MS).reason == CHUNK_RAN_OUT
    logic.observe_positions(np.array([0.4, 0.4]))
    logic.accept_chunk(_chunk(80, [[0.8, 0.8]] * 50), now_ns=80 * MS)
    assert [logic.tick(t * MS).positions[0] for t in (100, 120, 180)] == pytest.approx([0.4, 0.5, 0.8])


def test_safety_settings_are_checked_and_unset_limits_are_named():
    assert _limits().unset() == ["position_lower", "position_upper", "max_velocity", "max_jump"]
    assert _limits(upper=[1.0, 1.0], max_jump=[0.2, 0.2]).unset() == ["position_lower", "max_velocity"]
    with pytest.raises(ValueError, match=r"max_jump must be positive, not for \['elbow'\]"):
        _limits(max_jump=[0.1, 0.0])
    with pytest.raises(ValueError, match=r"max_jump has 1 values for 2 joints"):
        _limits(max_jump=[0.1])
    with pytest.raises(ValueError, match=r"controller.max_jump has 1 values for 2 joints"):
        load_config(None, {"controller.joints": ["a", "b"], "controller.max_jump": [0.1]})
    with pytest.raises(ValueError, match="controller.ramp_s must be >= 0"):
        load_config(None, {"controller.ramp_s": -1.0})
    with pytest.raises(ValueError, match="controller.dry_run must be true or false"):
        load_config(None, {"controller.dry_run": "yes"})
    config = load_config(None, {})
    assert config.controller.ramp_s > 0 and not config.controller.dry_run  # safe unless told otherwise


def test_unset_limits_are_warned_about_once_per_process_however_many_controllers_start(capfd):
    """A lock-step evaluation builds a controller per episode: `eval metaworld` said it 20 times."""
    import rclpy
    from rclpy.context import Context

    from embodied_ros.nodes.controller import ControllerNode
    from domains import next_domain

    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        for joints in (["once_a", "once_b"], ["once_a", "once_b"], ["once_a", "once_b"], ["other_a"]):
            node = ControllerNode(parameters={"controller.joints": joints}, context=context)
            node.trigger_configure()
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)
    err = capfd.readouterr().err
    assert err.count("no limits in") == 2, err  # once for each set of joints
    assert err.count("for joints ['once_a', 'once_b']") == 1 and err.count("for joints ['other_a']") == 1
