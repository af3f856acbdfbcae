"""Checkpoint naming -> bundles: the Wan block records as one-block bundles, whole-model checkpoints."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from embodied_ros.bundle import open_bundle
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.models import lingbot_va
from embodied_ros.models.lingbot_va import convert, naming
from embodied_ros.models.lingbot_va.checkpoint import WEIGHTS_FILE, read_checkpoint, write_random_checkpoint
from embodied_ros.models.lingbot_va.config import PRESETS

RECORD = Path(__file__).parent / "data" / "wan_block_tiny"


def test_block_record_becomes_a_one_block_bundle(tmp_path):
    path = convert.convert_block_record(RECORD, tmp_path / "block.gguf")
    bundle = open_bundle(path, architecture="lingbot_va")
    source = load_file(RECORD / "block.safetensors")
    assert sorted(bundle.weight_names) == sorted(f"blk.0.{naming.BLOCK_NAMES[n]}" for n in source)
    np.testing.assert_array_equal(bundle.weight("blk.0.self_attn.q.weight"), source["attn1.to_q.weight"])
    np.testing.assert_array_equal(bundle.weight("blk.0.modulation"), source["scale_shift_table"][0])
    np.testing.assert_array_equal(bundle.weight("blk.0.ffn_out.bias"), source["ffn.net.2.bias"])
    assert bundle.config[convert.BLOCKS_ONLY]["dim"] == 64


def test_one_block_bundle_reproduces_the_recorded_cases(tmp_path):
    bundle = open_bundle(convert.convert_block_record(RECORD, tmp_path / "block.gguf"))
    error, tolerance = lingbot_va.verify_reference(bundle)
    assert tolerance == convert.BLOCK_TOLERANCE["f32"] == 1e-4
    assert error <= tolerance
    with pytest.raises(ValueError, match="bare Wan blocks"):
        lingbot_va.load_runtime(bundle)


@pytest.mark.parametrize("plan", ["q8_0", "q4_k", "bf16"])
def test_parity_hook_runs_quantized_blocks_within_their_tolerance(plan):
    assert lingbot_va.recognizes_fixture(RECORD)
    results = lingbot_va.run_fixture_parity(RECORD, plan)
    assert [r.name for r in results] == ["case0", "case1"]
    assert all(r.passed and r.max_abs_error > 1e-4 for r in results), results  # quantized: not exact


def test_quantized_block_keeps_modulation_and_vectors_f32(tmp_path):
    bundle = open_bundle(convert.convert_block_record(RECORD, tmp_path / "block.gguf", "q4_k"))
    assert isinstance(bundle.weight("blk.0.modulation"), np.ndarray)
    assert isinstance(bundle.weight("blk.0.self_attn.q_norm.weight"), np.ndarray)
    q = bundle.weight("blk.0.self_attn.q.weight")
    assert isinstance(q, QuantTensor) and q.qtype == "q8_0"  # width 64: no whole Q4_K super-block
    assert "modulation=f32" in bundle.quant_plan


def test_unknown_or_misshaped_tensors_are_refused(tmp_path):
    with pytest.raises(ValueError, match="attn3.to_q.weight"):
        naming.convert_block_tensors({"attn3.to_q.weight": np.zeros((4, 4), np.float32)})
    folder = tmp_path / "record"
    shutil.copytree(RECORD, folder)
    tensors = load_file(folder / "block.safetensors")
    tensors["ffn.net.2.weight"] = tensors["ffn.net.2.weight"][:, :100]
    save_file(tensors, str(folder / "block.safetensors"))
    with pytest.raises(ValueError, match="ffn_out.weight"):
        lingbot_va.run_fixture_parity(folder)


def test_checkpoint_generator_is_deterministic(tmp_path):
    cfg = PRESETS["small"]
    for name in ("a", "b"):
        write_random_checkpoint(tmp_path / name, cfg, seed=3)
    for file in (WEIGHTS_FILE, "tokenizer.model", "config.json"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    write_random_checkpoint(tmp_path / "c", cfg, seed=4)
    assert (tmp_path / "a" / WEIGHTS_FILE).read_bytes() != (tmp_path / "c" / WEIGHTS_FILE).read_bytes()


def test_checkpoint_converts_with_groups_and_metadata(tmp_path):
    cfg = PRESETS["small"]
    write_random_checkpoint(tmp_path / "ckpt", cfg, seed=0)
    assert convert.detect(tmp_path / "ckpt") and convert.detect(RECORD) and not convert.detect(tmp_path)
    path = convert.convert_checkpoint(tmp_path / "ckpt", tmp_path / "m.gguf", "ffn=q8_0,head=bf16")
    bundle = open_bundle(path, architecture="lingbot_va")
    assert bundle.raw("blk.1.ffn_in.weight").qtype == "q8_0"
    assert isinstance(bundle.raw("blk.1.self_attn.q.weight"), np.ndarray)  # group not named: f32
    assert bundle.raw("action.out.proj.weight").qtype == "bf16"
    assert bundle.robot.action_names == cfg.action_names and bundle.tokenizer_model
    _, tensors, _ = read_checkpoint(tmp_path / "ckpt")
    np.testing.assert_array_equal(bundle.stats["action"]["std"], tensors["normalization.action_std"])
    np.testing.assert_array_equal(bundle.weight("patch_embed.weight"),
                                  tensors["patch_embedding.weight"].reshape(cfg.dim, -1))


def test_checkpoint_bundle_carries_a_reference_record_that_catches_regressions(tmp_path, monkeypatch):
    from embodied_ros.models.lingbot_va import reference
    from embodied_ros.models.lingbot_va.runtime import LingbotVARuntime
    from embodied_ros.pipeline.types import StageResult

    cfg = PRESETS["small"]
    write_random_checkpoint(tmp_path / "ckpt", cfg, seed=0)
    bundle = open_bundle(convert.convert_checkpoint(tmp_path / "ckpt", tmp_path / "m.gguf", "q8_0"))
    record = bundle.reference
    assert record.fields["kind"] == "world_action" and record.tolerance == reference.TOLERANCE
    assert record.expected["actions"].shape == (cfg.chunk_size, cfg.action_dim)
    assert record.expected["world_latents"].shape == cfg.world_noise_shape
    assert sorted(record.inputs) == sorted([*(f"image_{c}" for c in cfg.camera_names), "state"])
    error, tolerance = lingbot_va.verify_reference(bundle, "numba")
    assert error <= tolerance

    predict_world = LingbotVARuntime.predict_world

    def slightly_off(self, prefix, noise=None):  # the predicted frames' keys 1 % off
        world = predict_world(self, prefix, noise)
        return StageResult(world.stage, world.stamp_ns, {**world.tensors, "world_k": world.tensors["world_k"] * 0.99},
                           world.meta)

    monkeypatch.setattr(LingbotVARuntime, "predict_world", slightly_off)
    error, tolerance = lingbot_va.verify_reference(bundle, "numba")
    assert error > tolerance


def test_checkpoint_with_a_missing_tensor_is_refused(tmp_path):
    write_random_checkpoint(tmp_path / "ckpt", PRESETS["small"], seed=0)
    tensors = load_file(tmp_path / "ckpt" / WEIGHTS_FILE)
    del tensors["blocks.1.attn2.norm_k.weight"]
    save_file(tensors, str(tmp_path / "ckpt" / WEIGHTS_FILE))
    with pytest.raises(ValueError, match="blocks.1.attn2.norm_k.weight"):
        convert.convert_checkpoint(tmp_path / "ckpt", tmp_path / "m.gguf")
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    config["dim"] = 65
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="not divisible"):
        convert.convert_checkpoint(tmp_path / "ckpt", tmp_path / "m.gguf")
