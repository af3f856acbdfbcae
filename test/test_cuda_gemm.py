"""The tensor-core matrix product (kernels/gemm.cu), checked without a GPU.

nvcc builds it for every checked architecture with no warnings; its machine code multiplies on the
tensor cores (HMMA) with no local memory and fits its block on one multiprocessor; the launcher's
parameter buffer matches the PTX entries; the launch geometry covers odd sizes; a host model of the
kernel's tile loop, built from the kernel's own tiling code (test/cuda_gemm_model.cpp), matches numpy
for odd shapes and every load path; and `linear` takes the tensor-core path only when asked to.
"""

from __future__ import annotations

import bisect
import importlib.util
import json
import logging
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from embodied_ros.kernels import registry

from embodied_ros.kernels.cuda import gemm

from embodied_ros.kernels.cuda import runtime
from embodied_ros.kernels.cuda.abi import module_entries, param_offsets, unpack_arguments
from embodied_ros.kernels.cuda.compiler import CACHE_ENV
from embodied_ros.kernels.cuda.gemm import (CHECKED_ARCHITECTURES, GEMM_BF16_WEIGHT, GEMM_F32_WEIGHT, GEMM_KERNELS,
                                             PRECISION_ENV, find_nvcc, gencode_flags, launch_plan,
                                             matmul_precision, nvcc_command, use_matmul_precision)
from embodied_ros.kernels.cuda.runtime import DeviceTensor
from embodied_ros.kernels.quant import random_quant_tensor
from embodied_ros.share import share_path

TEST_DIR = Path(__file__).resolve().parent
SOURCE = share_path("kernels", "gemm.cu")
_spec = importlib.util.spec_from_file_location("benchmarks_gpu_check",
                                               TEST_DIR.parent / "benchmarks" / "gpu_check.py")
