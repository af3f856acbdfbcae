"""The prefix rules pi0.5's actions depend on (mask, positions) and the cache's lifecycle.

Each rule is broken on purpose to show that parity catches it.
"""

import dataclasses

import numpy as np
import pytest

from embodied_ros.backbone import gemma
from embodied_ros.backbone.prefix_cache import PrefixCache, PrefixCacheBuilder
from embodied_ros.heads import adarms_expert
from embodied_ros.models.pi05.convert import read_checkpoint
from embodied_ros.models.pi05.runtime import Pi05Runtime
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation
from embodied_ros.sequence import prefix as layout
from pi05_fixtures import CHECKPOINT, TINY, max_case_error, model, record, run_case

TOLERANCE = 1e-4
CLEARLY_WRONG = 1e-3


@pytest.fixture(scope="module")
def tiny():
    _, _, cases = record(TINY)
    return model(TINY, "numba"), cases


@pytest.fixture(scope="module")
def runtime():
    checkpoint = read_checkpoint(CHECKPOINT / "checkpoint")
    return Pi05Runtime.from_parts(checkpoint.config, checkpoint.weights, checkpoint.tokenizer, checkpoint.stats)


@pytest.fixture(scope="module")
def observation():
    with np.load(CHECKPOINT / "cases.npz") as cases:
        return Observation(stamp_ns=7, images={"base_0_rgb": cases["case0_base_0_rgb_uint8"],
                                               "wrist_0_rgb": cases["case0_wrist_0_rgb_uint8"]},
                           state=cases["case0_state_raw"], instruction="pick up the red cube and put it in the bowl")


@pytest.mark.parametrize("compact", [True, False])
def test_correct_rules_pass(tiny, compact):
    m, cases = tiny
    assert max_case_error(m, cases, compact) < TOLERANCE


@pytest.mark.parametrize("compact", [True, False])
def test_causal_prefix_mask_fails_parity(tiny, monkeypatch, compact):
    m, cases = tiny
    monkeypatch.setattr(layout, "attention_allowed",
                        lambda pad: np.tril(np.outer(np.asarray(pad, bool), np.asarray(pad, bool))))
    assert max_case_error(m, cases, compact) > CLEARLY_WRONG


@pytest.mark.parametrize("compact", [True, False])
def test_prefix_positions_off_by_one_fail_parity(tiny, monkeypatch, compact):
    m, cases = tiny
    monkeypatch.setattr(layout, "position_ids", lambda pad: np.cumsum(pad, dtype=np.int64))
    assert max_case_error(m, cases, compact) > CLEARLY_WRONG


def test_positions_that_count_padding_fail_parity(tiny, monkeypatch):
    m, cases = tiny  # case 2 has a missing camera before the language tokens
    monkeypatch.setattr(layout, "position_ids", lambda pad: np.arange(len(pad), dtype=np.int64))
    error = np.abs(run_case(m, cases, 2, compact=False) - cases["case2_actions"]).max()
    assert error > CLEARLY_WRONG


def test_action_positions_off_by_one_fail_parity(tiny, monkeypatch):
    m, cases = tiny
    original = m.suffix_rope

    def shifted(cache):
        cos, sin = original(cache)
        return np.roll(cos, -1, axis=0), np.roll(sin, -1, axis=0)  # positions n_valid + 1 ...

    monkeypatch.setattr(m, "suffix_rope", shifted)
    assert max_case_error(m, cases) > CLEARLY_WRONG


