"""Every cuda kernel compiles to PTX for the checked architectures, the PTX assembles with ptxas, and
the launcher's parameter buffer matches each PTX entry's parameter list exactly. No GPU needed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest
from numba.core import types

from cuda_ptx_cache import compiled_cache, kernels
from embodied_ros.kernels.cuda.abi import (Param, abi_params, buffer_size, entry_params, pack_arguments,
                                            param_offsets, unpack_arguments)
from embodied_ros.kernels.cuda.compiler import CHECKED_ARCHITECTURES


def _kernel_ids():
    return [pytest.param(k, id=k.name.rsplit(".", 1)[1]) for k in kernels()]


@pytest.fixture(scope="module")
def cache():
    return compiled_cache()


def _ptx(kernel, cc) -> str:
    return kernel.ptx(cc)  # filled by the cache fixture, so this is the freshly compiled text


@pytest.mark.parametrize("kernel", _kernel_ids())
def test_kernel_compiles_for_each_checked_architecture(cache, kernel):
    for cc in CHECKED_ARCHITECTURES:
        ptx = _ptx(kernel, cc)
        assert f".target sm_{cc[0]}{cc[1]}" in ptx
        name, _ = entry_params(ptx)
        assert kernel.fn.__name__ in name


@pytest.mark.parametrize("kernel", _kernel_ids())
def test_packed_buffer_matches_the_ptx_entry(cache, kernel):
    for cc in CHECKED_ARCHITECTURES:
        _, params = entry_params(_ptx(kernel, cc))
        assert params == abi_params(kernel.arg_types), f"{kernel.name} sm_{cc[0]}{cc[1]}"
        assert buffer_size(kernel.arg_types) == param_offsets(params)[-1] + params[-1].size

    values, expected = _sample_arguments(kernel.arg_types)
    buffer = pack_arguments(kernel.arg_types, values)
    assert len(buffer) == buffer_size(kernel.arg_types)
    assert unpack_arguments(params, buffer) == pytest.approx(expected)


def _sample_arguments(arg_types):
    """Distinct values for every argument, and the parameter values numba's ABI expects for them."""
    values, expected = [], []
    for position, ty in enumerate(arg_types):
        if isinstance(ty, types.Array):
            shape = tuple(3 + position + axis for axis in range(ty.ndim))
            dtype = np.dtype(str(ty.dtype))
            pointer = 0x7F0000000000 + 0x1000 * position
            values.append(SimpleNamespace(pointer=pointer, shape=shape, dtype=dtype))
            strides = [int(np.prod(shape[axis + 1:])) * dtype.itemsize for axis in range(ty.ndim)]
            expected += [0, 0, int(np.prod(shape)), dtype.itemsize, pointer, *shape, *strides]
        else:
            value = 1.5 + position if isinstance(ty, types.Float) else 7 + position
            values.append(value)
            expected.append(value)
    return values, expected


def _ptxas() -> str:
    found = shutil.which("ptxas") or (os.path.exists("/usr/local/cuda/bin/ptxas") and "/usr/local/cuda/bin/ptxas")
    if not found:
        pytest.fail("ptxas not found on PATH or in /usr/local/cuda/bin: install the CUDA toolkit (nvcc 12+) so the "
                    "cuda kernels' PTX can be checked; this machine image is expected to have it")
    return found


