"""Q8_0 weights multiply in int8 where the CPU can: `vpdpbusd` on AVX512-VNNI and on AVX-VNNI (256-bit,
AVX2 CPUs without AVX-512), `vpmaddubsw` on AVX2 without either; on AVX2 alone, products of many rows
decode the packed panels for BLAS instead. On a CPU with none of these the tests check that the stored
blocks are kept (the fallback)."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import binding as llvm_binding
from llvmlite import ir

from embodied_ros.kernels import linear as linear_module
from embodied_ros.kernels.cpu import int8_gemm
from embodied_ros.kernels.cpu.int8_gemm import Q8Weight
from embodied_ros.kernels.linear_int8 import linear_int8
from embodied_ros.kernels.quant import QuantTensor, random_quant_tensor
from embodied_ros.kernels.registry import KernelSet
from tile_by_definition import compile_tile, register_amx_tiles_by_definition, tile_instructions_for_sapphire_rapids

FEATURES = llvm_binding.get_host_cpu_features()


def test_the_unit_follows_the_cpu():
    if FEATURES.get("avx512f") and FEATURES.get("avx512vnni"):
        assert int8_gemm.INT8_UNIT == "avx512_vnni"
    elif FEATURES.get("avx2") and FEATURES.get("fma") and not FEATURES.get("avx512f"):
        if FEATURES.get("avxvnni"):
            assert int8_gemm.INT8_UNIT == "avx_vnni" and int8_gemm.MAX_ROWS == 6 and int8_gemm.X_OFFSET == 128
        else:
            assert int8_gemm.INT8_UNIT == "avx2" and int8_gemm.MAX_ROWS == 4 and int8_gemm.X_OFFSET == 0
    else:
        assert int8_gemm.INT8_UNIT is None
    from embodied_ros.kernels.linear_int8 import INT8_TILES
    assert INT8_TILES == bool(FEATURES.get("amx-tile") and FEATURES.get("amx-int8") and FEATURES.get("avx512vnni"))


def test_q8_0_products_on_the_unit_or_the_stored_blocks_kept():
    rng = np.random.default_rng(7)
    stored = random_quant_tensor(rng, "q8_0", (70, 96))
    prepared = linear_module.pack_for_products(stored)
    assert isinstance(prepared, Q8Weight if linear_module.INT8_PRODUCTS else QuantTensor)
    ks = KernelSet("numba")
    dense = stored.dequantize()
    for rows in (1, 5, 50, 150, 3072):  # a vision tower's rows too: the panels are never decoded for BLAS
        x = rng.standard_normal((rows, 96), dtype=np.float32)
        bias = rng.standard_normal(70, dtype=np.float32)
        y = ks.linear(x, prepared, bias)
        if isinstance(prepared, Q8Weight):  # x quantized per 32-block, as the reference does
            np.testing.assert_allclose(y, linear_int8(x, prepared, bias), rtol=1e-4, atol=1e-4)
        else:  # float32 products of the stored values
            np.testing.assert_allclose(y, x @ dense.T + bias, rtol=1e-4, atol=1e-4)


def test_the_avx_vnni_tile_compiles_to_vpdpbusd():
    """Compiled for an AVX-VNNI CPU (Alder Lake) whatever this CPU is: each step of a row and vector is
    one `vpdpbusd`, and the AVX2 sequence is gone; the AVX2 tile keeps it."""
    llvm_binding.initialize_native_asmparser()
    assembly = {}
    for unit in ("avx_vnni", "avx2"):
        module = ir.Module(unit)
        i64 = ir.IntType(64)
        function = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64] * 10 + [ir.IntType(1), i64]), "tile")
        builder = ir.IRBuilder(function.append_basic_block())
        int8_gemm.emit_ymm_tile(builder, unit, 6, *function.args)
        builder.ret_void()
        parsed = llvm_binding.parse_assembly(str(module))
        parsed.verify()
        machine = llvm_binding.Target.from_default_triple().create_target_machine(cpu="alderlake", opt=3)
        assembly[unit] = machine.emit_assembly(parsed)
    fused = assembly["avx_vnni"].count("vpdpbusd")
    assert fused and fused % (6 * 2 * 2) == 0  # 6 rows x 2 vectors in each half of the panel, per step
    assert "vpmaddubsw" not in assembly["avx_vnni"] and "vpmaddwd" not in assembly["avx_vnni"]
    assert "vpmaddubsw" in assembly["avx2"] and "vpdpbusd" not in assembly["avx2"]


@pytest.mark.parametrize("unit", ["avx_vnni", "avx2"])
@pytest.mark.parametrize("rows", [1, 4, 6])
@pytest.mark.parametrize("accumulate", [False, True])
def test_the_256_bit_tiles_compute_the_product(unit, rows, accumulate):
    """The tile as emitted for `unit`, run here (AVX-VNNI's `vpdpbusd` by its definition in IR where this
    CPU lacks it, the AVX2 sequence as it is): y = (y if accumulate else bias) plus each block's
    d_w * d_x * sum(q_w * q_x), x stored with the unit's offset, against the same sums in numpy."""
    if not (FEATURES.get("avx2") and FEATURES.get("fma")):
        pytest.skip("the tile's other instructions are AVX2 and FMA, which this CPU lacks")
    i64 = ir.IntType(64)
    tile, replaced = compile_tile(lambda builder, args: int8_gemm.emit_ymm_tile(builder, unit, rows, *args),
                                  [i64] * 10 + [ir.IntType(1), i64])
    assert replaced == ({"vpdpbusd"} if unit == "avx_vnni" else set())
    rng = np.random.default_rng(rows)
    weight = int8_gemm.pack_q8_0(random_quant_tensor(rng, "q8_0", (int8_gemm.PANEL, 96)).data, (int8_gemm.PANEL, 96))
    x = rng.standard_normal((rows, 96), dtype=np.float32)
    x[0, 5] = 40.0  # an outlier in one block
    q_x, d_x = int8_gemm.quantize_activations(x)
    xq = (q_x.astype(np.int16) + int8_gemm.X_OFFSET_OF[unit]).astype(np.uint8)
    wq, ws, wsum = (np.ascontiguousarray(a[0]) for a in (weight.quants, weight.scales, weight.sums))
    bias = rng.standard_normal(int8_gemm.PANEL, dtype=np.float32)
    y = rng.standard_normal((rows, int8_gemm.PANEL + 3), dtype=np.float32)  # rows longer than the panel
    start = y.copy()
    tile(xq.ctypes.data, xq.strides[0], d_x.ctypes.data, d_x.strides[0] // 4, wq.ctypes.data, ws.ctypes.data,
         wsum.ctypes.data, y.ctypes.data, y.strides[0] // 4, 3, accumulate, bias.ctypes.data)
    q_w, d_w = weight.blocks()
    sums = np.einsum("rbi,fbi->rfb", q_x.reshape(rows, 3, 32).astype(np.int64), q_w.reshape(-1, 3, 32).astype(np.int64))
    expected = (start[:, :int8_gemm.PANEL] if accumulate else bias) + np.einsum("rfb,fb,rb->rf", sums, d_w, d_x)
    np.testing.assert_allclose(y[:, :int8_gemm.PANEL], expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(y[:, int8_gemm.PANEL:], start[:, int8_gemm.PANEL:])


@pytest.fixture(scope="module")
def int8_tiles() -> str:
    """Where the AMX int8 kernel runs in this process: the CPU's tiles, or their definitions."""
    from embodied_ros.kernels.cpu import amx_q8
    if FEATURES.get("amx-tile") and FEATURES.get("amx-int8"):
        assert amx_q8.int8_tiles_available()
        return "amx"
    register_amx_tiles_by_definition(amx_q8.IR, (amx_q8.SYMBOL,))
    return "by definition"


@pytest.mark.parametrize("rows, n_in, n_out", [(1, 32, 5), (33, 64, 40), (50, 1024, 96), (300, 608, 70),
                                               (257, 2048, 100)])
def test_q8_0_products_on_the_int8_tiles_equal_the_reference(int8_tiles, rows, n_in, n_out):
    """One block deep a tile step, each block's sums scaled before the next: odd rows (past a block of
    32, past a pass of 256), features past a panel, with and without a bias, all-zero blocks of x."""
    from embodied_ros.kernels.cpu.amx_q8 import matmul_amx_q8
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, n_in), dtype=np.float32)
    x[rows // 2, :32] = 0
    stored = random_quant_tensor(rng, "q8_0", (n_out, n_in))
    weight = int8_gemm.pack_q8_0(stored.data, stored.shape)
    assert weight.quants.ctypes.data % 64 == 0  # B tiles on 64-byte lines
    bias = rng.standard_normal(n_out, dtype=np.float32)
    for b in (bias, None):
        expected = linear_int8(x, weight, b)
        got = matmul_amx_q8(x, weight, b)
        assert got.shape == (rows, n_out) and got.flags.c_contiguous
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    assert matmul_amx_q8(x[:0], weight, bias).shape == (0, n_out)


def test_the_int8_tile_kernel_compiles_for_an_intel_xeon_with_amx():
    """On every CPU: LLVM configures its three tile shapes and keeps all eight tiles in registers."""
    from embodied_ros.kernels.cpu import amx_q8
    emitted, called = tile_instructions_for_sapphire_rapids(amx_q8.IR)
    assert emitted == called and called["tdpbssd"] == 4, (emitted, called)


def test_few_rows_stay_off_the_int8_tiles(monkeypatch):
    from embodied_ros.kernels import linear_int8 as module
    from embodied_ros.kernels.cpu.amx_q8 import TILES_MIN_ROWS
    taken = []
    monkeypatch.setattr(module, "INT8_PRODUCTS", True)
    monkeypatch.setattr(module, "INT8_TILES", True)
    monkeypatch.setattr(module, "matmul_amx_q8", lambda x, w, b: taken.append("tiles") or np.zeros((len(x), 32)))
    monkeypatch.setattr(module, "matmul_q8", lambda x, w, b: taken.append("vector") or np.zeros((len(x), 32)))
    weight = int8_gemm.pack_q8_0(random_quant_tensor(np.random.default_rng(1), "q8_0", (32, 64)).data, (32, 64))
    for rows in (1, TILES_MIN_ROWS - 1, TILES_MIN_ROWS, 50):
        module.linear_int8_numba(np.ones((rows, 64), np.float32), weight)
    assert taken == ["vector", "vector", "tiles", "tiles"]
