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
from tile_by_definition import compile_tile

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


def test_bf16_weights_pack_from_their_bits_without_a_float32_copy(monkeypatch):
    """The panels from a BF16 tensor's bits are those from its decoded values, and packing them holds
    little more than the panels: a float32 copy of the whole matrix would double the peak."""
    import tracemalloc

    from embodied_ros.kernels import linear
    monkeypatch.setattr(linear, "INT16_PRODUCTS", True)
    tensor = _bf16_tensor(np.random.default_rng(4).standard_normal((1000, 2048), dtype=np.float32))
    tracemalloc.start()
    try:
        packed = pack_for_products(tensor)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(packed, I16Weight)
    assert peak < 1.25 * packed.nbytes, (peak, packed.nbytes)
    decoded = pack_i16(tensor.dequantize())
    np.testing.assert_array_equal(packed.quants, decoded.quants)
    np.testing.assert_array_equal(packed.scales, decoded.scales)


def test_blocks_at_full_scale_do_not_overflow():
    # every product at LEVELS^2, all of one sign: a block's int32 sum at its largest
    n_in = 2 * int16_gemm.BLOCK
    x = np.full((7, n_in), 3.0, np.float32)
    weight = pack_i16(np.full((33, n_in), -2.0, np.float32))
    expected = np.full((7, 33), -6.0 * n_in, np.float32)
    np.testing.assert_allclose(linear_int16_numba(x, weight), expected, rtol=1e-6)
    np.testing.assert_allclose(linear_int16(x, weight), expected, rtol=1e-6)


def test_int16_error_is_below_bf16_rounding():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((50, 720), dtype=np.float32)
    x[:, 5] *= 40.0  # an outlier feature costs only its block
    w = rng.standard_normal((96, 720), dtype=np.float32)
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    int16 = linear_int16_numba(x, pack_i16(w))
    bf16 = _bf16_tensor(x).dequantize().astype(np.float64) @ _bf16_tensor(w).dequantize().T.astype(np.float64)
    assert np.abs(int16 - exact).max() < 0.25 * np.abs(bf16 - exact).max()


@pytest.mark.parametrize("shape", [(2, 5, 50), (3, 1024, 50)])
def test_linear_quantizes_x_at_any_number_of_rows(shape):
    """A vision tower's thousands of rows too: the panels are never decoded for BLAS."""
    rng = np.random.default_rng(2)
    weight = pack_i16(rng.standard_normal((70, 50), dtype=np.float32))
    bias = rng.standard_normal(70, dtype=np.float32)
    x = rng.standard_normal(shape, dtype=np.float32)
    np.testing.assert_allclose(linear_numba(x, weight, bias), linear_int16(x, weight, bias), rtol=1e-5, atol=1e-5)


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
        function = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.IntType(64)] * 12), "tile")
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


@pytest.mark.parametrize("unit", ["avx_vnni", "avx2"])
@pytest.mark.parametrize("rows,first,last,tail_steps", [(1, 0, 0, None), (5, 1, 1, 20), (6, 0, 0, None),
                                                         (6, 1, 0, 1), (6, 0, 1, None)])
def test_the_tiles_compute_the_product(unit, rows, first, last, tail_steps):
    """The tile as emitted for `unit`, run here (AVX-VNNI's `vpdpwssd` by its definition in IR where this
    CPU lacks it): y += each block's d_x * sum(q_x * q_w), x read block by block as `_quantize_row`
    lays out a tile's rows, against the same sums in numpy; full-scale integers do not overflow. The
    first pass over a panel starts y at zero, the last scales it by d_w and adds the bias; the last
    block reads only its first `tail_steps` pairs of k (all of them if None)."""
    if not (FEATURES.get("avx2") and FEATURES.get("fma")):
        pytest.skip("the tile's other instructions are AVX2 and FMA, which this CPU lacks")
    tile, replaced = compile_tile(lambda builder, args: emit_tile(builder, unit, rows, *args), [ir.IntType(64)] * 12)
    assert replaced == ({"vpdpwssd"} if unit == "avx_vnni" else set())
    rng = np.random.default_rng(rows)
    block, n_in = int16_gemm.BLOCK, 3 * int16_gemm.BLOCK
    tail_steps = block // 2 if tail_steps is None else tail_steps
    full = slice(block, 2 * block)  # the second block of w at +-LEVELS, and of x against feature 0's:
    values = rng.standard_normal((int16_gemm.PANEL, n_in)).astype(np.float32)
    values[:, full] = np.where(values[:, full] > 0, 10.0, -10.0)
    weight = pack_i16(values)
    x = rng.standard_normal((rows, n_in)).astype(np.float32)
    x[:, full] = np.where(values[0, full] > 0, 3.0, -3.0)  # BLOCK * LEVELS^2 in feature 0's sum
    q_x, d_x = int16_gemm.quantize_activations(x)
    xq = np.ascontiguousarray(q_x.reshape(rows, 3, block).transpose(1, 0, 2))  # [blocks, rows, BLOCK]
    wq = np.ascontiguousarray(weight.quants[0])
    y = rng.standard_normal((rows, int16_gemm.PANEL + 3)).astype(np.float32)
    start = y.copy()
    bias = rng.standard_normal(int16_gemm.PANEL).astype(np.float32)
    tile(xq.ctypes.data, d_x.ctypes.data, d_x.strides[0] // 4, wq.ctypes.data, weight.scales.ctypes.data,
         bias.ctypes.data, y.ctypes.data, y.strides[0] // 4, 3, tail_steps, first, last)
    read = q_x.reshape(rows, 3, block).astype(np.int64)
    read[:, 2, 2 * tail_steps:] = 0
    sums = np.einsum("rbi,fbi->rfb", read,
                     weight.integers().reshape(-1, 3, block).astype(np.int64))
    assert sums[:, 0, 1].max() == block * LEVELS ** 2 < 2 ** 31
    expected = (0 if first else start[:, :int16_gemm.PANEL]) + np.einsum("rfb,rb->rf", sums, d_x)
    if last:
        expected = expected * weight.scales + bias
    np.testing.assert_allclose(y[:, :int16_gemm.PANEL], expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(y[:, int16_gemm.PANEL:], start[:, int16_gemm.PANEL:])