gpu_check = sys.modules.setdefault("benchmarks_gpu_check", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(gpu_check)
REGISTERS_PER_MULTIPROCESSOR = 65536
STATIC_SHARED_LIMIT = 48 * 1024


def _nvcc() -> str:
    found = find_nvcc()
    if not found:
        pytest.fail("nvcc not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin: install the CUDA toolkit "
                    "(nvcc 12+) so that kernels/gemm.cu can be checked; this machine image is expected to have it")
    return found


def _nvdisasm() -> str:
    """nvdisasm from PATH, the CUDA toolkit, or the nvidia-cuda-nvdisasm wheel (requirements/dev.txt)."""
    spec = importlib.util.find_spec("nvidia")
    folders = spec.submodule_search_locations if spec else []
    wheel = sorted(p for base in folders for p in Path(base).glob("cu*/bin/nvdisasm"))
    found = shutil.which("nvdisasm") or next(iter(wheel), None)
    if not found:
        pytest.fail("nvdisasm not found: pip install nvidia-cuda-nvdisasm (requirements/dev.txt)")
    return str(found)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Per checked architecture the cubin and nvcc's output (ptxas -v report); the PTX; the host model."""
    nvcc = _nvcc()
    out = tmp_path_factory.mktemp("gemm")
    jobs = {f"sm_{a}{b}": nvcc_command(nvcc, SOURCE, out / f"gemm.sm_{a}{b}.cubin", "cubin",
                                       [*gencode_flags([(a, b)], ptx=False), "-Xptxas", "-v", "-Werror",
                                        "all-warnings"])
            for a, b in CHECKED_ARCHITECTURES}
    jobs["ptx"] = nvcc_command(nvcc, SOURCE, out / "gemm.ptx", "ptx", ["-arch=sm_80"])
    jobs["model"] = [nvcc, "-O2", "-std=c++17", "--cudart", "none", f"-I{SOURCE.parent}",
                     "-Xcompiler", "-Wall,-Wextra,-Werror,-fsanitize=address,-fsanitize=undefined",
                     str(TEST_DIR / "cuda_gemm_model.cpp"), "-o", str(out / "model")]

    def run(name):
        return name, subprocess.run(jobs[name], capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(pool.map(run, jobs))
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {' '.join(jobs[name])}\n{result.stderr}"
    return SimpleNamespace(dir=out, results=results)


def _architectures():
    return [pytest.param(f"sm_{a}{b}", id=f"sm_{a}{b}") for a, b in CHECKED_ARCHITECTURES]


@pytest.mark.parametrize("arch", _architectures())
def test_builds_without_warnings(built, arch):
    result = built.results[arch]
    assert "warning" not in (result.stdout + result.stderr).lower(), result.stderr
    assert (built.dir / f"gemm.{arch}.cubin").stat().st_size > 0


def _sass_by_function(cubin: Path) -> dict[str, str]:
    listing = subprocess.run([_nvdisasm(), str(cubin)], capture_output=True, text=True, check=True).stdout
    parts = re.split(r"^\s*\.text\.(\w+):\s*$", listing, flags=re.MULTILINE)
    return {name: body for name, body in zip(parts[1::2], parts[2::2])}


@pytest.mark.parametrize("arch", _architectures())
def test_machine_code_multiplies_on_tensor_cores_without_local_memory(built, arch):
    sass = _sass_by_function(built.dir / f"gemm.{arch}.cubin")
    assert set(sass) == {k.entry for k in GEMM_KERNELS}
    for entry, code in sass.items():
        # one slice of K per loop trip: 2 steps of 16 x (4 x 4 fragments) bf16 products with f32 accumulators
        assert len(re.findall(r"\bHMMA\.16816\.F32\.BF16\b", code)) >= 32, entry
        assert re.search(r"\bLDSM\.16\.M88\.4\b", code), f"{entry}: fragments are not loaded with ldmatrix"
        assert not re.search(r"\b(LDL|STL)\b", code), f"{entry}: uses local memory"
    assert re.search(r"\bLDGSTS\b", sass[GEMM_BF16_WEIGHT.entry]), "bf16 weights are not copied with cp.async"


def _ptxas_report(text: str) -> dict[str, dict]:
    report = {}
    for entry, body in re.findall(r"Compiling entry function '(\w+)'(.*?)(?=Compiling entry function|\Z)", text,
                                  flags=re.DOTALL):
        registers = int(re.search(r"Used (\d+) registers", body).group(1))
        shared = re.search(r"(\d+) bytes smem", body)
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", body)
        report[entry] = dict(registers=registers, shared=int(shared.group(1)) if shared else 0,
                             stack=tuple(int(n) for n in frame.groups()))
    return report


@pytest.mark.parametrize("arch", _architectures())
def test_registers_and_shared_memory_fit_one_block(built, arch):
    report = _ptxas_report(built.results[arch].stderr + built.results[arch].stdout)
    assert set(report) == {k.entry for k in GEMM_KERNELS}
    for entry, use in report.items():
        assert use["stack"] == (0, 0, 0), f"{entry} {arch}: stack frame or spills {use}"
        per_thread = -(-use["registers"] // 8) * 8  # allocated in units of 8 per thread
        assert per_thread * gemm.THREADS <= REGISTERS_PER_MULTIPROCESSOR, f"{entry} {arch}: {use}"
        assert use["shared"] == _shared_bytes() <= STATIC_SHARED_LIMIT, f"{entry} {arch}: {use}"


def _tiling_constants() -> dict[str, int]:
    text = (SOURCE.parent / "gemm_tiling.cuh").read_text()
    return {name: int(value) for name, value in re.findall(r"constexpr int (\w+) = (\d+);", text)}


def _shared_bytes() -> int:
    c = _tiling_constants()
    return c["STAGES"] * (c["BLOCK_M"] + c["BLOCK_N"]) * (c["BLOCK_K"] + 8) * 2  # bf16 rows of SMEM_K


def test_launcher_constants_match_the_kernel():
    c = _tiling_constants()
    assert (c["BLOCK_M"], c["BLOCK_N"]) == (gemm.BLOCK_M, gemm.BLOCK_N)
    assert 32 * c["WARPS_M"] * c["WARPS_N"] == gemm.THREADS == GEMM_F32_WEIGHT.threads
    assert "constexpr int SMEM_K = BLOCK_K + 8;" in (SOURCE.parent / "gemm_tiling.cuh").read_text()


def test_packed_buffer_matches_the_ptx_entries(built):
    entries = module_entries((built.dir / "gemm.ptx").read_text())
    assert entries == {k.entry: list(k.params) for k in GEMM_KERNELS}
    values = [0x7F0000001000, 0x7F0000002000, 0, 0x7F0000004000, 968, 16384, 2048]
    for kernel in GEMM_KERNELS:
        buffer = kernel.pack(values)
        params = entries[kernel.entry]
        assert len(buffer) == kernel.buffer_size == param_offsets(params)[-1] + params[-1].size == 44
        assert unpack_arguments(params, buffer) == values
    with pytest.raises(TypeError, match="takes 7 parameters"):
        GEMM_F32_WEIGHT.pack(values[:6])


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (127, 129, 3), (128, 128, 32), (129, 257, 2050), (968, 16384, 2048),
                                   (960, 14336, 3072), (5, 7, 0)])
def test_launch_plan_covers_every_output_once(m, n, k):
    plan = launch_plan(m, n, k)
    gx, gy, gz = plan.grid
    assert (gx - 1) * gemm.BLOCK_M < m <= gx * gemm.BLOCK_M
    assert (gy - 1) * gemm.BLOCK_N < n <= gy * gemm.BLOCK_N
    assert gz == 1 and plan.block == (gemm.THREADS, 1, 1) and plan.shared_bytes == 0


@pytest.mark.parametrize("m,n,k,message", [(0, 5, 5, "at least 1"), (3, 2 ** 31, 4, "below 2"),
                                           (3, 65536 * 128 + 1, 4, "65535")])
def test_launch_plan_refuses_impossible_sizes(m, n, k, message):
    with pytest.raises(ValueError, match=message):
        launch_plan(m, n, k)


# ---- the host model of the tile loop ------------------------------------------------------------

def _bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, rounded to nearest, ties to even (written here independently of the kernel)."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


MODEL_CASES = [  # weight type, M, N, K, elements before x / before W (unaligned rows), bias
    pytest.param("f32", 130, 257, 68, 0, 0, True, id="f32 16-byte loads, K tail, odd N"),
    pytest.param("f32", 129, 200, 70, 0, 0, False, id="f32 K not a multiple of 4"),
    pytest.param("f32", 256, 128, 96, 1, 0, True, id="f32 whole tiles, x rows unaligned"),
    pytest.param("f32", 1, 1, 1, 0, 0, False, id="f32 1x1x1"),
    pytest.param("bf16", 200, 130, 40, 0, 0, True, id="bf16 cp.async, K tail"),
    pytest.param("bf16", 64, 136, 64, 0, 1, True, id="bf16 W rows unaligned"),
    pytest.param("bf16", 129, 131, 37, 1, 3, False, id="bf16 odd everything"),
]


@pytest.mark.parametrize("weight,m,n,k,x_offset,w_offset,bias", MODEL_CASES)
def test_host_model_of_the_tile_loop_matches_numpy(built, tmp_path, weight, m, n, k, x_offset, w_offset, bias):
    rng = np.random.default_rng(m * 1000 + k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    np.concatenate([np.zeros(x_offset, np.float32), x.ravel()]).tofile(tmp_path / "x.bin")
    stored = _bf16_bits(w) if weight == "bf16" else w
    np.concatenate([np.zeros(w_offset, stored.dtype), stored.ravel()]).tofile(tmp_path / "w.bin")
    b.tofile(tmp_path / "bias.bin")
    command = [str(built.dir / "model"), weight, *map(str, (m, n, k, x_offset, w_offset, int(bias))), str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]  # AddressSanitizer: a read or write out of bounds
    violations = json.loads(result.stdout)
    assert violations == dict.fromkeys(violations, 0) and len(violations) == 6

    y = np.fromfile(tmp_path / "y.bin", np.float32).reshape(m, n)
    xb, wb = _bf16_values(_bf16_bits(x)), _bf16_values(_bf16_bits(w))
    expected = xb @ wb.T + (b if bias else 0.0)
    scale = np.abs(xb) @ np.abs(wb).T  # what bounds the float32 accumulation error
    assert np.all(np.isfinite(y))
    assert np.max(np.abs(y - expected) / scale) < 1e-5
    # against float32 inputs, the documented bound: |y - y_f32| <= 2^-8 (|x| @ |W|^T)
    exact = x.astype(np.float64) @ w.astype(np.float64).T + (b if bias else 0.0)
    assert np.all(np.abs(y - exact) <= 2.0 ** -8 * (np.abs(x) @ np.abs(w).T) + 1e-6)


# ---- building at run time -----------------------------------------------------------------------

def test_runtime_build_goes_to_the_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    builds = []
    real_run = subprocess.run

    def counting_run(command, *args, **kwargs):
        builds.extend(c for c in command if c == "-fatbin")
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(gemm.subprocess, "run", counting_run)
    path = gemm.build("gemm.cu", (8, 7))
    assert path.parent == tmp_path and path.name.startswith("gemm.sm_87.") and path.suffix == ".fatbin"
    assert path.stat().st_size > 0 and builds == ["-fatbin"]
    assert GEMM_F32_WEIGHT.image((8, 7)) == path.read_bytes() and builds == ["-fatbin"]
    assert not list(tmp_path.glob("*.tmp"))


def test_without_nvcc_the_build_says_so(monkeypatch):
    monkeypatch.setattr(gemm, "find_nvcc", lambda: None)
    with pytest.raises(gemm.TensorCoresUnavailable, match="nvcc was not found"):
        gemm.build("gemm.cu", (9, 0))


# ---- the precision setting ----------------------------------------------------------------------

def test_precision_is_float32_unless_asked(monkeypatch):
    monkeypatch.delenv(PRECISION_ENV, raising=False)
    assert matmul_precision() == "float32"
    monkeypatch.setenv(PRECISION_ENV, "bf16")
    assert matmul_precision() == "bf16"
    with use_matmul_precision("float32"):
        assert matmul_precision() == "float32"
        with use_matmul_precision("bf16"):
            assert matmul_precision() == "bf16"
        assert matmul_precision() == "float32"
    assert matmul_precision() == "bf16"
    monkeypatch.setenv(PRECISION_ENV, "fp8")
    with pytest.raises(ValueError, match=r"\$EMBODIED_ROS_CUDA_MATMUL: matmul precision 'fp8'"):
        matmul_precision()
    with pytest.raises(ValueError, match="'half' is not one of float32, bf16"):
        with use_matmul_precision("half"):
            pass


def test_a_scoped_precision_belongs_to_its_thread(monkeypatch):
    monkeypatch.delenv(PRECISION_ENV, raising=False)
    with use_matmul_precision("bf16"), ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(matmul_precision).result() == "float32"
        assert matmul_precision() == "bf16"


# ---- routing in `linear`, on a recording stand-in for the GPU --------------------------------------

class RecordingDevice:
    """Allocations at made-up addresses; records every launch. Results download as zeros."""

    def __init__(self, compute_capability=(9, 0)):
        self.compute_capability = compute_capability
        self.launches, self.loaded, self.uploads = [], [], []
        self._next = 0x7F0000000000

    def empty(self, shape, dtype):
        self._next += 1 << 32
        return DeviceTensor(tuple(int(n) for n in shape), np.dtype(dtype), self._next, None, self)

    def upload(self, array):
        tensor = self.empty(array.shape, array.dtype)
        self.uploads.append((np.array(array), tensor))
        return tensor

    def download(self, tensor):
        return np.zeros(tensor.shape, tensor.dtype)

    def launch(self, kernel, grid, block, args, shared_bytes=0):
        self.launches.append((kernel.fn.__name__, grid, args))

    def load_native(self, kernels):
        self.loaded.extend(k.entry for k in kernels)

    def launch_native(self, kernel, grid, block, buffer, shared_bytes=0):
        self.launches.append((kernel.entry, grid, unpack_arguments(kernel.params, buffer)))

    def pointer_of(self, array):
        """Where an uploaded array went (compared by value, in any shape)."""
        return next(t.pointer for a, t in self.uploads
                    if a.size == array.size and np.array_equal(a.ravel(), array.ravel()))


@pytest.fixture
def device(monkeypatch):
    recording = RecordingDevice()
    monkeypatch.setattr(runtime, "_gpu", recording)
    monkeypatch.delenv(PRECISION_ENV, raising=False)
    return recording


def _linear(*args):
    return registry.implementations("linear")["cuda"](*args)


def test_linear_stays_float32_by_default(device):
    rng = np.random.default_rng(0)
    _linear(rng.standard_normal((200, 64), dtype=np.float32), rng.standard_normal((96, 64), dtype=np.float32))
    assert [name for name, _, _ in device.launches] == ["matmul_nt"] and not device.loaded


def test_bf16_precision_puts_large_products_on_tensor_cores(device):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 150, 64), dtype=np.float32)  # 300 rows
    w = rng.standard_normal((257, 64), dtype=np.float32)
    b = rng.standard_normal(257, dtype=np.float32)
    with use_matmul_precision("bf16"):
        y = _linear(x, w, b)
    assert y.shape == (2, 150, 257)
    assert device.loaded == [k.entry for k in GEMM_KERNELS]
    (entry, grid, values), = device.launches
    assert entry == GEMM_F32_WEIGHT.entry and grid == (3, 3, 1)
    assert values[:3] == [device.pointer_of(x), device.pointer_of(w), device.pointer_of(b)]
    assert values[4:] == [300, 257, 64]


