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

The numba kernel works per (query, head) row, with keys transposed to [Hkv, d, Tk] so the score
loop runs along contiguous keys and vectorizes; exp is the vectorizable one of `_vector_math`.
"""

from __future__ import annotations

import numba
import numpy as np

from embodied_ros.kernels._jit import jit
from embodied_ros.kernels._vector_math import exp_f32
from embodied_ros.kernels.registry import kernel, reference

MASKED = np.float32(-2.3819763e38)  # the additive mask value of the reference (finite, not -inf)


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
    for tq, tk, hq, hkv, d in ((1, 1, 1, 1, 4), (7, 7, 4, 4, 12), (13, 29, 8, 1, 16), (30, 30, 6, 2, 72)):
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
    return cases


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@reference("attention", examples=_examples, rtol=1e-4, atol=2e-5)
def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    _check_heads("attention", q, k, v)
    group = q.shape[1] // k.shape[1]
    q_heads = q.transpose(1, 0, 2)  # [Hq, Tq, d]
    k_heads = np.repeat(k.transpose(1, 0, 2), group, axis=0)  # [Hq, Tk, d]
    v_heads = np.repeat(v.transpose(1, 0, 2), group, axis=0)
    scores = (q_heads @ k_heads.transpose(0, 2, 1)) * np.float32(q.shape[2] ** -0.5)  # [Hq, Tq, Tk]
    if bias is not None:
        scores = scores + bias
    return (_softmax(scores) @ v_heads).transpose(1, 0, 2)


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


@jit(parallel=True, fastmath={"reassoc", "contract"})
def _attend(q, k_t, v, bias, key_bias, out):  # pragma: no cover - compiled
    # q: [Tq, Hq, d], k_t: [Hkv, d, Tk], v: [Tk, Hkv, d], bias: [Tq, Tk] or [0, 0],
    # key_bias: [Tk] or [0] -> out: [Tq, Hq, d]
    n_queries, n_heads, width = q.shape
    n_keys = k_t.shape[2]
    group = n_heads // k_t.shape[0]
    scale = np.float32(width ** -0.5)
    for row in numba.prange(n_queries * n_heads):
        i = row // n_heads
        h = row % n_heads
        g = h // group
        scores = np.zeros(n_keys, np.float32)
        for c in range(width):
            qc = q[i, h, c]
            for j in range(n_keys):
                scores[j] += qc * k_t[g, c, j]
        top = np.float32(-np.inf)
        for j in range(n_keys):
            s = scores[j] * scale
            if bias.shape[0]:
                s += bias[i, j]
            if key_bias.shape[0]:
                s += key_bias[j]
            scores[j] = s
            top = max(top, s)
        total = np.float32(0.0)
        for j in range(n_keys):
            e = exp_f32(scores[j] - top)
            scores[j] = e
            total += e
        acc = np.zeros(width, np.float32)
        for j in range(n_keys):
            p = scores[j]
            for c in range(width):
                acc[c] += p * v[j, g, c]
        inv = np.float32(1.0) / total
        for c in range(width):
            out[i, h, c] = acc[c] * inv


_NO_BIAS_2D = np.zeros((0, 0), np.float32)
_NO_BIAS_1D = np.zeros(0, np.float32)


def _run(q, keys, values, bias, key_bias):
    q = np.ascontiguousarray(q, dtype=np.float32)
    k_t = np.ascontiguousarray(keys.transpose(1, 2, 0), dtype=np.float32)  # [Hkv, d, Tk]
    values = np.ascontiguousarray(values, dtype=np.float32)
    out = np.empty(q.shape, np.float32)
    _attend(q, k_t, values, bias, key_bias, out)
    return out


@kernel("attention", "numba")
def attention_numba(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    _check_heads("attention", q, k, v)
    bias = _NO_BIAS_2D if bias is None else np.ascontiguousarray(np.broadcast_to(bias, (q.shape[0], k.shape[0])),
                                                                 dtype=np.float32)
    return _run(q, k, v, bias, _NO_BIAS_1D)


@kernel("cached_attention", "numba")
def cached_attention_numba(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, cache_bias: np.ndarray | None,
                           k_new: np.ndarray, v_new: np.ndarray) -> np.ndarray:
    keys = np.concatenate([k_cache, k_new])
    values = np.concatenate([v_cache, v_new])
    _check_heads("cached_attention", q, keys, values)
    key_bias = _NO_BIAS_1D
    if cache_bias is not None:
        key_bias = np.concatenate([cache_bias, np.zeros(k_new.shape[0], np.float32)]).astype(np.float32)
    return _run(q, keys, values, _NO_BIAS_2D, key_bias)
