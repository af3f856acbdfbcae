"""The cuda backend's host side on a machine without a GPU: imports, errors, device tensors, PTX cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embodied_ros.kernels import registry
from embodied_ros.kernels.cuda.compiler import CACHE_ENV, CudaKernel, _cache_path, cache_dir
from embodied_ros.kernels.cuda.runtime import CudaUnavailable, DeviceTensor, gpu
from embodied_ros.kernels.quant import random_quant_tensor

REPO = Path(__file__).resolve().parent.parent


def test_kernel_modules_import_without_cupy_and_open_no_gpu():
    code = ("import sys; from embodied_ros.kernels import registry; registry.KernelSet('cuda'); "
            "print(sorted(m for m in sys.modules if m.startswith('cupy') or m.endswith(('kernels.cuda.launch', "
            "'kernels.cuda.driver'))))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_cuda_op_runs_or_says_what_is_missing():
    ks = registry.KernelSet("cuda")
    x, w = np.ones((2, 4), np.float32), np.zeros(4, np.float32)
    try:
        gpu()
    except CudaUnavailable as error:  # this machine: no CuPy, no driver
        assert "NVIDIA GPU with its driver and CuPy" in str(error)
        with pytest.raises(CudaUnavailable, match="pip install cupy-cuda12x or cupy-cuda13x"):
            ks.rms_norm(x, w, 1e-6)
    else:  # a machine with a GPU
        np.testing.assert_allclose(ks.rms_norm(x, w, 1e-6), registry.reference_of("rms_norm").fn(x, w, 1e-6),
                                   rtol=1e-5)


@pytest.mark.parametrize("op,args,message", [
    ("rms_norm", (np.ones((2, 4), np.float32), np.zeros(5, np.float32), 1e-6), "weight has shape"),
    ("modulated_layer_norm", (np.ones((3, 4), np.float32), np.zeros((2, 4), np.float32),
                              np.zeros((1, 4), np.float32), 1e-6), "shift has shape"),
    ("rope", (np.ones((3, 2, 5), np.float32), np.ones((3, 5), np.float32), np.ones((3, 5), np.float32)), "even"),
    ("rope_pairs", (np.ones((3, 2, 8), np.float32), np.ones((2, 8), np.float32), np.ones((2, 8), np.float32)),
     "do not fit"),
    ("gelu_tanh_mul", (np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)), "differ in shape"),
    ("gated_residual", (np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)),
     "gate has shape"),
    ("attention", (np.ones((2, 3, 8), np.float32), np.ones((4, 2, 8), np.float32), np.ones((4, 2, 8), np.float32)),
     "3 query heads cannot share 2"),
    ("attention", (np.ones((1, 1, 320), np.float32), np.ones((4, 1, 320), np.float32),
                   np.ones((4, 1, 320), np.float32)), "exceeds the cuda kernel's maximum"),
    ("cached_attention", (np.ones((2, 2, 8), np.float32), np.ones((5, 1, 8), np.float32),
                          np.ones((5, 1, 8), np.float32), np.zeros(4, np.float32), np.ones((2, 1, 8), np.float32),
                          np.ones((2, 1, 8), np.float32)), "one value per cached key"),
    ("linear", (np.ones((2, 30), np.float32), random_quant_tensor(np.random.default_rng(0), "q8_0", (3, 32)), None),
     "does not fit a weight"),
    ("linear", (np.ones((2, 32), np.float32), np.ones((3, 32), np.float32), np.ones(4, np.float32)),
     "bias has shape"),
])
def test_bad_shapes_are_refused_before_any_gpu_work(op, args, message):
    with pytest.raises(ValueError, match=message):
        registry.implementations(op)["cuda"](*args)


def _tensor(shape, dtype=np.float32, pointer=4096):
    return DeviceTensor(tuple(shape), np.dtype(dtype), pointer, None, None)


def test_device_tensor_views_share_memory():
    t = _tensor((6, 4, 8))
    assert t.reshape(-1, 8).shape == (24, 8) and t.reshape(24, 8).pointer == t.pointer
    assert t.reshape((3, 2, 32)).shape == (3, 2, 32)
    rows = t.rows(2, 5)
    assert rows.shape == (3, 4, 8) and rows.pointer == 4096 + 2 * 4 * 8 * 4
    assert t.view(np.uint32).dtype == np.uint32 and t.view(np.uint32).pointer == t.pointer
    assert t.nbytes == 6 * 4 * 8 * 4 and t.size == 192 and t.ndim == 3
    with pytest.raises(ValueError, match="cannot reshape a tensor of 192 elements"):
        t.reshape(5, -1)
    with pytest.raises(IndexError):
        t.rows(4, 7)
    with pytest.raises(ValueError, match="item sizes differ"):
        t.view(np.float16)


def test_ptx_comes_from_the_cache_when_present(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert cache_dir() == tmp_path

    def never_compiled(x):  # pragma: no cover - only its identity matters
        pass

    kernel = CudaKernel(never_compiled, "void(float32[::1])", threads=32)
    path = _cache_path(kernel, (8, 7))
    assert path.is_relative_to(tmp_path) and path.name.endswith(".sm_87.ptx")
    path.parent.mkdir(parents=True)
    path.write_text("// cached PTX")
    assert kernel.ptx((8, 7)) == "// cached PTX"


def test_compiled_ptx_is_written_to_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))

    def store(x, out):  # pragma: no cover - compiled for the GPU only
        out[0] = x[0]

    kernel = CudaKernel(store, "void(float32[::1], float32[::1])", threads=32)
    ptx = kernel.ptx((9, 0))
    assert ".target sm_90" in ptx
    assert _cache_path(kernel, (9, 0)).read_text() == ptx