def test_bf16_weights_are_read_as_stored_and_small_products_stay_float32(device):
    rng = np.random.default_rng(2)
    weight = random_quant_tensor(rng, "bf16", (40, 24))
    with use_matmul_precision("bf16"):
        _linear(rng.standard_normal((128, 24), dtype=np.float32), weight)
        _linear(rng.standard_normal((127, 24), dtype=np.float32), weight)
        _linear(rng.standard_normal((128, 64), dtype=np.float32), random_quant_tensor(rng, "q8_0", (8, 64)))
    names = [name for name, _, _ in device.launches]
    assert names == [GEMM_BF16_WEIGHT.entry, "bf16_rows", "matmul_nt", "q8_0_rows", GEMM_F32_WEIGHT.entry]
    entry, grid, values = device.launches[0]
    assert values[1] == device.pointer_of(weight.data) and values[2] == 0 and values[4:] == [128, 40, 24]


def test_linear_on_device_tensors_writes_its_result_in_place(device):
    """Device tensors in, device tensors out, nothing through the host: the float32 product writes the
    result directly, and so does the tensor-core product in bf16 precision (a bf16 weight read as stored)."""
    rng = np.random.default_rng(4)
    x, w, b = (runtime.to_device(rng.standard_normal(shape, dtype=np.float32))
               for shape in ((200, 64), (96, 64), (96,)))
    bf16_weight = runtime.to_device(random_quant_tensor(rng, "bf16", (40, 64)))
    results = [_linear(x, w, b)]
    with use_matmul_precision("bf16"):
        results += [_linear(x, w, b), _linear(x, bf16_weight)]
    assert [r.shape for r in results] == [(200, 96), (200, 96), (200, 40)]
    assert all(isinstance(r, DeviceTensor) for r in results) and len(device.uploads) == 4
    names = [name for name, _, _ in device.launches]
    assert names == ["matmul_nt", GEMM_F32_WEIGHT.entry, GEMM_BF16_WEIGHT.entry]
    _, grid, args = device.launches[0]
    assert [(t.pointer, t.shape) for t in args] == [(t.pointer, t.shape) for t in (x, w, b, results[0])]
    assert grid == (2, 4)
    _, _, values = device.launches[1]
    assert values == [x.pointer, w.pointer, b.pointer, results[1].pointer, 200, 96, 64]
    _, _, values = device.launches[2]
    assert values[:4] == [x.pointer, bf16_weight.data.pointer, 0, results[2].pointer] and values[4:] == [200, 40, 64]


