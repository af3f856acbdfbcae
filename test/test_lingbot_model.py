"""The LingBot-VA-style world-action runtime on a small random-weight bundle: stages, determinism,
caches, bad inputs."""

import numpy as np
import pytest

from embodied_ros.heads.world_predictor import euler_flow, predict_world
from embodied_ros.models.lingbot_va.checkpoint import write_random_checkpoint
from embodied_ros.models.lingbot_va.config import PRESETS
from embodied_ros.models.lingbot_va.convert import convert_checkpoint
from embodied_ros.pipeline.stages import infer, load_runtime
from embodied_ros.pipeline.types import Observation, StageResult

CFG = PRESETS["small"]


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lingbot")
    write_random_checkpoint(folder / "checkpoint", CFG, seed=0)
    return convert_checkpoint(folder / "checkpoint", folder / "small.gguf")


@pytest.fixture(scope="module")
def runtime(bundle_path):
    return load_runtime(bundle_path)


def _observation(seed=0, stamp=1_000, **changes):
    rng = np.random.default_rng(seed)
    values = dict(
        stamp_ns=stamp,
        images={name: rng.integers(0, 256, (*CFG.image_size, 3), dtype=np.uint8) for name in CFG.camera_names},
        state=rng.standard_normal(CFG.state_dim).astype(np.float32), instruction="pick up the red block")
    values.update(changes)
    return Observation(**values)


def _noise(runtime, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(runtime.spec.noise_shape, dtype=np.float32),
            rng.standard_normal(runtime.world_noise_shape, dtype=np.float32))


def test_spec_describes_the_model(runtime):
    spec = runtime.spec
    assert spec.architecture == "lingbot_va" and spec.has_world_model
    assert spec.camera_names == CFG.camera_names and spec.image_size == CFG.image_size
    assert spec.noise_shape == (CFG.chunk_size, CFG.action_dim) and spec.action_names == CFG.action_names


def test_stage_shapes(runtime):
    obs = _observation()
    embeddings = runtime.encode(obs)
    prefix = runtime.build_prefix(embeddings, obs)
    world = runtime.predict_world(prefix)
    chunk = runtime.act(prefix, world)
    rows, cols = CFG.latent_hw
    layers, heads, head_dim = CFG.num_layers, CFG.num_heads, CFG.dim // CFG.num_heads
    text_tokens = len(runtime.tokenizer.encode(obs.instruction))
    assert embeddings.tensors["latents"].shape == (CFG.latent_channels, 1, rows, cols)
    assert prefix.tensors["context_k"].shape == (layers, text_tokens + 1, heads, head_dim)
    assert prefix.tensors["frame_v"].shape == (layers, CFG.tokens_per_frame, heads, head_dim)
    assert world.tensors["latents"].shape == (CFG.latent_channels, CFG.future_frames, rows, cols)
    assert world.tensors["world_k"].shape == (layers, CFG.future_frames * CFG.tokens_per_frame, heads, head_dim)
    assert chunk.actions.shape == (CFG.chunk_size, CFG.action_dim) and chunk.actions.dtype == np.float32
    assert np.isfinite(chunk.actions).all() and chunk.joint_names == CFG.action_names
    assert {r.stamp_ns for r in (embeddings, prefix, world)} == {chunk.stamp_ns} == {obs.stamp_ns}


def test_same_inputs_and_noise_give_the_same_actions(runtime, bundle_path):
    noise, world_noise = _noise(runtime, 5)
    first = infer(runtime, _observation(), noise, world_noise).actions
    again = infer(load_runtime(bundle_path), _observation(), noise, world_noise).actions
    np.testing.assert_array_equal(first, again)
    other_noise, other_world = _noise(runtime, 6)
    assert not np.allclose(infer(runtime, _observation(), other_noise, world_noise).actions, first)
    assert not np.allclose(infer(runtime, _observation(), noise, other_world).actions, first)


def test_default_noise_is_reproducible_per_stamp(runtime):
    a = infer(runtime, _observation(stamp=7)).actions
    np.testing.assert_array_equal(a, infer(runtime, _observation(stamp=7)).actions)
    assert not np.allclose(a, infer(runtime, _observation(stamp=8)).actions)


def test_world_prediction_follows_the_observation_and_actions_follow_the_world(runtime):
    noise, world_noise = _noise(runtime, 1)
    worlds, actions = [], []
    for seed in (0, 1):
        obs = _observation(seed=seed)
        prefix = runtime.build_prefix(runtime.encode(obs), obs)
        worlds.append(runtime.predict_world(prefix, world_noise))
    assert not np.allclose(worlds[0].tensors["latents"], worlds[1].tensors["latents"])
    obs = _observation()
    prefix = runtime.build_prefix(runtime.encode(obs), obs)
    for world in worlds:
        actions.append(runtime.act(prefix, world, noise).actions)
    assert not np.allclose(actions[0], actions[1])


