"""Softmax attention on the GPU: `attention` and `cached_attention` (see attention.py for the axes,
the grouped K/V heads and the additive masks).

One block per (query, query head). The block walks the keys in tiles of THREADS: each thread scores
one key of the tile (q is staged in shared memory), the tile's maximum and sum update a running
softmax (online softmax: earlier partial sums are rescaled by exp(old max - new max)), and each thread
accumulates the weighted values of its own head channels. No score matrix is materialized, so the
number of keys is unbounded. `cached_attention` reads the cached prefix and the new tokens in place
(keys [0, N) from the cache, [N, N + T) from the new rows): the cache is never copied or concatenated.
"""

from __future__ import annotations

import math

import numpy as np

from embodied_ros.kernels.cuda.compiler import cuda, cuda_kernel
from embodied_ros.kernels.cuda.device import block_max, block_sum
from embodied_ros.kernels.cuda.runtime import DeviceTensor, gpu, nothing, on_device, returned
from embodied_ros.kernels.registry import kernel

THREADS = 128  # keys per tile; head channels are split over the same threads
MAX_HEAD_DIM = 256
_SLOTS = MAX_HEAD_DIM // THREADS  # head channels per thread
_NEG_INF = np.float32(-np.inf)
_HEADS = "float32[:, :, ::1]"


@cuda_kernel(f"void({_HEADS}, {_HEADS}, {_HEADS}, {_HEADS}, {_HEADS}, float32[:, ::1], float32[::1], float32, "
             f"{_HEADS})", threads=THREADS)
def attend(q, k_cache, v_cache, k_new, v_new, bias, key_bias, scale, out):  # pragma: no cover - device code
    # q, out: [Tq, Hq, d]; k_*, v_*: [N | T, Hkv, d]; bias: [Tq, N + T] or [0, 0];
    # key_bias: [N] (cache keys only) or [0]; grid (Tq, Hq), block THREADS
    query = cuda.shared.array(MAX_HEAD_DIM, np.float32)
    weights = cuda.shared.array(THREADS, np.float32)
    buffer = cuda.shared.array(THREADS, np.float32)
    acc = cuda.local.array(_SLOTS, np.float32)
    i = cuda.blockIdx.x
    h = cuda.blockIdx.y
    t = cuda.threadIdx.x
    width = q.shape[2]
    n_cached = k_cache.shape[0]
    n_keys = n_cached + k_new.shape[0]
    g = h // (q.shape[1] // k_cache.shape[1])
    for c in range(t, width, THREADS):
        query[c] = q[i, h, c]
    for s in range(_SLOTS):
        acc[s] = np.float32(0.0)
    cuda.syncthreads()
    running_max = _NEG_INF
    running_sum = np.float32(0.0)
    for start in range(0, n_keys, THREADS):
        j = start + t
        score = _NEG_INF
        if j < n_keys:
            dot = np.float32(0.0)
            if j < n_cached:
                for c in range(width):
                    dot += query[c] * k_cache[j, g, c]
            else:
                for c in range(width):
                    dot += query[c] * k_new[j - n_cached, g, c]
            score = dot * scale
            if bias.shape[0] != 0:
                score += bias[i, j]
            if key_bias.shape[0] != 0 and j < n_cached:
                score += key_bias[j]
        # block_max's barriers also order this tile's `weights` writes after the last tile's reads
        tile_max = block_max(buffer, score)
        new_max = tile_max if tile_max > running_max else running_max
        weight = np.float32(math.exp(score - new_max)) if j < n_keys else np.float32(0.0)
        weights[t] = weight
        correction = np.float32(math.exp(running_max - new_max))
        running_sum = running_sum * correction + block_sum(buffer, weight)
        running_max = new_max
        count = n_keys - start if n_keys - start < THREADS else THREADS
        for s in range(_SLOTS):
            c = t + s * THREADS
            if c < width:
                total = acc[s] * correction
                for jj in range(count):
                    key = start + jj
                    if key < n_cached:
                        total += weights[jj] * v_cache[key, g, c]
                    else:
                        total += weights[jj] * v_new[key - n_cached, g, c]
                acc[s] = total
    inverse = np.float32(1.0) / running_sum
    for s in range(_SLOTS):
        c = t + s * THREADS
        if c < width:
            out[i, h, c] = acc[s] * inverse


def _check(op: str, q, keys: list, values: list) -> None:
    for k, v in zip(keys, values):
        if len(q.shape) != 3 or len(k.shape) != 3 or tuple(k.shape) != tuple(v.shape) or q.shape[2] != k.shape[2]:
            raise ValueError(f"{op}: expected q [Tq, Hq, d] and k, v [Tk, Hkv, d], got q {tuple(q.shape)}, "
                             f"k {tuple(k.shape)}, v {tuple(v.shape)}")
        if k.shape[1] != keys[0].shape[1]:
            raise ValueError(f"{op}: cached and new keys have different head counts: {k.shape[1]} vs "
                             f"{keys[0].shape[1]}")
    if q.shape[1] % keys[0].shape[1]:
        raise ValueError(f"{op}: {q.shape[1]} query heads cannot share {keys[0].shape[1]} key/value heads")
    if q.shape[2] > MAX_HEAD_DIM:
        raise ValueError(f"{op}: head_dim {q.shape[2]} exceeds the cuda kernel's maximum of {MAX_HEAD_DIM}")


def _run(q, k_cache, v_cache, k_new, v_new, bias, key_bias):
    out = gpu().empty(tuple(q.shape), np.float32)
    if out.size:
        gpu().launch(attend, (q.shape[0], q.shape[1]), (THREADS,),
                     (on_device(q, "q"), k_cache, v_cache, k_new, v_new, bias, key_bias,
                      np.float32(q.shape[2] ** -0.5), out))
    return returned(out, q)


def _no_keys(like) -> DeviceTensor:
    return gpu().empty((0, like.shape[1], like.shape[2]), np.float32)


@kernel("attention", "cuda")
def attention_cuda(q, k, v, bias=None):
    _check("attention", q, [k], [v])
    if k.shape[0] == 0:
        raise ValueError("attention: no keys to attend to")
    tq, tk = q.shape[0], k.shape[0]
    if bias is None:
        bias_d = gpu().empty((0, 0), np.float32)
    elif isinstance(bias, DeviceTensor):
        if bias.shape != (tq, tk):
            raise ValueError(f"attention: a device bias must have shape ({tq}, {tk}), got {bias.shape}")
        bias_d = bias
    else:
        bias_d = on_device(np.broadcast_to(np.asarray(bias, np.float32), (tq, tk)), "bias")
    return _run(q, on_device(k, "k"), on_device(v, "v"), _no_keys(k), _no_keys(k), bias_d, nothing())


@kernel("cached_attention", "cuda")
def cached_attention_cuda(q, k_cache, v_cache, cache_bias, k_new, v_new):
    _check("cached_attention", q, [k_cache, k_new], [v_cache, v_new])
    if cache_bias is not None and tuple(cache_bias.shape) != (k_cache.shape[0],):
        raise ValueError(f"cached_attention: cache_bias has shape {tuple(cache_bias.shape)}; expected "
                         f"({k_cache.shape[0]},), one value per cached key")
    if k_cache.shape[0] + k_new.shape[0] == 0:
        raise ValueError("cached_attention: no keys to attend to")
    key_bias = nothing() if cache_bias is None else on_device(cache_bias, "cache_bias")
    return _run(q, on_device(k_cache, "k_cache"), on_device(v_cache, "v_cache"), on_device(k_new, "k_new"),
                on_device(v_new, "v_new"), gpu().empty((0, 0), np.float32), key_bias)
