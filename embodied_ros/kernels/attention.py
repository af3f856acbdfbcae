"""Softmax attention, token-major: q [Tq, Hq, d], k and v [Tk, Hkv, d] -> [Tq, Hq, d].

Axes: Tq queries, Tk keys, Hq query heads, Hkv key/value heads (Hq a multiple of Hkv: query head h
reads kv head h // (Hq / Hkv), as transformers' repeat_kv), d head width. Scores are scaled by
d^-0.5 after the dot product (as the eager PyTorch attention does) and softmaxed in float32.

attention         full attention with an optional additive bias [Tq, Tk] (0 = allowed, a large
                  negative value = masked): SigLIP (no bias), the Gemma prefix (bidirectional mask
                  over valid tokens), Wan blocks.
cached_attention  a few new tokens reading [cached prefix ; themselves]: the action expert. The
                  cache keys may carry an additive per-key bias [N] (masked padding rows); every
                  new token reads every new token (no causal mask).

The numba kernels, on CPUs with AVX-512, run the whole attention on the register tiles of the
matrix product, a few query rows at a time in one parallel region (`vector_attention.py`).
Elsewhere they leave the two matrix products to BLAS (queries of all heads sharing a kv head form
one matrix, whose scores are computed a block of rows at a time into one reused buffer) and fuse
scaling, masking and the softmax's exponentials into one numba pass over each block, with the
vectorizable exp of `cpu/vector_math.py`; the 1/sum of each row scales the (shorter) rows of the
result. Large attention is split by rows over threads of its own, each calling single-threaded
BLAS (`cpu/blas.py: run_split`), unless BLAS's own threads ran the product before it.
"""

from __future__ import annotations

import functools
import threading

import numba
import numpy as np

from embodied_ros.kernels.cpu import vector_attention
from embodied_ros.kernels.cpu.blas import current_threads, product_threads, run_split, split_product
from embodied_ros.kernels.cpu.shares import share_count
from embodied_ros.kernels.cpu.jit import jit, vector_units_available
from embodied_ros.kernels.cpu.vector_attention import softmax_numerators
from embodied_ros.kernels.registry import kernel, reference

MASKED = np.float32(-2.3819763e38)  # the additive mask value of the reference (finite, not -inf)
VECTOR_ATTENTION = vector_units_available()  # vector_attention.py; elsewhere BLAS products


