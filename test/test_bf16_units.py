"""BF16 weights multiply on the unit the CPU does fastest: the AMX tiles where it has them, else
AVX512-BF16, else float32. On a CPU without a unit these tests check that the fallback is chosen; the
tile kernels run everywhere, on the CPU's tiles where it has them and elsewhere with each tile instruction
replaced by its definition (tile_by_definition.py)."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import binding as llvm_binding

from embodied_ros.kernels import linear_bf16 as bf16_module
from embodied_ros.kernels.cpu import amx_gemm
from embodied_ros.kernels.cpu.bf16_gemm import PAIRS_MULTIPLE, pack_bf16
from embodied_ros.kernels.linear_bf16 import linear_bf16, to_bf16_weight
from tile_by_definition import register_amx_tiles_by_definition, tile_instructions_for_sapphire_rapids

FEATURES = llvm_binding.get_host_cpu_features()
HAS_TILES = bool(FEATURES.get("amx-tile") and FEATURES.get("amx-bf16"))


@pytest.fixture(scope="module")
def tiles() -> str:
    """Where the tile kernels run in this process: the CPU's tiles, or their definitions."""
    if HAS_TILES:
        assert amx_gemm.tile_units_available()
        return "amx"
    register_amx_tiles_by_definition(amx_gemm._IR, (amx_gemm.SYMBOL, amx_gemm.PANELS_SYMBOL))  # noqa: SLF001
    return "by definition"


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


@pytest.mark.parametrize("rows, n_in, n_out", [(1, 7, 5), (33, 64, 40), (50, 1024, 96), (300, 1100, 70),
                                               (257, 2048, 2080), (40, 2600, 33)])
def test_tile_products_equal_the_reference(tiles, rows, n_in, n_out):
    """Odd shapes: padded rows, pairs and features; more than one pass over rows (257, 300 > 256 rows
    a pass) and over k (2600 > 2048 values a pass); with and without a bias."""
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


def test_the_tile_kernels_compile_for_an_intel_xeon_with_amx():
    """On every CPU: the block product and the panels product keep their accumulators in tile registers."""
    emitted, called = tile_instructions_for_sapphire_rapids(amx_gemm._IR)  # noqa: SLF001
    assert emitted == called and called["tdpbf16ps"] == 8, (emitted, called)


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


def test_bf16_attention_is_used_where_a_bf16_unit_is():
    from embodied_ros.kernels import KernelSet
    from embodied_ros.kernels.attention_bf16 import BF16_ATTENTION, attention_for
    ks = KernelSet("numba")
    assert BF16_ATTENTION == (bf16_module.BF16_UNIT in ("amx", "avx512_bf16"))
    weight = to_bf16_weight(np.ones((64, 32), np.float32))
    assert attention_for(ks, weight) is (ks.attention_bf16 if BF16_ATTENTION else ks.attention)
    assert attention_for(ks, np.ones((64, 32), np.float32)) is ks.attention


@pytest.mark.parametrize("tokens, heads, kv_heads, width", [(300, 8, 1, 256), (257, 4, 4, 72)])
def test_bf16_attention_equals_its_reference_at_layer_sizes(tokens, heads, kv_heads, width):
    """Gemma's shape (8 query heads on one kv head, d 256) and SigLIP's (d 72: pairs padded), masked:
    on the tiles where the CPU has them, else the same rounding through BLAS; bf16-sized differences
    from float32 attention."""
    from embodied_ros.kernels.attention import attention
    from embodied_ros.kernels.attention_bf16 import attention_bf16, attention_bf16_numba
    rng = np.random.default_rng(tokens)
    q = rng.standard_normal((tokens, heads, width), dtype=np.float32)
    k = rng.standard_normal((tokens, kv_heads, width), dtype=np.float32)
    v = rng.standard_normal((tokens, kv_heads, width), dtype=np.float32)
    bias = np.where(rng.random((tokens, tokens)) < 0.2, np.float32(-2.3819763e38), np.float32(0)).astype(np.float32)
    bias[:, 0] = 0
    got = attention_bf16_numba(q, k, v, bias)
    np.testing.assert_allclose(got, attention_bf16(q, k, v, bias), rtol=2e-3, atol=2e-3)
    off = np.abs(got - attention(q, k, v, bias)).max()
    assert 1e-4 < off < 3e-2, off


