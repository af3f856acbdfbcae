"""pi0.5 sequence builders: prompt text, state bins, tokenizer, normalization, images, prefix layout."""

import json

import numpy as np
import pytest

from embodied_ros.models.pi05 import prompt
from embodied_ros.sequence import images, prefix
from embodied_ros.sequence.normalize import QuantileStats
from embodied_ros.sequence.tokenizer import PromptTokenizer
from pi05_fixtures import CHECKPOINT

TOKENIZER = (CHECKPOINT / "checkpoint" / "tokenizer.model").read_bytes()


@pytest.fixture(scope="module")
def recorded():
    with np.load(CHECKPOINT / "cases.npz") as cases:
        arrays = {name: cases[name] for name in cases.files}
    return json.loads((CHECKPOINT / "cases.json").read_text())["cases"], arrays


# ---- prompt --------------------------------------------------------------------------------

def test_task_is_stripped_before_underscores_and_newlines_become_spaces():
    assert prompt.clean_task("  Stack_the_green_block\non the blue plate_  \n") == \
        "Stack the green block on the blue plate "
    assert prompt.clean_task("\n_pick\n") == " pick"  # inner newline and underscore survive as spaces


def test_state_bins_at_the_edges():
    edges = np.array([-1.0, -1.0 + 1 / 128, 0.0, 127 / 128, 1.0], dtype=np.float32)
    np.testing.assert_array_equal(prompt.discretize_state(edges), [0, 1, 128, 255, 255])
    below = np.array([np.nextafter(np.float32(-1.0), np.float32(-2.0)), -1.7], dtype=np.float32)
    np.testing.assert_array_equal(prompt.discretize_state(below), [-1, -1])
    just_below_zero = np.array([np.nextafter(np.float32(0.0), np.float32(-1.0))], dtype=np.float32)
    assert prompt.discretize_state(just_below_zero)[0] == 127  # floor((n + 1) * 128) would give 128


def test_state_must_be_finite_vector():
    with pytest.raises(ValueError, match="non-finite"):
        prompt.discretize_state(np.array([0.0, np.nan], np.float32))
    with pytest.raises(ValueError, match="vector"):
        prompt.discretize_state(np.zeros((2, 2), np.float32))


def test_prompt_format():
    assert prompt.build_prompt("pick_up\n", np.array([-1, 0, 255])) == "Task: pick up, State: -1 0 255;\nAction: "


