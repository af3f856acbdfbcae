"""Lock-step acceptance with LingBot-VA (lerobot's layout, the tiny test checkpoint): over 12 steps with
the world predictor every 3rd step, each stage runs exactly on its steps, the world node carries one
episode (KV pool, VAE streams, observed frames, executed actions) from run to run and starts a new
one when the instruction changes, the action head uses the latest prediction, so the graph equals
direct calls of the runtime with the graph's noise, every second prediction is published decoded,
and two runs give identical chunks and commands, composed (stage outputs by reference) or one
process per node (serialized); and the shipped config with its bundle equals direct calls too."""

import time
from dataclasses import replace

import numpy as np
import pytest

from sensor_msgs.msg import Image

from embodied_ros.inputs.stamps import time_to_ns
from embodied_ros.node_infra.config import load_config
from embodied_ros.node_infra.topics import lockstep_qos, world_frames_topic
from embodied_ros.graph.lockstep import LockstepGraph
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import load_runtime
from embodied_ros.pipeline.types import Observation
from embodied_ros.share import share_path
from domains import next_domain
from graph_bundles import world_action_bundle

STEPS = 12
INSTRUCTIONS = ["put the black bowl on the plate"] * 8 + ["open the top drawer"] * 4  # a new episode at step 8
SEED = 9


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return world_action_bundle(tmp_path_factory)


@pytest.fixture(scope="module")
def runtime(bundle):
    return load_runtime(bundle)


@pytest.fixture(scope="module")
def episode(runtime):
    rng = np.random.default_rng(1)
    height, width = runtime.spec.image_size
    return [({c: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for c in runtime.spec.camera_names},
             rng.uniform(-1, 1, len(runtime.spec.state_names)).astype(np.float32)) for _ in range(STEPS)]


@pytest.fixture(scope="module")
def config():
    return load_config(None, {"schedule.perception": 1, "stages.noise_seed": SEED, "stages.world_frames_every": 2})


def _run(config, runtime, episode, log_dir=None, frames=None):
    """The episode through the lock-step graph; `frames` (a list) gets every decoded world frame
    message the graph publishes."""
    with LockstepGraph(config, runtime=runtime, domain_id=next_domain(), timeout_s=120, log_dir=log_dir) as graph:
        if frames is not None:
            for camera in runtime.spec.camera_names:
                graph.driver.create_subscription(Image, world_frames_topic(camera), frames.append, lockstep_qos())
        outputs = [graph.step(images, state, instruction)
                   for (images, state), instruction in zip(episode, INSTRUCTIONS)]
        if frames is not None:
            wait = time.monotonic() + 10.0
            while len(frames) < 2 * len(runtime.spec.camera_names) and time.monotonic() < wait:
                graph.executor.spin_once(timeout_sec=0.1)
        return outputs


@pytest.fixture(scope="module")
def world_frames():
    return []


@pytest.fixture(scope="module")
def first_run(config, runtime, episode, world_frames):
    return _run(config, runtime, episode, frames=world_frames)


def _direct(runtime, episode, stamps, instructions=INSTRUCTIONS, seed=SEED, period=3):
    """The schedule done by hand: every step's prefix reaches the world episode, the prediction is
    made on steps k % period == 0, the action head reads the newest one. (chunks, world results by step)"""
    world_episode = runtime.world_episode()
    world, chunks, predictions = None, [], {}
    for step, ((images, state), stamp, instruction) in enumerate(zip(episode, stamps, instructions)):
        observation = Observation(stamp, images, state, instruction)
        prefix = runtime.build_prefix(runtime.encode(observation), observation)
        runtime.observe_world(world_episode, prefix)
        if step % period == 0:
            noise = stage_noise(seed, "world", step, runtime.spec.world_noise_shape)
            world = predictions[step] = runtime.predict_world(prefix, noise, world_episode)
        chunks.append(runtime.act(prefix, world, stage_noise(seed, "action", step, runtime.spec.noise_shape)))
    return chunks, predictions


def test_each_stage_runs_exactly_on_its_steps(first_run):
    def ran(stage):
        return [o.step for o in first_run if stage in o.timings and o.timings[stage].sequence > 0]

    assert ran("world") == [0, 3, 6, 9]
    for stage in ("observation", "perception", "prefix", "action", "controller"):
        assert ran(stage) == list(range(STEPS))


