"""BF16 weights on AVX2 CPUs without AVX-512 multiply as int16 (`vpmaddwd`, or AVX-VNNI's
`vpdpwssd`); elsewhere these tests check that the weights stay as they were."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import binding as llvm_binding
from llvmlite import ir

from embodied_ros.backbone.gemma import row_slice
from embodied_ros.kernels.cpu import int16_gemm
from embodied_ros.kernels.cpu.int16_gemm import LEVELS, I16Weight, emit_tile, pack_i16
from embodied_ros.kernels.linear import linear_numba, pack_for_products
from embodied_ros.kernels.linear_int16 import INT16_PRODUCTS, linear_int16, linear_int16_numba
from embodied_ros.kernels.quant import QuantTensor

FEATURES = llvm_binding.get_host_cpu_features()


def _bf16_tensor(values: np.ndarray) -> QuantTensor:
    bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return QuantTensor("bf16", values.shape, bits.view(np.uint8).reshape(values.shape[0], -1))


def test_the_unit_follows_the_cpu():
    unit = int16_gemm.INT16_UNIT
    if FEATURES.get("avx512f") or not (FEATURES.get("avx2") and FEATURES.get("fma")):
        assert unit is None
    else:
        assert unit == ("avx_vnni" if FEATURES.get("avxvnni") else "avx2")


def test_bf16_weights_are_packed_as_int16_only_where_it_runs():
    weight = _bf16_tensor(np.random.default_rng(0).standard_normal((40, 64), dtype=np.float32))
    packed = pack_for_products(weight)
    assert isinstance(packed, I16Weight) == INT16_PRODUCTS
    if INT16_PRODUCTS:
        values = weight.dequantize()
        half_step = np.abs(values).max(axis=1, keepdims=True) / LEVELS / 2
        assert np.all(np.abs(packed.dense() - values) <= half_step * 1.001)


def test_blocks_at_full_scale_do_not_overflow():
    # every product at LEVELS^2, all of one sign: a block's int32 sum at its largest
    x = np.full((7, 96), 3.0, np.float32)
    weight = pack_i16(np.full((33, 96), -2.0, np.float32))
    np.testing.assert_allclose(linear_int16_numba(x, weight), np.full((7, 33), -576.0, np.float32), rtol=1e-6)
    np.testing.assert_allclose(linear_int16(x, weight), np.full((7, 33), -576.0, np.float32), rtol=1e-6)


def test_int16_error_is_below_bf16_rounding():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((50, 720), dtype=np.float32)
    x[:, 5] *= 40.0  # an outlier feature costs only its block
    w = rng.standard_normal((96, 720), dtype=np.float32)
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    int16 = linear_int16_numba(x, pack_i16(w))
    bf16 = _bf16_tensor(x).dequantize().astype(np.float64) @ _bf16_tensor(w).dequantize().T.astype(np.float64)
    assert np.abs(int16 - exact).max() < 0.25 * np.abs(bf16 - exact).max()


def test_linear_quantizes_x_for_few_rows_and_decodes_for_many():
    rng = np.random.default_rng(2)
    weight = pack_i16(rng.standard_normal((70, 50), dtype=np.float32))
    bias = rng.standard_normal(70, dtype=np.float32)
    few = rng.standard_normal((2, 5, 50), dtype=np.float32)
    np.testing.assert_allclose(linear_numba(few, weight, bias), linear_int16(few, weight, bias), rtol=1e-5, atol=1e-5)
    many = rng.standard_normal((int16_gemm.DECODE_ABOVE_ROWS + 3, 50), dtype=np.float32)
    np.testing.assert_allclose(linear_numba(many, weight, bias), many @ weight.dense().T + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("start,stop", [(32, 70), (5, 37), (0, 96)])
def test_row_slices_keep_the_integers(start, stop):
    weight = pack_i16(np.random.default_rng(3).standard_normal((96, 40), dtype=np.float32))
    rows = row_slice(weight, start, stop)
    assert rows.shape == (stop - start, 40)
    np.testing.assert_array_equal(rows.dense(), weight.dense()[start:stop])


def test_the_avx_vnni_tile_compiles_to_vpdpwssd():
    """Compiled for an AVX-VNNI CPU (Alder Lake) whatever this CPU is: every pair sum one `vpdpwssd`."""
    llvm_binding.initialize_native_asmparser()
    assembly = {}
    for unit in ("avx_vnni", "avx2"):
        module = ir.Module(unit)
        function = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.IntType(64)] * 7), "tile")
        builder = ir.IRBuilder(function.append_basic_block())
        emit_tile(builder, unit, 6, *function.args)
        builder.ret_void()
        parsed = llvm_binding.parse_assembly(str(module))
        parsed.verify()
        machine = llvm_binding.Target.from_default_triple().create_target_machine(cpu="alderlake", opt=3)
        assembly[unit] = machine.emit_assembly(parsed)
    assert assembly["avx_vnni"].count("vpdpwssd") == 2 * 12  # 6 rows x 2 vectors, in each half of the panel
    assert "vpmaddwd" not in assembly["avx_vnni"]
    assert "vpmaddwd" in assembly["avx2"]
