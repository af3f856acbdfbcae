"""GR00T N1.7 model math against LeRobot's records (test/data/groot_tiny): each stage of case 0,
the actions of every case (two views, another embodiment, a missing view), bad inputs."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from embodied_ros.backbone import qwen3_vl
from embodied_ros.heads import groot_dit
from embodied_ros.models.groot.config import GrootConfig
from embodied_ros.models.groot.model import GrootModel
from embodied_ros.models.groot.weights import from_lerobot

RECORD = Path(__file__).parent / "data" / "groot_tiny"
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model():
    config = GrootConfig.from_fixture_json(json.loads((RECORD / "config.json").read_text()))
    weights = from_lerobot(load_file(RECORD / "model.safetensors"), config.text.depth)
    return GrootModel(config, weights, backend="numpy")


@pytest.fixture(scope="module")
def cases():
    with np.load(RECORD / "cases.npz") as data:
        return dict(data)


def _grids(cases, k):
    return [tuple(int(v) for v in g[1:]) for g in cases[f"case{k}_image_grid_thw"]]


def _close(actual, expected):
    assert actual.shape == expected.shape
    assert float(np.abs(actual - expected).max()) < TOLERANCE


def test_vision_tower_stages(model, cases):
    cfg, grids = model.config, _grids(cases, 0)
    _close(qwen3_vl.vision_embed(model.ks, cfg.vision, model.weights, cases["case0_pixel_values"], grids),
           cases["case0_vision_embed_in"])
    image, deepstack = model.image_rows(cases["case0_pixel_values"], grids)
    _close(image, cases["case0_image_embeddings"])
    assert len(deepstack) == len(cfg.vision.deepstack_indexes)
    for j, feature in enumerate(deepstack):
        _close(feature, cases[f"case0_deepstack_{j}"])


def test_mrope_positions_follow_the_prompt(model, cases):
    positions = qwen3_vl.mrope_positions(cases["case0_input_ids"], model.config.tokens.image, _grids(cases, 0),
                                         model.config.vision.spatial_merge_size)
    np.testing.assert_array_equal(positions, cases["case0_position_ids"][1:])


def test_backbone_and_head_stages(model, cases):
    backbone = model.backbone(cases["case0_pixel_values"], _grids(cases, 0), cases["case0_input_ids"])
    np.testing.assert_array_equal(backbone.image_mask, cases["case0_image_mask"])
    _close(backbone.features, cases["case0_backbone_features"])
    _close(model.vl_embeddings(backbone), cases["case0_vl_embeds"])
    embodiment = int(cases["case0_embodiment_id"])
    state_rows = groot_dit.state_features(model.weights, cases["case0_state"], embodiment)
    _close(state_rows, cases["case0_state_features"])
    first = model.timesteps[0]
    actions_in = groot_dit.action_features(model.config.head, model.weights, cases["case0_noise"], first, embodiment)
    _close(np.concatenate([state_rows, actions_in]), cases["case0_dit_input_step0"])
    velocity = groot_dit.velocity(model.ks, model.config.head, model.weights, model.dit_blocks, cases["case0_noise"],
                                  first, state_rows, model.vl_embeddings(backbone), ~backbone.image_mask,
                                  backbone.image_mask, embodiment)
    _close(velocity, cases["case0_velocity_step0"])


def test_integer_timesteps():
    assert groot_dit.euler_timesteps(4, 1000) == [0, 250, 500, 750]
    assert groot_dit.euler_timesteps(3, 1000) == [0, 333, 666]


@pytest.mark.parametrize("k", [0, 1, 2])
def test_actions_match_the_record(model, cases, k):
    backbone = model.backbone(cases[f"case{k}_pixel_values"], _grids(cases, k), cases[f"case{k}_input_ids"])
    actions = model.sample_actions(backbone, cases[f"case{k}_state"], cases[f"case{k}_noise"],
                                   int(cases[f"case{k}_embodiment_id"]))
    _close(actions[:, : model.config.action_dim], cases[f"case{k}_actions"])


def test_another_embodiment_changes_the_actions(model, cases):
    backbone = model.backbone(cases["case0_pixel_values"], _grids(cases, 0), cases["case0_input_ids"])
    one = model.sample_actions(backbone, cases["case0_state"], cases["case0_noise"], 1)
    other = model.sample_actions(backbone, cases["case0_state"], cases["case0_noise"], 2)
    assert float(np.abs(one - other).max()) > 1e-2


def test_bad_inputs_are_clear_errors(model, cases):
    grids, ids = _grids(cases, 0), cases["case0_input_ids"]
    with pytest.raises(ValueError, match="image tokens"):
        model.backbone(cases["case0_pixel_values"][: 24], grids[:1], ids)
    with pytest.raises(ValueError, match="pixel rows"):
        model.backbone(cases["case0_pixel_values"][:, :10], grids, ids)
    with pytest.raises(ValueError, match="input ids"):
        model.backbone(cases["case0_pixel_values"], grids, np.array([model.config.text.vocab_size]))
    backbone = model.backbone(cases["case0_pixel_values"], grids, ids)
    with pytest.raises(ValueError, match="embodiment"):
        model.sample_actions(backbone, cases["case0_state"], cases["case0_noise"], model.config.head.num_embodiments)
    with pytest.raises(ValueError, match="noise"):
        model.sample_actions(backbone, cases["case0_state"], cases["case0_noise"][:3], 1)
    with pytest.raises(ValueError, match="state"):
        model.sample_actions(backbone, cases["case0_state"][:6], cases["case0_noise"], 1)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_pixel_rows_from_uint8_views(model, cases, k):
    vision = model.config.vision
    rows, grids = zip(*(qwen3_vl.pixel_rows(view, vision.patch_size, vision.temporal_patch_size,
                                            vision.spatial_merge_size) for view in cases[f"case{k}_images_uint8"]))
    assert list(grids) == _grids(cases, k)
    np.testing.assert_allclose(np.concatenate(rows), cases[f"case{k}_pixel_values"], atol=1e-6, rtol=0)


def test_pixel_rows_refuse_bad_images():
    with pytest.raises(ValueError, match="multiple of patch"):
        qwen3_vl.pixel_rows(np.zeros((40, 64, 3), np.uint8), 16, 2, 2)
    with pytest.raises(ValueError, match="uint8"):
        qwen3_vl.pixel_rows(np.zeros((64, 64, 3), np.float32), 16, 2, 2)
