"""Cutting an episode into lock-step control steps and building each step's observation."""

import numpy as np
import pytest

from embodied_ros.replay.bag_reader import BagError
from embodied_ros.replay.episode import CameraStream, Episode, JointSeries
from embodied_ros.replay.steps import StateSelector, observation_at, plan_steps

MS = 1_000_000


def _episode(joint_positions=None):
    frames = tuple(np.full((4, 4, 3), i, np.uint8) for i in range(4))
    camera = CameraStream("/cam", np.array([10, 43, 76, 110]) * MS, frames)  # ~30 Hz
    positions = joint_positions if joint_positions is not None else np.arange(12.0).reshape(6, 2)
    joints = JointSeries("/joint_states", np.array([0, 20, 40, 60, 80, 100]) * MS, ("a", "b"), positions)
    return Episode("mem", "mcap", 0, 120 * MS, {"front": camera}, joints,
                   ((0, "first"), (50 * MS, "second")), None, "")


def test_steps_start_when_every_input_has_a_sample_and_see_the_newest_ones():
    episode = _episode()
    steps = plan_steps(episode, 0.04)
    assert [s.bag_ns for s in steps] == [10 * MS, 50 * MS, 90 * MS]
    assert [s.frames["front"] for s in steps] == [0, 1, 2]
    assert [s.joint_index for s in steps] == [0, 2, 4]
    assert [s.instruction for s in steps] == ["first", "second", "second"]
    assert steps[1].input_age_ms(episode) == {"front": 7.0, "joint_states": 10.0}
    assert len(plan_steps(episode, 0.04, max_steps=2)) == 2


def test_observation_holds_the_step_frames_and_the_state_in_model_order():
    episode = _episode()
    step = plan_steps(episode, 0.04)[1]
    observation = observation_at(episode, step, StateSelector(episode, ("b", "a")), stamp_ns=7)
    assert observation.stamp_ns == 7 and observation.instruction == "second"
    assert observation.images["front"][0, 0, 0] == 1
    np.testing.assert_array_equal(observation.state, [5.0, 4.0])
    assert observation.state.dtype == np.float32


def test_state_errors_name_the_joints():
    episode = _episode()
    with pytest.raises(BagError, match=r"needs joints \['elbow'\].*they name \['a', 'b'\]"):
        StateSelector(episode, ("a", "elbow"))
    with pytest.raises(ValueError, match="positive"):
        plan_steps(episode, 0.0)


def test_non_finite_state_is_passed_on_for_the_graph_to_refuse():
    positions = np.arange(12.0).reshape(6, 2)
    positions[:3, 1] = np.nan  # joint b published only from the 4th message on
    episode = _episode(positions)
    selector = StateSelector(episode, ("a", "b"))
    steps = plan_steps(episode, 0.04)
    assert np.isnan(observation_at(episode, steps[0], selector, 0).state[1])
    np.testing.assert_array_equal(observation_at(episode, steps[2], selector, 0).state, [8.0, 9.0])


def test_lockstep_commands_land_on_the_bag_time_of_their_own_tick():
    """A step whose controller sent only its first two ticks (e.g. deactivated mid-step): the
    commands keep their ticks, they are not shifted to the end of the step."""
    from embodied_ros.graph.lockstep import StepCommand, StepOutput
    from embodied_ros.replay.record import ReplayRecord
    from embodied_ros.replay.runner import _take_step

    episode = _episode()
    step = plan_steps(episode, 0.04)[1]  # bag time 50 ms
    graph_ns = 7_000 * MS  # the graph's clock for this step
    commands = [StepCommand(graph_ns + j * 8 * MS, np.array([j, -j], float)) for j in range(2)]  # 125 Hz ticks
    record = ReplayRecord(mode="lockstep")
    _take_step(record, episode, step, StepOutput(1, graph_ns, None, commands, {}), {graph_ns: step})
    assert [t for t, _ in record.commands] == [50 * MS, 58 * MS]
    np.testing.assert_array_equal(record.commands[1][1], [1.0, -1.0])
