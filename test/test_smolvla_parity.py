"""SmolVLA actions and intermediate values against LeRobot's PyTorch reference records."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from embodied_ros.backbone.smolvlm import pixel_shuffle
from embodied_ros.models.smolvla import weights as smolvla_weights
from embodied_ros.models.smolvla.config import SmolVLAConfig
from embodied_ros.models.smolvla.model import SmolVLAModel, prefix_attention_bias
from embodied_ros.models.smolvla import RECORDS

DATA = Path(__file__).parent / "data"
TINY = DATA / "smolvla_tiny"
OTHER_SHAPES = sorted(p for p in (DATA / "extra").glob("smolvla_*")  # plain sampling records, not RTC ones
                      if (p / "cases.npz").is_file() and "rtc" not in json.loads((p / "config.json").read_text()))
TOLERANCE = 1e-4
_MODELS = {}


def record(folder):
    config = SmolVLAConfig.from_fixture_json(json.loads((folder / "config.json").read_text()))
    return config, np.load(folder / "cases.npz")


def model(folder, backend):
    key = (folder, backend)
    if key not in _MODELS:
        config, _ = record(folder)
        state_dict = load_file(str(folder / "model.safetensors"))
        weights = smolvla_weights.stack_projections(smolvla_weights.rename_lerobot(state_dict), config)
        _MODELS[key] = SmolVLAModel(config, weights, backend)
    return _MODELS[key]


def case_count(cases):
    return len({name.split("_")[0] for name in cases.files if name.endswith("_noise")})


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("folder", [TINY, *OTHER_SHAPES], ids=["tiny", *[p.name for p in OTHER_SHAPES]])
def test_every_case_within_tolerance(folder, backend):
    config, cases = record(folder)
    m = model(folder, backend)
    for k in range(case_count(cases)):
        error = np.abs(RECORDS.model_case(m, cases, f"case{k}", config.action_dim) - cases[f"case{k}_actions"]).max()
        assert error < TOLERANCE, f"case {k}: max abs action error {error:.3g}"


def test_taps_of_case0_with_the_masked_prefix():
    """Vision output, connector output, prefix input, last VLM layer, K/V of the first and last layer,
    expert input/output and velocity at t = 1, on the valid rows of the reference's masked prefix."""
    config, cases = record(TINY)
    m = model(TINY, "numpy")
    images = cases["case0_images"] * np.float32(2.0) - np.float32(1.0)
    mask = cases["case0_image_masks"]
    from embodied_ros.backbone import smolvlm

    hidden = smolvlm.vision_hidden(m.ks, config.vision, m.weights, m.vision_layers, images[mask])
    np.testing.assert_allclose(hidden, cases["case0_vision_hidden"][mask], atol=1e-5)
    tokens = m.image_tokens(images, mask)
    slots = np.repeat(mask, config.vision.tokens_per_image)
    np.testing.assert_allclose(tokens.reshape(-1, config.lm.width)[slots], cases["case0_image_embeddings"][slots],
                               atol=1e-5)
    valid = cases["case0_prefix_pad_mask"]
    embeds = m.prefix_embeddings(tokens, cases["case0_tokens"], cases["case0_state"])
    np.testing.assert_allclose(embeds[valid], cases["case0_prefix_embeds"][valid], atol=1e-4)
    cache, last = m.prefix_pass(tokens, mask, cases["case0_tokens"], cases["case0_token_mask"], cases["case0_state"],
                                compact=False, full_lm=True)
    np.testing.assert_array_equal(cache.valid, valid)
    np.testing.assert_allclose(last[valid], cases["case0_prefix_hidden"][valid], atol=1e-4)
    for layer, tag in ((0, "layer0"), (config.lm.depth - 1, "layerLAST")):
        for kind, array in (("k", cache.keys), ("v", cache.values)):
            recorded = cases[f"case0_prefix_{kind}_{tag}"][0].transpose(1, 0, 2)
            np.testing.assert_allclose(array[layer][valid], recorded[valid], atol=1e-5, err_msg=f"{kind} {tag}")
    from embodied_ros.heads import interleaved_expert

    step0 = interleaved_expert.action_tokens(m.ks, m.weights, cases["case0_noise"], m.time_embeddings[0])
    np.testing.assert_allclose(step0, cases["case0_suffix_embeds_step0"], atol=1e-5)
    context = m.suffix_context(cache)
    out = interleaved_expert.hidden_states(m.ks, config.expert, m.expert_layers, step0, cache, context)
    np.testing.assert_allclose(out, cases["case0_suffix_hidden_step0"], atol=1e-4)
    np.testing.assert_allclose(m.velocity(cache, cases["case0_noise"], 0, context), cases["case0_velocity_step0"],
                               atol=1e-5)


def test_compacted_prefix_matches_the_masked_one_with_a_missing_camera():
    config, cases = record(TINY)
    m = model(TINY, "numba")
    k = 2  # cam0 missing: one camera and the padding slot
    images = cases[f"case{k}_images"] * np.float32(2.0) - np.float32(1.0)
    mask = cases[f"case{k}_image_masks"]
    args = (m.image_tokens(images, mask), mask, cases[f"case{k}_tokens"], cases[f"case{k}_token_mask"],
            cases[f"case{k}_state"])
    compact, masked = m.build_prefix(*args), m.build_prefix(*args, compact=False)
    assert compact.num_rows == compact.n_valid == masked.n_valid < masked.num_rows
    np.testing.assert_allclose(m.sample_actions(compact, cases[f"case{k}_noise"]),
                               m.sample_actions(masked, cases[f"case{k}_noise"]), atol=1e-5)


def test_only_the_state_token_reads_the_state_token():
    bias = prefix_attention_bias(np.array([True, False, True, True]))
    allowed = bias == 0
    assert allowed[3].tolist() == [True, False, True, True]  # the state token reads every valid row
    assert allowed[0].tolist() == [True, False, True, False]
    assert not allowed[:, 1].any()


def test_pixel_shuffle_channel_order():
    side, scale, width = 4, 2, 3
    hidden = np.arange(side * side * width, dtype=np.float32).reshape(1, side * side, width)
    out = pixel_shuffle(hidden, scale)
    assert out.shape == (1, 4, scale * scale * width)
    i, j, a, b, c = 1, 0, 1, 1, 2  # token (i, j), channel (a*s + b)*W + c = patch (i*s + a, j*s + b)
    patch = (i * scale + a) * side + (j * scale + b)
    assert out[0, i * (side // scale) + j, (a * scale + b) * width + c] == hidden[0, patch, c]


def test_checkpoint_of_another_policy_is_refused_by_name():
    with pytest.raises(ValueError, match="not a SmolVLA parameter"):
        smolvla_weights.runtime_name("model.paligemma_with_expert.paligemma.lm_head.weight")


def test_parity_command_on_both_record_layouts(capsys):
    from embodied_ros.cli.main import main

    for folder in (TINY, DATA / "smolvla_tiny_checkpoint"):
        assert main(["parity", str(folder)]) == 0
        out = capsys.readouterr().out
        assert "within tolerance 0.0001 (f32)" in out and float(out.split("max_abs_err=")[-1]) < 1e-4