def test_world_stage_leaves_the_prefix_cache_untouched(runtime):
    obs = _observation()
    prefix = runtime.build_prefix(runtime.encode(obs), obs)
    before = {name: array.copy() for name, array in prefix.tensors.items()}
    _, world_noise = _noise(runtime, 2)
    first = runtime.predict_world(prefix, world_noise)
    second = runtime.predict_world(prefix, world_noise)
    assert isinstance(first, StageResult) and first.stage == "world"
    for name, array in prefix.tensors.items():
        np.testing.assert_array_equal(array, before[name])
        assert not array.flags.writeable
    for name in first.tensors:
        np.testing.assert_array_equal(first.tensors[name], second.tensors[name])


def test_instruction_changes_the_context(runtime):
    results = []
    for text in ("pick up the red block", "open the drawer", ""):
        obs = _observation(instruction=text)
        results.append(runtime.build_prefix(runtime.encode(obs), obs).tensors["context_k"])
    assert results[2].shape[1] == 1  # no text tokens: the state token alone
    assert results[0].shape != results[1].shape or not np.allclose(results[0], results[1])


def test_bad_inputs_are_reported(runtime):
    good = _observation()
    small = dict(good.images, cam_high=np.zeros((32, 40, 3), np.uint8))
    with pytest.raises(ValueError, match="cam_high.*shape \\(32, 40, 3\\)"):
        runtime.encode(_observation(images=small))
    with pytest.raises(ValueError, match="missing"):
        runtime.encode(_observation(images={"cam_high": good.images["cam_high"]}))
    with pytest.raises(ValueError, match="uint8"):
        runtime.encode(_observation(images={k: v.astype(np.float32) for k, v in good.images.items()}))
    embeddings = runtime.encode(good)
    state = good.state.copy()
    state[3] = np.nan
    with pytest.raises(ValueError, match="not finite.*joint_3"):
        runtime.build_prefix(embeddings, _observation(state=state))
    with pytest.raises(ValueError, match="robot state"):
        runtime.build_prefix(embeddings, _observation(state=None))
    with pytest.raises(ValueError, match="shape"):
        runtime.build_prefix(embeddings, _observation(state=np.zeros(3, np.float32)))
    prefix = runtime.build_prefix(embeddings, good)
    with pytest.raises(ValueError, match="world noise has shape"):
        runtime.predict_world(prefix, np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="run predict_world first"):
        runtime.act(prefix, None)
    with pytest.raises(ValueError, match="action noise contains NaN"):
        runtime.act(prefix, runtime.predict_world(prefix), np.full(runtime.spec.noise_shape, np.nan, np.float32))


def test_q8_0_bundle_stays_close_to_float32(runtime, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    write_random_checkpoint(checkpoint, CFG, seed=0)
    quantized = load_runtime(convert_checkpoint(checkpoint, tmp_path / "q8.gguf", "q8_0"))
    noise, world_noise = _noise(runtime, 9)
    reference = infer(runtime, _observation(), noise, world_noise).actions
    actions = infer(quantized, _observation(), noise, world_noise).actions
    error = np.sqrt(np.mean((actions - reference) ** 2) / np.mean(reference ** 2))
    assert 0 < error < 0.05, error


def test_euler_flow_integrates_a_linear_field_exactly():
    # dx/dt = c (constant velocity): x(0) = x(1) - c, whatever the number of steps
    x1 = np.arange(6, dtype=np.float32).reshape(2, 3)
    times = []

    def velocity(x, t):
        times.append(t)
        return np.full_like(x, 2.0)

    np.testing.assert_allclose(euler_flow(velocity, x1, 4), x1 - 2.0, rtol=0, atol=1e-6)
    assert times == [1.0, 0.75, 0.5, 0.25]


def test_world_predictor_runs_the_clean_pass_once_on_the_solution():
    seen = []
    prediction = predict_world(lambda x, t: -x, lambda latents: seen.append(latents.copy()) or ["kv"],
                               np.ones((2, 2), np.float32), steps=2)
    np.testing.assert_allclose(prediction.latents, np.full((2, 2), 2.25, np.float32))
    assert len(seen) == 1 and np.array_equal(seen[0], prediction.latents) and prediction.kv == ["kv"]
