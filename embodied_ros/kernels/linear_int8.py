"""Linear layers with int8 dot products for Q8_0 weights: y = x @ W^T + b, W a `Q8Weight`.

x is quantized per 32-wide block as llama.cpp's CPU backend does for Q8_0 (kernels/cpu/int8_gemm.py);
each block's int8 sum is exact, then scaled by d_w * d_x and summed in float32. The reference
quantizes x the same way in numpy and sums in float64; the numba kernel runs on the AMX tiles
(`tdpbssd`, kernels/cpu/amx_q8.py) where the CPU has them (`INT8_TILES`), else `vpdpbusd` where it has
AVX512-VNNI or AVX-VNNI (256-bit, on AVX2 CPUs without AVX-512), `vpmaddubsw` where it has AVX2 and
neither (`INT8_PRODUCTS`), else the reference. `pack_for_products` makes Q8Weights from Q8_0 weights where the CPU has either.
"""

from __future__ import annotations

import os

import numpy as np

from embodied_ros.kernels.cpu.amx_q8 import TILES_MIN_ROWS, int8_tiles_available, matmul_amx_q8
from embodied_ros.kernels.cpu.int8_gemm import (INT8_UNIT, Q8Weight, matmul_q8, pack_q8_0,  # noqa: F401
                                             quantize_activations)
from embodied_ros.kernels.quant import random_quant_tensor
from embodied_ros.kernels.registry import kernel, reference

# EMBODIED_ROS_INT8_PRODUCTS=0 keeps today's products (Q8_0 decoded to float32 as it is packed)
INT8_PRODUCTS = INT8_UNIT is not None and os.environ.get("EMBODIED_ROS_INT8_PRODUCTS", "1") != "0"
# EMBODIED_ROS_AMX=0 keeps them off the AMX tiles (on AVX512-VNNI), as it does BF16's
INT8_TILES = (INT8_PRODUCTS and INT8_UNIT == "avx512_vnni" and os.environ.get("EMBODIED_ROS_AMX", "1") != "0"
              and int8_tiles_available())


def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for rows, n_in, n_out in ((1, 32, 5), (13, 64, 40), (50, 1024, 96), (7, 608, 64), (64, 512, 1024), (130, 512, 64)):
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        stored = random_quant_tensor(rng, "q8_0", (n_out, n_in))
        w = pack_q8_0(stored.data, stored.shape)
        cases.append((x, w, rng.standard_normal(n_out, dtype=np.float32)))
        cases.append((x, w, None))
    x = np.zeros((3, 64), np.float32)  # an all-zero block: scale 0, no division by it
    x[1, 40:] = 1.0
    stored = random_quant_tensor(rng, "q8_0", (32, 64))
    cases.append((x.reshape(1, 3, 64), pack_q8_0(stored.data, stored.shape), None))
    return cases


@reference("linear_int8", examples=_examples, rtol=1e-4, atol=1e-4)
def linear_int8(x: np.ndarray, weight: Q8Weight, bias: np.ndarray | None = None) -> np.ndarray:
    # x: [..., in] -> [..., out]
    n_out, n_in = weight.shape
    rows = x.reshape(-1, n_in)
    q_x, d_x = quantize_activations(rows)
    q_w, d_w = weight.blocks()
    blocks = np.einsum("nbi,obi->nob", q_x.reshape(rows.shape[0], -1, 32).astype(np.int32),
                       q_w.reshape(n_out, -1, 32).astype(np.int32))  # exact int sums per block
    y = np.einsum("nob,nb,ob->no", blocks.astype(np.float64), d_x.astype(np.float64), d_w.astype(np.float64))
    if bias is not None:
        y += bias
    return y.astype(np.float32).reshape(*x.shape[:-1], n_out)


@kernel("linear_int8", "numba")
def linear_int8_numba(x: np.ndarray, weight: Q8Weight, bias: np.ndarray | None = None) -> np.ndarray:
    if not INT8_PRODUCTS:
        return linear_int8(x, weight, bias)
    rows = x.reshape(-1, weight.shape[1])
    y = (matmul_amx_q8 if INT8_TILES and rows.shape[0] >= TILES_MIN_ROWS else matmul_q8)(rows, weight, bias)
    return y.reshape(*x.shape[:-1], weight.shape[0])