ATTENTION_SHAPES = [(50, 1018, 8, 1, 256), (203, 203, 5, 5, 64), (37, 61, 4, 4, 72)]


def _attention_equals_its_reference(attend, queries, keys, heads, kv_heads, width):
    """The pi0.5 expert's 50 queries over a cache with a key bias, odd key counts and widths (pairs past
    a panel, numerators past 32 keys), a [Tq, Tk] bias."""
    from embodied_ros.kernels.attention_bf16 import _NO_BIAS, _NO_KEY_BIAS, attention_bf16
    rng = np.random.default_rng(keys)
    q = rng.standard_normal((queries, heads, width), dtype=np.float32)
    k = rng.standard_normal((keys, kv_heads, width), dtype=np.float32)
    v = rng.standard_normal((keys, kv_heads, width), dtype=np.float32)
    key_bias = np.where(rng.random(keys) < 0.2, np.float32(-2.3819763e38), np.float32(0)).astype(np.float32)
    key_bias[0] = 0
    got = attend(q, k, v, _NO_BIAS, key_bias)
    np.testing.assert_allclose(got, attention_bf16(q, k, v, np.broadcast_to(key_bias, (queries, keys))),
                               rtol=2e-3, atol=2e-3)
    bias = np.broadcast_to(key_bias, (queries, keys)).copy()
    bias[::2, -1] = np.float32(-2.3819763e38)
    got = attend(q, k, v, bias, _NO_KEY_BIAS)
    assert got.shape == (queries, heads, width) and got.flags.c_contiguous
    np.testing.assert_allclose(got, attention_bf16(q, k, v, bias), rtol=2e-3, atol=2e-3)


@pytest.mark.skipif(not FEATURES.get("avx512bf16"), reason="needs AVX512-BF16; test_bf16_attention_is_used_where_a_"
                                                            "bf16_unit_is checks the fallback here")
@pytest.mark.parametrize("queries, keys, heads, kv_heads, width", ATTENTION_SHAPES)
def test_bf16_attention_on_avx512_bf16_equals_its_reference(queries, keys, heads, kv_heads, width):
    """AVX512-BF16's register tiles over the attention's panels (also on CPUs with AMX, which use the
    tiles instead)."""
    from embodied_ros.kernels.attention_bf16 import _on_vector_units
    _attention_equals_its_reference(_on_vector_units, queries, keys, heads, kv_heads, width)


@pytest.mark.parametrize("queries, keys, heads, kv_heads, width", ATTENTION_SHAPES)
def test_bf16_attention_on_tiles_equals_its_reference(tiles, queries, keys, heads, kv_heads, width):
    from embodied_ros.kernels.attention_bf16 import _on_tiles
    _attention_equals_its_reference(_on_tiles, queries, keys, heads, kv_heads, width)


def test_bf16_attention_reads_the_views_of_a_stacked_projection():
    """SigLIP's q, k and v are strided views of one [tokens, 3, heads, d] product; rows past a block
    of 32 (tokens x heads not a multiple of it) and keys past a panel are padding."""
    from embodied_ros.kernels.attention_bf16 import attention_bf16, attention_bf16_numba
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((203, 3, 5, 64), dtype=np.float32)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    assert not q.flags.c_contiguous
    got = attention_bf16_numba(q, k, v)
    assert got.shape == (203, 5, 64) and got.flags.c_contiguous
    np.testing.assert_allclose(got, attention_bf16(q, k, v), rtol=2e-3, atol=2e-3)


