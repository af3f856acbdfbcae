"""Rotary position embeddings on the GPU: `rope` (rotate-half, Gemma; rope.py) and `rope_pairs`
(adjacent channel pairs, Wan's 3-axis RoPE; rope3d.py). The cos/sin tables are the references'
own ([tokens, head_dim], built on the host); each thread rotates one channel pair of one head."""

from __future__ import annotations

import numpy as np

from embodied_ros.kernels.cuda.compiler import cuda, cuda_kernel
from embodied_ros.kernels.cuda.runtime import blocks_for, gpu, on_device, returned
from embodied_ros.kernels.registry import kernel

THREADS = 256
_SIGNATURE = "void(float32[:, :, ::1], float32[:, ::1], float32[:, ::1], float32[:, :, ::1])"


@cuda_kernel(_SIGNATURE, threads=THREADS)
def rotate_half(x, cos, sin, out):  # pragma: no cover - device code
    # x, out: [T, H, d]; cos, sin: [T, d]; channel i pairs with i + d/2
    heads, width = x.shape[1], x.shape[2]
    half = width // 2
    for item in range(cuda.grid(1), x.shape[0] * heads * half, cuda.gridsize(1)):
        i = item % half
        t = item // (heads * half)
        h = (item // half) % heads
        a = x[t, h, i]
        b = x[t, h, i + half]
        out[t, h, i] = a * cos[t, i] - b * sin[t, i]
        out[t, h, i + half] = b * cos[t, i + half] + a * sin[t, i + half]


@cuda_kernel(_SIGNATURE, threads=THREADS)
def rotate_pairs(x, cos, sin, out):  # pragma: no cover - device code
    # x, out: [S, H, Dh]; cos, sin: [S, Dh]; channel 2j pairs with 2j + 1
    heads, width = x.shape[1], x.shape[2]
    half = width // 2
    for item in range(cuda.grid(1), x.shape[0] * heads * half, cuda.gridsize(1)):
        j = 2 * (item % half)
        s = item // (heads * half)
        h = (item // half) % heads
        a = x[s, h, j]
        b = x[s, h, j + 1]
        out[s, h, j] = a * cos[s, j] - b * sin[s, j + 1]
        out[s, h, j + 1] = a * sin[s, j + 1] + b * cos[s, j]


def _rotate(op: str, fn, x, cos, sin):
    if len(x.shape) != 3 or x.shape[2] % 2:
        raise ValueError(f"{op}: expected x of shape [tokens, heads, even head_dim], got {tuple(x.shape)}")
    expected = (x.shape[0], x.shape[2])
    if tuple(cos.shape) != expected or tuple(sin.shape) != expected:
        raise ValueError(f"{op}: tables {tuple(cos.shape)}/{tuple(sin.shape)} do not fit x {tuple(x.shape)}; "
                         f"expected {expected}")
    out = gpu().empty(tuple(x.shape), np.float32)
    pairs = out.size // 2
    if pairs:
        gpu().launch(fn, (blocks_for(pairs, THREADS),), (THREADS,),
                     (on_device(x, "x"), on_device(cos, "cos"), on_device(sin, "sin"), out))
    return returned(out, x)


@kernel("rope", "cuda")
def rope_cuda(x, cos, sin):
    return _rotate("rope", rotate_half, x, cos, sin)


@kernel("rope_pairs", "cuda")
def rope_pairs_cuda(x, cos, sin):
    return _rotate("rope_pairs", rotate_pairs, x, cos, sin)
