"""The UMT5 text encoder (transformers `UMT5EncoderModel`) as functions over numpy arrays.

Axes: L tokens, D = d_model, H heads of width K = d_kv, F = d_ff.

    h = shared[ids]                                                    (no scaling)
    per layer:  h += o(attention(rms(h) * w_attn))                     scores = q k^T (no 1/sqrt(K))
                                                                         + this layer's relative bias
                                                                         + float32_min on padded keys
                h += wo(gelu_tanh(wi_0 n) * wi_1 n),  n = rms(h) * w_ffn
    out = rms(h) * w_final, rows of padded tokens set to 0

rms(x) = x * rsqrt(mean(x^2) + eps) (T5's norm: no mean subtraction, no bias). Unlike T5, every
UMT5 layer has its own relative-position bias table [buckets, H].

The encoder runs once per instruction, so its weights are not kept resident: `UMT5Weights` may hold
the bundle's stored arrays (memory-mapped F32/F16, or BF16 tensors), and `encode` makes each
matrix's float32 form only while it multiplies with it; only the embedding rows of the prompt's
tokens are read. Between instructions the mapped pages can be dropped by the OS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from embodied_ros.kernels.quant import QuantTensor


@dataclass(frozen=True)
class UMT5Config:
    vocab_size: int
    d_model: int
    d_kv: int
    num_heads: int
    d_ff: int
    num_layers: int
    num_buckets: int = 32
    max_distance: int = 128
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if min(self.vocab_size, self.d_model, self.d_kv, self.num_heads, self.d_ff, self.num_layers) < 1:
            raise ValueError(f"UMT5 sizes must be positive: {self}")
        if self.num_buckets < 4 or self.num_buckets % 4 or self.max_distance <= self.num_buckets // 4:
            raise ValueError(f"UMT5: num_buckets {self.num_buckets} must be a multiple of 4 and "
                             f"max_distance {self.max_distance} above num_buckets / 4")

    @classmethod
    def from_transformers(cls, config: Mapping[str, Any]) -> "UMT5Config":
        if config.get("feed_forward_proj", "gated-gelu") != "gated-gelu":
            raise ValueError(f"UMT5: only the gated-gelu feed-forward is supported, got {config['feed_forward_proj']}")
        return cls(vocab_size=int(config["vocab_size"]), d_model=int(config["d_model"]), d_kv=int(config["d_kv"]),
                   num_heads=int(config["num_heads"]), d_ff=int(config["d_ff"]), num_layers=int(config["num_layers"]),
                   num_buckets=int(config.get("relative_attention_num_buckets", 32)),
                   max_distance=int(config.get("relative_attention_max_distance", 128)),
                   eps=float(config.get("layer_norm_epsilon", 1e-6)))


@dataclass(frozen=True)
class UMT5Layer:
    attn_norm: np.ndarray  # [D]
    q: Any  # [H*K, D] (out, in), float32/float16 array or a BF16 tensor
    k: Any
    v: Any
    o: Any  # [D, H*K]
    relative_bias: np.ndarray  # [buckets, H]
    ffn_norm: np.ndarray  # [D]
    wi_0: Any  # [F, D]
    wi_1: Any  # [F, D]
    wo: Any  # [D, F]


@dataclass(frozen=True)
class UMT5Weights:
    embedding: np.ndarray  # [V, D]
    layers: tuple[UMT5Layer, ...]
    final_norm: np.ndarray  # [D]


def load_weights(get: Callable[[str], Any], cfg: UMT5Config) -> UMT5Weights:
    """Gather the encoder by transformers' names (`shared.weight`, `encoder.block.{i}...`), checking shapes."""
    inner = cfg.num_heads * cfg.d_kv

    def tensor(name: str, shape: tuple[int, ...]) -> Any:
        value = get(name)
        if tuple(value.shape) != shape:
            raise ValueError(f"text encoder {name}: shape {tuple(value.shape)}, expected {shape}")
        return value

    layers = []
    for i in range(cfg.num_layers):
        attn, ffn = f"encoder.block.{i}.layer.0.", f"encoder.block.{i}.layer.1."
        layers.append(UMT5Layer(
            attn_norm=tensor(attn + "layer_norm.weight", (cfg.d_model,)),
            q=tensor(attn + "SelfAttention.q.weight", (inner, cfg.d_model)),
            k=tensor(attn + "SelfAttention.k.weight", (inner, cfg.d_model)),
            v=tensor(attn + "SelfAttention.v.weight", (inner, cfg.d_model)),
            o=tensor(attn + "SelfAttention.o.weight", (cfg.d_model, inner)),
            relative_bias=tensor(attn + "SelfAttention.relative_attention_bias.weight",
                                 (cfg.num_buckets, cfg.num_heads)),
            ffn_norm=tensor(ffn + "layer_norm.weight", (cfg.d_model,)),
            wi_0=tensor(ffn + "DenseReluDense.wi_0.weight", (cfg.d_ff, cfg.d_model)),
            wi_1=tensor(ffn + "DenseReluDense.wi_1.weight", (cfg.d_ff, cfg.d_model)),
            wo=tensor(ffn + "DenseReluDense.wo.weight", (cfg.d_model, cfg.d_ff))))
    return UMT5Weights(tensor("shared.weight", (cfg.vocab_size, cfg.d_model)), tuple(layers),
                       tensor("encoder.final_layer_norm.weight", (cfg.d_model,)))


