"""HY-VLA against its records (made by HY-VLA's own code: reference/hy_vla/gen_records.py): the model's
actions, the tower's image tokens, the image preparation and the prompt's token ids; the prefix's attention
rules; memory frames; the converter's refusals."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from embodied_ros.models.hy_vla import convert
from embodied_ros.models.hy_vla.config import HyVLAConfig
from embodied_ros.models.hy_vla.model import HyVLAModel, prefix_allowed, prefix_layout
from embodied_ros.models.hy_vla.parity import model_case
from embodied_ros.models.hy_vla.runtime import HyVLARuntime, HyVLATokenizer, prompt_text
from embodied_ros.models.hy_vla.parity import RECORDS
from embodied_ros.sequence.images import model_image

DATA = Path(__file__).parent / "data"
TINY, MEMORY, BF16 = DATA / "hy_vla_tiny", DATA / "extra" / "hy_vla_memory", DATA / "extra" / "hy_vla_bf16"


def model_and_cases(folder: Path):
    checkpoint = convert.read_checkpoint(folder)
    with np.load(folder / "cases.npz") as cases:
        arrays = {name: cases[name] for name in cases.files}
    return checkpoint, HyVLAModel(checkpoint.config, checkpoint.weights, "numpy"), arrays


@pytest.mark.parametrize("folder, tolerance", [(TINY, 1e-5), (MEMORY, 1e-5)], ids=["tiny", "memory"])
def test_actions_and_image_tokens_match_the_record(folder, tolerance):
    _, model, cases = model_and_cases(folder)
    present = cases["case0_image_masks"]
    tokens = model.image_tokens(cases["case0_images"], present)[present]
    assert np.abs(tokens - cases["case0_image_tokens"]).max() < 1e-5
    notes = json.loads((folder / "cases.json").read_text())["cases"]
    for k in range(len(notes)):
        expected = cases[f"case{k}_normalized_actions"]
        assert np.abs(model_case(model, cases, f"case{k}") - expected).max() < tolerance


def test_a_record_made_in_bf16_is_met_within_bf16_error_by_float32_arithmetic():
    _, model, cases = model_and_cases(BF16)
    errors = [np.abs(model_case(model, cases, f"case{k}") - cases[f"case{k}_normalized_actions"]).max()
              for k in range(2)]
    assert 1e-3 < max(errors) < 5e-2  # the reference's bf16 rounding, well inside bf16's tolerance


def test_a_wrong_isolation_setting_misses_the_record():
    checkpoint, _, cases = model_and_cases(TINY)
    values = checkpoint.config.to_dict()
    values["visual_segment_isolation"] = not values["visual_segment_isolation"]
    model = HyVLAModel(HyVLAConfig.from_dict(values), checkpoint.weights, "numpy")
    assert np.abs(model_case(model, cases, "case0") - cases["case0_normalized_actions"]).max() > 1e-2


@pytest.mark.parametrize("folder", [TINY, MEMORY], ids=["tiny", "memory"])
def test_camera_images_are_prepared_as_the_reference_prepares_them(folder):
    checkpoint, _, cases = model_and_cases(folder)
    size, cameras = checkpoint.config.vision.image_size, checkpoint.config.camera_names
    for k in range(len(json.loads((folder / "cases.json").read_text())["cases"])):
        raw = [cases[f"case{k}_{name}_uint8"] for name in cameras if f"case{k}_{name}_uint8" in cases]
        for index, image in enumerate(raw):  # present cameras come first
            frames = image if image.ndim == 4 else image[None]
            ours = np.stack([model_image(frame, size) for frame in frames])
            assert np.abs(ours - cases[f"case{k}_images"][index].reshape(ours.shape)).max() < 1e-5


@pytest.mark.parametrize("folder, tolerance", [(TINY, 1e-4), (MEMORY, 1e-4), (BF16, 5e-2)],
                         ids=["tiny", "memory", "bf16"])
def test_raw_inputs_through_the_runtime_give_the_wrappers_actions(folder, tolerance):
    """uint8 cameras, the raw state and the task through the runtime's stages (memory frames one
    observation at a time) -> the actions the evaluation's wrapper hands on."""
    results = RECORDS.run_fixture_parity(folder, "f32", "numpy")
    raw = [result for result in results if result.name.endswith(" raw")]
    assert len(raw) == len(results) // 2 and all(r.max_abs_error < tolerance for r in raw), results


