"""Wan block records -> one-block bundles: names, reference cases, quantized parity, refusals."""

import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from embodied_ros.backbone.wan_block import DIFFUSERS_BLOCK_NAMES
from embodied_ros.bundle import open_bundle
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.models import lingbot_va
from embodied_ros.models.lingbot_va import convert, naming

RECORD = Path(__file__).parent / "data" / "wan_block_tiny"


def test_block_record_becomes_a_one_block_bundle(tmp_path):
    path = convert.convert_block_record(RECORD, tmp_path / "block.gguf")
    bundle = open_bundle(path, architecture="lingbot_va")
    source = load_file(RECORD / "block.safetensors")
    assert sorted(bundle.weight_names) == sorted(f"blk.0.{DIFFUSERS_BLOCK_NAMES[n]}" for n in source)
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
