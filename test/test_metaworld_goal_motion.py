"""Moving goals in the Meta-World tasks (sim/metaworld.py): the goal moves at its speed, in a direction
fixed by the episode seed, stays in the region the task draws it from, and the state follows it."""

import numpy as np
import pytest

from embodied_ros.sim.metaworld import MetaWorldTask, bounce, hold_action

SPEED = 0.004
STILL = np.zeros(4)


def test_bounce_reflects_at_the_edges_and_flips_the_velocity():
    low, high = np.array([0.0, 0.0]), np.array([1.0, 1.0])
    position, velocity = bounce(np.array([0.9, 0.5]), np.array([0.3, -0.1]), low, high)
    np.testing.assert_allclose(position, [0.8, 0.4])
    np.testing.assert_allclose(velocity, [-0.3, -0.1])
    position, velocity = bounce(np.array([0.05, 0.5]), np.array([-0.1, 0.0]), low, high)
    np.testing.assert_allclose(position, [0.05, 0.5])
    np.testing.assert_allclose(velocity, [0.1, 0.0])


def test_hold_action_stops_the_hand_and_keeps_the_gripper():
    np.testing.assert_array_equal(hold_action(np.array([0.3, -0.2, 0.5, 0.7])), [0.0, 0.0, 0.0, 0.7])
    np.testing.assert_array_equal(hold_action(None), [0.0, 0.0, 0.0, 0.0])


def goal_path(task, seed, speed=SPEED, steps=60):
    env = MetaWorldTask(task, goal_speed=speed)
    try:
        states = [env.reset(seed).state] + [env.step(STILL).state for _ in range(steps)]
        region = env.env._random_reset_space
        return np.stack(states), region.low[-3:], region.high[-3:]
    finally:
        env.close()


@pytest.mark.parametrize("task", ["reach-v3", "button-press-topdown-v3"])
def test_goal_moves_at_its_speed_inside_its_region_reproducibly(task):
    states, low, high = goal_path(task, seed=3)
    goals = states[:, 7:10]
    moves = np.diff(goals, axis=0)
    assert np.all(np.abs(moves[:, 2]) < 1e-12)  # horizontal only
    per_step = np.linalg.norm(moves[:, :2], axis=1)
    assert np.all(per_step <= SPEED * (1 + 1e-4)) and np.median(per_step) == pytest.approx(SPEED, rel=1e-4)  # float32
    assert np.linalg.norm(goals[-1, :2] - goals[0, :2]) > 10 * SPEED  # it travels
    if task == "reach-v3":  # the goal point itself is drawn from the region
        assert np.all(goals[:, :2] >= low[:2] - 1e-9) and np.all(goals[:, :2] <= high[:2] + 1e-9)
    else:  # the box is; the button on it moves with it
        button = states[:, 4:6]
        np.testing.assert_allclose(button[-1] - button[0], goals[-1, :2] - goals[0, :2], atol=2e-3)
    again, _, _ = goal_path(task, seed=3)
    np.testing.assert_array_equal(again, states)
    other, _, _ = goal_path(task, seed=4)
    first_move = other[1, 7:9] - other[0, 7:9]
    assert not np.allclose(first_move, moves[0, :2])  # another seed, another direction


def test_a_still_goal_stays_where_the_task_put_it():
    states, _, _ = goal_path("reach-v3", seed=3, speed=0.0, steps=10)
    assert np.all(states[:, 7:10] == states[0, 7:10])


@pytest.mark.parametrize("task, speed, problem", [("push-v3", 0.001, "moving goal"),
                                                  ("reach-v3", -0.001, "goal speed")])
def test_unsupported_goal_motion_is_refused(task, speed, problem):
    with pytest.raises(ValueError, match=problem):
        MetaWorldTask(task, goal_speed=speed)