@pytest.mark.parametrize("cc,missing_nvcc,reason", [((9, 0), True, "nvcc was not found"),
                                                    ((7, 5), False, "sm_75; bf16 tensor-core products need sm_80")])
def test_bf16_falls_back_to_float32_with_a_log_line(monkeypatch, caplog, cc, missing_nvcc, reason):
    recording = RecordingDevice(cc)
    recording.load_native = lambda kernels: [k.image(cc) for k in kernels]  # builds, as the launcher does
    monkeypatch.setattr(runtime, "_gpu", recording)
    if missing_nvcc:
        monkeypatch.setattr(gemm, "find_nvcc", lambda: None)
    rng = np.random.default_rng(3)
    with caplog.at_level(logging.WARNING, logger=gemm.__name__), use_matmul_precision("bf16"):
        for _ in range(2):
            _linear(rng.standard_normal((256, 32), dtype=np.float32), rng.standard_normal((16, 32), dtype=np.float32))
    assert [name for name, _, _ in recording.launches] == ["matmul_nt", "matmul_nt"]
    warnings = [r.getMessage() for r in caplog.records if r.name == gemm.__name__]
    assert len(warnings) == 1 and "run in float32 instead" in warnings[0] and reason in warnings[0]


def test_tensor_core_product_checks_its_arguments(device):
    x, y = device.empty((4, 8), np.float32), device.empty((4, 5), np.float32)
    with pytest.raises(ValueError, match="does not fit x of shape"):
        gemm.multiply(device, x, device.empty((5, 7), np.float32), None, y)
    with pytest.raises(ValueError, match=r"bias float32 \(4,\); expected float32 \(5,\)"):
        gemm.multiply(device, x, device.empty((5, 16), np.uint8), device.empty((4,), np.float32), y)
    assert not device.launches