def _check_heads(op: str, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    if q.ndim != 3 or k.ndim != 3 or k.shape != v.shape or q.shape[2] != k.shape[2]:
        raise ValueError(f"{op}: expected q [Tq, Hq, d] and k, v [Tk, Hkv, d], got q {q.shape}, k {k.shape}, "
                         f"v {v.shape}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{op}: {q.shape[1]} query heads cannot share {k.shape[1]} key/value heads")


def _random_bias(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    bias = np.where(rng.random((rows, cols)) < 0.3, MASKED, np.float32(0.0)).astype(np.float32)
    bias[:, 0] = 0.0  # every query reads at least one key
    return bias


def _examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for tq, tk, hq, hkv, d in ((1, 1, 1, 1, 4), (7, 7, 4, 4, 12), (13, 29, 8, 1, 16), (30, 30, 6, 2, 72),
                              (96, 96, 8, 2, 64),  # on every thread where the vector attention runs
                              (256, 256, 4, 1, 64), (200, 200, 6, 3, 48)):  # split by rows elsewhere
        q = rng.standard_normal((tq, hq, d), dtype=np.float32) * 2.0
        k = rng.standard_normal((tk, hkv, d), dtype=np.float32) * 2.0
        v = rng.standard_normal((tk, hkv, d), dtype=np.float32)
        cases.append((q, k, v))
        cases.append((q, k, v, _random_bias(rng, tq, tk)))
    return cases


def _cached_examples(rng: np.random.Generator) -> list[tuple]:
    cases = []
    for tq, n, hq, hkv, d in ((1, 1, 1, 1, 4), (10, 56, 8, 1, 16), (50, 223, 8, 1, 48), (5, 17, 4, 2, 32)):
        q = rng.standard_normal((tq, hq, d), dtype=np.float32) * 2.0
        k_cache, v_cache = (rng.standard_normal((n, hkv, d), dtype=np.float32) for _ in range(2))
        k_new, v_new = (rng.standard_normal((tq, hkv, d), dtype=np.float32) for _ in range(2))
        cache_bias = _random_bias(rng, 1, n)[0]
        cases.append((q, k_cache, v_cache, None, k_new, v_new))
        cases.append((q, k_cache, v_cache, cache_bias, k_new, v_new))
    for array in cases[-1][1:3]:  # a sealed prefix cache is read-only (a type of its own to compile)
        array.flags.writeable = False
    return cases


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


@reference("attention", examples=_examples, rtol=1e-4, atol=2e-5)
def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    _check_heads("attention", q, k, v)
    group = q.shape[1] // k.shape[1]
    q_heads = q.transpose(1, 0, 2)  # [Hq, Tq, d]
    k_heads = np.repeat(k.transpose(1, 0, 2), group, axis=0)  # [Hq, Tk, d]
    v_heads = np.repeat(v.transpose(1, 0, 2), group, axis=0)
    split_product(q.shape[0] * q.shape[2] * k.shape[0])  # per head
    scores = (q_heads @ k_heads.transpose(0, 2, 1)) * np.float32(q.shape[2] ** -0.5)  # [Hq, Tq, Tk]
    if bias is not None:
        scores = scores + bias
    return (softmax(scores) @ v_heads).transpose(1, 0, 2)


@reference("cached_attention", examples=_cached_examples, rtol=1e-4, atol=2e-5)
def cached_attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, cache_bias: np.ndarray | None,
                     k_new: np.ndarray, v_new: np.ndarray) -> np.ndarray:
    # q, k_new, v_new: [T, H*, d]; k_cache, v_cache: [N, Hkv, d]; cache_bias: [N] or None -> [T, Hq, d]
    keys = np.concatenate([k_cache, k_new])
    values = np.concatenate([v_cache, v_new])
    bias = None
    if cache_bias is not None:
        row = np.concatenate([cache_bias, np.zeros(k_new.shape[0], np.float32)])
        bias = np.broadcast_to(row, (q.shape[0], row.size))
    return attention(q, keys, values, bias)


_FAST = {"reassoc", "contract"}


@jit(fastmath=_FAST)
def _softmax_numerators(scores, scale, bias, first_row, group, key_bias, inv_totals):  # pragma: no cover
    # scores: [R, Tk] raw dot products of rows first_row.. -> softmax numerators in place, 1 / sum of
    # each row into inv_totals [R]; row r reads bias[(first_row + r) // group] ([Tq, Tk], or [0, 0])
    for r in range(scores.shape[0]):
        inv_totals[r] = softmax_numerators(scores[r], scale, bias, (first_row + r) // group, key_bias)


_NO_BIAS_2D = np.zeros((0, 0), np.float32)
# Scores are computed a block of rows of one kv head at a time, at most this many floats (16 MiB,
# one reused buffer): SmolVLM's vision attention (1024 tokens, 12 heads) took 39 ms per camera as
# one [12, 1024, 1024] score array (48 MiB, mapped anew each call) and 33 ms a head at a time; the
# Gemma prefix's one kv head (816 tokens x 8 heads) the same in one block or two (AMD EPYC Zen 3, 2
# threads, alternating).
_SCORE_BLOCK = 1 << 22
_local = threading.local()
_NO_BIAS_1D = np.zeros(0, np.float32)


def _score_buffer(size: int) -> np.ndarray:
    """Room for one block of scores, reused by the calling thread.

    A fresh array of a few hundred KiB is mapped anew by malloc on each call, and on this kind of
    machine the first touch of those pages from BLAS's worker thread made the scores product of
    the action expert (400 x 273 x 48) take 160 us instead of 45.
    """
    buffer = getattr(_local, "scores", None)
    if buffer is None or buffer.size < size:
        buffer = _local.scores = np.empty(size, np.float32)
    return buffer[:size]


def _grouped(q, keys, values, bias, key_bias):
    """Attention with the query heads of each kv head stacked into one matrix product.

    Rows of kv head h are (query i, head j of its group) in that order, so one GEMM per block of
    rows computes their scores; with a single kv head (Gemma, the pi0.5 expert) every query head is
    a row of the same product, whose normalization is applied to the [rows, d] result.

    Where the last product ran on BLAS's own threads, whose worker still spins, the products run on
    them; otherwise the rows of all heads go in shares to threads of their own (`run_split`):
    after products of numba kernels (int16, int8) SmolVLM's vision attention took 108-117 ms as two
    shares against 129-147 ms on OpenBLAS's two threads (3 cameras, Zen 3), while right after a
    BLAS product it took 150 ms as shares against 100 ms on BLAS's threads.
    """
    n_queries, n_heads, width = q.shape
    n_keys, n_kv = keys.shape[0], keys.shape[1]
    group = n_heads // n_kv
    rows = n_queries * group
    q_groups = q.reshape(n_queries, n_kv, group, width).transpose(1, 0, 2, 3).reshape(n_kv, rows, width)
    out = np.empty((n_kv, rows, width), np.float32)
    step = max(1, min(rows, _SCORE_BLOCK // n_keys))
    scale = np.float32(width ** -0.5)

    def share(start: int, stop: int) -> None:  # rows start..stop of all heads, head after head
        scores_block = _score_buffer(step * n_keys)
        inv_totals = np.empty(step, np.float32)
        while start < stop:
            h, first = divmod(start, rows)
            last = min(rows, first + step, first + stop - start)
            scores = np.matmul(q_groups[h, first:last], keys[:, h].T,
                               out=scores_block[:(last - first) * n_keys].reshape(last - first, n_keys))
            _softmax_numerators(scores, scale, bias, first, group, key_bias, inv_totals)
            block = np.matmul(scores, values[:, h], out=out[h, first:last])
            block *= inv_totals[:last - first, None]
            start += last - first

    total = n_kv * rows
    macs = 2 * total * width * n_keys  # scores and weighted sums
    threads = product_threads(macs)
    if threads > 1 and current_threads() > 1:  # BLAS's own threads ran the last product and are awake
        split_product(step * width * n_keys)
        share(0, total)
    else:
        shares = share_count(threads, total, macs)
        run_split([functools.partial(share, total * i // shares, total * (i + 1) // shares) for i in range(shares)],
                  threads)
    return out.reshape(n_kv, n_queries, group, width).transpose(1, 0, 2, 3).reshape(n_queries, n_heads, width)


@kernel("attention", "numba")
def attention_numba(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    _check_heads("attention", q, k, v)
    if bias is None:
        bias = _NO_BIAS_2D
    else:
        bias = np.ascontiguousarray(np.broadcast_to(bias, (q.shape[0], k.shape[0])), dtype=np.float32)
    if VECTOR_ATTENTION:
        empty = k[:0]
        return vector_attention.attend(_float32(q), (_float32(k), empty), (_float32(v), empty), bias, _NO_BIAS_1D,
                                        numba.get_num_threads())
    return _grouped(q, k, v, bias, _NO_BIAS_1D)


@kernel("cached_attention", "numba")
def cached_attention_numba(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, cache_bias: np.ndarray | None,
                           k_new: np.ndarray, v_new: np.ndarray) -> np.ndarray:
    _check_heads("cached_attention", q, k_new, v_new)
    _check_heads("cached_attention", q, k_cache, v_cache)
    key_bias = _NO_BIAS_1D
    if cache_bias is not None:
        key_bias = np.concatenate([cache_bias, np.zeros(k_new.shape[0], np.float32)]).astype(np.float32)
    if VECTOR_ATTENTION:
        return vector_attention.attend(_float32(q), (_float32(k_cache), _float32(k_new)),
                                        (_float32(v_cache), _float32(v_new)), _NO_BIAS_2D, key_bias,
                                        numba.get_num_threads())
    return _grouped(q, np.concatenate([k_cache, k_new]), np.concatenate([v_cache, v_new]), _NO_BIAS_2D, key_bias)


def _float32(x: np.ndarray) -> np.ndarray:
    """The array itself when float32 with contiguous features (rows may be strided), else a copy."""
    if x.dtype == np.float32 and x.strides[-1] == 4:
        return x
    return np.ascontiguousarray(x, dtype=np.float32)
