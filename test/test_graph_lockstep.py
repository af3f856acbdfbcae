"""Lock-step graph on real rclpy with a test runtime: schedule kept exactly, runs reproducible."""

import numpy as np
import pytest

from embodied_ros.node_infra.config import load_config
from embodied_ros.graph.lockstep import LockstepGraph
from embodied_ros.pipeline.noise import stage_noise
from domains import next_domain
from fake_runtime import FakeRuntime, random_images


def _episode(runtime, steps, seed=3):
    rng = np.random.default_rng(seed)
    return [(random_images(runtime, rng), rng.standard_normal(3)) for _ in range(steps)]


def _run(config, runtime, episode, instruction="stack the cups"):
    with LockstepGraph(config, runtime=runtime, domain_id=next_domain(), timeout_s=30) as graph:
        return graph.run(episode, instruction)


@pytest.fixture(scope="module")
def multirate_config():
    return load_config(None, {"schedule.perception": 2, "schedule.prefix": 2, "schedule.world": 3,
                              "schedule.step_period_s": 0.1, "controller.rate_hz": 50.0})


def test_each_stage_runs_exactly_on_its_steps_and_reads_the_newest_upstream(multirate_config):
    runtime = FakeRuntime(has_world_model=True)
    outputs = _run(multirate_config, runtime, _episode(runtime, 12))
    ran = {stage: [o.step for o in outputs if stage in o.timings and o.timings[stage].sequence > 0]
           for stage in ("observation", "perception", "prefix", "world", "action", "controller")}
    assert ran["observation"] == list(range(12))
    assert ran["perception"] == [0, 2, 4, 6, 8, 10]
    assert ran["prefix"] == [0, 2, 4, 6, 8, 10]
    assert ran["world"] == [0, 3, 6, 9]
    assert ran["action"] == list(range(12))
    stamp = outputs[0].stamp_ns
    period = outputs[1].stamp_ns - outputs[0].stamp_ns
    # the world predictor at step 9 used the prefix of step 8; the action head at step 7 the
    # prefix of step 6 and the prediction of step 6
    world_calls = [s for stage, s in runtime.calls if stage == "world"]
    assert world_calls == [stamp + k * period for k in (0, 2, 6, 8)]
    assert outputs[7].chunk.stamp_ns == stamp + 6 * period
    for o in outputs:  # 50 Hz ticks of a 0.1 s step, each command stamped with its own
        assert [c.stamp_ns for c in o.commands] == [o.stamp_ns + j * 20_000_000 for j in range(5)]


def test_two_runs_give_identical_chunks_and_commands(multirate_config):
    runtime = FakeRuntime(has_world_model=True)
    episode = _episode(runtime, 6)
    first = _run(multirate_config, runtime, episode)
    second = _run(multirate_config, runtime, episode)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a.chunk.actions, b.chunk.actions)
        np.testing.assert_array_equal(np.stack([c.positions for c in a.commands]),
                                      np.stack([c.positions for c in b.commands]))


def test_chunk_equals_the_direct_runtime_call_with_the_same_noise():
    from embodied_ros.pipeline.stages import infer
    from embodied_ros.pipeline.types import Observation

    runtime = FakeRuntime()
    config = load_config(None, {"stages.noise_seed": 11})
    episode = _episode(runtime, 1)
    [output] = _run(config, runtime, episode, "open the drawer")
    images, state = episode[0]
    observation = Observation(output.stamp_ns, images, state.astype(np.float32), "open the drawer")
    expected = infer(runtime, observation, stage_noise(11, "action", 0, runtime.spec.noise_shape))
    np.testing.assert_allclose(output.chunk.actions, expected.actions, atol=1e-6)