# ---- the device check's tensor-core cases, end to end on a stand-in GPU ----------------------------

class ModelGpu:
    """A stand-in GPU: its memory is host memory at made-up addresses; a tensor-core launch runs the
    host model of gemm.cu on the memory its parameter buffer points at; the few numba kernels the
    float32 comparison launches run as their numpy equivalents."""

    compute_capability = (8, 7)

    def __init__(self, model: Path, scratch: Path):
        self.model, self.scratch = model, scratch
        self.bases, self.buffers = [], {}
        self.native_launches = 0

    def empty(self, shape, dtype):
        dtype = np.dtype(dtype)
        base = 0x7F0000000000 + (len(self.bases) + 1) * (1 << 32)
        self.bases.append(base)
        self.buffers[base] = np.zeros(max(1, int(np.prod(shape)) * dtype.itemsize), np.uint8)
        return DeviceTensor(tuple(int(n) for n in shape), dtype, base, None, self)

    def _at(self, pointer: int, shape, dtype) -> np.ndarray:
        base = self.bases[bisect.bisect_right(self.bases, pointer) - 1]
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.buffers[base][pointer - base:pointer - base + nbytes].view(dtype).reshape(shape)

    def view(self, tensor):
        return self._at(tensor.pointer, tensor.shape, tensor.dtype)

    def upload(self, array):
        tensor = self.empty(array.shape, array.dtype)
        self.view(tensor)[...] = array
        return tensor

    def download(self, tensor):
        return self.view(tensor).copy()

    def load_native(self, kernels):
        for kernel in kernels:
            assert kernel.image(self.compute_capability)  # nvcc builds it, as on a GPU machine

    def launch_native(self, kernel, grid, block, buffer, shared_bytes=0):
        x, w, bias, y, m, n, k = unpack_arguments(kernel.params, buffer)
        assert grid == launch_plan(m, n, k).grid and block == (kernel.threads, 1, 1)
        bf16 = kernel is GEMM_BF16_WEIGHT
        self._at(x, (m, k), np.float32).tofile(self.scratch / "x.bin")
        self._at(w, (n, k), np.uint16 if bf16 else np.float32).tofile(self.scratch / "w.bin")
        if bias:
            self._at(bias, (n,), np.float32).tofile(self.scratch / "bias.bin")
        command = [str(self.model), "bf16" if bf16 else "f32", *map(str, (m, n, k, 0, 0, int(bias != 0))),
                   str(self.scratch)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and json.loads(result.stdout) == dict.fromkeys(json.loads(result.stdout), 0)
        self._at(y, (m, n), np.float32)[...] = np.fromfile(self.scratch / "y.bin", np.float32).reshape(m, n)
        self.native_launches += 1

    def launch(self, kernel, grid, block, args, shared_bytes=0):
        name = kernel.fn.__name__
        if name == "matmul_nt":
            x, w, bias, y = (self.view(a) for a in args)
            y[...] = x @ w.T + (bias if bias.size else 0)
        elif name == "bf16_rows":
            data, bits = (self.view(a) for a in args)
            bits[...] = data.view(np.uint16).astype(np.uint32) << 16
        else:
            raise AssertionError(f"unexpected kernel {name}")

    def event(self):  # timings are not what this checks
        return SimpleNamespace(record=lambda: None, synchronize=lambda: None, time_till=lambda other: 1.0)


def test_device_check_tensor_core_cases_pass_on_the_host_model(built, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    stand_in = ModelGpu(built.dir / "model", tmp_path)
    monkeypatch.setattr(runtime, "_gpu", stand_in)
    cases = gpu_check.gemm_cases(gpu_check.TINY)
    assert [c.weight for c in cases] == ["float32", "bf16"] * 3 and min(c.rows for c in cases) >= 128
    for case in cases:
        result = gpu_check.run_gemm_case(case, repeats=1, seed=0)
        assert result["ok"] and result["linear_uses_it"], result
        assert result["kernel_err"] < 1e-5 and result["precision_err"] <= 2.0 ** -8
    assert stand_in.native_launches == 3 * len(cases)  # timing warm-up + timed call, `linear`
