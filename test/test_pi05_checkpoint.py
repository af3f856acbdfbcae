"""LeRobot's saved-checkpoint layout end to end: convert -> bundle -> raw robot inputs -> actions."""

import json
import shutil

import numpy as np
import pytest

from embodied_ros.bundle import open_bundle
from embodied_ros.models.pi05 import convert as conversion
from embodied_ros.models.pi05 import verify_reference
from embodied_ros.models.pi05.runtime import load_runtime
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation
from compile_probe import compiled_after_warm_up
from pi05_fixtures import CHECKPOINT, TINY

SOURCE = CHECKPOINT / "checkpoint"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("pi05") / "policy.gguf"
    conversion.convert(SOURCE, path, reference=CHECKPOINT)
    return open_bundle(path, architecture="pi05")


@pytest.fixture(scope="module")
def cases():
    with np.load(CHECKPOINT / "cases.npz") as arrays:
        return json.loads((CHECKPOINT / "cases.json").read_text())["cases"], {n: arrays[n] for n in arrays.files}


def _observation(arrays, case, k):
    images = {name: arrays[f"case{k}_{name}_uint8"] for name in ("base_0_rgb", "wrist_0_rgb")
              if f"case{k}_{name}_uint8" in arrays}
    return Observation(stamp_ns=100 + k, images=images, state=arrays[f"case{k}_state_raw"], instruction=case["task"])


def test_dimensions_come_from_tensor_shapes(bundle):
    runtime = load_runtime(bundle)
    config = runtime.config
    assert (config.vision.width, config.vision.depth, config.vision.num_heads) == (48, 2, 4)
    assert (config.lm.width, config.lm.num_heads, config.lm.num_kv_heads, config.lm.head_dim) == (64, 8, 1, 16)
    assert (config.expert.width, config.expert.mlp_dim) == (32, 64)
    assert config.camera_names == ("base_0_rgb", "wrist_0_rgb") and config.vision.image_size == 56
    assert config.tokenizer_max_length == 64 and config.chunk_size == 10 and config.action_dim == 7
    assert runtime.spec.action_names[-1] == "gripper" and runtime.spec.noise_shape == (10, 32)


def test_raw_inputs_give_recorded_prompt_tokens_and_physical_actions(bundle, cases):
    runtime = load_runtime(bundle)
    recorded, arrays = cases
    for k, case in enumerate(recorded):
        observation = _observation(arrays, case, k)
        assert runtime.prompt(observation) == case["prompt"]
        np.testing.assert_array_equal(runtime.normalized_state(observation), arrays[f"case{k}_state_normalized"])
        prefix = runtime.build_prefix(runtime.encode(observation), observation)
        np.testing.assert_array_equal(prefix.tensors["tokens"], arrays[f"case{k}_tokens"])
        np.testing.assert_array_equal(prefix.tensors["token_mask"], arrays[f"case{k}_attention_mask"])
        chunk = runtime.act(prefix, None, arrays[f"case{k}_noise"])
        assert chunk.stamp_ns == 100 + k and chunk.joint_names == runtime.spec.action_names
        error = np.abs(chunk.actions - arrays[f"case{k}_actions"]).max()
        assert error < 1e-4, f"case {k} ({case['missing_cameras'] or 'all cameras'}): {error:.3g}"


def test_bundle_reference_record_verifies(bundle):
    error, tolerance = verify_reference(bundle)
    assert tolerance == 1e-4 and error < tolerance


def test_no_camera_at_all_is_refused(bundle, cases):
    runtime = load_runtime(bundle)
    recorded, arrays = cases
    observation = _observation(arrays, recorded[0], 0)
    with pytest.raises(ValueError, match="no camera"):
        infer(runtime, Observation(0, {}, observation.state, observation.instruction))
    with pytest.raises(ValueError, match="state"):
        infer(runtime, Observation(0, observation.images, observation.state[:3], observation.instruction))


def test_head_counts_the_weights_cannot_tell_need_an_override(tmp_path):
    lonely = tmp_path / "checkpoint"  # no cases.json beside it
    shutil.copytree(SOURCE, lonely)
    with pytest.raises(ValueError, match="vision.num_heads"):
        conversion.read_checkpoint(lonely)
    checkpoint = conversion.read_checkpoint(lonely, overrides={"vision.num_heads": 4})
    assert checkpoint.config.vision.num_heads == 4 and checkpoint.stats["action"]["q99"].shape == (7,)


def test_detect_and_foreign_checkpoints(tmp_path):
    assert conversion.detect(SOURCE) and conversion.detect(TINY)
    assert not conversion.detect(CHECKPOINT) and not conversion.detect(tmp_path)
    foreign = tmp_path / "act"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"type": "act"}))
    (foreign / "model.safetensors").write_bytes((SOURCE / "model.safetensors").read_bytes())
    assert not conversion.detect(foreign)
    with pytest.raises(ValueError, match="not a pi0.5 checkpoint"):
        conversion.read_checkpoint(foreign)


def test_quantized_bundle_records_its_own_tolerance(tmp_path):
    path = tmp_path / "q8.gguf"
    conversion.convert(TINY, path, "default=q8_0", reference=TINY)
    bundle = open_bundle(path, architecture="pi05")
    assert {bundle.tensor_info(name).qtype for name in bundle.weight_names} >= {"q8_0"}
    error, tolerance = verify_reference(bundle)
    assert 1e-4 < error < tolerance == 1e-1


def test_nothing_compiles_after_warm_up(bundle):
    """In a fresh interpreter (this one has compiled everything already): after one warm_up,
    then real observations, a missing camera included, add no compiled signature."""
    assert compiled_after_warm_up("embodied_ros.models.pi05.runtime", bundle.path, CHECKPOINT) == {}