def test_every_kernel_assembles_with_ptxas_and_fits_its_blocks(cache, tmp_path):
    """ptxas accepts every PTX, nothing spills to local memory, and the registers and shared memory a
    block needs fit one multiprocessor at the kernel's largest block size (else the launch would fail
    with "too many resources requested")."""
    ptxas = _ptxas()
    jobs = []
    for kernel in kernels():
        for cc in CHECKED_ARCHITECTURES:
            source = tmp_path / f"{kernel.name}.sm_{cc[0]}{cc[1]}.ptx"
            source.write_text(_ptx(kernel, cc))
            jobs.append((kernel, source, f"sm_{cc[0]}{cc[1]}"))

    def assemble(job):
        kernel, source, arch = job
        command = [ptxas, "-v", f"-arch={arch}", str(source), "-o", str(source.with_suffix(".cubin"))]
        return kernel, source, subprocess.run(command, capture_output=True, text=True)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for kernel, source, result in pool.map(assemble, jobs):
            assert result.returncode == 0, f"ptxas failed on {source.name}:\n{result.stderr}"
            assert source.with_suffix(".cubin").stat().st_size > 0
            report = result.stdout + result.stderr
            assert "0 bytes spill stores, 0 bytes spill loads" in report, f"{source.name}:\n{report}"
            registers = int(re.search(r"Used (\d+) registers", report).group(1))
            shared = re.search(r"(\d+) bytes smem", report)
            per_thread = -(-registers // 8) * 8  # allocated in units of 8 per thread (256 per warp)
            assert per_thread * kernel.threads <= 65536, f"{source.name}: {registers} registers x {kernel.threads}"
            assert int(shared.group(1) if shared else 0) <= 48 * 1024, f"{source.name}: {report}"


def test_entry_params_reads_a_ptx_signature():
    ptx = """
.visible .entry _Z6kernel(
	.param .u64 _Z6kernel_param_0,
	.param .f32 _Z6kernel_param_1,
	.param .u32 _Z6kernel_param_2,
	.param .f64 _Z6kernel_param_3
)
{ ret; }"""
    name, params = entry_params(ptx)
    assert name == "_Z6kernel"
    assert params == [Param("int", 8), Param("float", 4), Param("int", 4), Param("float", 8)]
    assert param_offsets(params) == [0, 8, 12, 16]


def test_entry_params_refuses_aggregates_and_several_entries():
    aggregate = ".visible .entry k(\n.param .align 8 .b8 k_param_0[16]\n)\n{ ret; }"
    with pytest.raises(ValueError, match="aggregate"):
        entry_params(aggregate)
    with pytest.raises(ValueError, match="one .entry"):
        entry_params(".entry a(\n.param .u64 p\n)\n.entry b(\n.param .u64 q\n)")


def test_packer_rejects_wrong_arguments():
    arg_types = (types.float32[:, ::1], types.float32)
    tensor = SimpleNamespace(pointer=4096, shape=(2, 3), dtype=np.dtype(np.float32))
    with pytest.raises(TypeError, match="got a 1-d float32 tensor"):
        pack_arguments(arg_types, (SimpleNamespace(pointer=1, shape=(6,), dtype=np.dtype(np.float32)), 1.0))
    with pytest.raises(TypeError, match="device tensor"):
        pack_arguments(arg_types, (np.zeros((2, 3), np.float32), 1.0))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        pack_arguments(arg_types, (tensor,))
    with pytest.raises(TypeError, match="not supported"):
        abi_params((types.complex64,))


def test_dequantization_rounds_every_product_as_numpy_does(cache):
    """ptxas may fuse a plain mul.f32 with an add/sub that uses it into one FMA (one rounding instead of
    numpy's two). In the dequantization kernels no plain product may feed an addition or subtraction."""
    by_name = {k.fn.__name__: k for k in kernels()}
    for name in ("q4_k_rows", "q8_0_rows"):
        for cc in CHECKED_ARCHITECTURES:
            body = _ptx(by_name[name], cc)
            assert not re.search(r"\bfma\.", body), name
            plain_products = set(re.findall(r"\tmul\.f32\s+(%f\d+),", body))
            for line in re.findall(r"\t(?:add|sub)(?:\.rn)?\.f32\s+[^;]+;", body):
                operands = set(re.findall(r"%f\d+", line)[1:])
                assert not operands & plain_products, f"{name}: {line.strip()} may be fused into an FMA"
    assert "mul.rn.f32" in _ptx(by_name["q4_k_rows"], CHECKED_ARCHITECTURES[0])