@pytest.mark.parametrize("folder", [TINY, MEMORY], ids=["tiny", "memory"])
def test_prompts_give_the_recorded_token_ids(folder):
    checkpoint, _, cases = model_and_cases(folder)
    tokenizer = HyVLATokenizer(checkpoint.tokenizer, checkpoint.config.tokenizer_max_length)
    for k, case in enumerate(json.loads((folder / "cases.json").read_text())["cases"]):
        tokens, mask = tokenizer.encode(prompt_text(case["task"]))
        assert np.array_equal(mask, cases[f"case{k}_token_mask"])
        assert np.array_equal(tokens[mask], cases[f"case{k}_tokens"][mask])


def test_prompt_is_cleaned_and_ends_with_the_assistant_token():
    assert prompt_text("  pick_up the\ncup ") == "pick up the cup<｜hy_Assistant｜>"
    # the reference replaces underscores before it looks for the token, so a task that brings its own gets two
    assert prompt_text("go<｜hy_Assistant｜>") == "go<｜hy Assistant｜><｜hy_Assistant｜>"


def test_prefix_attention_rules():
    checkpoint = convert.read_checkpoint(TINY)
    values = checkpoint.config.to_dict()
    g = checkpoint.config.vision.grid
    kinds, patch, segments = prefix_layout(checkpoint.config, 2, 1, 3)
    assert kinds.size == 2 + 2 * (2 + g * (g + 1)) + 2 + 3 and patch.sum() == 2 * g * g
    (a0, a1), (b0, b1) = segments
    isolated = prefix_allowed(checkpoint.config, patch, segments)
    assert isolated[a0:a1, a0:a1].all() and not isolated[a0:a1, :a0].any()  # own image only, both ways
    assert isolated[-1].all() and not isolated[0, 1:].any()  # the prompt reads everything before it; causal
    values["visual_segment_isolation"] = False
    patch_only = prefix_allowed(HyVLAConfig.from_dict(values), patch, segments)
    first_patch, other_patch = a0, b0
    assert patch_only[first_patch, a0:a0 + g].all() and patch_only[first_patch, 0]  # its image's patches, and bos
    assert not patch_only[other_patch, a0] and patch_only[other_patch, a0 + g]  # not another image's patches; its splits


def test_memory_frames_stack_the_encoded_images_with_black_before_the_first():
    checkpoint = convert.read_checkpoint(MEMORY)
    runtime = HyVLARuntime.from_parts(checkpoint.config, checkpoint.weights, checkpoint.tokenizer, checkpoint.stats,
                                      "numpy")
    frames = checkpoint.config.memory_frames
    shots = [np.full((1, 3, 2, 2), float(i), np.float32) for i in range(frames + 2)]
    stack = runtime.frames(shots[0])
    assert stack.shape == (1, frames, 3, 2, 2) and (stack[0, :-1] == -1).all() and (stack[0, -1] == 0).all()
    for shot in shots[1:]:
        stack = runtime.frames(shot)
    assert [float(stack[0, k, 0, 0, 0]) for k in range(frames)] == [float(i) for i in range(2, frames + 2)]
    runtime.reset_memory()
    assert (runtime.frames(shots[0])[0, :-1] == -1).all()


