"""The device runtime's CUDA C kernels (kernels/transformer.cu) and its device check, without a GPU.

nvcc builds the kernels for every checked architecture with no warnings, no spills and no local memory
(the GPU builds them with NVRTC at run time, from the same source and no headers); the entries are the
engine's; the device check's operation cases (benchmarks/gpu_engine_ops.py) run on the host engines at
small sizes, and their full sizes are full-size pi0.5's and SmolVLA's.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from embodied_ros.gpu import engine
from embodied_ros.kernels.cuda.gemm import CHECKED_ARCHITECTURES, find_nvcc, gencode_flags
from embodied_ros.share import share_path

REPO = Path(__file__).resolve().parent.parent
SOURCE = share_path("kernels", "transformer.cu")


def _module(name: str):
    """A benchmarks/ script as a module (registered first: its dataclasses look their module up)."""
    key = f"benchmarks_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, REPO / "benchmarks" / f"{name}.py")
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    nvcc = find_nvcc()
    if not nvcc:
        pytest.fail("nvcc not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin: install the CUDA toolkit")
    out = tmp_path_factory.mktemp("transformer")

    def build(arch):
        a, b = arch
        command = [nvcc, "-cubin", "-O3", "-std=c++17", *gencode_flags([arch], ptx=False), "-Xptxas", "-v",
                   "-Werror", "all-warnings", str(SOURCE), "-o", str(out / f"sm_{a}{b}.cubin")]
        return f"sm_{a}{b}", subprocess.run(command, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, CHECKED_ARCHITECTURES))


@pytest.mark.parametrize("arch", [f"sm_{a}{b}" for a, b in CHECKED_ARCHITECTURES])
def test_kernels_build_without_warnings_spills_or_local_memory(builds, arch):
    result = builds[arch]
    assert result.returncode == 0, result.stderr
    report = result.stdout + result.stderr
    assert "warning" not in report.lower(), report
    entries = re.findall(r"Compiling entry function '(\w+)'", report)
    assert sorted(entries) == sorted(engine.KERNELS)
    assert report.count("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") == len(entries), report


def test_the_source_includes_nothing():
    """NVRTC compiles it on the GPU machine with no include path: the kernels must not need headers."""
    assert "#include" not in SOURCE.read_text()


def test_device_check_operation_cases_run_on_the_host_engines():
    ops = _module("gpu_engine_ops")
    for case in ops.cases(ops.TINY):
        result = ops.run_on_host(case, seed=1)
        assert result["ok"], result
        assert all(error < 1e-2 for error in result["errors"].values()), result  # bf16 rounding, no more


def test_device_check_sizes_are_full_size_pi05_and_smolvla():
    ops = _module("gpu_engine_ops")
    assert ops.TINY.keys() == ops.FULL.keys()
    full = ops.FULL
    assert (full["prefix"], full["gemma"], full["gemma_mlp"], full["heads"], full["head_dim"]) == (968, 2048, 16384, 8, 256)
    assert (full["smol"], full["smol_heads"], full["smol_kv"], full["smol_head_dim"]) == (960, 15, 5, 64)
    kinds = [case.name.split()[0] for case in ops.cases(full)]
    assert kinds == [case.name.split()[0] for case in ops.cases(ops.TINY)]
    assert set(kinds) >= {"matmul", "residual_norm", "rope_split", "softmax", "glu", "bias_act", "axpy_cast"}


def test_whole_chunk_check_builds_configs_the_runtime_accepts():
    chunks = _module("gpu_chunks")
    from embodied_ros.models.pi05.config import Pi05Config
    from embodied_ros.models.smolvla.config import SmolVLAConfig
    pi05 = Pi05Config.from_fixture_json(chunks.pi05_record("full"))
    assert (pi05.vision.width, pi05.lm.width, pi05.expert.width, pi05.max_prefix_len) == (1152, 2048, 1024, 968)
    smolvla = SmolVLAConfig.from_fixture_json(chunks.smolvla_record("full"))
    assert (smolvla.vision.tokens_per_image, smolvla.lm.depth, smolvla.expert.width, smolvla.expert.mlp_dim) == \
        (64, 16, 720, 2048)
    record = chunks.pi05_record("tiny")
    cases = chunks.draw_cases(record, chunks.PI05["tiny"]["cases"], 56, 1024, seed=0)
    assert cases["case1_image_masks"].tolist() == [True, True, False]
    assert cases["case0_token_mask"].sum() == 9 and cases["case0_noise"].shape == (10, 32)
    assert np.all(cases["case0_tokens"][9:] == 0)
