"""pi0.5 config validation, bundle round trip, and the checkpoint -> runtime tensor naming."""

import dataclasses

import numpy as np
import pytest

from embodied_ros.models.pi05 import weights as naming
from embodied_ros.models.pi05.config import GemmaConfig, Pi05Config, VisionConfig
from pi05_fixtures import TINY, record

FULL_SIZE = Pi05Config(
    vision=VisionConfig(224, 14, 1152, 27, 4304, 16),
    lm=GemmaConfig(2048, 18, 16384, 8, 1, 256),
    expert=GemmaConfig(1024, 18, 4096, 8, 1, 256),
    vocab_size=257152, camera_names=("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"),
    state_names=tuple(f"joint_{i}" for i in range(14)), action_names=tuple(f"joint_{i}" for i in range(14)))


def test_full_size_dimensions():
    assert FULL_SIZE.vision.tokens_per_camera == 256 and FULL_SIZE.vision.head_dim == 72
    assert FULL_SIZE.max_prefix_len == 3 * 256 + 200
    shapes = naming.expected_shapes(FULL_SIZE)
    assert shapes["lm.blk.17.attn_qkv.weight"] == (2048 + 2 * 256, 2048)
    assert shapes["lm.blk.0.ffn_gate_up.weight"] == (2 * 16384, 2048)
    assert shapes["expert.blk.0.attn_qkv.weight"] == (2048 + 2 * 256, 1024)
    assert shapes["expert.blk.0.attn_out.weight"] == (1024, 2048)
    assert shapes["vision.blk.26.attn_qkv.bias"] == (3 * 1152,)
    assert shapes["expert.blk.3.attn_norm.weight"] == (3072, 1024) and shapes["vision.patch.weight"] == (1152, 588)


@pytest.mark.parametrize("change, message", [
    (dict(expert=GemmaConfig(1024, 19, 4096, 8, 1, 256)), "expert depth 19 > LM depth 18"),
    (dict(expert=GemmaConfig(1024, 18, 4096, 8, 2, 128)), "kv heads x head_dim"),
    (dict(camera_names=()), "at least one camera"),
    (dict(camera_names=("a", "a")), "repeat"),
    (dict(action_names=tuple(str(i) for i in range(33))), "33 action names"),
    (dict(chunk_size=0), "chunk_size must be a positive integer, got 0"),
    (dict(action_period_s=-1.0), "action_period_s must be positive, got -1.0"),
    (dict(relative_action_mask=(True,)), "relative actions"),
])
def test_invalid_configs_say_what_is_wrong(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(FULL_SIZE, **change)


def test_invalid_parts():
    with pytest.raises(ValueError, match="not divisible by num_heads 5"):
        VisionConfig(224, 14, 1152, 27, 4304, 5)
    with pytest.raises(ValueError, match="not a multiple of patch_size 14"):
        VisionConfig(100, 14, 1152, 27, 4304, 16)
    with pytest.raises(ValueError, match="8 query heads cannot share 3"):
        GemmaConfig(64, 2, 128, 8, 3, 16)


def test_round_trips():
    assert Pi05Config.from_dict(FULL_SIZE.to_dict()) == FULL_SIZE
    assert Pi05Config.from_bundle_sections(*FULL_SIZE.bundle_sections()) == FULL_SIZE
    with pytest.raises(ValueError, match="unknown pi05 config keys"):
        Pi05Config.from_dict({**FULL_SIZE.to_dict(), "heads": 3})
    with pytest.raises(ValueError, match="incomplete"):
        Pi05Config.from_dict({"vision": FULL_SIZE.to_dict()["vision"]})


def test_fixture_config_and_names():
    config, weights, _ = record(TINY)
    assert config.camera_names == ("cam0", "cam1") and config.vision.tokens_per_camera == 16
    naming.check_weights(weights, config)
    assert set(weights) == set(naming.expected_shapes(config))


def test_lerobot_names_map_to_runtime_names():
    prefix = "model.paligemma_with_expert."
    assert naming.runtime_name(prefix + "paligemma.model.language_model.layers.3.mlp.gate_proj.weight") == \
        "lm.blk.3.ffn_gate.weight"
    assert naming.runtime_name(prefix + "gemma_expert.model.layers.0.post_attention_layernorm.dense.bias") == \
        "expert.blk.0.ffn_norm.bias"
    assert naming.runtime_name(
        prefix + "paligemma.model.vision_tower.vision_model.encoder.layers.26.self_attn.out_proj.weight") == \
        "vision.blk.26.attn_out.weight"
    assert naming.runtime_name(prefix + "paligemma.lm_head.weight") is None
    with pytest.raises(ValueError, match="not a pi0.5 parameter"):
        naming.runtime_name("model.action_time_mlp_in.weight")  # pi0, not pi0.5
    assert all(len(name) <= 64 for name in naming.expected_shapes(FULL_SIZE))  # GGUF name limit


def test_projections_are_stacked_q_k_v_and_gate_up():
    from safetensors.numpy import load_file

    state = load_file(str(TINY / "model.safetensors"))
    stacked = naming.from_lerobot(state)
    lm = "model.paligemma_with_expert.paligemma.model.language_model.layers.1."
    expected = np.concatenate([state[lm + f"self_attn.{p}_proj.weight"] for p in "qkv"])
    np.testing.assert_array_equal(stacked["lm.blk.1.attn_qkv.weight"], expected)
    expected = np.concatenate([state[lm + f"mlp.{p}_proj.weight"] for p in ("gate", "up")])
    np.testing.assert_array_equal(stacked["lm.blk.1.ffn_gate_up.weight"], expected)
    vision = "model.paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.layers.0.self_attn."
    np.testing.assert_array_equal(stacked["vision.blk.0.attn_qkv.bias"],
                                  np.concatenate([state[vision + f"{p}_proj.bias"] for p in "qkv"]))


def test_tied_checkpoint_takes_embeddings_from_lm_head():
    table = np.arange(6, dtype=np.float32).reshape(3, 2)
    renamed = naming.from_lerobot({"model.paligemma_with_expert.paligemma.lm_head.weight": table})
    np.testing.assert_array_equal(renamed["lm.token_embd"], table)


def test_weight_checks_name_the_tensor():
    config, weights, _ = record(TINY)
    broken = dict(weights, **{"lm.blk.1.ffn_down.weight": np.zeros((3, 3), np.float32)})
    with pytest.raises(ValueError, match=r"lm.blk.1.ffn_down.weight \(3, 3\)"):
        naming.check_weights(broken, config)
    missing = {k: v for k, v in weights.items() if k != "time_in.bias"}
    with pytest.raises(ValueError, match="time_in.bias"):
        naming.check_weights(missing, config)
