"""The Wan block with Q8_0 / Q4_K weights: output error against float32 and stored sizes."""

import numpy as np
import pytest

from embodied_ros.backbone import wan_block as wb
from embodied_ros.bundle import quantize
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.kernels.rope3d import rope3d_tables

# relative RMS error of the block output (float32 weights = 0); measured 0.0016 / 0.0054 / 0.069
ERROR_BOUNDS = {"bf16": 0.005, "q8_0": 0.015, "q4_k": 0.12}


def _random_block(rng, cfg):
    tensors = {}
    for name, shape in wb.block_tensor_shapes(cfg).items():
        if wb.is_weight_matrix(name):
            tensors[name] = rng.standard_normal(shape, dtype=np.float32) * shape[1] ** -0.5
        elif "norm.weight" in name:
            tensors[name] = 1 + 0.2 * rng.standard_normal(shape, dtype=np.float32)
        else:
            tensors[name] = 0.1 * rng.standard_normal(shape, dtype=np.float32)
    return tensors


def _stored(tensors, qtype):
    return {name: quantize(t, qtype) if wb.is_weight_matrix(name) else t for name, t in tensors.items()}


@pytest.fixture(scope="module")
def block_case():
    rng = np.random.default_rng(3)
    cfg = wb.WanBlockConfig(256, 4, 512)  # input widths 256 and 512: whole Q4_K super-blocks
    tensors = _random_block(rng, cfg)
    grid = (2, 4, 5)
    x = rng.standard_normal((40, cfg.dim), dtype=np.float32)
    context = rng.standard_normal((7, cfg.dim), dtype=np.float32)
    temb = 0.5 * rng.standard_normal((40, 6, cfg.dim), dtype=np.float32)
    return cfg, tensors, x, context, temb, wb.Rope(*rope3d_tables(grid, cfg.head_dim))


def _run(cfg, tensors, x, context, temb, rope, backend="numba"):
    ks = KernelSet(backend)
    weights = wb.load_block_weights(tensors.__getitem__, "", cfg)
    return wb.wan_block(ks, cfg, weights, x, temb, rope, wb.context_kv(ks, cfg, weights.cross_attn, context))[0]


@pytest.mark.parametrize("qtype", sorted(ERROR_BOUNDS))
def test_quantized_block_error_is_bounded(block_case, qtype):
    cfg, tensors, x, context, temb, rope = block_case
    reference = _run(cfg, tensors, x, context, temb, rope)
    out = _run(cfg, _stored(tensors, qtype), x, context, temb, rope)
    error = np.sqrt(np.mean((out - reference) ** 2) / np.mean(reference ** 2))
    assert 0 < error < ERROR_BOUNDS[qtype], f"{qtype}: relative RMS error {error:.4f}"


def test_quantized_block_backends_agree(block_case):
    cfg, tensors, x, context, temb, rope = block_case
    stored = _stored(tensors, "q4_k")
    np.testing.assert_allclose(_run(cfg, stored, x, context, temb, rope, "numba"),
                               _run(cfg, stored, x, context, temb, rope, "numpy"), atol=2e-4, rtol=1e-4)


def test_block_weights_take_4_5_bits_in_q4_k(block_case):
    cfg, tensors, *_ = block_case
    stored = _stored(tensors, "q4_k")
    matrices = [t for name, t in stored.items() if wb.is_weight_matrix(name)]
    assert all(isinstance(t, QuantTensor) and t.qtype == "q4_k" for t in matrices)
    weights = sum(int(np.prod(t.shape)) for t in matrices)
    assert sum(t.nbytes for t in matrices) * 8 == weights * 4.5
    assert not any(isinstance(stored[name], QuantTensor) for name in stored if not wb.is_weight_matrix(name))


def test_full_size_block_fits_the_q4_k_budget():
    cfg = wb.WanBlockConfig(3072, 24, 14336)
    shapes = wb.block_tensor_shapes(cfg)
    matrices = sum(int(np.prod(s)) for n, s in shapes.items() if wb.is_weight_matrix(n))
    others = sum(int(np.prod(s)) for n, s in shapes.items() if not wb.is_weight_matrix(n))
    assert matrices + others == 163_656_704  # diffusers' WanTransformerBlock at Wan2.2 TI2V-5B size
    q4_k_mib = (matrices // 256 * 144 + others * 4) / 2 ** 20
    assert q4_k_mib <= 88.1, q4_k_mib
