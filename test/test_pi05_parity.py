"""pi0.5 actions and intermediate values against LeRobot's PyTorch reference records."""

import numpy as np
import pytest

from pi05_fixtures import EXTRA_SETS, SMALL, TINY, case_count, max_case_error, model, record, run_case

TOLERANCE = 1e-4  # max abs action error, float32


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("folder", [TINY, SMALL], ids=["tiny", "small"])
def test_every_case_within_tolerance(folder, backend):
    _, _, cases = record(folder)
    m = model(folder, backend)
    for k in range(case_count(cases)):
        error = np.abs(run_case(m, cases, k) - cases[f"case{k}_actions"]).max()
        assert error < TOLERANCE, f"case {k}: max abs action error {error:.3g}"


@pytest.mark.parametrize("folder", [TINY, SMALL], ids=["tiny", "small"])
def test_masked_prefix_oracle_matches_reference_and_compacted_prefix(folder):
    _, _, cases = record(folder)
    m = model(folder, "numba")
    for k in range(case_count(cases) if folder == TINY else 1):  # tiny case 2 has a missing camera
        masked, compact = run_case(m, cases, k, compact=False), run_case(m, cases, k, compact=True)
        assert np.abs(masked - cases[f"case{k}_actions"]).max() < TOLERANCE
        np.testing.assert_allclose(compact, masked, atol=1e-5)


@pytest.mark.parametrize("folder", EXTRA_SETS, ids=[p.name for p in EXTRA_SETS])
def test_records_of_other_shapes(folder):
    _, _, cases = record(folder)
    assert max_case_error(model(folder, "numba"), cases) < TOLERANCE


@pytest.mark.parametrize("folder", [TINY, SMALL], ids=["tiny", "small"])
def test_taps_of_case0(folder):
    """Image tokens, LM hidden states and K/V of the first and last layer (valid rows), velocity at t=1."""
    config, _, cases = record(folder)
    m = model(folder, "numpy")
    images = cases["case0_images"] * np.float32(2.0) - np.float32(1.0)
    mask = cases["case0_image_masks"]
    tokens = m.image_tokens(images)
    np.testing.assert_allclose(tokens.reshape(-1, tokens.shape[-1]), cases["case0_image_embeddings"], atol=1e-5)
    cache, hidden = m.prefix_pass(tokens, mask, cases["case0_tokens"], cases["case0_token_mask"], compact=False,
                                  full_lm=True)
    valid = cases["case0_prefix_pad_mask"]
    np.testing.assert_array_equal(cache.valid, valid)
    np.testing.assert_allclose(hidden[valid], cases["case0_prefix_hidden"][valid], atol=1e-4)
    for layer, tag in ((0, "layer0"), (config.lm.depth - 1, "layerLAST")):
        for kind, array in (("k", cache.keys), ("v", cache.values)):
            recorded = cases[f"case0_prefix_{kind}_{tag}"][0].transpose(1, 0, 2)  # -> [n, kv_heads, d]
            np.testing.assert_allclose(array[layer][valid], recorded[valid], atol=1e-4, err_msg=f"{kind} {tag}")
    velocity = m.velocity(cache, cases["case0_noise"], 0)
    np.testing.assert_allclose(velocity, cases["case0_velocity_step0"], atol=1e-5)