def test_params_file_nests_dotted_names_for_ros():
    from embodied_ros.graph.processes import node_command, params_file_content
    from embodied_ros.share import module_command

    config = load_config(None, {"schedule.perception": 2, "schedule.mode": "lockstep"})
    content = params_file_content(config)["/**"]["ros__parameters"]
    assert content["schedule"]["perception"] == 2 and content["use_sim_time"] is True
    assert "cameras" not in content["inputs"]  # empty lists are left to the node's default
    command = node_command("prefix", "/tmp/p.yaml", namespace="arm", remaps=["joint_states:=/arm/js"])
    assert command[:4] == module_command("embodied_ros.nodes.prefix")
    assert command[-4:] == ["-r", "__ns:=/arm", "-r", "joint_states:=/arm/js"]


def test_warm_up_runs_every_stage_once_before_any_control_step():
    runtime = FakeRuntime(has_world_model=True)
    runtime.warm_up()
    assert [stage for stage, _ in runtime.calls] == ["perception", "prefix", "world", "action"]


def test_controller_maps_columns_to_joints_by_name():
    runtime = FakeRuntime()
    config = load_config(None, {
        "controller.output": "float64_multi_array", "controller.joints": ["arm_b", "arm_a"],
        "controller.action_columns": ["j1", "j0"],
        "controller.ramp_s": 0.0})  # no ramp: the arm's joints are not in the joint states
    outputs = _run(config, runtime, _episode(runtime, 2))
    commands = np.stack([c.positions for o in outputs for c in o.commands])  # [ticks, (arm_b, arm_a)]
    assert commands.shape == (10, 2)
    first_chunk = outputs[0].chunk.actions
    np.testing.assert_allclose(commands[0], first_chunk[0, [1, 0]])  # arm_b follows column j1, arm_a j0


def test_instructions_are_taken_stripped_or_refused_without_waiting_out_the_step_timeout():
    from embodied_ros.pipeline.stages import infer
    from embodied_ros.pipeline.types import Observation

    runtime = FakeRuntime()
    episode = _episode(runtime, 4)
    config = load_config(None, {"stages.noise_seed": 5})
    with LockstepGraph(config, runtime=runtime, domain_id=next_domain(), timeout_s=10) as graph:
        padded = graph.step(*episode[0], "  open the drawer\n")
        empty = graph.step(*episode[1], "   ")
        too_long = graph.step(*episode[2], "x" * 5000)
        back = graph.step(*episode[3], "open the drawer")
    images, state = episode[0]
    observation = Observation(padded.stamp_ns, images, state.astype(np.float32), "open the drawer")
    expected = infer(runtime, observation, stage_noise(5, "action", 0, runtime.spec.noise_shape))
    assert padded.input_problem == ""
    np.testing.assert_allclose(padded.chunk.actions, expected.actions, atol=1e-6)
    assert "instruction is empty" in empty.input_problem
    assert "5000 characters" in too_long.input_problem
    assert back.input_problem == ""


def test_a_simulated_inference_delay_lands_each_chunk_that_many_steps_late():
    runtime = FakeRuntime()  # chunks of 10 rows 20 ms apart: one lasts two 0.1 s steps
    settings = {"controller.output": "float64_multi_array", "controller.rate_hz": 10.0, "controller.ramp_s": 0.0,
                "schedule.step_period_s": 0.1}
    episode = _episode(runtime, 6)
    prompt = _run(load_config(None, settings), runtime, episode)
    delayed = _run(load_config(None, {**settings, "schedule.lockstep_action_delay": 1}), runtime, episode)
    for a, b in zip(prompt, delayed):  # the same chunks are solved either way
        np.testing.assert_array_equal(a.chunk.actions, b.chunk.actions)
    row_at_next_step = 4  # row i is the target at the chunk's stamp + (i + 1) * 20 ms: row 4 at + 100 ms
    np.testing.assert_allclose(delayed[0].commands[0].positions, prompt[0].commands[0].positions)  # nothing executing: at once
    for step in range(2, 6):
        np.testing.assert_allclose(delayed[step].commands[0].positions,
                                   prompt[step - 1].chunk.actions[row_at_next_step], atol=1e-6)
        assert not np.allclose(delayed[step].commands[0].positions, prompt[step].commands[0].positions)
