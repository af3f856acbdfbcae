"""GR00T N1.7 checkpoints -> bundles: `bundle convert` with a reference record, `bundle verify`,
`parity`, family detection and clear errors for foreign or broken input."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from embodied_ros.bundle import families, open_bundle
from embodied_ros.cli.main import main
from embodied_ros.models.groot import convert, parity
from embodied_ros.models.groot.runtime import load_model

RECORD = Path(__file__).parent / "data" / "groot_tiny"
ASIDE = Path(__file__).parent / "data" / "extra" / "groot_aside"  # other shapes, see its README


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("groot") / "groot_tiny.gguf"
    convert.convert(RECORD, path, reference=RECORD)
    return path


def test_detect_family_finds_groot():
    assert families.detect_family(RECORD) == "groot"
    assert parity.recognizes_fixture(RECORD)


def test_bundle_keeps_the_kept_layers_and_reproduces_its_record(bundle_path):
    bundle = open_bundle(bundle_path, architecture="groot")
    assert not any(name.startswith("lm.blk.3.") for name in bundle.weight_names)  # select_layer = 3 of 4
    model = load_model(bundle, "numpy")
    assert model.config.text.depth == 3 and model.config.head.block_kinds[0] == "cross_attn_text"
    error, tolerance = families.verify_reference(bundle, "numpy")
    assert tolerance == 1e-4 and error < tolerance


def test_bundle_verify_command(bundle_path, capsys):
    assert main(["bundle", "verify", str(bundle_path), "--backend", "numpy"]) == 0
    assert "PASS reference record" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_parity_command_within_1e4(backend, capsys):
    assert main(["parity", str(RECORD), "--backend", backend]) == 0
    out = capsys.readouterr().out
    assert "within tolerance 0.0001 (f32)" in out
    assert float(out.strip().splitlines()[-1].split("=")[1]) < 1e-4


def test_parity_on_the_record_kept_aside(capsys):
    assert main(["parity", str(ASIDE), "--backend", "numpy"]) == 0
    assert float(capsys.readouterr().out.strip().splitlines()[-1].split("=")[1]) < 1e-4


def test_parity_with_bf16_weights_uses_that_types_tolerance(capsys):
    assert main(["parity", str(RECORD), "--quant", "bf16", "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    error = float(out.strip().splitlines()[-1].split("=")[1])
    assert "(bf16)" in out and 1e-4 < error < parity.TOLERANCES["bf16"]


def test_a_record_the_bundle_misses_is_refused(tmp_path):
    folder = tmp_path / "record"
    shutil.copytree(RECORD, folder)
    with np.load(folder / "cases.npz") as data:
        cases = dict(data)
    cases["case1_actions"] = cases["case1_actions"] + np.float32(0.01)
    np.savez(folder / "cases.npz", **cases)
    output = tmp_path / "bad.gguf"
    with pytest.raises(ValueError, match="misses its reference record"):
        convert.convert(folder, output, reference=folder)
    assert not output.exists()
    assert main(["parity", str(folder), "--backend", "numpy"]) == 1


def test_foreign_tensors_are_a_clear_error(tmp_path):
    folder = tmp_path / "checkpoint"
    shutil.copytree(RECORD, folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.paligemma_with_expert.something.weight"] = np.zeros((2, 2), np.float32)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match="not a LeRobot GR00T N1.7 policy"):
        convert.read_checkpoint(folder)


def test_missing_tensors_are_a_clear_error(tmp_path):
    folder = tmp_path / "checkpoint"
    shutil.copytree(RECORD, folder)
    tensors = load_file(folder / "model.safetensors")
    del tensors["_groot_model.action_head.vlln.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match="groot weights lack 1 tensors"):
        convert.read_checkpoint(folder)


def test_the_graph_refuses_a_bundle_without_tokenizer_in_one_line(bundle_path):
    from embodied_ros.pipeline.stages import load_runtime

    with pytest.raises(ValueError, match="has no tokenizer") as error:
        load_runtime(bundle_path)
    assert "\n" not in str(error.value)


def test_a_save_that_kept_only_the_tied_lm_head_converts(tmp_path):
    folder = tmp_path / "record"
    shutil.copytree(RECORD, folder)
    tensors = load_file(folder / "model.safetensors")
    embed = "_groot_model.backbone.model.model.language_model.embed_tokens.weight"
    tensors["_groot_model.backbone.model.lm_head.weight"] = tensors.pop(embed)
    save_file(tensors, folder / "model.safetensors")
    assert main(["parity", str(folder), "--backend", "numpy"]) == 0


LEROBOT_CONFIG = {"type": "groot", "chunk_size": 8, "max_state_dim": 16, "max_action_dim": 16,
                  "input_features": {"observation.images.wrist": {"type": "VISUAL", "shape": [3, 256, 256]},
                                     "observation.images.front": {"type": "VISUAL", "shape": [3, 256, 256]},
                                     "observation.state": {"type": "STATE", "shape": [6]}},
                  "output_features": {"action": {"type": "ACTION", "shape": [5]}}}
RECORD_DIMS = {"vision.num_heads": 2, "vision.deepstack_indexes": [0, 2], "text.mrope_section": [4, 2, 2],
               "head.num_heads": 2, "head.vl_num_heads": 2, "embodiment_id": 1}


def _lerobot_save(tmp_path) -> Path:
    folder = tmp_path / "save"
    folder.mkdir()
    shutil.copy(RECORD / "model.safetensors", folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(LEROBOT_CONFIG))
    return folder


def test_a_lerobot_save_gives_its_sizes_from_the_tensor_shapes(tmp_path):
    from embodied_ros.models.groot.config import GrootConfig

    checkpoint = convert.read_checkpoint(_lerobot_save(tmp_path), RECORD_DIMS)
    recorded = GrootConfig.from_fixture_json(json.loads((RECORD / "config.json").read_text()))
    config = checkpoint.config
    assert config.camera_names == ("front", "wrist")  # LeRobot feeds the cameras sorted
    assert (config.vision, config.text.width, config.text.depth, config.head) == (
        recorded.vision, recorded.text.width, recorded.text.depth, recorded.head)
    assert (config.state_dim, config.action_dim, config.processor.embodiment_id) == (6, 5, 1)


def test_a_lerobot_save_that_the_released_head_counts_do_not_fit_is_a_clear_error(tmp_path):
    folder = _lerobot_save(tmp_path)
    assert convert.detect(folder) and families.detect_family(folder) == "groot"
    with pytest.raises(ValueError, match="vision.width 32 / num_heads 16"):
        convert.read_checkpoint(folder)
    with pytest.raises(ValueError, match="unknown groot conversion setting"):
        convert.read_checkpoint(folder, {"vision.heads": 2})
