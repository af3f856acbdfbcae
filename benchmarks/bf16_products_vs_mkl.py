"""This runtime's bf16 products next to oneMKL's (`cblas_gemm_bf16bf16f32`, weight packed once with its
`_pack` form), on the shapes of a Gemma-2B prefix layer and of the action expert.

    python benchmarks/bf16_products_vs_mkl.py --mkl PATH/libmkl_rt.so.N [--threads 2] [--no-write]

oneMKL comes from the `mkl` wheel on PyPI (not a dependency: `pip install mkl` into any
environment, then point --mkl at its lib/libmkl_rt.so.*). Its side runs in a child process (its
OpenMP runtime stays out of numba's). This runtime's time includes rounding x from float32 to bf16;
MKL's does not (x is handed over rounded: numpy's rounding would cost more than the product), which
favours MKL. Best of 5 after a warm-up, per shape.
Writes BENCHMARKS.md section bf16_products_vs_mkl.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys

import numpy as np

import common

SHAPES = ((968, 2048, 16384), (968, 16384, 2048), (968, 2048, 2048), (50, 1024, 4096), (50, 1024, 8192))
ROW_MAJOR, NO_TRANS, TRANS, PACKED, B_MATRIX = 101, 111, 112, 151, 162


def _best_ms(run, repeats: int = 5) -> float:
    return min(common.time_repeats(run, repeats).runs_ms)


def _bf16(x: np.ndarray) -> np.ndarray:
    bits = x.view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def mkl_side(library: str) -> dict[str, float]:
    """ms per shape of MKL's packed bf16 product (this process loads MKL)."""
    mkl = ctypes.CDLL(library)
    mkl.cblas_gemm_bf16bf16f32_pack_get_size.restype = ctypes.c_size_t
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    mkl.cblas_gemm_bf16bf16f32_pack_get_size.argtypes = (i, i, i, i)
    mkl.cblas_gemm_bf16bf16f32_pack.argtypes = (i, i, i, i, i, i, p, i, p)
    mkl.cblas_gemm_bf16bf16f32_compute.argtypes = (i, i, i, i, i, i, f, p, i, p, i, f, p, i)
    rng = np.random.default_rng(0)
    out = {}
    for m, k, n in SHAPES:
        x = rng.standard_normal((m, k), dtype=np.float32)
        weight = _bf16(rng.standard_normal((n, k), dtype=np.float32))  # [out, in], as a bundle stores it
        packed = np.empty(mkl.cblas_gemm_bf16bf16f32_pack_get_size(B_MATRIX, m, n, k), np.uint8)
        mkl.cblas_gemm_bf16bf16f32_pack(ROW_MAJOR, B_MATRIX, TRANS, m, n, k, weight.ctypes.data, k, packed.ctypes.data)
        y = np.empty((m, n), np.float32)
        a = _bf16(x)

        def run():
            mkl.cblas_gemm_bf16bf16f32_compute(ROW_MAJOR, NO_TRANS, PACKED, m, n, k, 1.0, a.ctypes.data, k,
                                               packed.ctypes.data, n, 0.0, y.ctypes.data, n)
        out[f"{m} x {k} -> {n}"] = _best_ms(run)
    return out


def runtime_side() -> tuple[dict[str, float], str]:
    from embodied_ros.kernels import KernelSet, reuse_freed_memory
    from embodied_ros.kernels.linear_bf16 import BF16_UNIT, to_bf16_weight
    reuse_freed_memory()
    ks = KernelSet("numba")
    rng = np.random.default_rng(0)
    out = {}
    for m, k, n in SHAPES:
        x = rng.standard_normal((m, k), dtype=np.float32)
        weight = to_bf16_weight(rng.standard_normal((n, k), dtype=np.float32))
        out[f"{m} x {k} -> {n}"] = _best_ms(lambda: ks.linear(x, weight))
    return out, str(BF16_UNIT)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mkl", required=True, help="path of oneMKL's libmkl_rt.so.N")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mkl-side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if args.mkl_side:
        print(json.dumps(mkl_side(args.mkl)))
        return 0
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)
    ours, unit = runtime_side()
    child_env = {**os.environ, "MKL_NUM_THREADS": str(args.threads), "OMP_NUM_THREADS": str(args.threads)}
    theirs = json.loads(subprocess.run([sys.executable, __file__, "--mkl", args.mkl, "--mkl-side"], env=child_env,
                                       check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    rows = []
    for m, k, n in SHAPES:
        shape = f"{m} x {k} -> {n}"
        rows.append({"product": shape, "this runtime ms": ours[shape], "oneMKL ms": theirs[shape],
                     "oneMKL / this": theirs[shape] / ours[shape],
                     "this runtime TFLOP/s": 2 * m * k * n / ours[shape] / 1e9})
    body = (f"{args.threads} threads. This runtime: `ks.linear` on a Bf16Weight (its bf16 unit here: {unit}); "
            "oneMKL: `cblas_gemm_bf16bf16f32_compute` on a weight packed once (`_pack`), in a child process, x "
            "handed over already in bf16 (its rounding is in this runtime's time, not in MKL's).\n\n"
            + common.markdown_table(rows))
    print(body)
    if not args.no_write:
        common.write_section(common.REPO_ROOT / "BENCHMARKS.md", "bf16_products_vs_mkl", body, common.command_line(),
                             common.machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
