"""BF16 weights multiply on the unit the CPU does fastest: the AMX tiles where it has them, else
AVX512-BF16, else float32. On a CPU without a unit these tests check that the fallback is chosen."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import binding as llvm_binding

from embodied_ros.kernels import linear_bf16 as bf16_module
from embodied_ros.kernels.cpu import amx_gemm
from embodied_ros.kernels.cpu.bf16_gemm import PAIRS_MULTIPLE, pack_bf16
from embodied_ros.kernels.linear_bf16 import linear_bf16, to_bf16_weight

FEATURES = llvm_binding.get_host_cpu_features()
HAS_TILES = bool(FEATURES.get("amx-tile") and FEATURES.get("amx-bf16"))


def test_the_unit_follows_the_cpu():
    if not FEATURES.get("avx512f"):
        assert bf16_module.BF16_UNIT is None
    elif HAS_TILES:
        assert bf16_module.BF16_UNIT == "amx"
    elif FEATURES.get("avx512bf16"):
        assert bf16_module.BF16_UNIT == "avx512_bf16"
        assert not amx_gemm.tile_units_available()
    else:
        assert bf16_module.BF16_UNIT is None


def test_the_unit_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("EMBODIED_ROS_AMX", "0")
    assert bf16_module._bf16_unit() in ("avx512_bf16", None)
    monkeypatch.setenv("EMBODIED_ROS_BF16_PRODUCTS", "0")
    assert bf16_module._bf16_unit() is None


def test_packed_panels_are_tile_ready():
    weight = to_bf16_weight(np.random.default_rng(0).standard_normal((45, 37), dtype=np.float32))
    assert weight.panels.shape == (2, PAIRS_MULTIPLE * 2, 32)  # 37 -> 19 pairs -> 32
    assert weight.panels.ctypes.data % 64 == 0
    np.testing.assert_array_equal(weight.panels[:, 19:], 0)
    assert weight.dense().shape == (45, 37)


@pytest.mark.skipif(not HAS_TILES, reason="needs AMX tiles (Intel Xeon 4th generation or later); "
                                           "test_the_unit_follows_the_cpu checks the fallback here")
@pytest.mark.parametrize("rows, n_in, n_out", [(1, 7, 5), (33, 64, 40), (50, 1024, 96), (300, 1100, 70),
                                               (257, 2048, 2080)])
def test_tile_products_equal_the_reference(rows, n_in, n_out):
    """Odd shapes: padded rows, pairs and features; more than one pass over k (1100, 2048 > 512
    values a pass) and over rows (257, 300 > 256 rows a pass); with and without a bias."""
    assert amx_gemm.tile_units_available()
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, n_in), dtype=np.float32)
    weight = to_bf16_weight(rng.standard_normal((n_out, n_in), dtype=np.float32))
    bias = rng.standard_normal(n_out, dtype=np.float32)
    for b in (bias, None):
        expected = linear_bf16(x, weight, b)
        got = amx_gemm.matmul_amx_bf16(x, weight, b)
        assert got.shape == (rows, n_out) and got.flags.c_contiguous
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    assert amx_gemm.matmul_amx_bf16(x[:0], weight, bias).shape == (0, n_out)


@pytest.mark.skipif(not HAS_TILES, reason="needs AMX tiles")
def test_tile_products_refuse_weights_not_in_tile_layout():
    weight = pack_bf16(np.zeros((32, 64), np.uint16))
    shifted = type(weight)(np.zeros((1, 20, 32), np.uint32), (32, 40))
    with pytest.raises(ValueError, match="tile layout"):
        amx_gemm.matmul_amx_bf16(np.zeros((2, 40), np.float32), shifted)


@pytest.mark.skipif(not FEATURES.get("avx512bf16"), reason="needs AVX512-BF16; test_the_unit_follows_the_cpu "
                                                            "checks the fallback here")
def test_vector_products_equal_the_reference_beside_the_tiles():
    """AVX512-BF16's product reads the same tile-ready panels (padded pairs) on every CPU that has it."""
    from embodied_ros.kernels.cpu.bf16_gemm import matmul_bf16
    rng = np.random.default_rng(3)
    x = rng.standard_normal((23, 37), dtype=np.float32)
    weight = to_bf16_weight(rng.standard_normal((45, 37), dtype=np.float32))
    expected = linear_bf16(x, weight)
    np.testing.assert_allclose(matmul_bf16(x, weight), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
