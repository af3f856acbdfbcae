"""Synchronous execution with an inference delay (sim/metaworld_eval.run_episode, `blocking_delay`) on
real rclpy with a test runtime: the world steps on while each chunk is solved, the arm holds, and the
chunk then runs from its first row; held steps count toward the episode's step cap."""

import dataclasses

import numpy as np
import pytest

from embodied_ros.node_infra.config import load_config
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation
from embodied_ros.sim.metaworld import StepResult
from embodied_ros.sim.metaworld_eval import run_episode
from domains import next_domain
from fake_runtime import FakeRuntime

CAMERA, SEED, DELAY, CAP, PLAN_EVERY = "front", 4, 3, 30, 5


class MovingWorld:
    """A world that moves on by itself, whatever the arm does: its state and image depend on the number
    of steps taken only. Records the actions it was given."""

    text = "follow the dot"

    def __init__(self, size):
        self.size, self.t, self.actions = size, 0, []

    def observe(self) -> StepResult:
        state = np.array([np.sin(0.3 * self.t), np.cos(0.2 * self.t), 0.05 * self.t], np.float32)
        image = np.full((*self.size, 3), (17 * self.t) % 256, np.uint8)
        return StepResult(state, image, 0.0, False)

    def reset(self, seed) -> StepResult:
        self.t, self.actions = 0, []
        return self.observe()

    def step(self, action) -> StepResult:
        self.actions.append(np.array(action, dtype=np.float64))
        self.t += 1
        return self.observe()


@pytest.fixture(scope="module")
def runtime():
    runtime = FakeRuntime(cameras=(CAMERA,))
    runtime.spec = dataclasses.replace(runtime.spec, action_names=("dx", "dy", "dz", "grip"), noise_shape=(10, 4),
                                       action_period_s=0.1)
    return runtime


@pytest.fixture(scope="module")
def config():
    return load_config(None, {"schedule.step_period_s": 0.1, "schedule.perception": PLAN_EVERY,
                              "schedule.prefix": PLAN_EVERY, "schedule.action": PLAN_EVERY,
                              "controller.rate_hz": 10.0, "controller.output": "joint_trajectory",
                              "controller.ramp_s": 0.0, "stages.noise_seed": SEED})


def _episode(config, runtime, blocking_delay):
    world = MovingWorld(runtime.spec.image_size)
    record = run_episode(config, runtime, world, "moving", SEED, CAMERA, CAP, next_domain(), blocking_delay)
    return record, world


def test_the_arm_holds_while_each_chunk_after_the_first_is_solved(config, runtime):
    record, world = _episode(config, runtime, DELAY)
    assert record["steps"] == len(world.actions) == CAP  # the cap counts held steps
    # plans at graph steps 0, 5, 10, 15: the first lands at once, each later one costs DELAY env steps
    assert record["held_steps"] == [5, 6, 7, 13, 14, 15, 21, 22, 23, 29]
    actions = np.stack(world.actions)
    for t in record["held_steps"]:
        np.testing.assert_array_equal(actions[t, :3], 0.0)  # no end-effector motion
        assert actions[t, 3] == actions[t - 1, 3]  # the gripper as last commanded


def test_each_chunk_runs_from_its_first_row_on_the_observation_before_the_hold(config, runtime):
    """The chunk of plan p saw the world as it was when the hold began, and its rows 0..4 run after
    the hold; without the delay the same graph executes chunks back to back."""
    record, world = _episode(config, runtime, DELAY)
    actions = np.stack(world.actions)
    starts = [0, 8, 16, 24]  # env steps where plans 0..3 start executing
    for plan, start in enumerate(starts):
        observed_at = start - DELAY if plan else 0
        view = MovingWorld(runtime.spec.image_size)
        view.t = observed_at
        seen = view.observe()
        observation = Observation(0, {CAMERA: seen.image}, seen.state, MovingWorld.text)
        chunk = infer(runtime, observation, stage_noise(SEED, "action", plan * PLAN_EVERY,
                                                        runtime.spec.noise_shape)).actions
        rows = min(PLAN_EVERY, CAP - start)
        np.testing.assert_allclose(actions[start:start + rows], chunk[:rows], atol=1e-6, rtol=0,
                                   err_msg=f"plan {plan}")
    plain, _ = _episode(config, runtime, 0)
    assert plain["held_steps"] == [] and plain["steps"] == CAP


def test_a_negative_delay_is_refused(config, runtime):
    with pytest.raises(ValueError, match="blocking delay"):
        _episode(config, runtime, -1)