def test_graph_equals_direct_calls_and_the_action_head_uses_the_latest_prediction(first_run, runtime, episode):
    chunks, predictions = _direct(runtime, episode, [o.stamp_ns for o in first_run])
    assert [predictions[k].meta["chunk"] for k in (0, 3, 6, 9)] == [0, 1, 2, 0]  # the new instruction restarts
    for output, chunk in zip(first_run, chunks):
        latest = output.step - output.step % 3
        assert output.chunk.stamp_ns == first_run[latest].stamp_ns, f"step {output.step}"
        np.testing.assert_allclose(output.chunk.actions, chunk.actions, atol=1e-5, rtol=0,
                                   err_msg=f"step {output.step}")
        rows = predictions[latest].tensors["actions"]
        np.testing.assert_allclose(output.chunk.actions, runtime.act(None, predictions[latest]).actions, atol=1e-6)
        assert output.chunk.actions.shape == (rows.shape[0], len(runtime.spec.action_names))
    # the chunks differ from prediction to prediction (the feedback and the noise change them)
    assert not np.allclose(first_run[0].chunk.actions[:4], first_run[3].chunk.actions[:4], atol=1e-3)


def test_every_second_prediction_is_published_decoded(first_run, world_frames, runtime, episode):
    _, predictions = _direct(runtime, episode, [o.stamp_ns for o in first_run])
    height, width = runtime.spec.image_size
    received = {(msg.header.frame_id, time_to_ns(msg.header.stamp)): msg for msg in world_frames}
    expected = {(camera, first_run[step].stamp_ns): image for step in (0, 6)  # world runs 1 and 3 of 4
                for camera, image in runtime.world_frames(predictions[step]).items()}
    assert sorted(received) == sorted(expected)
    for key, image in expected.items():
        msg = received[key]
        assert (msg.encoding, msg.height, msg.width) == ("rgb8", height, width)
        np.testing.assert_array_equal(np.frombuffer(bytes(msg.data), np.uint8).reshape(height, width, 3), image)
    assert len({image.tobytes() for image in expected.values()}) == len(expected)  # the frames differ


def test_two_runs_give_identical_chunks_and_commands(first_run, config, runtime, episode):
    second_run = _run(config, runtime, episode)
    for a, b in zip(first_run, second_run):
        np.testing.assert_array_equal(a.chunk.actions, b.chunk.actions, err_msg=f"step {a.step}")
        np.testing.assert_array_equal(_positions(a), _positions(b), err_msg=f"step {a.step}")
        assert [c.stamp_ns for c in a.commands] == [c.stamp_ns for c in b.commands]


def _positions(output):
    return np.stack([c.positions for c in output.commands])


def test_one_process_per_node_gives_the_same_chunks(first_run, config, bundle, runtime, episode, tmp_path):
    separate = replace(config, bundle=str(bundle), layout="separate")
    try:
        second_run = _run(separate, runtime, episode, log_dir=str(tmp_path))
    except TimeoutError:
        print({path.name: path.read_text()[-2000:] for path in tmp_path.glob("*.log")})
        raise
    for a, b in zip(first_run, second_run):
        np.testing.assert_array_equal(a.chunk.actions, b.chunk.actions, err_msg=f"step {a.step}")
        np.testing.assert_array_equal(_positions(a), _positions(b), err_msg=f"step {a.step}")


def test_the_shipped_config_in_lock_step_equals_direct_calls():
    """config/lingbot_va.yaml with its bundle (world every third step), driven step by step."""
    config = load_config(share_path("config", "lingbot_va.yaml"), {"schedule.mode": "lockstep"})
    assert config.schedule.world == 3 and config.schedule.action == 1
    runtime = load_runtime(config.bundle)
    rng = np.random.default_rng(2)
    height, width = runtime.spec.image_size
    steps = [({c: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for c in runtime.spec.camera_names},
              np.zeros(len(runtime.spec.state_names), np.float32)) for _ in range(7)]
    with LockstepGraph(config, runtime=runtime, domain_id=next_domain(), timeout_s=120) as graph:
        outputs = graph.run(steps, "pick up the red block")
    chunks, predictions = _direct(runtime, steps, [o.stamp_ns for o in outputs], ["pick up the red block"] * 7,
                                  config.stages.seed_for(runtime.spec))
    assert sorted(predictions) == [0, 3, 6] and [o.step for o in outputs if "world" in o.timings and o.timings["world"].sequence] == [0, 3, 6]
    for output, chunk in zip(outputs, chunks):
        assert output.chunk.stamp_ns == chunk.stamp_ns == outputs[output.step - output.step % 3].stamp_ns
        np.testing.assert_allclose(output.chunk.actions, chunk.actions, atol=1e-5, rtol=0, err_msg=f"step {output.step}")
