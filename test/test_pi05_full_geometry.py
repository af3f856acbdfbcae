"""pi0.5 at full-size attention geometry (SigLIP 1152 wide with 16 heads of 72 over 256 patches,
Gemma 2048 and expert 1024 wide with 8 heads x 256 and 1 kv head), one layer each and small MLPs
so that it runs in a unit test: nothing in the runtime may assume the tiny records' shapes."""

import numpy as np
import pytest

from embodied_ros.models.pi05.config import GemmaConfig, Pi05Config, VisionConfig
from embodied_ros.models.pi05.model import Pi05Model
from embodied_ros.models.pi05.weights import expected_shapes

CONFIG = Pi05Config(
    vision=VisionConfig(224, 14, 1152, 1, 96, 16), lm=GemmaConfig(2048, 1, 64, 8, 1, 256),
    expert=GemmaConfig(1024, 1, 64, 8, 1, 256), vocab_size=300, camera_names=("base", "wrist"),
    state_names=("a", "b"), action_names=("a", "b"), chunk_size=50, tokenizer_max_length=48, num_inference_steps=2)


@pytest.fixture(scope="module")
def full_geometry():
    rng = np.random.default_rng(0)
    weights = {}
    for name, shape in expected_shapes(CONFIG).items():
        scale = shape[-1] ** -0.5 if len(shape) > 1 else 0.1
        weights[name] = (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))
    return Pi05Model(CONFIG, weights, "numba"), rng


def test_compacted_prefix_equals_the_masked_oracle(full_geometry):
    m, rng = full_geometry
    images = rng.uniform(-1, 1, (2, 3, 224, 224)).astype(np.float32)
    camera_mask = np.array([True, False])
    tokens = rng.integers(0, CONFIG.vocab_size, 48)
    token_mask = np.arange(48) < 37
    noise = rng.standard_normal((50, 32), dtype=np.float32)
    image_tokens = m.image_tokens(images, camera_mask)
    assert image_tokens.shape == (2, 256, 2048) and not image_tokens[1].any()
    compact = m.build_prefix(image_tokens, camera_mask, tokens, token_mask)
    masked = m.build_prefix(image_tokens, camera_mask, tokens, token_mask, compact=False)
    assert compact.keys.shape == (1, 256 + 37, 1, 256) and masked.keys.shape == (1, 512 + 48, 1, 256)
    assert compact.n_valid == masked.n_valid == 293
    actions = m.sample_actions(compact, noise)
    assert actions.shape == (50, 32) and np.all(np.isfinite(actions))
    np.testing.assert_allclose(actions, m.sample_actions(masked, noise), atol=1e-4)
