"""lerobot's LingBot-VA checkpoint -> one bundle: conversion with per-group types, the reference
episode `bundle verify` reruns, and `embodied-ros parity` on lerobot's record through the bundle."""

import numpy as np
import pytest

from embodied_ros.backbone import wan_vae
from embodied_ros.bundle import open_bundle
from embodied_ros.bundle.families import verify_reference
from embodied_ros.models import lingbot_va
from embodied_ros.models.lingbot_va import convert, lerobot_bundle
from lingbot_fixtures import CHECKPOINT, EXTRA, TINY


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("lingbot_lerobot") / "tiny.gguf"
    convert.convert(CHECKPOINT, path, lerobot_bundle._plan("q8_0"))
    return open_bundle(path)


def test_checkpoint_is_detected_and_stored_per_group(bundle):
    assert convert.detect(CHECKPOINT) and not convert.detect(TINY)
    groups = {name: lerobot_bundle.weight_group(name) for name in bundle.weight_names}
    assert groups["transformer.blocks.1.attn1.to_q.weight"] == "self_attn"
    assert groups["transformer.blocks.0.ffn.net.2.weight"] == "ffn"
    assert groups["transformer.condition_embedder_action.time_proj.weight"] == "embed"
    stored = {name: bundle.tensor_info(name).qtype for name in bundle.weight_names}
    assert stored["transformer.blocks.1.attn1.to_q.weight"] == "q8_0"
    assert stored["transformer.blocks.0.scale_shift_table"] == "f32"  # modulation stays f32
    assert stored["vae.encoder.conv_in.weight"] == "f16" and stored["text_encoder.shared.weight"] == "f16"
    assert bundle.tensor_info("vae.encoder.conv_in.weight").shape == (4, 12, 3, 9)  # 3D kernel, 4 axes
    assert bundle.config["lerobot"]["obs_cam_keys"] == ["observation.images.image", "observation.images.image2"]
    with pytest.raises(ValueError, match="vae group is stored f32"):
        lerobot_bundle._plan("vae=q8_0")


def test_bundle_verify_reruns_the_reference_episode(bundle):
    error, tolerance = verify_reference(bundle, "numpy")
    assert error == 0.0 and tolerance == lerobot_bundle.REFERENCE_TOLERANCE
    # three chunks: chunk 0's (F-1)*P steps, then two chunks of F*P
    assert bundle.reference.expected["actions"].shape == (4 + 8 + 8, 7)


def test_graph_settings_default_and_are_checked(bundle, tmp_path):
    assert bundle.config[lerobot_bundle.GRAPH_SECTION] == {
        "action_period_s": 0.1, "action_names": [f"action_{i}" for i in range(7)]}
    spec = lingbot_va.spec_of(bundle)
    assert spec.camera_names == ("image", "image2") and spec.action_period_s == 0.1 and spec.has_world_model
    names = ["j0", "j1", "j2", "j3", "j4", "j5", "grip"]
    path = tmp_path / "set.gguf"
    convert.convert(CHECKPOINT, path, lerobot_bundle._plan("f32"),
                    overrides={"action_period_s": 0.05, "action_names": names})
    spec = lingbot_va.spec_of(open_bundle(path))
    assert spec.action_period_s == 0.05 and spec.action_names == tuple(names) == spec.state_names
    for settings, message in (({"action_period_s": 0}, "action_period_s"), ({"action_names": names[:3]}, "7 distinct"),
                              ({"fps": 20}, "unknown lingbot_va conversion setting")):
        with pytest.raises(ValueError, match=message):
            convert.convert(CHECKPOINT, tmp_path / "bad.gguf", lerobot_bundle._plan("f32"), overrides=settings)


@pytest.mark.parametrize("folder", [TINY, *EXTRA], ids=lambda p: p.name)
def test_parity_on_lerobots_records(folder):
    assert lingbot_va.recognizes_fixture(folder)
    results = lingbot_va.run_fixture_parity(folder, "f32", backend="numpy")
    assert [r.name for r in results] == [f"case{k}" for k in range(len(results))] and len(results) >= 2
    assert all(r.passed and r.tolerance == 1e-4 for r in results), results
    assert max(r.max_abs_error for r in results) < 1e-5


def test_decoder_from_the_bundle(bundle):
    with np.load(TINY.parent / "wan_vae_decode" / "cases.npz") as decoded:
        frames = lerobot_bundle.load_decoder(bundle).frames(decoded["case2_latents"], wan_vae.Stream())
        assert np.abs(frames - decoded["case2_frames"]).max() < 5e-2  # the VAE stored F16 here