def test_one_prefix_pass_per_chunk_and_every_step_reads_that_cache(runtime, observation, monkeypatch):
    passes, caches_read = [], []
    real_pass, real_velocity = gemma.prefix_pass, adarms_expert.velocity

    def counting_pass(*args, **kwargs):
        passes.append(1)
        return real_pass(*args, **kwargs)

    def recording_velocity(ks, cfg, weights, layers, cache, *rest):
        caches_read.append(cache)
        return real_velocity(ks, cfg, weights, layers, cache, *rest)

    monkeypatch.setattr(gemma, "prefix_pass", counting_pass)
    monkeypatch.setattr(adarms_expert, "velocity", recording_velocity)
    embeddings = runtime.encode(observation)
    prefix = runtime.build_prefix(embeddings, observation)
    runtime.act(prefix, None, np.zeros(runtime.spec.noise_shape, np.float32))
    assert len(passes) == 1
    assert len(caches_read) == runtime.config.num_inference_steps
    assert all(cache is caches_read[0] for cache in caches_read)
    assert caches_read[0].keys is prefix.tensors["keys"]  # handed over, not copied
    runtime.act(prefix, None, np.ones(runtime.spec.noise_shape, np.float32))
    assert len(passes) == 1  # a second chunk from the same observation reuses the prefix


def test_sealed_cache_is_read_only_and_superseded_not_modified(runtime, observation):
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    cache = PrefixCache.from_tensors(prefix.tensors, prefix.stamp_ns)
    with pytest.raises(ValueError):
        cache.keys[0, 0, 0, 0] = 1.0
    before = cache.keys.copy()
    newer = Observation(8, observation.images, observation.state * 0.5, "open the drawer")
    newer_prefix = runtime.build_prefix(runtime.encode(newer), newer)
    assert not np.shares_memory(newer_prefix.tensors["keys"], prefix.tensors["keys"])
    np.testing.assert_array_equal(cache.keys, before)


def test_builder_lifecycle():
    builder = PrefixCacheBuilder.allocate(num_layers=2, num_rows=3, kv_heads=1, head_dim=4)
    builder.write(0, np.zeros((3, 1, 4), np.float32), np.zeros((3, 1, 4), np.float32))
    with pytest.raises(RuntimeError, match="never written"):
        builder.seal(np.ones(3, bool))
    builder.write(1, np.ones((3, 1, 4), np.float32), np.ones((3, 1, 4), np.float32))
    cache = builder.seal(np.array([True, True, False]), stamp_ns=5)
    assert cache.n_valid == 2 and cache.key_bias[2] < -1e38 and cache.stamp_ns == 5
    with pytest.raises(RuntimeError, match="sealed"):
        builder.write(0, np.zeros((3, 1, 4), np.float32), np.zeros((3, 1, 4), np.float32))
    with pytest.raises(ValueError, match="no valid row"):
        PrefixCache(np.zeros((1, 2, 1, 4), np.float32), np.zeros((1, 2, 1, 4), np.float32), np.zeros(2, bool))


def test_prefix_rebuilt_from_copied_tensors_gives_the_same_actions(runtime, observation):
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    noise = np.random.default_rng(3).standard_normal(runtime.spec.noise_shape).astype(np.float32)
    copied = type(prefix)(prefix.stage, prefix.stamp_ns, {k: np.array(v) for k, v in prefix.tensors.items()},
                          dict(prefix.meta))
    np.testing.assert_array_equal(runtime.act(copied, None, noise).actions, runtime.act(prefix, None, noise).actions)


def test_default_noise_is_drawn_from_the_seed_and_the_observation_stamp(runtime, observation):
    first = infer(runtime, observation).actions
    np.testing.assert_array_equal(infer(runtime, observation).actions, first)  # no hidden generator state
    later = dataclasses.replace(observation, stamp_ns=observation.stamp_ns + 1)
    assert not np.array_equal(infer(runtime, later).actions, first)  # fresh noise per observation
    again = Pi05Runtime(runtime.model, runtime.tokenizer, runtime.state_stats, runtime.action_stats)
    np.testing.assert_array_equal(infer(again, observation).actions, first)  # seeded from the config
    expected = stage_noise(runtime.config.noise_seed, "action", observation.stamp_ns, runtime.spec.noise_shape)
    np.testing.assert_array_equal(infer(runtime, observation, expected).actions, first)
