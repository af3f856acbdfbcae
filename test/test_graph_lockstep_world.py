"""Lock-step acceptance with a real world-action runtime: over 12 steps with perception every 2
and prediction every 3, each stage runs exactly on its steps, the action head uses the latest
prediction, both stochastic stages take the graph's noise (so the graph equals direct calls), and
two runs give identical chunks and commands."""

import numpy as np
import pytest

from embodied_ros.node_infra.config import load_config
from embodied_ros.graph.lockstep import LockstepGraph
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import infer, load_runtime
from embodied_ros.pipeline.types import Observation
from graph_bundles import world_action_bundle
from graph_harness import next_domain

STEPS = 12
INSTRUCTION = "hand the cup to the left arm"
SEED = 9


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    return load_runtime(world_action_bundle(tmp_path_factory))


@pytest.fixture(scope="module")
def episode(runtime):
    rng = np.random.default_rng(1)
    height, width = runtime.spec.image_size
    return [({c: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for c in runtime.spec.camera_names},
             rng.uniform(-1, 1, len(runtime.spec.state_names)).astype(np.float32)) for _ in range(STEPS)]


@pytest.fixture(scope="module")
def config():
    return load_config(None, {"schedule.perception": 2, "schedule.world": 3, "stages.noise_seed": SEED})


def _run(config, runtime, episode):
    with LockstepGraph(config, runtime=runtime, domain_id=next_domain(), timeout_s=120) as graph:
        return graph.run(episode, INSTRUCTION)


@pytest.fixture(scope="module")
def first_run(config, runtime, episode):
    return _run(config, runtime, episode)


def _direct_chunks(runtime, episode, stamps):
    """The schedule done by hand: embeddings of step k - k%2, prediction of step k - k%3."""
    embeddings, world, chunks = None, None, []
    for step, ((images, state), stamp) in enumerate(zip(episode, stamps)):
        observation = Observation(stamp, images, state, INSTRUCTION)
        if step % 2 == 0:
            embeddings = runtime.encode(observation)
        prefix = runtime.build_prefix(embeddings, observation)
        if step % 3 == 0:
            world = runtime.predict_world(prefix, _world_noise(runtime, step))
        chunks.append(runtime.act(prefix, world, _action_noise(runtime, step)))
    return chunks


def _action_noise(runtime, step):
    return stage_noise(SEED, "action", step, runtime.spec.noise_shape)


def _world_noise(runtime, step):
    return stage_noise(SEED, "world", step, runtime.spec.world_noise_shape)


def test_each_stage_runs_exactly_on_its_steps(first_run):
    def ran(stage):
        return [o.step for o in first_run if stage in o.timings and o.timings[stage].sequence > 0]

    assert ran("perception") == [0, 2, 4, 6, 8, 10]
    assert ran("world") == [0, 3, 6, 9]
    for stage in ("observation", "prefix", "action", "controller"):
        assert ran(stage) == list(range(STEPS))


def test_action_head_uses_the_latest_prediction(first_run, runtime, episode):
    expected = _direct_chunks(runtime, episode, [o.stamp_ns for o in first_run])
    for output, chunk in zip(first_run, expected):
        np.testing.assert_allclose(output.chunk.actions, chunk.actions, atol=1e-5, rtol=0,
                                   err_msg=f"step {output.step}")


def test_first_step_equals_direct_infer_with_the_graph_noises(first_run, runtime, episode):
    """Every stage runs at step 0: the chunk is `infer` on that observation with both stage noises
    (the runtime's own draw, seeded by the observation stamp, would give another prediction)."""
    images, state = episode[0]
    observation = Observation(first_run[0].stamp_ns, images, state, INSTRUCTION)
    direct = infer(runtime, observation, _action_noise(runtime, 0), _world_noise(runtime, 0))
    np.testing.assert_allclose(first_run[0].chunk.actions, direct.actions, atol=1e-5, rtol=0)
    stamp_seeded = infer(runtime, observation, _action_noise(runtime, 0))
    assert not np.allclose(stamp_seeded.actions, direct.actions, atol=1e-5, rtol=0)


def test_two_runs_give_identical_chunks_and_commands(first_run, config, runtime, episode):
    second_run = _run(config, runtime, episode)
    for a, b in zip(first_run, second_run):
        np.testing.assert_array_equal(a.chunk.actions, b.chunk.actions, err_msg=f"step {a.step}")
        np.testing.assert_array_equal(_positions(a), _positions(b), err_msg=f"step {a.step}")
        assert [c.stamp_ns for c in a.commands] == [c.stamp_ns for c in b.commands]


def _positions(output):
    return np.stack([c.positions for c in output.commands])
