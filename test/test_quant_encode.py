"""The encoders: Q4_K (our own) and Q8_0/BF16 (gguf's), checked through gguf's dequantization."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as GGML

from embodied_ros.bundle import QuantTensor, encode_q4_k, quantization_error, quantize
from embodied_ros.kernels.quant import QUANT_TYPES, dequantize, dequantize_numba, random_quant_tensor

_GGML = {"q8_0": GGML.Q8_0, "q4_k": GGML.Q4_K, "bf16": GGML.BF16, "tq2_0": GGML.TQ2_0}


@pytest.mark.parametrize("shape", [(1, 256), (3, 512), (2, 3, 768), (5, 1024)])
def test_q4_k_decodes_identically_through_gguf(shape):
    weights = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    stored = encode_q4_k(weights)
    assert stored.data.shape == (*shape[:-1], shape[-1] // 256 * 144)
    ours = dequantize(stored)
    np.testing.assert_array_equal(gguf.quants.dequantize(stored.data, GGML.Q4_K), ours)
    np.testing.assert_array_equal(dequantize_numba(stored), ours)


def test_q4_k_error_on_gaussian_weights_beats_min_max():
    weights = np.random.default_rng(1).standard_normal((64, 2048)).astype(np.float32)
    searched = quantization_error(weights, encode_q4_k(weights))
    min_max = quantization_error(weights, encode_q4_k(weights, search=False))
    assert searched < 0.072  # measured 0.070
    assert 0.074 < min_max < 0.082  # measured 0.078
    assert searched < 0.93 * min_max


def test_q4_k_error_is_bounded_in_every_block():
    rng = np.random.default_rng(2)
    weights = (rng.standard_normal((16, 512)) * rng.uniform(0.01, 3, (16, 1)) + rng.uniform(-1, 1, (16, 1)))
    weights = weights.astype(np.float32)
    error = np.abs(dequantize(encode_q4_k(weights)) - weights).reshape(-1, 32)
    span = np.ptp(weights.reshape(-1, 32), axis=1, keepdims=True)
    assert np.all(error <= 0.1 * span + 1e-6)  # one 4-bit step is span / 15


def test_q4_k_special_blocks():
    zeros = np.zeros((1, 256), np.float32)
    np.testing.assert_array_equal(dequantize(encode_q4_k(zeros)), zeros)
    for value in (0.5, -0.5):
        constant = np.full((1, 256), value, np.float32)
        assert np.abs(dequantize(encode_q4_k(constant)) - value).max() < 2e-3
    one_spike = np.zeros((1, 256), np.float32)
    one_spike[0, 17] = 4.0
    assert np.abs(dequantize(encode_q4_k(one_spike)) - one_spike).max() < 0.02


def test_q4_k_refuses_what_it_cannot_store():
    with pytest.raises(ValueError, match="multiple of 256"):
        encode_q4_k(np.ones((2, 96), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        encode_q4_k(np.full((1, 256), np.nan, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        quantize(np.full((1, 32), np.inf, np.float32), "q8_0")
    with pytest.raises(ValueError, match="too large"):
        encode_q4_k(np.linspace(-1e9, 1e9, 256, dtype=np.float32)[None])


def test_q8_0_and_bf16_are_gguf_bit_exact():
    weights = np.random.default_rng(3).standard_normal((7, 96)).astype(np.float32)
    for qtype in ("q8_0", "bf16"):
        stored = quantize(weights, qtype)
        expected = gguf.quants.quantize(weights, _GGML[qtype]).view(np.uint8).reshape(stored.data.shape)
        np.testing.assert_array_equal(stored.data, expected)
        np.testing.assert_array_equal(dequantize(stored), gguf.quants.dequantize(stored.data, _GGML[qtype]))


@pytest.mark.parametrize("qtype,bound", [("f16", 3e-4), ("bf16", 3e-3), ("q8_0", 7e-3), ("q4_k", 0.072)])
def test_relative_errors_by_type(qtype, bound):
    weights = np.random.default_rng(4).standard_normal((32, 512)).astype(np.float32)
    assert quantization_error(weights, quantize(weights, qtype)) < bound


def test_reference_dequantize_matches_gguf_on_random_bits():
    rng = np.random.default_rng(5)
    for qtype in QUANT_TYPES:
        tensor = random_quant_tensor(rng, qtype, (6, 512))
        np.testing.assert_array_equal(dequantize(tensor), gguf.quants.dequantize(tensor.data, _GGML[qtype]))


def test_quant_tensor_checks_its_bytes():
    with pytest.raises(ValueError, match="uint8 data of shape"):
        QuantTensor("q8_0", (2, 64), np.zeros((2, 60), np.uint8))
    with pytest.raises(ValueError, match="multiple of the block size"):
        QuantTensor("q4_k", (2, 100), np.zeros((2, 56), np.uint8))
    with pytest.raises(ValueError, match="unknown quantization type"):
        QuantTensor("q3_k", (2, 256), np.zeros((2, 110), np.uint8))
    with pytest.raises(ValueError, match="unknown weight type"):
        quantize(np.ones((2, 32), np.float32), "int4")


def test_take_rows_dequantizes_only_those_rows():
    tensor = random_quant_tensor(np.random.default_rng(6), "q4_k", (10, 256))
    rows = np.array([[7, 0], [3, 3]])
    np.testing.assert_array_equal(tensor.take_rows(rows), dequantize(tensor)[rows])
