"""Every registered kernel, on every backend that runs here, against its numpy reference."""

import numpy as np
import pytest

from embodied_ros.kernels import registry

_RUNNABLE_BACKENDS = ("numba",)  # cuda kernels are checked by test_cuda_*.py in the CUDA simulator


def _cases():
    for op in registry.ops():
        for backend in registry.implementations(op):
            if backend in _RUNNABLE_BACKENDS:
                yield pytest.param(op, backend, id=f"{op}-{backend}")


def _as_list(out):
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("op,backend", list(_cases()))
def test_kernel_matches_reference(op, backend):
    ref = registry.reference_of(op)
    impl = registry.implementations(op)[backend]
    for example in ref.examples(np.random.default_rng(1234)):
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in example]
        expected = _as_list(ref.fn(*copies))
        got = _as_list(impl(*example))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=ref.rtol, atol=ref.atol, err_msg=f"{op} on {backend}")


def test_every_op_has_a_reference_and_examples():
    for op in registry.ops():
        ref = registry.reference_of(op)
        assert ref.examples(np.random.default_rng(0)), f"{op} has no examples"


def test_kernel_set_falls_back_to_reference():
    ks = registry.KernelSet("cuda")
    for op in registry.ops():
        chosen = ks.chosen[op]
        assert chosen in registry.implementations(op)


@pytest.mark.parametrize("op", ["linear", "attention", "cached_attention"])
def test_products_without_vector_units_match_reference(op, monkeypatch):
    """The BLAS forms the numba kernels take on CPUs without 16-lane vectors."""
    from embodied_ros.kernels import attention, linear
    monkeypatch.setattr(linear, "VECTOR_GEMM", False)
    monkeypatch.setattr(attention, "VECTOR_ATTENTION", False)
    test_kernel_matches_reference(op, "numba")


@pytest.mark.parametrize("rows", list(range(1, 12)) + [23, 50, 257, 300])
def test_vector_product_row_tiles_and_blocks(rows):
    """Every register-tile height, several row blocks, several panel blocks and a partial last panel,
    depth over several blocks (float32 packed per call, packed once, q4_k), rows read at a stride."""
    from embodied_ros.kernels.cpu import gemm
    from embodied_ros.kernels.quant import dequantize, random_quant_tensor
    rng = np.random.default_rng(rows)
    depth, n_out = 2 * gemm.DEPTH_BLOCK + 256, (gemm.PANEL_BLOCK + 1) * gemm.PANEL + 5
    wide = rng.standard_normal((rows, depth + 3), dtype=np.float32)
    x = wide[:, 1:depth + 1]  # rows at a stride
    w = rng.standard_normal((n_out, depth), dtype=np.float32) * 0.05
    bias = rng.standard_normal(n_out, dtype=np.float32)
    quantized = random_quant_tensor(rng, "q4_k", (n_out, depth))
    cases = [(w, w), (gemm.pack_weight(w), w), (quantized, dequantize(quantized))]
    for weight, dense in cases:
        expected = x.astype(np.float64) @ dense.astype(np.float64).T + bias
        np.testing.assert_allclose(gemm.matmul(x, weight, bias), expected, rtol=1e-4, atol=1e-4)
    # rows contiguous: small products with a packed weight take their arrays straight to the kernel,
    # with a bundle's read-only bias, a writeable one or none
    contiguous = np.ascontiguousarray(x)
    read_only = bias.copy()
    read_only.flags.writeable = False
    for b in (bias, read_only, None):
        expected = contiguous.astype(np.float64) @ w.astype(np.float64).T + (0 if b is None else b)
        np.testing.assert_allclose(gemm.matmul(contiguous, gemm.pack_weight(w), b), expected, rtol=1e-4, atol=1e-4)
    assert bias.flags.writeable  # the caller's bias is left as it was


def test_vector_attention_head_layouts_and_key_parts():
    """One kv head (rows = query heads), one kv head per query head, grouped heads; keys in two parts,
    more than one 32-key panel and a head width that is not a multiple of 32."""
    from embodied_ros.kernels.cpu import vector_attention
    from embodied_ros.kernels.attention import attention as reference
    rng = np.random.default_rng(5)
    for n_heads, n_kv, width in ((8, 1, 48), (3, 3, 40), (4, 2, 64)):
        q = rng.standard_normal((37, n_heads, width), dtype=np.float32)
        k, v = (rng.standard_normal((70, n_kv, width), dtype=np.float32) for _ in range(2))
        bias = np.where(rng.random((37, 70)) < 0.2, np.float32(-1e30), np.float32(0)).astype(np.float32)
        bias[:, 0] = 0
        for workers in (1, 2):
            got = vector_attention.attend(q, (k[:50], k[50:]), (v[:50], v[50:]), bias, np.zeros(0, np.float32),
                                           workers)
            np.testing.assert_allclose(got, reference(q, k, v, bias), rtol=1e-4, atol=2e-5)


def test_every_op_module_is_in_the_registry_table_and_registers_ops():
    import importlib
    import inspect
    import pkgutil
    from pathlib import Path

    import embodied_ros.kernels as package

    folder = Path(package.__file__).parent
    top_level = {info.name for info in pkgutil.iter_modules([str(folder)]) if not info.ispkg} - {"registry"}
    assert top_level == {name for name in registry.OP_MODULES if "." not in name}
    registry.ops()
    for name in registry.OP_MODULES:
        module = importlib.import_module(f"embodied_ros.kernels.{name}")
        registered = {fn.__module__ for by_backend in registry._IMPLEMENTATIONS.values() for fn in by_backend.values()
                      if inspect.getmodule(fn) is module}
        assert registered, f"kernels/{name.replace('.', '/')}.py registers no op"


def test_silu_of_large_negative_inputs_gives_the_limit_without_a_warning():
    """exp(-x) overflows below x = -88 (a random-weight time MLP gets there): the result is the limit,
    and no RuntimeWarning reaches a node's log."""
    import warnings

    from embodied_ros.kernels.silu import silu
    x = np.array([-1000.0, -89.0, -3.0, 0.0, 3.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = silu(x)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-30)
