"""Run a command as on an AVX2-only Intel CPU (AVX2, FMA, AVX-VNNI; no AVX-512, no AMX) on a CPU with more.

    python benchmarks/avx2_only.py --check
    python benchmarks/avx2_only.py -- python benchmarks/record_types.py --record /tmp/smolvla_full ...

Intel's client CPUs (the robot PC's) have AVX2 and AVX-VNNI and neither AVX-512 nor AMX; issue 34's
AVX2-only criterion is measured on a Xeon that hides the rest. Every process of the command gets:
- llvmlite's host features without avx512*, avx10*, evex512 and amx* (avx2_only_site/sitecustomize.py,
  first on PYTHONPATH): the runtime's kernels dispatch on them (int16 and int8 on AVX-VNNI, BLAS for
  float32), and numba compiles for Alder Lake with those features (NUMBA_CPU_NAME, NUMBA_CPU_FEATURES),
  its cache in a folder of its own;
- numpy's OpenBLAS on its AVX2 kernels (OPENBLAS_CORETYPE=Haswell);
- PyTorch on its AVX2 kernels, oneDNN up to AVX2 with VNNI, MKL up to AVX2 (ATEN_CPU_CAPABILITY,
  ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS).
`--check` runs a probe the same way and prints what it sees: the features llvmlite reports, the
runtime's choice of unit for each weight type, OpenBLAS's kernels and, where importable, PyTorch's;
it fails if anything masked is still seen. Benchmarks run this way name it in their Machine line.
The CPU must have AVX2 and FMA; one without AVX-VNNI runs as an AVX2 CPU without it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BENCHMARKS_DIR = Path(__file__).resolve().parent
SITE_DIR = BENCHMARKS_DIR / "avx2_only_site"
MASKED_PREFIXES = ("avx512", "avx10", "evex512", "amx")
MASK_ENV = "EMBODIED_ROS_MASKED_CPU_FEATURES"  # read by avx2_only_site/sitecustomize.py and common.py
CPU_NAME = "alderlake"

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from llvmlite import binding
features = binding.get_host_cpu_features()
from numba.core import config
from embodied_ros.kernels import linear, linear_bf16, linear_int16, linear_int8
from embodied_ros.kernels.cpu import int8_gemm, int16_gemm
import common
report = {
    "masked features seen": sorted(name for name, on in features.items() if on and name.startswith(tuple(sys.argv[2].split(",")))),
    "avx2": features.get("avx2", False), "fma": features.get("fma", False), "avxvnni": features.get("avxvnni", False),
    "numba cpu": config.CPU_NAME, "16-lane vector products": linear.VECTOR_GEMM,
    "bf16 products": linear_bf16.BF16_PRODUCTS, "int16 unit (BF16 weights)": int16_gemm.INT16_UNIT if linear_int16.INT16_PRODUCTS else None,
    "int8 unit (Q8_0 weights)": int8_gemm.INT8_UNIT if linear_int8.INT8_PRODUCTS else None,
    "openblas kernels": common.openblas_kernels(),
}
try:
    import torch
    report["torch cpu capability"] = torch.backends.cpu.get_cpu_capability()
except ImportError:
    report["torch cpu capability"] = None
print(json.dumps(report))
"""


def masked_features_string() -> str:
    """This CPU's llvmlite features with the masked ones off, as numba's NUMBA_CPU_FEATURES takes them."""
    from llvmlite import binding
    features = binding.get_host_cpu_features()
    if not (features.get("avx2", False) and features.get("fma", False)):
        raise SystemExit("avx2_only: this CPU has no AVX2 and FMA; it cannot run as an AVX2 CPU")
    for name in list(features):
        if name.startswith(MASKED_PREFIXES):
            features[name] = False
    return features.flatten()


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (this process's environment) with the settings of the module doc."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR)] + [p for p in [env.get("PYTHONPATH")] if p])
    env[MASK_ENV] = ",".join(MASKED_PREFIXES)
    env["NUMBA_CPU_NAME"] = CPU_NAME
    env["NUMBA_CPU_FEATURES"] = masked_features_string()
    env["NUMBA_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / "embodied_ros_avx2_only_numba")
    env.update(OPENBLAS_CORETYPE="Haswell", ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2_VNNI",
               MKL_ENABLE_INSTRUCTIONS="AVX2")
    return env


def check() -> int:
    probe = subprocess.run([sys.executable, "-c", PROBE, str(BENCHMARKS_DIR), ",".join(MASKED_PREFIXES)],
                           env=environment(), capture_output=True, text=True)
    if probe.returncode:
        print(probe.stderr, file=sys.stderr)
        return probe.returncode
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    if report["masked features seen"] or report["16-lane vector products"] or report["bf16 products"]:
        print("avx2_only: the probe still sees AVX-512 or AMX", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print what a process run this way sees")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.check:
        return check()
    if not command:
        parser.error("give --check or a command after --")
    return subprocess.run(command, env=environment()).returncode


if __name__ == "__main__":
    sys.exit(main())
