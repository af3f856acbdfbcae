"""LeRobot's saved SmolVLA checkpoint end to end: convert -> bundle -> raw robot inputs -> actions."""

import json
from pathlib import Path

import numpy as np
import pytest

from embodied_ros.bundle import open_bundle
from embodied_ros.models.smolvla import convert as conversion
from embodied_ros.models.smolvla import verify_reference
from embodied_ros.models.kit.records import pipeline_observation
from embodied_ros.models.smolvla import RECORDS
from embodied_ros.models.smolvla.runtime import load_runtime
from embodied_ros.pipeline.stages import infer
from compile_probe import compiled_after_warm_up

DATA = Path(__file__).parent / "data"
RECORD = DATA / "smolvla_tiny_checkpoint"
TINY = DATA / "smolvla_tiny"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("smolvla") / "policy.gguf"
    conversion.convert(RECORD / "checkpoint", path, reference=RECORD)
    return open_bundle(path, architecture="smolvla")


@pytest.fixture(scope="module")
def runtime(bundle):
    return load_runtime(bundle)


def test_dimensions_and_statistics_come_from_the_save(bundle):
    config = bundle.config
    assert config["vision"]["image_size"] == 64 and config["vision"]["scale_factor"] == 2
    assert config["lm"]["depth"] == 4 and config["expert"]["width"] == 48 and config["empty_cameras"] == 1
    assert config["camera_names"] == ["front", "wrist"]
    assert set(bundle.stats) == {"state", "action"} and set(bundle.stats["state"]) == {"mean", "std"}
    assert bundle.tokenizer_kind == "huggingface-json"


def test_raw_inputs_give_recorded_tokens_and_physical_actions(runtime):
    results = list(RECORDS.run_cases(runtime, RECORD))
    assert len(results) == 3
    for result in results:
        assert result.detail == "" and result.max_abs_error < 1e-4, (result.name, result.max_abs_error, result.detail)


def test_bundle_reference_record_verifies(bundle):
    error, tolerance = verify_reference(bundle)
    assert tolerance == 1e-4 and error < tolerance


def test_no_camera_at_all_is_refused(runtime):
    cases = np.load(RECORD / "cases.npz")
    observation = pipeline_observation(cases, "open the drawer", "case0", ())
    with pytest.raises(ValueError, match="no camera image"):
        infer(runtime, observation, cases["case0_noise"])


def test_head_counts_the_weights_cannot_tell_need_an_override(tmp_path):
    source = tmp_path / "checkpoint"
    source.mkdir()
    for item in (RECORD / "checkpoint").iterdir():
        (source / item.name).symlink_to(item)
    with pytest.raises(ValueError, match="vision.num_heads cannot be read"):
        conversion.read_checkpoint(source)
    checkpoint = conversion.read_checkpoint(source, {"vision.num_heads": 2, "lm.num_heads": 4})
    assert checkpoint.config.lm.num_kv_heads == 2


def test_detect_tells_smolvla_from_other_checkpoints(tmp_path):
    assert conversion.detect(RECORD / "checkpoint") and conversion.detect(TINY)
    assert not conversion.detect(DATA / "pi05_tiny")
    (tmp_path / "config.json").write_text(json.dumps({"type": "pi0"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert not conversion.detect(tmp_path)


def test_quantized_bundle_records_its_own_tolerance(tmp_path):
    path = tmp_path / "q8.gguf"
    conversion.convert(TINY, path, "default=q8_0", reference=TINY)
    error, tolerance = verify_reference(open_bundle(path, architecture="smolvla"))
    assert tolerance == 1e-1 and error < tolerance


def test_bad_inputs_get_one_line_errors(runtime):
    from embodied_ros.models.smolvla.tokenizer import SmolVLATokenizer
    from embodied_ros.pipeline.types import Observation

    cases = np.load(RECORD / "cases.npz")
    images = {"wrist": cases["case0_wrist_uint8"]}
    with pytest.raises(ValueError, match="state has 3 values, the model expects 6"):
        infer(runtime, Observation(0, images, np.zeros(3, np.float32), "open"), cases["case0_noise"])
    with pytest.raises(ValueError, match="noise must have shape"):
        infer(runtime, Observation(0, images, cases["case0_state_raw"], "open"), np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError, match="not a valid tokenizer.json"):
        SmolVLATokenizer(b"{not json", 8)


def test_expert_layers_pair_with_vlm_layers():
    from embodied_ros.heads.interleaved_expert import CROSS, SELF, layer_plan

    assert layer_plan(4, 4, 2) == [(SELF, 0), (CROSS, 1), (SELF, 2), (CROSS, 3)]
    assert layer_plan(6, 3, 3) == [(SELF, 0), (CROSS, 2), (CROSS, 4)]  # every 2nd VLM layer has an expert layer
    with pytest.raises(ValueError, match="cannot be paired"):
        layer_plan(5, 2, 2)


def test_nothing_compiles_after_warm_up(bundle):
    """In a fresh interpreter: after Runtime.warm_up, real observations (two cameras, one
    missing, other image sizes) add no compiled signature."""
    assert compiled_after_warm_up("embodied_ros.models.smolvla.runtime", bundle.path, RECORD) == {}


def test_aloha_space_conversion_is_refused(tmp_path):
    source = tmp_path / "checkpoint"
    source.mkdir()
    for item in (RECORD / "checkpoint").iterdir():
        if item.name != "config.json":
            (source / item.name).symlink_to(item)
    config = json.loads((RECORD / "checkpoint" / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "adapt_to_pi_aloha": True}))
    with pytest.raises(ValueError, match="adapt_to_pi_aloha"):
        conversion.read_checkpoint(source)
