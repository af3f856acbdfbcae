"""The AMX bf16 product's pass sizes (kernels/cpu/amx_gemm.py BLOCKING), side by side on the products
of full-size pi0.5 and SmolVLA.

    python benchmarks/amx_blocking.py [--blockings "64,8 32,8 128,4"] [--threads 2] [--no-write]

Each blocking is (tile steps, blocks of 32 rows) of one pass: a pass's A tiles are read by every
weight panel, so they should stay in L2, and the accumulators leave the tiles once per pass. Every
shape runs every blocking (best of 3 after a warm-up) on random data; writes BENCHMARKS.md section
amx_blocking. Needs a CPU with AMX tiles.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import common

SHAPES = ((968, 2048, 32768), (968, 16384, 2048), (968, 2048, 2304), (968, 2048, 2048), (50, 1024, 4096),
          (768, 1152, 4304), (256, 1152, 3456))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blockings", default="32,8 64,4 64,8 128,4 100000,4")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)
    from embodied_ros.kernels import reuse_freed_memory
    from embodied_ros.kernels.cpu import amx_gemm
    from embodied_ros.kernels.linear_bf16 import to_bf16_weight
    if not amx_gemm.tile_units_available():
        print("this CPU has no AMX bf16 tiles (or the kernel refused their state): nothing to measure")
        return 1
    reuse_freed_memory()
    blockings = [tuple(int(v) for v in b.split(",")) for b in args.blockings.split()]
    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in SHAPES:
        x = rng.standard_normal((m, k), dtype=np.float32)
        weight = to_bf16_weight(rng.standard_normal((n, k), dtype=np.float32))
        row = {"product": f"{m} x {k} -> {n}"}
        for blocking in blockings:
            amx_gemm.BLOCKING = blocking
            best = min(common.time_repeats(lambda: amx_gemm.matmul_amx_bf16(x, weight), 3).runs_ms)
            row[f"{blocking[0]} x {blocking[1]} TFLOP/s"] = 2 * m * k * n / best / 1e9
        rows.append(row)
        print(row, flush=True)
    body = (f"TFLOP/s of `matmul_amx_bf16` ({args.threads} threads) per pass size (tile steps x blocks of "
            "32 rows); the shipped BLOCKING is the column that is fastest across the rows.\n\n"
            + common.markdown_table(rows))
    print(body)
    if not args.no_write:
        common.write_section(common.REPO_ROOT / "BENCHMARKS.md", "amx_blocking", body, common.command_line(),
                             common.machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
