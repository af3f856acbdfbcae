"""The pieces every model family shares (models/kit/)."""

import numpy as np
import pytest

from embodied_ros.models.kit import configs, flow_vla, lerobot_save, records
from embodied_ros.models.groot import parity as groot_parity
from embodied_ros.models.pi05.config import Pi05Config
from embodied_ros.pipeline.types import Observation
from pi05_fixtures import TINY


def _tiny_config() -> Pi05Config:
    import json

    return Pi05Config.from_fixture_json(json.loads((TINY / "config.json").read_text()))


def test_tolerance_is_that_of_the_weakest_stored_type_in_the_family_table():
    assert records.tolerance_for({"f32", "q8_0", "f16"}) == records.TOLERANCES["q8_0"]
    assert records.tolerance_for(set()) == records.TOLERANCES["f32"]
    assert groot_parity.tolerance_for({"f16", "f32"}) == groot_parity.TOLERANCES["f16"] != records.TOLERANCES["f16"]


def test_bundle_sections_round_trip_and_refuse_another_solver():
    config = _tiny_config()
    model, solver, robot = configs.split_bundle_sections(config.to_dict())
    assert set(robot) == set(configs.ROBOT_KEYS) and solver["method"] == "euler"
    assert Pi05Config.from_bundle_sections(model, solver, robot) == config
    with pytest.raises(ValueError, match="runs the Euler solver"):
        configs.join_bundle_sections("pi05", model, {**solver, "method": "heun"}, robot, 0)
    with pytest.raises(ValueError, match="unknown pi05 config keys"):
        Pi05Config.from_dict({**config.to_dict(), "surplus": 1})


def test_camera_batch_pads_a_missing_camera_and_refuses_none():
    config = _tiny_config()
    size, first = config.vision.image_size, config.camera_names[0]
    observation = Observation(0, {first: np.zeros((8, 8, 3), np.uint8)}, None, "")
    images, present = flow_vla.camera_batch(observation, config.camera_names, size, "pi0.5")
    assert present.tolist() == [name == first for name in config.camera_names]
    assert images.shape == (len(config.camera_names), 3, size, size) and np.all(images[~present] == -1.0)
    with pytest.raises(ValueError, match="no camera image"):
        flow_vla.camera_batch(Observation(0, {}, None, ""), config.camera_names, size, "pi0.5")


def test_conversion_settings_and_weight_shapes_are_checked():
    with pytest.raises(ValueError, match=r"unknown pi0 conversion setting\(s\) \['lm.width'\]"):
        lerobot_save.check_overrides({"lm.width": 4}, frozenset({"lm.num_heads"}), "pi0")
    weights = {"a": np.zeros((2, 3)), "b": np.zeros(4)}
    lerobot_save.check_weight_shapes(weights, {"a": (2, 3)}, "x")
    with pytest.raises(ValueError, match="tensors the config does not describe: b"):
        lerobot_save.check_weight_shapes(weights, {"a": (2, 3)}, "x", exact=True)
    with pytest.raises(ValueError, match=r"do not match the config: a \(2, 3\) \(expected \(3, 2\)\)"):
        lerobot_save.check_weight_shapes(weights, {"a": (3, 2)}, "x")
