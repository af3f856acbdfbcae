"""Every cuda op, run through the real launcher in numba's CUDA simulator, against its numpy reference.

The simulator must be switched on before numba.cuda is imported, so subprocesses run the checks
(cuda_sim_check.py, then benchmarks/gpu_check.py at tiny sizes) with PTX compiled here beforehand:
one per share of the cases, side by side, as the simulator keeps each to one core.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_ptx_cache import compiled_cache
from embodied_ros.kernels import registry

TEST_DIR = Path(__file__).resolve().parent
REPO = TEST_DIR.parent
_spec = importlib.util.spec_from_file_location("benchmarks_gpu_check", REPO / "benchmarks" / "gpu_check.py")
gpu_check = sys.modules.setdefault("benchmarks_gpu_check", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(gpu_check)

CUDA_OPS = sorted(op for op in registry.ops() if "cuda" in registry.implementations(op))
GPU_CHECK_ARGS = ["--tiny", "--repeats", "2", "--host-repeats", "1", "--only", "rope", "--sections", "kernel_set"]
SHARDS = max(1, min(4, len(os.sched_getaffinity(0))))
_RUNNER = f"""
import sys
sys.path[:0] = [{str(TEST_DIR)!r}, {str(REPO / 'benchmarks')!r}]
import cuda_sim_check, gpu_check
shard = int(sys.argv[1])
cuda_sim_check.main(shard, {SHARDS})
print("GPU_CHECK_EXIT", gpu_check.main({GPU_CHECK_ARGS!r}) if shard == {SHARDS} - 1 else "skipped")
"""


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", EMBODIED_ROS_CUDA_CACHE=str(compiled_cache()))
    folder = tmp_path_factory.mktemp("simulator")
    logs = [(folder / f"{shard}.out", folder / f"{shard}.err") for shard in range(SHARDS)]
    runs = []
    for shard, (out, err) in enumerate(logs):
        with out.open("w") as stdout, err.open("w") as stderr:
            runs.append(subprocess.Popen([sys.executable, "-c", _RUNNER, str(shard)], cwd=REPO, env=env,
                                         stdout=stdout, stderr=stderr))
    try:
        for run in runs:
            run.wait(timeout=600)
    finally:
        for run in runs:
            run.kill()  # a shard still running after another failed; nothing for ended ones
    outputs = [(out.read_text(), err.read_text()) for out, err in logs]
    for stdout, stderr in outputs:
        assert "GPU_CHECK_EXIT" in stdout, f"simulator run died:\n{stdout[-3000:]}\n{stderr[-5000:]}"
    checks = [json.loads(line) for stdout, _ in outputs for line in stdout.splitlines() if line.startswith('{"op"')]
    lines = outputs[-1][0].splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("GPU_CHECK_EXIT"))
    report = json.loads("\n".join(lines[lines.index("{"):end]))  # gpu_check prints one indented document
    return checks, report, int(lines[end].split()[1])


def ops_called_by_the_package() -> dict[str, list[str]]:
    """op -> where it is called: every attribute access named after a registered op (`ks.linear`, ...)
    in the package outside embodied_ros/kernels/. Read from the source, so a new call is seen at once."""
    package = REPO / "embodied_ros"
    names = set(registry.ops())
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "kernels":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in names:
                found.setdefault(node.attr, []).append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_every_op_the_package_calls_runs_on_the_gpu():
    """An op without a cuda implementation silently runs as numpy on the CPU in the cuda backend, with
    a copy of its arguments to the host and back."""
    called = ops_called_by_the_package()
    assert {"linear", "cached_attention", "attention", "rms_norm"} <= set(called)  # the scan reads the model code
    missing = {op: where[:3] for op, where in called.items() if op not in CUDA_OPS}
    assert not missing, f"ops called without a cuda implementation (op: first call sites): {missing}"
    chosen = registry.KernelSet("cuda").chosen
    assert all(chosen[op] == "cuda" for op in called)


def test_the_cuda_backend_covers_the_hot_ops():
    expected = {"rms_norm", "ada_rms_norm", "layer_norm", "modulated_layer_norm", "rms_norm_across_heads",
                "gated_residual", "rope", "rope_pairs", "gelu_tanh", "gelu_tanh_mul", "gelu_tanh_glu", "attention",
                "cached_attention", "linear", "dequantize"}
    assert expected <= set(CUDA_OPS)
    chosen = registry.KernelSet("cuda").chosen
    assert all(chosen[op] == "cuda" for op in expected)


@pytest.mark.parametrize("op", CUDA_OPS)
def test_op_matches_its_reference_in_the_simulator(simulated, op):
    checks, _, _ = simulated
    mine = [c for c in checks if c["op"] == op]
    assert mine, f"no simulator checks ran for {op}"
    failed = [f"{c['case']}: {c['error']}" for c in mine if not c["ok"]]
    assert not failed, "\n".join(failed)


def test_ops_chain_on_device_without_leaving_it(simulated):
    checks, _, _ = simulated
    chain = [c for c in checks if c["op"] == "chain"]
    assert len(chain) == 1 and chain[0]["ok"], chain


def test_gpu_check_runs_through_the_launcher(simulated):
    _, report, exit_code = simulated
    assert exit_code == 0 and report["ok"]
    section = report["kernel_set"]
    assert report["sizes"] == "tiny" and section["compute_capability"] == [9, 0]
    names = [c["case"] for c in section["cases"]]
    assert any("rope q" in n for n in names) and any("rope_pairs" in n for n in names)
    for case in section["cases"]:
        assert case["max_abs_err"] <= case["tolerance"]["atol"] + 1e-3
        assert case["device_ms"] > 0 and case["host_ms"] > 0


def test_gpu_check_covers_every_cuda_op_with_valid_cases():
    """Every case of the device check builds, at tiny sizes, arguments its numpy reference accepts."""
    tiny = gpu_check.cases(gpu_check.TINY)
    assert {c.op for c in tiny} == set(CUDA_OPS)
    assert [c.name.split(" [")[0] for c in tiny] == [c.name.split(" [")[0] for c in gpu_check.cases(gpu_check.FULL)]
    for case in tiny:
        args = case.make(np.random.default_rng(0))
        out = registry.reference_of(case.op).fn(*args)
        assert np.all(np.isfinite(out)), case.name


def test_gpu_check_full_sizes_are_pi05_and_wan():
    full = gpu_check.FULL
    assert (full["prefix"], full["gemma"], full["expert"], full["head_dim"]) == (968, 2048, 1024, 256)
    assert (full["wan"], full["wan_heads"]) == (3072, 24)
    assert gpu_check.TINY.keys() == full.keys()