def test_converter_refuses_what_it_cannot_run(tmp_path):
    source = tmp_path / "ckpt"
    shutil.copytree(TINY, source)
    (source / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="tokenizer.json"):
        convert.read_checkpoint(source)
    shutil.copy(TINY / "tokenizer.json", source / "tokenizer.json")
    config = json.loads((source / "config.json").read_text())
    config["vlm_config_dict"]["text_config"]["rope_scaling"] = {"type": "yarn", "factor": 4.0}
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="dynamic-alpha"):
        convert.read_checkpoint(source)
    assert not convert.detect(DATA / "pi0_tiny") and convert.detect(TINY)


def test_step_times_carry_the_float32_additions_of_the_reference_loop():
    from embodied_ros.heads import flow

    times = flow.accumulated_times(10)
    assert times.dtype == np.float32 and times[0] == 1 and times.size == 10
    assert times[2] == np.float32(np.float32(np.float32(1) - np.float32(0.1)) - np.float32(0.1)) != np.float32(0.8)
    assert np.array_equal(flow.accumulated_times(4), flow.euler_times(4))  # quarters add exactly


def test_actions_leave_in_physical_units_with_the_per_step_statistics():
    import pickle

    from embodied_ros.bundle import open_bundle
    from embodied_ros.models.hy_vla.runtime import load_runtime

    runtime = load_runtime(open_bundle(DATA.parent.parent / "bundles" / "hy_vla_tiny.gguf"), "numpy")
    with (TINY / "norm_stats.pkl").open("rb") as file:
        stats = pickle.load(file)
    with np.load(TINY / "cases.npz") as cases:
        normalized = cases["case0_normalized_actions"]
    chunk = normalized.shape[0]
    physical = runtime.to_physical(normalized, None)
    assert np.allclose(physical, normalized * stats["action_std"][:chunk] + stats["action_mean"][:chunk], atol=1e-5)
    state = np.arange(runtime.config.state_dim, dtype=np.float32)
    assert np.allclose(runtime.state_stats.normalize(state), (state - stats["qpos_mean"]) / stats["qpos_std"], atol=1e-5)


def test_a_statistics_pickle_that_names_anything_but_arrays_is_refused(tmp_path):
    import os
    import pickle

    class Forged:
        def __reduce__(self):
            return (os.getcwd, ())

    source = tmp_path / "ckpt"
    shutil.copytree(TINY, source)
    (source / "norm_stats.pkl").write_bytes(pickle.dumps({"qpos_mean": Forged()}))
    with pytest.raises(ValueError, match="only numpy arrays"):
        convert.read_checkpoint(source)
    (source / "norm_stats.pkl").write_bytes(pickle.dumps({"qpos_mean": np.zeros(3)}))
    with pytest.raises(ValueError, match="not HY-VLA statistics"):
        convert.read_checkpoint(source)


def test_memory_starts_again_with_a_new_task_or_an_older_observation():
    from embodied_ros.pipeline.types import Observation

    checkpoint = convert.read_checkpoint(MEMORY)
    runtime = HyVLARuntime.from_parts(checkpoint.config, checkpoint.weights, checkpoint.tokenizer, checkpoint.stats,
                                      "numpy")
    image = np.zeros((32, 32, 3), np.uint8)
    state = np.zeros(checkpoint.config.state_dim, np.float32)

    def encode(stamp: int, task: str) -> int:
        runtime.encode(Observation(stamp, {name: image for name in checkpoint.config.camera_names}, state, task))
        return len(runtime.memory)

    assert [encode(1, "fold"), encode(2, "fold"), encode(3, "fold")] == [1, 2, 3]
    assert encode(4, "stack") == 1  # a new task
    assert encode(5, "stack") == 2 and encode(2, "stack") == 1  # a replay from its start


def test_quantized_bundles_stay_within_their_types_tolerance():
    for quant in ("bf16", "q8_0"):
        results = RECORDS.run_fixture_parity(TINY, quant, "numba")
        assert all(result.passed for result in results), (quant, results)
        assert max(result.max_abs_error for result in results) > 1e-4  # the storage really changed the weights
