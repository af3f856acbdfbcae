"""Linear layers with int16 products for 16-bit weights on AVX2 CPUs: y = x @ W^T + b, W an `I16Weight`.

W is quantized per output feature and x per 128-wide block, both to 13 bits of magnitude
(kernels/cpu/int16_gemm.py); each block's integer sum is exact, scaled by d_x, and y by d_w. The
reference quantizes x the same way and sums in float64. The numba kernel runs on AVX-VNNI's
`vpdpwssd` or AVX2's `vpmaddwd` (`INT16_UNIT`), else the reference. `pack_for_products` makes
I16Weights from BF16 weights where the CPU has either and no AVX-512 (`INT16_PRODUCTS`): there,
BF16 weights were decoded to float32 for BLAS, at float32's speed.
"""

from __future__ import annotations

import os

import numpy as np

from embodied_ros.kernels.cpu.int16_gemm import (BLOCK, INT16_UNIT, I16Weight, matmul_i16, pack_i16,  # noqa: F401
                                              quantize_activations)
from embodied_ros.kernels.registry import kernel, reference

# EMBODIED_ROS_INT16_PRODUCTS=0 keeps BF16 weights decoded to float32 for BLAS on AVX2 CPUs
INT16_PRODUCTS = INT16_UNIT is not None and os.environ.get("EMBODIED_ROS_INT16_PRODUCTS", "1") != "0"


def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for rows, n_in, n_out in ((1, 32, 5), (13, 45, 40), (50, 720, 96), (7, 608, 64), (64, 512, 1024), (130, 96, 64)):
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        w = pack_i16(rng.standard_normal((n_out, n_in), dtype=np.float32))
        cases.append((x, w, rng.standard_normal(n_out, dtype=np.float32)))
        cases.append((x, w, None))
    x = np.zeros((3, 64), np.float32)  # an all-zero block (scale 0, no division by it) and an outlier
    x[1, 40:] = 1.0
    x[2, 3] = 1e4
    cases.append((x.reshape(1, 3, 64), pack_i16(rng.standard_normal((32, 64), dtype=np.float32)), None))
    return cases


@reference("linear_int16", examples=_examples, rtol=1e-4, atol=1e-4)
def linear_int16(x: np.ndarray, weight: I16Weight, bias: np.ndarray | None = None) -> np.ndarray:
    # x: [..., in] -> [..., out]
    n_out, n_in = weight.shape
    rows = x.reshape(-1, n_in)
    q_x, d_x = quantize_activations(rows)
    q_w = np.zeros((n_out, q_x.shape[1]), np.int64)
    q_w[:, :n_in] = weight.integers()
    blocks = np.einsum("nbi,obi->nob", q_x.reshape(rows.shape[0], -1, BLOCK).astype(np.int64),
                       q_w.reshape(n_out, -1, BLOCK))  # exact integer sums per block
    y = np.einsum("nob,nb->no", blocks.astype(np.float64), d_x.astype(np.float64))
    y *= weight.scales[:n_out].astype(np.float64)
    if bias is not None:
        y += bias
    return y.astype(np.float32).reshape(*x.shape[:-1], n_out)


@kernel("linear_int16", "numba")
def linear_int16_numba(x: np.ndarray, weight: I16Weight, bias: np.ndarray | None = None) -> np.ndarray:
    if not INT16_PRODUCTS:
        return linear_int16(x, weight, bias)
    y = matmul_i16(x.reshape(-1, weight.shape[1]), weight, bias)
    return y.reshape(*x.shape[:-1], weight.shape[0])