def test_recorded_prompts_bins_and_normalized_state(recorded):
    from safetensors.numpy import load_file

    cases, arrays = recorded
    stats = load_file(str(CHECKPOINT / "checkpoint" / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    state_stats = QuantileStats(stats["observation.state.q01"], stats["observation.state.q99"])
    for k, case in enumerate(cases):
        normalized = state_stats.normalize(arrays[f"case{k}_state_raw"])
        np.testing.assert_array_equal(normalized, arrays[f"case{k}_state_normalized"])
        bins = prompt.discretize_state(normalized)
        np.testing.assert_array_equal(bins, arrays[f"case{k}_state_bins"])
        assert prompt.build_prompt(case["task"], bins) == case["prompt"]


# ---- tokenizer -----------------------------------------------------------------------------

def test_recorded_token_ids_including_truncation(recorded):
    cases, arrays = recorded
    tokenizer = PromptTokenizer(TOKENIZER, 64)
    for k, case in enumerate(cases):
        ids, mask = tokenizer.encode(case["prompt"])
        np.testing.assert_array_equal(ids, arrays[f"case{k}_tokens"])
        np.testing.assert_array_equal(mask, arrays[f"case{k}_attention_mask"])
    assert cases[2]["truncated"] and mask.all()


def test_tokenizer_adds_bos_pads_right_and_truncates():
    short = PromptTokenizer(TOKENIZER, 8)
    ids, mask = short.encode("Task: a")
    assert ids[0] == 2 and mask[0]
    n = int(mask.sum())
    assert not mask[n:].any() and (ids[n:] == 0).all() and 1 < n < 8
    long_ids, long_mask = short.encode("Task: " + "pick up the cube " * 10)
    assert long_ids.shape == (8,) and long_mask.all() and long_ids[0] == 2
    assert 1 not in long_ids  # no eos


def test_tokenizer_rejects_garbage():
    with pytest.raises(ValueError, match="SentencePiece"):
        PromptTokenizer(b"not a model", 16)


# ---- normalization -------------------------------------------------------------------------

def test_quantile_normalization_round_trip_without_clipping():
    stats = QuantileStats(np.array([0.0, -2.0, 5.0]), np.array([1.0, 2.0, 5.0]))
    x = np.array([1.5, -2.0, 5.0], np.float32)
    n = stats.normalize(x)
    np.testing.assert_allclose(n[:2], [2.0, -1.0])  # outside [q01, q99] stays outside [-1, 1]
    assert n[2] == -1.0  # zero range: divided by eps, not by zero
    np.testing.assert_allclose(stats.denormalize(np.array([2.0, -1.0, 0.3], np.float32)), [1.5, -2.0, 5.0])


def test_normalization_checks_sizes():
    stats = QuantileStats(np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="3"):
        stats.normalize(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="differ"):
        QuantileStats(np.zeros(3), np.ones(2))


# ---- images --------------------------------------------------------------------------------

def test_resize_with_pad_matches_recorded_model_images(recorded):
    cases, arrays = recorded
    for k, case in enumerate(cases):
        for slot, camera in enumerate(case["model_camera_order"]):
            short = camera.split(".")[-1]
            if f"case{k}_{short}_uint8" in arrays:
                got = images.model_image(arrays[f"case{k}_{short}_uint8"], 56)
                np.testing.assert_allclose(got, arrays[f"case{k}_model_images"][slot], atol=2e-6)


def test_resize_keeps_aspect_ratio_and_pads_centred():
    image = np.full((96, 128, 3), 255, np.uint8)
    out = images.model_image(image, 56)  # 96x128 -> 42x56, 7 rows of padding above and below
    assert out.shape == (3, 56, 56)
    assert (out[:, :7] == -1).all() and (out[:, 49:] == -1).all() and np.allclose(out[:, 7:49], 1.0)


def test_image_input_errors_name_the_camera():
    with pytest.raises(ValueError, match="wrist"):
        images.model_image(np.zeros((4, 4), np.uint8), 56, "wrist")
    with pytest.raises(ValueError, match="uint8"):
        images.model_image(np.zeros((4, 4, 3), np.float32), 56, "wrist")


# ---- prefix layout -------------------------------------------------------------------------

def test_prefix_layout_rules():
    pad = prefix.prefix_pad_mask(np.array([True, False]), 2, np.array([True, True, False]))
    np.testing.assert_array_equal(pad, [1, 1, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(prefix.position_ids(pad), [0, 1, 1, 1, 2, 3, 3])
    allowed = prefix.attention_allowed(pad)
    assert allowed[0, 5] and allowed[5, 0]  # bidirectional: an image token reads a later text token
    assert not allowed[0, 2].any() and not allowed[6].any()
    assert prefix.attention_bias(np.ones(4, bool)) is None
    bias = prefix.attention_bias(pad)
    assert bias[0, 1] == 0 and bias[0, 2] < -1e38


def test_resize_with_pad_keeps_a_row_of_a_very_thin_image():
    from embodied_ros.sequence.images import resize_with_pad

    thin = np.ones((3, 1, 2000), np.float32)
    with np.errstate(all="raise"):
        out = resize_with_pad(thin, 224)
    assert out.shape == (3, 224, 224)
    assert out.sum() > 0  # the image's one row is there, not all padding


def test_padding_is_centred_or_left_and_top():
    from embodied_ros.sequence.images import resize_with_pad

    wide = np.ones((3, 32, 64), np.float32)  # -> 16 x 32 in a 32 x 32 frame: 16 rows of padding
    centre, left_top = resize_with_pad(wide, 32), resize_with_pad(wide, 32, "left_top")
    assert centre[0, :8].sum() == 0 and centre[0, 8:24].min() == 1 and centre[0, 24:].sum() == 0
    assert left_top[0, :16].sum() == 0 and left_top[0, 16:].min() == 1
    with pytest.raises(ValueError, match="padding must be one of"):
        resize_with_pad(wide, 32, "right")


def test_normalizer_is_chosen_from_the_stored_statistics():
    from embodied_ros.sequence.normalize import MeanStdStats, MinMaxStats, normalizer_of

    x = np.array([0.5, -1.0, 3.0], np.float32)
    mean_std = normalizer_of({"mean": np.array([0.0, 1.0, 2.0]), "std": np.array([1.0, 2.0, 0.0])})
    assert isinstance(mean_std, MeanStdStats)
    np.testing.assert_array_equal(mean_std.normalize(x), (x - mean_std.mean) / (mean_std.std + np.float32(1e-8)))
    np.testing.assert_allclose(mean_std.denormalize(mean_std.normalize(x))[:2], x[:2], rtol=1e-6)
    min_max = normalizer_of({"min": np.array([0.0, -2.0, 3.0]), "max": np.array([1.0, 2.0, 3.0])})
    assert isinstance(min_max, MinMaxStats)
    np.testing.assert_allclose(min_max.normalize(x), [0.0, -0.5, -1.0])  # a zero range maps min to -1
    np.testing.assert_allclose(min_max.denormalize(np.array([1.0, -1.0, 0.0], np.float32)), [1.0, -2.0, 3.0])
    assert isinstance(normalizer_of({"q01": np.zeros(3), "q99": np.ones(3), "mean": np.zeros(3)}), QuantileStats)
    assert normalizer_of({}) is None
    with pytest.raises(ValueError, match="match no mode"):
        normalizer_of({"median": np.zeros(3)})