def test_the_padded_product_reads_narrower_rows_as_zero_padded(tiles):
    rng = np.random.default_rng(5)
    weight = to_bf16_weight(rng.standard_normal((40, 70), dtype=np.float32))  # 70 -> 96 values of depth
    x = rng.standard_normal((33, 70), dtype=np.float32)
    padded = amx_gemm.amx_product(x, weight)
    assert padded.shape == (64, 64)
    np.testing.assert_allclose(padded[:33, :40], linear_bf16(x, weight), rtol=1e-4, atol=1e-4)
    assert not padded[:33, 40:].any()
    with pytest.raises(ValueError, match="at most 96"):
        amx_gemm.amx_product(np.zeros((2, 97), np.float32), weight)


FEED_FORWARD_SHAPES = [("gelu_tanh_glu", 37, 64, 64, 20), ("silu_glu", 1, 96, 160, 33), ("gelu_tanh", 70, 96, 72, 40),
                       ("gelu_tanh_glu", 300, 200, 96, 50)]


def _fused_feed_forward_equals_the_three_ops(fused, activation, rows, n_in, hidden, n_out):
    """The fused path that large middles take (a GLU's halves on panels; a plain hidden width ending
    inside a panel, with biases; more than one pass of rows), at small sizes: the same sums, activation
    and rounding."""
    from embodied_ros.kernels import feed_forward as ff
    rng = np.random.default_rng(rows)
    glu = ff.ACTIVATIONS[activation].glu
    x = rng.standard_normal((rows, n_in), dtype=np.float32)
    up = to_bf16_weight(rng.standard_normal((2 * hidden if glu else hidden, n_in), dtype=np.float32) * n_in ** -0.5)
    down = to_bf16_weight(rng.standard_normal((n_out, hidden), dtype=np.float32) * hidden ** -0.5)
    up_bias = None if glu else rng.standard_normal(hidden, dtype=np.float32)
    down_bias = None if glu else rng.standard_normal(n_out, dtype=np.float32)
    got = fused(x, up, up_bias, down, down_bias, activation)
    expected = ff.feed_forward(x, up, up_bias, down, down_bias, activation)
    assert got.shape == (rows, n_out)
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=2e-3 * np.abs(expected).max())
    return up, down


@pytest.mark.skipif(not FEATURES.get("avx512bf16"), reason="needs AVX512-BF16; test_the_unit_follows_the_cpu "
                                                            "checks the fallback here")
@pytest.mark.parametrize("activation, rows, n_in, hidden, n_out", FEED_FORWARD_SHAPES)
def test_the_fused_feed_forward_on_avx512_bf16_equals_the_three_ops(activation, rows, n_in, hidden, n_out):
    from embodied_ros.kernels import feed_forward as ff
    up, down = _fused_feed_forward_equals_the_three_ops(ff._feed_forward_on_vector_units, activation, rows, n_in,
                                                        hidden, n_out)
    if bf16_module.BF16_UNIT == "avx512_bf16":
        assert ff._fused_on_vector_units(1024, up, down, activation) == (1024 * hidden >= ff.FUSED_MIN_MIDDLE)
        assert ff._fused_on_vector_units(ff.FUSED_MIN_MIDDLE // hidden + 1, up, down, activation)


@pytest.mark.parametrize("activation, rows, n_in, hidden, n_out", FEED_FORWARD_SHAPES)
def test_the_fused_feed_forward_on_tiles_equals_the_three_ops(tiles, activation, rows, n_in, hidden, n_out):
    from embodied_ros.kernels import feed_forward as ff
    up, down = _fused_feed_forward_equals_the_three_ops(ff._feed_forward_on_tiles, activation, rows, n_in, hidden,
                                                        n_out)
    assert ff._fused_on_tiles(up, down, activation) == (bf16_module.BF16_UNIT == "amx")
