"""Full-size GR00T N1.7: the runtime's names and shapes cover LeRobot's full-size state dict exactly
(test/data/groot_n1_7_shapes.json, recorded from the model built on torch's meta device)."""

import json
from pathlib import Path

import numpy as np
import pytest

from embodied_ros.models.groot.config import block_kinds, n1_7_config
from embodied_ros.models.groot.weights import expected_shapes, runtime_name

RECORD = json.loads((Path(__file__).parent / "data" / "groot_n1_7_shapes.json").read_text())


def _renamed_shapes(select_layer):
    shapes = {}
    for name, shape in RECORD["state_dict_shapes"].items():
        ours = runtime_name(name)  # raises for a name the runtime does not know
        if ours is None:
            continue
        assert not (ours.startswith("lm.blk.") and int(ours.split(".")[2]) >= select_layer)
        shapes[ours] = (shape[0], int(np.prod(shape[1:]))) if ours == "vision.patch.weight" else tuple(shape)
    return shapes


def test_full_size_shapes_match_lerobots_state_dict():
    config = n1_7_config(state_dim=7, action_dim=7)
    assert config.text.depth == RECORD["select_layer"]
    assert list(config.vision.deepstack_indexes) == RECORD["vision"]["deepstack_visual_indexes"]
    assert list(config.text.mrope_section) == RECORD["rope"]["mrope_section"]
    assert config.tokens.image == RECORD["token_ids"]["image_token_id"]
    assert config.vision.num_heads == RECORD["vision"]["num_heads"]
    text = RECORD["text"]
    assert (config.text.num_heads, config.text.num_kv_heads, config.text.head_dim) == (
        text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"])
    expected, recorded = expected_shapes(config), _renamed_shapes(config.text.depth)
    assert sorted(set(expected) ^ set(recorded)) == []
    assert {n: s for n, s in expected.items() if recorded[n] != s} == {}


def test_block_kinds_alternate_as_lerobot_builds_them():
    assert block_kinds(4) == ("cross_attn_text", "self_attn", "cross_attn_image", "self_attn")
    assert block_kinds(6, 1) == ("cross_attn_text", "self_attn") * 3
    tiny = json.loads((Path(__file__).parent / "data" / "groot_tiny" / "config.json").read_text())
    assert list(block_kinds(4, tiny["action_head"]["attend_text_every_n_blocks"])) == tiny["action_head"]["dit"]["block_kinds"]


def test_a_bad_full_size_setting_is_a_clear_error():
    with pytest.raises(ValueError, match="action_dim"):
        n1_7_config(state_dim=7, action_dim=200)
