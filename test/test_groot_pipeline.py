"""GR00T N1.7 from raw inputs as LeRobot's pre- and postprocessor run it (test/data/groot_pipeline_tiny,
made by reference/gen_groot_pipeline.py): the uint8 view transform bit for bit, the patch rows, the
chat prompt's token ids, state normalization and action decoding, the LeRobot save's conversion and
the stage runtime end to end."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from embodied_ros.bundle import open_bundle
from embodied_ros.cli.main import main
from embodied_ros.models.kit.records import pipeline_observation
from embodied_ros.models.groot import convert, parity, processor
from embodied_ros.models.groot.runtime import load_runtime
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation
from embodied_ros.sequence.resample import resize_bicubic_uint8

RECORD = Path(__file__).parent / "data" / "groot_pipeline_tiny"
TASKS = json.loads((RECORD / "cases.json").read_text())["cases"]
SETTINGS = processor.ProcessorConfig()


@pytest.fixture(scope="module")
def cases():
    with np.load(RECORD / "cases.npz") as data:
        return dict(data)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    path = tmp_path_factory.mktemp("groot_pipeline") / "groot.gguf"
    convert.convert(RECORD / "checkpoint", path, reference=RECORD)
    return load_runtime(open_bundle(path))


@pytest.mark.parametrize("i", range(7))
def test_uint8_bicubic_resize_equals_torchvisions_bit_for_bit(cases, i):
    source, expected = cases[f"resize{i}_in"], cases[f"resize{i}_out"]
    np.testing.assert_array_equal(resize_bicubic_uint8(source, *expected.shape[:2]), expected)


@pytest.mark.parametrize("k", range(3))
def test_view_transform_gives_lerobots_views(cases, k):
    for camera in TASKS[k]["cameras"]:
        frame = processor.view_frame(cases[f"case{k}_{camera}_uint8"], SETTINGS, camera)
        np.testing.assert_array_equal(frame, cases[f"case{k}_{camera}_view"])


def test_patch_rows_equal_the_qwen_image_processors(cases):
    frame = processor.view_frame(cases["case2_front_uint8"], SETTINGS)
    rows, grid = processor.patch_rows(frame, SETTINGS, 16, 2, 2)
    assert grid == (16, 16)
    np.testing.assert_allclose(rows, cases["case2_pixel_values"], atol=1e-6, rtol=0)


def test_smart_size_keeps_the_grid_and_the_pixel_bounds():
    assert processor.smart_size(256, 256, 32, 65536, 16777216) == (256, 256)
    assert processor.smart_size(100, 150, 32, 65536, 16777216) == (224, 320)  # scaled up to the minimum
    assert processor.smart_size(5000, 5000, 32, 65536, 1 << 20) == (1024, 1024)
    with pytest.raises(ValueError, match="elongated"):
        processor.smart_size(1, 300, 32, 65536, 16777216)


@pytest.mark.parametrize("k", range(3))
def test_prompt_token_ids_and_state_equal_lerobots(runtime, cases, k):
    observation = pipeline_observation(cases, TASKS[k]["task"], f"case{k}", runtime.spec.camera_names)
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    np.testing.assert_array_equal(prefix.tensors["tokens"], cases[f"case{k}_tokens"])
    np.testing.assert_allclose(prefix.tensors["state"], cases[f"case{k}_state"], atol=1e-6, rtol=0)


def test_task_text_is_formalized_as_lerobot_does():
    assert processor.task_text("Pick up the red cube, and place it in the bowl.") == \
        "pick up the red cube and place it in the bowl"
    assert processor.task_text("") == "perform the task"
    assert processor.task_text("Keep_Case!", formalize=False) == "Keep_Case!"


def test_a_constant_joint_normalizes_to_zero_and_decodes_to_its_minimum():
    low, high = np.array([0.0, 1.0], np.float32), np.array([2.0, 1.0], np.float32)
    np.testing.assert_array_equal(processor.normalize_state(np.array([3.0, 5.0]), low, high, 4), [1.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(processor.normalize_state(np.array([3.0, 5.0]), low, high, 2, clip=False), [2.0, 0.0])
    np.testing.assert_array_equal(processor.decode_actions(np.array([[0.0, 0.7], [2.0, -3.0]]), low, high),
                                  [[1.0, 1.0], [2.0, 1.0]])


@pytest.mark.parametrize("k", range(3))
def test_raw_inputs_give_lerobots_actions_within_1e4(runtime, cases, k):
    observation = pipeline_observation(cases, TASKS[k]["task"], f"case{k}", runtime.spec.camera_names)
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    noise = cases[f"case{k}_noise"]
    assert np.abs(runtime.model_actions(prefix, noise) - cases[f"case{k}_actions_model"]).max() < 1e-4
    actions = infer(runtime, observation, noise).actions
    assert actions.shape == (8, 5) and np.abs(actions - cases[f"case{k}_actions"]).max() < 1e-4


def test_parity_command_and_bundle_verify_on_the_pipeline_record(tmp_path, capsys):
    assert main(["parity", str(RECORD)]) == 0
    assert "within tolerance 0.0001" in capsys.readouterr().out
    assert [r.passed for r in parity.run_fixture_parity(RECORD, "q8_0")] == [True] * 3
    bundle = tmp_path / "groot.gguf"
    assert main(["bundle", "convert", str(RECORD / "checkpoint"), str(bundle), "--reference", str(RECORD),
                 "--no-progress"]) == 0
    assert main(["bundle", "verify", str(bundle)]) == 0


def test_the_save_carries_stats_tokenizer_and_processor_settings():
    checkpoint = convert.read_checkpoint(RECORD / "checkpoint")
    assert checkpoint.tokenizer is not None and sorted(checkpoint.stats) == ["action", "state"]
    assert checkpoint.state_names == tuple(f"joint_{i}" for i in range(6))  # cases.json beside the save
    settings = checkpoint.config.processor
    assert (settings.image_target_size, settings.image_crop_size, settings.embodiment_id) == ((256, 256),
                                                                                            (230, 230), 10)
    assert checkpoint.config.tokens.image == json.loads(checkpoint.tokenizer)["added_tokens"][5]["id"]


def test_a_missing_camera_is_one_view_fewer_and_no_camera_is_refused(runtime, cases):
    observation = pipeline_observation(cases, "push", "case0", ("front",))
    assert runtime.encode(observation).tensors["grids"].tolist() == [[16, 16]]
    with pytest.raises(ValueError, match="no camera image"):
        runtime.encode(Observation(stamp_ns=0, images={}, state=np.zeros(6, np.float32), instruction="x"))
    with pytest.raises(ValueError, match="uint8"):
        processor.view_frame(np.zeros((4, 4, 3), np.float32), SETTINGS, "front")


def test_a_save_without_statistics_or_with_unsupported_settings_is_refused(tmp_path):
    folder = tmp_path / "checkpoint"
    shutil.copytree(RECORD / "checkpoint", folder)
    shutil.copy(RECORD / "cases.json", tmp_path / "cases.json")
    pipeline = json.loads((folder / "policy_preprocessor.json").read_text())
    pipeline["steps"][3]["config"]["use_albumentations"] = True
    (folder / "policy_preprocessor.json").write_text(json.dumps(pipeline))
    with pytest.raises(ValueError, match="use_albumentations"):
        convert.read_checkpoint(folder)
    pipeline["steps"][3]["config"]["use_albumentations"] = False
    (folder / "policy_preprocessor.json").write_text(json.dumps(pipeline))
    for name in folder.glob("policy_postprocessor*"):
        name.unlink()
    bundle = tmp_path / "no_stats.gguf"
    convert.convert(folder, bundle)
    with pytest.raises(ValueError, match="no action min/max statistics"):
        load_runtime(open_bundle(bundle))
