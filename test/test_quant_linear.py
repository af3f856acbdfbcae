"""linear() with quantized weights: every path (vector product; without vector units fused and
chunked) against the dequantized product."""

import numba
import numpy as np
import pytest

from embodied_ros.bundle import BundleWriter, open_bundle
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels.cpu import gemm
from embodied_ros.kernels.cpu import vector_attention
from embodied_ros.kernels.cpu import vector_ir
from embodied_ros.kernels import linear as linear_module
from embodied_ros.kernels import quant as quant_module
from embodied_ros.kernels.linear import FUSED_MAX_ROWS, linear, linear_numba
from embodied_ros.kernels.quant import dequantize, random_quant_tensor


def _expected(x, weight, bias=None):
    y = x.astype(np.float64) @ dequantize(weight).astype(np.float64).T
    return y if bias is None else y + bias


@pytest.mark.parametrize("vector", [True, False])
@pytest.mark.parametrize("qtype", ["q8_0", "q4_k", "bf16"])
@pytest.mark.parametrize("rows", [1, 3, FUSED_MAX_ROWS, FUSED_MAX_ROWS + 1, 40])
def test_numba_linear_matches_dequantized_product(qtype, rows, vector, monkeypatch):
    monkeypatch.setattr(linear_module, "VECTOR_GEMM", vector)
    rng = np.random.default_rng(rows)
    weight = random_quant_tensor(rng, qtype, (37, 512))
    x = rng.standard_normal((rows, 512), dtype=np.float32)
    bias = rng.standard_normal(37, dtype=np.float32)
    got = linear_numba(x, weight, bias)
    assert got.dtype == np.float32 and got.shape == (rows, 37)
    np.testing.assert_allclose(got, _expected(x, weight, bias), rtol=1e-4, atol=1e-4)


def test_chunked_path_over_several_chunks(monkeypatch):
    monkeypatch.setattr(linear_module, "VECTOR_GEMM", False)
    monkeypatch.setattr(linear_module, "_CHUNK_BYTES", 16 * 256 * 4)  # 16 rows per chunk
    rng = np.random.default_rng(7)
    weight = random_quant_tensor(rng, "q4_k", (50, 256))
    x = rng.standard_normal((20, 256), dtype=np.float32)
    np.testing.assert_allclose(linear_numba(x, weight), _expected(x, weight), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(256,), (2, 5, 256)])
def test_leading_dimensions(shape):
    rng = np.random.default_rng(8)
    weight = random_quant_tensor(rng, "q4_k", (9, 256))
    x = rng.standard_normal(shape, dtype=np.float32)
    for fn in (linear, linear_numba):
        got = fn(x, weight)
        assert got.shape == (*shape[:-1], 9)
        np.testing.assert_allclose(got, _expected(x.reshape(-1, 256), weight).reshape(got.shape), rtol=1e-4,
                                   atol=1e-4)


def test_shape_mismatch_is_a_clear_error():
    weight = random_quant_tensor(np.random.default_rng(9), "q8_0", (4, 64))
    for fn in (linear, linear_numba):
        with pytest.raises(ValueError, match="does not fit a weight of shape"):
            fn(np.ones((2, 32), np.float32), weight)
        with pytest.raises(ValueError, match="does not fit"):
            fn(np.ones((2, 32), np.float32), np.ones((4, 64), np.float32))


def test_half_precision_ndarray_weight():
    rng = np.random.default_rng(10)
    weight = rng.standard_normal((6, 10)).astype(np.float16)
    x = rng.standard_normal((3, 10), dtype=np.float32)
    np.testing.assert_allclose(linear(x, weight), x @ weight.astype(np.float32).T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_kernel_set_runs_bundle_weights_of_every_type(tmp_path, backend):
    rng = np.random.default_rng(11)
    writer = BundleWriter("toy")
    weights = {f"w.{qtype}": rng.standard_normal((24, 512)).astype(np.float32)
               for qtype in ("f32", "f16", "bf16", "q8_0", "q4_k")}
    for name, weight in weights.items():
        writer.add_weight(name, weight, qtype=name[2:])
    bundle = open_bundle(writer.write(tmp_path / "all.gguf"))
    ks = KernelSet(backend)
    x = rng.standard_normal((5, 512), dtype=np.float32)
    for name in weights:
        stored = bundle.weight(name)
        values = dequantize(stored) if hasattr(stored, "qtype") else stored
        np.testing.assert_allclose(ks.linear(x, stored), x @ values.T, rtol=1e-4, atol=1e-4, err_msg=name)


def test_compiled_kernels_release_the_gil():
    dispatchers = [value for module in (quant_module, linear_module, gemm, vector_attention, vector_ir)
                   for value in vars(module).values()
                   if isinstance(value, numba.core.registry.CPUDispatcher)]
    assert len(dispatchers) >= 5
    for dispatcher in dispatchers:
        assert dispatcher.targetoptions.get("nogil"), dispatcher.py_func.__name__
