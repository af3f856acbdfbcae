"""Transformer layers on an engine (`engine.CudaEngine` on a GPU, `host.HostEngine` in numpy): the same
math as backbone/ and heads/, in the types the GPU computes in.

The residual stream is float32; every matrix product reads bf16 (weights converted once at load,
activations written as bf16 by the kernel before the product) and accumulates in float32; products
that update the residual add into it directly (beta = 1). Attention runs as three steps per group of
query heads sharing a key/value head: the score product, the softmax, the product with the values
(at these lengths, a few thousand keys at most, the score matrix stays in the GPU's L2 cache).

Tensors are engine arrays: `xp` is numpy or CuPy. Matrices are [rows, columns]; a head view
[heads, rows, head_dim] of a [rows, heads * head_dim] matrix is a strided view, never a copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from embodied_ros.kernels.quant import QuantTensor

F32 = np.float32


def heads_view(engine, matrix, heads: int, head_dim: int, first_head: int = 0, shared: bool = False):
    """[rows, ... heads * head_dim ...] -> [heads, rows, head_dim] view starting at `first_head`; with
    `shared`, one head repeated `heads` times (batch stride 0: keys shared by a group of queries)."""
    rows = matrix.shape[0]
    item = matrix.itemsize
    flat = matrix[:, first_head * head_dim:]
    strides = (0 if shared else head_dim * item, matrix.strides[0], item)
    return engine.xp.lib.stride_tricks.as_strided(flat, shape=(heads, rows, head_dim), strides=strides)


def linear(engine, x, weight, out_dtype=F32):
    """x [rows, K] bf16 @ weight [N, K]^T -> [rows, N] (no bias)."""
    out = engine.empty((x.shape[0], weight.shape[0]), out_dtype)
    engine.matmul(x, weight, out)
    return out


def grouped_attention(engine, queries, keys, values, num_heads: int, num_kv_heads: int, head_dim: int,
                      scale: float, bias, scores, probabilities, out) -> None:
    """Attention of queries [nq, H d] over keys, values [nk, K d] (bf16, any row stride) -> out [nq, H d]
    (bf16). bias: [nq or 1, nk] float32 added to the scaled scores, or None. scores [H, nq, nk] float32
    and probabilities [H, nq, nk] bf16 are the caller's buffers (a captured graph keeps its own).
    With one key/value head (Gemma's multi-query attention) and no per-query bias, queries and output
    are read as [nq H, d] matrices (contiguous), so each step is one plain product instead of a batch
    of products sharing one operand."""
    nq = queries.shape[0]
    if num_kv_heads == 1 and (bias is None or bias.shape[0] == 1):
        # every head reads the one key/value head: the heads are rows, [nq H, d] @ [nk, d]^T, two plain products
        flat_scores = scores.reshape(nq * num_heads, -1)
        flat_probabilities = probabilities.reshape(nq * num_heads, -1)
        engine.matmul(queries.reshape(nq * num_heads, head_dim), keys[:, :head_dim], flat_scores)
        engine.softmax(flat_scores, flat_probabilities, scale, bias)
        engine.matmul(flat_probabilities, values[:, :head_dim], out.reshape(nq * num_heads, head_dim),
                      transpose_b=False)
        return
    group = num_heads // num_kv_heads
    for g in range(num_kv_heads):
        heads = slice(g * group, (g + 1) * group)
        engine.matmul(heads_view(engine, queries, group, head_dim, g * group),
                      heads_view(engine, keys, group, head_dim, g, shared=True), scores[heads])
    rows = num_heads * queries.shape[0]
    engine.softmax(scores.reshape(rows, -1), probabilities.reshape(rows, -1), scale, bias)
    for g in range(num_kv_heads):
        heads = slice(g * group, (g + 1) * group)
        engine.matmul(probabilities[heads], heads_view(engine, values, group, head_dim, g, shared=True),
                      heads_view(engine, out, group, head_dim, g * group), transpose_b=False)


def self_attention(engine, queries, keys, values, num_heads: int, num_kv_heads: int, head_dim: int,
                   bias=None):
    """grouped_attention with buffers of its own (eager passes)."""
    nq, nk = queries.shape[0], keys.shape[0]
    out = engine.empty((nq, num_heads * head_dim), engine.product_dtype)
    grouped_attention(engine, queries, keys, values, num_heads, num_kv_heads, head_dim, head_dim ** -0.5, bias,
                      engine.empty((num_heads, nq, nk), F32), engine.empty((num_heads, nq, nk), engine.product_dtype), out)
    return out


# ---- weights ----------------------------------------------------------------------------------

def bf16_bits_of(weight: Any) -> np.ndarray | None:
    """A bf16-stored tensor's bits as uint16 [out, in] (a view), or None for another type."""
    if isinstance(weight, QuantTensor) and weight.qtype == "bf16":
        return np.asarray(weight.data).view(np.uint16).reshape(weight.shape)
    return None


def host_float(weight: Any) -> np.ndarray:
    """A stored tensor (array, memory-mapped array, Stacked or QuantTensor) as float32 on the host."""
    if isinstance(weight, QuantTensor):
        return weight.dequantize().astype(np.float32)
    return np.asarray(weight, dtype=np.float32)


def device_weights(engine, weights: Mapping[str, Any], is_linear_weight: Callable[[str], bool],
                   keep_on_host: Sequence[str] = (), float32_products: Sequence[str] = ()) -> dict[str, Any]:
    """Every tensor on the engine once, in the type it computes in: the products' matrices as bf16
    (quantized ones expanded first), the rest float32. `keep_on_host`: tensors the host reads (a token
    embedding table, gathered row by row on the CPU) stay as they are. `float32_products`: small products
    kept in float32 (the action projections, whose rounding would reach the actions directly)."""
    engine.reserve(sum(_device_bytes(name, weight, is_linear_weight(name) and name not in float32_products)
                       for name, weight in weights.items() if name not in keep_on_host), "the model's weights")
    prepared: dict[str, Any] = {}
    for name, weight in weights.items():
        if name in keep_on_host:
            prepared[name] = weight
        elif is_linear_weight(name) and name not in float32_products:
            bits = bf16_bits_of(weight)
            if bits is not None and engine.product_dtype == np.uint16:
                prepared[name] = engine.upload(bits)  # stored as the GPU computes: uploaded as it is
            else:
                prepared[name] = engine.bf16(host_float(weight) if isinstance(weight, QuantTensor) else np.asarray(weight))
        else:
            prepared[name] = engine.upload(host_float(weight), F32)
    return prepared


def _device_bytes(name: str, weight: Any, bf16: bool) -> int:
    elements = int(np.prod(weight.shape if isinstance(weight, QuantTensor) else np.shape(weight)))
    return elements * (2 if bf16 else 4)


def layer_weights(weights: Mapping[str, Any], stack: str, depth: int) -> list[dict[str, Any]]:
    """Per layer i of `stack`, its tensors named without the `{stack}.blk.{i}.` prefix."""
    return [{name[len(f"{stack}.blk.{i}."):]: weight for name, weight in weights.items()
             if name.startswith(f"{stack}.blk.{i}.")} for i in range(depth)]


# ---- vision -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class VisionDims:
    tokens: int  # per image
    width: int
    num_heads: int
    eps: float

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads


def image_attention(engine, qkv, images: int, dims: VisionDims):
    """Per-image multi-head attention over a bf16 [images * T, 3 W] q/k/v matrix -> bf16 [images * T, W].
    The heads of every image are made contiguous first ([3, images * H, T, d]), so that the scores and
    the weighted values are one batched product each, over all images and heads."""
    t, w, heads, hd = dims.tokens, dims.width, dims.num_heads, dims.head_dim
    xp = engine.xp
    split = xp.ascontiguousarray(qkv.reshape(images, t, 3, heads, hd).transpose(2, 0, 3, 1, 4))
    split = split.reshape(3, images * heads, t, hd)
    scores = engine.empty((images * heads, t, t), F32)
    probabilities = engine.empty((images * heads, t, t), engine.product_dtype)
    attended = engine.empty((images * heads, t, hd), engine.product_dtype)
    engine.matmul(split[0], split[1], scores)
    engine.softmax(scores.reshape(-1, t), probabilities.reshape(-1, t), hd ** -0.5)
    engine.matmul(probabilities, split[2], attended, transpose_b=False)
    return xp.ascontiguousarray(attended.reshape(images, heads, t, hd).transpose(0, 2, 1, 3)).reshape(images * t, w)


def vision_tower(engine, dims: VisionDims, weights: Mapping[str, Any], layers: Sequence[Mapping[str, Any]],
                 patches, images: int):
    """bf16 patches [images * T, 3 p p] -> bf16 [images * T, W]: the SigLIP-style encoder after its post
    LayerNorm (backbone/siglip.py). weights: `vision.patch.weight`, `vision.position_bias` (position
    embedding plus patch bias, [T, W]), `vision.post_ln.*`."""
    t, w = dims.tokens, dims.width
    x = linear(engine, patches, weights["vision.patch.weight"])
    x.reshape(images, t, w)[...] += weights["vision.position_bias"]
    h = engine.empty((images * t, w), engine.product_dtype)
    pending = None  # the last product's bias, added to the residual by the next norm
    for layer in layers:
        engine.residual_norm(x, h, layer["ln1.weight"], dims.eps, bias=pending, add=layer["ln1.bias"], center=True)
        qkv = linear(engine, h, layer["attn_qkv.weight"])
        qkv_bf16 = engine.empty(qkv.shape, engine.product_dtype)
        engine.bias_act(qkv, qkv_bf16, layer["attn_qkv.bias"])
        engine.matmul(image_attention(engine, qkv_bf16, images, dims), layer["attn_out.weight"], x, beta=1.0)
        engine.residual_norm(x, h, layer["ln2.weight"], dims.eps, bias=layer["attn_out.bias"],
                             add=layer["ln2.bias"], center=True)
        hidden = linear(engine, h, layer["fc1.weight"])
        hidden_bf16 = engine.empty(hidden.shape, engine.product_dtype)
        engine.bias_act(hidden, hidden_bf16, layer["fc1.bias"], "gelu_tanh")
        engine.matmul(hidden_bf16, layer["fc2.weight"], x, beta=1.0)
        pending = layer["fc2.bias"]
    engine.residual_norm(x, h, weights["vision.post_ln.weight"], dims.eps, bias=pending,
                         add=weights["vision.post_ln.bias"], center=True)
    return h


# ---- decoder ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class DecoderDims:
    width: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float
    activation: str  # of the gated MLP: "gelu_tanh" (Gemma) or "silu" (Llama)

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim


def decoder_prefix(engine, dims: DecoderDims, layers: Sequence[Mapping[str, Any]], x, cos, sin, bias,
                   keys, values, full_last_layer: bool = False):
    """The prefix [n, D] (float32, updated in place) through `layers`, each layer's keys (after RoPE)
    and values written as bf16 into keys[i], values[i] [n, K d]. cos, sin: [n, d / 2]; bias: [n, n]
    additive mask or None. Layer weights: `attn_mul`, `ffn_mul` (the norms' multipliers: 1 + w for
    Gemma, w for Llama), `attn_qkv`, `attn_kv` (its K/V rows), `attn_out`, `ffn_gate_up`, `ffn_down`.
    The last layer stops after its K/V unless `full_last_layer`. Returns x."""
    n = x.shape[0]
    heads = (dims.num_heads, dims.num_kv_heads, dims.num_kv_heads)
    h = engine.empty((n, dims.width), engine.product_dtype)
    for index, w in enumerate(layers):
        engine.residual_norm(x, h, w["attn_mul"], dims.eps)
        if index == len(layers) - 1 and not full_last_layer:
            engine.rope_split(linear(engine, h, w["attn_kv"]), None, keys[index], values[index], (0,) + heads[1:],
                              dims.head_dim, cos, sin)
            break
        queries = engine.empty((n, dims.num_heads * dims.head_dim), engine.product_dtype)
        engine.rope_split(linear(engine, h, w["attn_qkv"]), queries, keys[index], values[index], heads,
                          dims.head_dim, cos, sin)
        attended = self_attention(engine, queries, keys[index], values[index], dims.num_heads, dims.num_kv_heads,
                                  dims.head_dim, bias)
        engine.matmul(attended, w["attn_out"], x, beta=1.0)
        engine.residual_norm(x, h, w["ffn_mul"], dims.eps)
        gate_up = linear(engine, h, w["ffn_gate_up"], engine.product_dtype)
        hidden = engine.empty((n, gate_up.shape[1] // 2), engine.product_dtype)
        engine.glu(gate_up, hidden, dims.activation)
        engine.matmul(hidden, w["ffn_down"], x, beta=1.0)
    return x


def decoder_layers(engine, weights: Mapping[str, Any], stack: str, depth: int, dims: DecoderDims,
                   norm_offset: float) -> list[dict[str, Any]]:
    """A decoder stack's layer weights as `decoder_prefix` reads them; norm_offset: 1 for Gemma's
    (1 + w) norms, 0 for Llama's."""
    q_rows = dims.num_heads * dims.head_dim
    layers = []
    for w in layer_weights(weights, stack, depth):
        layers.append({
            "attn_mul": w["attn_norm.weight"] + np.float32(norm_offset),
            "ffn_mul": w["ffn_norm.weight"] + np.float32(norm_offset),
            "attn_qkv": w["attn_qkv.weight"], "attn_kv": w["attn_qkv.weight"][q_rows:],
            "attn_out": w["attn_out.weight"], "ffn_gate_up": w["ffn_gate_up.weight"],
            "ffn_down": w["ffn_down.weight"]})
    return layers


# ---- the prefix cache on the device -----------------------------------------------------------

@dataclass(frozen=True, eq=False)
class DevicePrefixCache:
    """The K/V cache of one observation on the engine: keys, values [layers, n, K d] bf16, keys after
    RoPE; `valid` [n] on the host (a compacted cache: all True). Read-only once built; a newer
    observation builds a new one (backbone/prefix_cache.py's lifecycle)."""

    keys: Any
    values: Any
    valid: np.ndarray
    stamp_ns: int = 0

    @property
    def num_layers(self) -> int:
        return int(self.keys.shape[0])

    @property
    def num_rows(self) -> int:
        return int(self.keys.shape[1])

    @property
    def n_valid(self) -> int:
        return int(np.count_nonzero(self.valid))

    def tensors(self) -> dict[str, Any]:
        return {"keys": self.keys, "values": self.values, "valid": self.valid}

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any], stamp_ns: int = 0) -> "DevicePrefixCache":
        missing = [name for name in ("keys", "values", "valid") if name not in tensors]
        if missing:
            raise ValueError(f"prefix tensors lack {missing}; got {sorted(tensors)}")
        return cls(tensors["keys"], tensors["values"], np.asarray(tensors["valid"], bool), stamp_ns)
