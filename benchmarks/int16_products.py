"""BF16 weights on an AVX2 CPU without AVX-512: int16 products against float32 ones through OpenBLAS.

    python benchmarks/int16_products.py [--repeats 5] [--section NAME]

For each product shape of a released-size SmolVLA (vision tower: 1024 tokens a camera, three
cameras; SmolLM2 prefix and expert: 960 and 720 wide), at several row counts, one process runs the
int16 product (kernels/cpu/int16_gemm.py: x quantized per block, `vpmaddwd` or `vpdpwssd`), the
runtime's only path for BF16 weights on such CPUs, and OpenBLAS's float32 product on the same
values (what an F32 bundle runs), alternating, every thread of the process; the medians are
compared. Each run starts after a pause, so that OpenBLAS's worker, spinning after its last
product, has let go of its core. Products taken apart from a model: whole chunks, where BLAS and
the int16 products alternate, are what benchmarks/path_pairs.py compares.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

SHAPES = ((768, 3072), (3072, 768), (768, 2304), (960, 2560), (720, 2048))  # (in, out)
ROWS = (50, 128, 256, 512, 1024, 3072)


def measure(repeats: int) -> list[dict]:
    import numba

    from embodied_ros.kernels.cpu import int16_gemm
    from embodied_ros.kernels.cpu.blas import limit_threads, product

    if int16_gemm.INT16_UNIT is None:
        raise SystemExit("this CPU runs no int16 products (they are for AVX2 CPUs without AVX-512)")
    limit_threads(numba.get_num_threads())
    rng = np.random.default_rng(0)
    rows_out = []
    for n_in, n_out in SHAPES:
        weight = int16_gemm.pack_i16(rng.standard_normal((n_out, n_in), dtype=np.float32))
        values_t = np.ascontiguousarray(weight.dense()).T
        for n in ROWS:
            x = rng.standard_normal((n, n_in), dtype=np.float32)
            int16_ms, float32_ms = [], []
            for _ in range(repeats + 1):
                for runs, run in ((int16_ms, lambda: int16_gemm.matmul_i16(x, weight)),
                                  (float32_ms, lambda: product(x, values_t))):
                    time.sleep(0.15)
                    start = time.perf_counter()
                    run()
                    runs.append(1e3 * (time.perf_counter() - start))
            a, b = float(np.median(int16_ms[1:])), float(np.median(float32_ms[1:]))
            rows_out.append({"rows x in -> out": f"{n} x {n_in} -> {n_out}", "int16 ms": a,
                             "int16 multiply-adds per ns": n * n_in * n_out / a / 1e6,
                             "float32 OpenBLAS ms": b, "float32 / int16": b / a})
    return rows_out


def main(argv=None) -> int:
    import common
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each side per shape (default 5)")
    parser.add_argument("--section", default=None, help="write the table as this BENCHMARKS.md section")
    args = parser.parse_args(argv)
    from embodied_ros.kernels.cpu import int16_gemm
    body = (f"Unit: {int16_gemm.INT16_UNIT}. Medians of {args.repeats} alternating runs, each after a pause.\n\n"
            + common.markdown_table(measure(args.repeats)))
    print(body)
    if args.section:
        common.write_section(Path(__file__).resolve().parent.parent / "BENCHMARKS.md", args.section, body,
                             command=f"python benchmarks/int16_products.py --section {args.section}",
                             machine=common.machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
