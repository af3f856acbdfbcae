"""Linear layers with bfloat16 products: y = x @ W^T + b, W a `Bf16Weight`, sums in float32.

The reference rounds x to bf16 (nearest even), as the kernels do, and multiplies the bf16 values
in float64. The numba kernel runs where the CPU multiplies bf16 fastest (`BF16_UNIT`, chosen once at
start-up): the AMX tiles (`tdpbf16ps`, kernels/cpu/amx_gemm.py) on Intel CPUs that have them, else
AVX512-BF16's `vdpbf16ps` (kernels/cpu/bf16_gemm.py), else the same math through numpy. Both units
read the one packed weight. `ks.linear` sends every Bf16Weight here; `pack_for_products` makes them
from BF16 weights where the CPU has either unit (`BF16_PRODUCTS`).

On the Intel Xeon of the development machines `vdpbf16ps` is no faster than float32 FMAs (one
port), while the tiles multiply 16 x 16 x 32 bf16 values per instruction: a 968 x 2048 -> 2048
product took 51 ms on `vdpbf16ps` and 4.5 ms on the tiles (2 cores). On AMD EPYC `vdpbf16ps` is
2.5x faster than float32 (BENCHMARKS.md, pi05_matrix_units).
"""

from __future__ import annotations

import os

import numpy as np

from embodied_ros.kernels.cpu.amx_gemm import matmul_amx_bf16, tile_units_available
from embodied_ros.kernels.cpu.bf16_gemm import (Bf16Weight, bf16_bits, bf16_products_available, matmul_bf16,  # noqa: F401
                                              pack_bf16)
from embodied_ros.kernels.cpu.jit import vector_units_available
from embodied_ros.kernels.registry import kernel, reference


def _bf16_unit() -> str | None:
    """"amx", "avx512_bf16" or None (float32 products). EMBODIED_ROS_BF16_PRODUCTS=0 keeps float32
    products (16-bit weights decoded as packed); EMBODIED_ROS_AMX=0 keeps the tiles unused."""
    if os.environ.get("EMBODIED_ROS_BF16_PRODUCTS", "1") == "0" or not vector_units_available():
        return None
    if os.environ.get("EMBODIED_ROS_AMX", "1") != "0" and tile_units_available():
        return "amx"
    return "avx512_bf16" if bf16_products_available() else None


BF16_UNIT = _bf16_unit()
BF16_PRODUCTS = BF16_UNIT is not None


def to_bf16_weight(values: np.ndarray) -> Bf16Weight:
    """[out, in] float array -> Bf16Weight, rounded to nearest even."""
    return pack_bf16(bf16_bits(values))


def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for rows, n_in, n_out in ((1, 7, 5), (13, 33, 40), (50, 1024, 96), (23, 600, 64), (64, 512, 1024), (130, 512, 64)):
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        w = to_bf16_weight(rng.standard_normal((n_out, n_in), dtype=np.float32))
        cases.append((x, w, rng.standard_normal(n_out, dtype=np.float32)))
        cases.append((x, w, None))
    cases.append((rng.standard_normal((2, 3, 64), dtype=np.float32),
                  to_bf16_weight(rng.standard_normal((32, 64), dtype=np.float32)), None))
    return cases


@reference("linear_bf16", examples=_examples, rtol=1e-4, atol=1e-4)
def linear_bf16(x: np.ndarray, weight: Bf16Weight, bias: np.ndarray | None = None) -> np.ndarray:
    # x: [..., in] -> [..., out]
    rounded = (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
    y = rounded.astype(np.float64) @ weight.dense().T.astype(np.float64)
    if bias is not None:
        y += bias
    return y.astype(np.float32)


@kernel("linear_bf16", "numba")
def linear_bf16_numba(x: np.ndarray, weight: Bf16Weight, bias: np.ndarray | None = None) -> np.ndarray:
    if not BF16_PRODUCTS:
        return linear_bf16(x, weight, bias)
    y = (matmul_amx_bf16 if BF16_UNIT == "amx" else matmul_bf16)(x.reshape(-1, weight.shape[1]), weight, bias)
    return y.reshape(*x.shape[:-1], weight.shape[0])
