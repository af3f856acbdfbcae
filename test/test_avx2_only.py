"""benchmarks/avx2_only.py: a command run as on an AVX2-only CPU sees the CPU without its AVX-512 and
AMX features, in what llvmlite reports, what numba compiles for and what the kernels choose."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


avx2_only = _module("avx2_only")
common = _module("common")


def test_the_site_hook_hides_the_named_features_from_llvmlite_and_the_kernels():
    probe = ("import json; from llvmlite import binding; from embodied_ros.kernels.cpu import int16_gemm; "
             "print(json.dumps([binding.get_host_cpu_features().get('fma', False), int16_gemm.int16_unit()]))")
    env = {**os.environ, "PYTHONPATH": str(avx2_only.SITE_DIR), avx2_only.MASK_ENV: "fma"}
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    fma, unit = json.loads(result.stdout)
    assert fma is False and unit is None  # every CPU these tests run on has FMA: only the hook hid it


def test_the_environment_names_the_client_cpu_and_its_kernels():
    env = avx2_only.environment({"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(avx2_only.SITE_DIR), "/elsewhere"]
    assert env["NUMBA_CPU_NAME"] == "alderlake" and env["OPENBLAS_CORETYPE"] == "Haswell"
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    features = env["NUMBA_CPU_FEATURES"].split(",")
    assert "+avx2" in features and "+fma" in features
    assert not [f for f in features if f.startswith("+") and f[1:].startswith(avx2_only.MASKED_PREFIXES)]


def test_a_probe_run_so_sees_no_avx512_and_the_command_keeps_its_exit_status():
    check = subprocess.run([sys.executable, str(BENCHMARKS / "avx2_only.py"), "--check"], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert report["masked features seen"] == [] and report["numba cpu"] == "alderlake"
    assert report["16-lane vector products"] is False and report["openblas kernels"] in ("Haswell", None)
    assert report["int16 unit (BF16 weights)"] == ("avx_vnni" if report["avxvnni"] else "avx2")
    assert avx2_only.main(["--", sys.executable, "-c", "raise SystemExit(3)"]) == 3


def test_the_machine_line_leaves_out_hidden_features(monkeypatch):
    monkeypatch.setenv(common.MASKED_FEATURES_ENV, "avx2")  # every CPU here has it
    assert "avx2" not in common.cpu_features().split()
    assert "run as an AVX2-only CPU" in common.machine_line()
    monkeypatch.delenv(common.MASKED_FEATURES_ENV)
    assert "avx2" in common.cpu_features().split()
