"""Softmax attention with bf16 products, for layers whose weights are stored in bf16 (as PyTorch runs
a bfloat16 model): q, k and v rounded to bf16 (nearest even), scores summed in float32 and softmaxed
in float32, the softmax's numerators rounded to bf16 for the product with v, each row's sum kept in
float32. Shapes and masking as `attention` (attention.py).

The numba kernel stacks the query heads of each kv head into one matrix, as attention.py's BLAS
path does, and runs both products on the AMX tiles (`amx_product`: the keys, then the transposed
values, packed per call as the weight of a product; the scores stay in the product's padded
buffer). Without tiles the same rounded values multiply in float32 (a product of two bf16 values
is exact in float32) through BLAS: the same math, for machines where layers are not sent here.
`BF16_ATTENTION` is where they are: only where the tiles make it faster than float32 attention.
"""

from __future__ import annotations

import numba
import numpy as np

from embodied_ros.kernels.attention import _check_heads, _examples
from embodied_ros.kernels.cpu.amx_gemm import amx_product
from embodied_ros.kernels.cpu.bf16_gemm import Bf16Weight, bf16_bits, pack_bf16
from embodied_ros.kernels.cpu.jit import jit
from embodied_ros.kernels.cpu.vector_attention import softmax_numerators
from embodied_ros.kernels.linear_bf16 import BF16_UNIT
from embodied_ros.kernels.registry import kernel, reference

BF16_ATTENTION = BF16_UNIT == "amx"
_NO_KEY_BIAS = np.zeros(0, np.float32)
_NO_BIAS = np.zeros((0, 0), np.float32)


def to_bf16_values(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bf16 (even on ties), as float32."""
    return (bf16_bits(x).astype(np.uint32) << np.uint32(16)).view(np.float32).reshape(np.shape(x))


@reference("attention_bf16", examples=_examples, rtol=2e-3, atol=2e-3)
def attention_bf16(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    _check_heads("attention_bf16", q, k, v)
    group = q.shape[1] // k.shape[1]
    q_heads = to_bf16_values(q).transpose(1, 0, 2).astype(np.float64)  # [Hq, Tq, d]
    k_heads = np.repeat(to_bf16_values(k).transpose(1, 0, 2), group, axis=0).astype(np.float64)
    v_heads = np.repeat(to_bf16_values(v).transpose(1, 0, 2), group, axis=0).astype(np.float64)
    scores = ((q_heads @ k_heads.transpose(0, 2, 1)) * q.shape[2] ** -0.5).astype(np.float32)  # [Hq, Tq, Tk]
    if bias is not None:
        scores = scores + bias
    numerators = np.exp(scores - scores.max(axis=-1, keepdims=True))
    totals = numerators.astype(np.float64).sum(axis=-1, keepdims=True)
    out = (to_bf16_values(numerators).astype(np.float64) @ v_heads) / totals
    return out.transpose(1, 0, 2).astype(np.float32)


@jit(parallel=True, fastmath={"reassoc", "contract"})
def _numerators(scores, n_keys, scale, bias, group, inv_totals):  # pragma: no cover - compiled
    """Rows of raw scores (the first n_keys columns) -> softmax numerators in place, the columns past
    n_keys zeroed; row r (query r // group) reads bias row r // group ([Tq, Tk], or [0, 0])."""
    for r in numba.prange(inv_totals.shape[0]):
        inv_totals[r] = softmax_numerators(scores[r, :n_keys], scale, bias, r // group, _NO_KEY_BIAS)
        scores[r, n_keys:] = 0


def _product(x: np.ndarray, weight: Bf16Weight | np.ndarray) -> np.ndarray:
    """x @ weight^T: on the tiles for a Bf16Weight (the padded product), else rounded values in float32."""
    if isinstance(weight, Bf16Weight):
        return amx_product(x, weight)
    return to_bf16_values(x) @ weight.T


def _operand(values: np.ndarray) -> Bf16Weight | np.ndarray:
    """[out, in] float32 -> what `_product` multiplies by: packed for the tiles where they run."""
    return pack_bf16(bf16_bits(values)) if BF16_ATTENTION else to_bf16_values(values)


@kernel("attention_bf16", "numba")
def attention_bf16_numba(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    _check_heads("attention_bf16", q, k, v)
    n_queries, n_heads, width = q.shape
    n_keys, n_kv = k.shape[0], k.shape[1]
    group = n_heads // n_kv
    bias = _NO_BIAS if bias is None else np.ascontiguousarray(np.broadcast_to(bias, (n_queries, n_keys)), np.float32)
    q_groups = np.ascontiguousarray(q.reshape(n_queries, n_kv, group, width).transpose(1, 0, 2, 3),
                                    np.float32).reshape(n_kv, n_queries * group, width)
    rows = n_queries * group
    out = np.empty((n_kv, rows, width), np.float32)
    for g in range(n_kv):
        scores = _product(q_groups[g], _operand(np.ascontiguousarray(k[:, g], np.float32)))
        inv_totals = np.empty(rows, np.float32)
        _numerators(scores, n_keys, np.float32(width ** -0.5), bias, group, inv_totals)
        values_t = np.ascontiguousarray(np.asarray(v[:, g], np.float32).T)  # [d, Tk]
        attended = _product(np.ascontiguousarray(scores[:rows]), _operand(values_t))
        out[g] = attended[:rows, :width] * inv_totals[:, None]
    return out.reshape(n_kv, n_queries, group, width).transpose(1, 0, 2, 3).reshape(n_queries, n_heads, width)


def attention_for(ks, weight) -> callable:
    """The attention of a layer whose projection weight is `weight`: bf16 products where the layer is
    stored in bf16 and the tiles make them faster, else float32 attention."""
    return ks.attention_bf16 if BF16_ATTENTION and isinstance(weight, Bf16Weight) else ks.attention


__all__ = ["BF16_ATTENTION", "attention_bf16", "attention_for", "to_bf16_values"]