def _dense(weight: Any) -> np.ndarray:
    """A stored weight's float32 values, made for one use."""
    if isinstance(weight, QuantTensor):
        return weight.dequantize()
    return np.asarray(weight, np.float32)


def relative_buckets(length: int, num_buckets: int, max_distance: int) -> np.ndarray:
    """Bidirectional T5 bucket [L, L] of the offset (key - query); the log term in float32."""
    offset = np.arange(length)[None, :] - np.arange(length)[:, None]
    half = num_buckets // 2
    exact = half // 2
    distance = np.abs(offset)
    scaled = (np.log(np.maximum(distance, 1).astype(np.float32) / np.float32(exact))
              / np.float32(math.log(max_distance / exact)) * np.float32(half - exact))
    large = np.minimum(exact + scaled.astype(np.int64), half - 1)
    return half * (offset > 0) + np.where(distance < exact, distance, large)


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(variance + np.float32(eps)) * weight).astype(np.float32)


def encode(ks, cfg: UMT5Config, w: UMT5Weights, token_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Token ids [L] and mask [L] (1 = valid) -> embeddings [L, D], padded rows 0."""
    token_ids, valid = np.asarray(token_ids), np.asarray(mask).astype(bool)
    if token_ids.ndim != 1 or valid.shape != token_ids.shape:
        raise ValueError(f"UMT5: token ids {token_ids.shape} and mask {valid.shape} must be one row each")
    if token_ids.size and (token_ids.min() < 0 or token_ids.max() >= cfg.vocab_size):
        raise ValueError(f"UMT5: token ids must lie in [0, {cfg.vocab_size}), got {token_ids.min()}..{token_ids.max()}")
    length = len(token_ids)
    buckets = relative_buckets(length, cfg.num_buckets, cfg.max_distance)
    key_mask = np.where(valid, np.float32(0.0), np.finfo(np.float32).min).astype(np.float32)
    rows = w.embedding[token_ids] if isinstance(w.embedding, np.ndarray) else _dense(w.embedding)[token_ids]
    h = _dense(rows)
    for layer in w.layers:
        n = _rms(h, _dense(layer.attn_norm), cfg.eps)
        q, k, v = (ks.linear(n, _dense(m)).reshape(length, cfg.num_heads, cfg.d_kv).transpose(1, 0, 2)
                   for m in (layer.q, layer.k, layer.v))
        bias = _dense(layer.relative_bias)[buckets].transpose(2, 0, 1)  # [H, L, L]
        scores = (q @ k.transpose(0, 2, 1) + bias + key_mask).astype(np.float32)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attended = (scores / scores.sum(axis=-1, keepdims=True)) @ v  # [H, L, K]
        h = h + ks.linear(np.ascontiguousarray(attended.transpose(1, 0, 2).reshape(length, -1), np.float32),
                          _dense(layer.o))
        n = _rms(h, _dense(layer.ffn_norm), cfg.eps)
        h = h + ks.linear(ks.gelu_tanh(ks.linear(n, _dense(layer.wi_0))) * ks.linear(n, _dense(layer.wi_1)),
                          _dense(layer.wo))
    out = _rms(h, _dense(w.final_norm), cfg.eps)
    out[~valid] = 0.0
    return out
