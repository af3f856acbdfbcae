"""The Wan block against diffusers' WanTransformerBlock records (test/data/wan_block_tiny)."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from embodied_ros.backbone import wan_block as wb
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels.rope3d import rope3d_split, rope3d_tables
from embodied_ros.models.lingbot_va.naming import convert_block_tensors

DATA = Path(__file__).parent / "data" / "wan_block_tiny"
PARITY_ATOL = 1e-4  # float32 parity with the PyTorch reference


@pytest.fixture(scope="module")
def fixture():
    config = json.loads((DATA / "config.json").read_text())
    cfg = wb.WanBlockConfig(config["dim"], config["num_heads"], config["ffn_dim"], config["eps"],
                            config["rotary"]["theta"])
    tensors = convert_block_tensors(load_file(DATA / "block.safetensors"))
    weights = wb.load_block_weights(tensors.__getitem__, "blk.0.", cfg)
    return config, cfg, weights, np.load(DATA / "cases.npz")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("case", [0, 1], ids=["per-token-temb", "global-temb"])
def test_block_matches_diffusers(fixture, backend, case):
    config, cfg, weights, cases = fixture
    ks = KernelSet(backend)
    x = cases[f"case{case}_hidden_states"][0]
    context = cases[f"case{case}_encoder_hidden_states"][0]
    rope = wb.Rope(*rope3d_tables(tuple(config["grid_fhw"]), cfg.head_dim, cfg.rope_theta))
    out, own = wb.wan_block(ks, cfg, weights, x, cases[f"case{case}_temb"][0], rope,
                            wb.context_kv(ks, cfg, weights.cross_attn, context))
    expected = cases[f"case{case}_output"][0]
    np.testing.assert_allclose(out, expected, atol=PARITY_ATOL, rtol=0)
    assert own.k.shape == own.v.shape == (x.shape[0], cfg.num_heads, cfg.head_dim)


@pytest.mark.parametrize("case", [0, 1])
def test_rope_tables_are_bit_exact(fixture, case):
    config, cfg, _, cases = fixture
    cos, sin = rope3d_tables(tuple(config["grid_fhw"]), cfg.head_dim, config["rotary"]["theta"])
    assert np.array_equal(cos, cases[f"case{case}_rotary_cos"][0, :, 0])
    assert np.array_equal(sin, cases[f"case{case}_rotary_sin"][0, :, 0])
    assert list(rope3d_split(cfg.head_dim)) == config["rotary"]["split_t_h_w"]


def test_rope_split_of_the_full_size_head():
    assert rope3d_split(128) == (44, 42, 42)


def test_rope_frame_start_shifts_only_the_frame_part():
    head_dim = 16
    t_width = rope3d_split(head_dim)[0]
    later_cos, _ = rope3d_tables((1, 2, 3), head_dim, frame_start=2)
    full_cos, _ = rope3d_tables((3, 2, 3), head_dim)
    np.testing.assert_array_equal(later_cos, full_cos[2 * 6:])
    assert not np.array_equal(later_cos[:, :t_width], full_cos[:6, :t_width])


def test_duplicated_past_keys_leave_attention_unchanged(fixture):
    # softmax over [K; K] with values [V; V] equals softmax over K with V: exercises the cached path
    config, cfg, weights, cases = fixture
    ks = KernelSet("numba")
    x, temb = cases["case1_hidden_states"][0], cases["case1_temb"][0]
    rope = wb.Rope(*rope3d_tables(tuple(config["grid_fhw"]), cfg.head_dim))
    context = wb.context_kv(ks, cfg, weights.cross_attn, cases["case1_encoder_hidden_states"][0])
    alone, own = wb.wan_block(ks, cfg, weights, x, temb, rope, context)
    with_past, _ = wb.wan_block(ks, cfg, weights, x, temb, rope, context, past=own)
    np.testing.assert_allclose(with_past, alone, atol=1e-5, rtol=0)


def _random_block(rng, cfg: wb.WanBlockConfig) -> wb.WanBlockWeights:
    tensors = {}
    for name, shape in wb.block_tensor_shapes(cfg).items():
        if len(shape) == 2 and name != "modulation":
            tensors[name] = rng.standard_normal(shape, dtype=np.float32) * shape[1] ** -0.5
        elif "norm.weight" in name:
            tensors[name] = 1 + 0.2 * rng.standard_normal(shape, dtype=np.float32)
        else:
            tensors[name] = 0.1 * rng.standard_normal(shape, dtype=np.float32)
    return wb.load_block_weights(tensors.__getitem__, "", cfg)


@pytest.mark.parametrize("dims", [(96, 6, 200, (1, 3, 5), 3), (48, 2, 64, (3, 2, 2), 11)])
def test_backends_agree_on_other_shapes(dims):
    dim, heads, ffn, grid, text = dims
    rng = np.random.default_rng(7)
    cfg = wb.WanBlockConfig(dim, heads, ffn)
    weights = _random_block(rng, cfg)
    tokens = int(np.prod(grid))
    x = rng.standard_normal((tokens, dim), dtype=np.float32)
    temb = 0.5 * rng.standard_normal((tokens, 6, dim), dtype=np.float32)
    rope = wb.Rope(*rope3d_tables(grid, cfg.head_dim))
    context = rng.standard_normal((text, dim), dtype=np.float32)
    outputs = []
    for backend in ("numpy", "numba"):
        ks = KernelSet(backend)
        context_kv = wb.context_kv(ks, cfg, weights.cross_attn, context)
        outputs.append(wb.wan_block(ks, cfg, weights, x, temb, rope, context_kv)[0])
    np.testing.assert_allclose(outputs[1], outputs[0], atol=1e-4, rtol=1e-4)
    assert np.isfinite(outputs[0]).all() and not np.allclose(outputs[0], x)


def test_bad_temb_and_weight_shapes_are_reported(fixture):
    _, cfg, weights, _ = fixture
    with pytest.raises(ValueError, match="temb has shape"):
        wb.modulation(weights.modulation, np.zeros((5, cfg.dim), np.float32))
    tensors = {name: np.zeros(shape, np.float32) for name, shape in wb.block_tensor_shapes(cfg).items()}
    tensors["ffn_in.weight"] = np.zeros((cfg.ffn_dim + 1, cfg.dim), np.float32)
    with pytest.raises(ValueError, match="ffn_in.weight"):
        wb.load_block_weights(tensors.__getitem__, "", cfg)
    with pytest.raises(ValueError, match="not divisible"):
        wb.WanBlockConfig(64, 5, 160)


def test_bad_block_inputs_are_reported(fixture):
    config, cfg, weights, cases = fixture
    ks = KernelSet("numpy")
    x, temb = cases["case0_hidden_states"][0], cases["case0_temb"][0]
    rope = wb.Rope(*rope3d_tables(tuple(config["grid_fhw"]), cfg.head_dim))
    context = wb.context_kv(ks, cfg, weights.cross_attn, cases["case0_encoder_hidden_states"][0])
    with pytest.raises(ValueError, match="RoPE tables"):
        wb.wan_block(ks, cfg, weights, x, temb, wb.Rope(rope.cos[:5], rope.sin[:5]), context)
    with pytest.raises(ValueError, match="per-token temb covers 31 tokens"):
        wb.wan_block(ks, cfg, weights, x, temb[:31], rope, context)
    with pytest.raises(ValueError, match="tokens have shape"):
        wb.wan_block(ks, cfg, weights, x[:, :32], temb, rope, context)
