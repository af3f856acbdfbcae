"""Llama-style decoder layers (SmolLM2, SmolVLM's text model) and the prefix pass that fills the K/V cache.

Axes: n tokens, D width, H query heads, K kv heads (grouped-query attention), d head width, F mlp width.

    h = w_attn * rms(x)                            (Llama RMSNorm: the weight multiplies directly)
    q, k, v = h [Wq; Wk; Wv]                       no biases; RoPE (rotate-half) on q and k
    x += attn_out(attention(q, k, v, bias))        k (after RoPE) and v go to the cache
    h = w_ffn * rms(x)
    x += ffn_down(silu(ffn_gate(h)) * ffn_up(h))   (gate and up as one product, `silu_glu`)

RoPE angles are pos / theta^(2i/d), i < d/2, in float32 (a division by the timescale, the form
SmolVLA's own rotary code uses; it differs from the inverse-frequency product of kernels/rope.py
in the last bit).

Runtime tensor names under `<stack>.blk.{i}.` and their transformers names under `layers.{i}.`:

    attn_norm.weight      input_layernorm.weight
    ffn_norm.weight       post_attention_layernorm.weight
    attn_qkv.weight       self_attn.{q,k,v}_proj.weight stacked   [(H + 2K) d, D]
    attn_out.weight       self_attn.o_proj.weight
    ffn_gate_up.weight    mlp.{gate,up}_proj.weight stacked       [2F, D]
    ffn_down.weight       mlp.down_proj.weight
  plus `<stack>.token_embd` (embed_tokens.weight) and `<stack>.final_norm.weight` (norm.weight).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone import gemma
from embodied_ros.backbone.prefix_cache import PrefixCacheBuilder
from embodied_ros.kernels.attention_bf16 import attention_for

# transformers name under `layers.{i}.` -> runtime name under `<stack>.blk.{i}.` (before stacking)
LAYER_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}


@dataclass(frozen=True)
class LlamaConfig:
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"llama.{name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.num_heads} query heads cannot share {self.num_kv_heads} key/value heads")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")

    @property
    def q_rows(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_rows(self) -> int:
        return self.num_kv_heads * self.head_dim


def layer_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Shapes of one layer's runtime tensors (names without the `<stack>.blk.{i}.` prefix)."""
    return {"attn_norm.weight": (cfg.width,), "ffn_norm.weight": (cfg.width,),
            "attn_qkv.weight": (cfg.q_rows + 2 * cfg.kv_rows, cfg.width), "attn_out.weight": (cfg.width, cfg.q_rows),
            "ffn_gate_up.weight": (2 * cfg.mlp_dim, cfg.width), "ffn_down.weight": (cfg.width, cfg.mlp_dim)}


def rope_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [T, head_dim] (both halves equal) for integer positions [T], for `ks.rope`."""
    exponents = np.float32(2.0 / head_dim) * np.arange(head_dim // 2, dtype=np.float32)
    timescale = np.power(np.float32(theta), exponents).astype(np.float32)
    radians = np.asarray(positions, dtype=np.float32)[:, None] / timescale[None, :]
    radians = np.concatenate([radians, radians], axis=-1)
    return np.cos(radians).astype(np.float32), np.sin(radians).astype(np.float32)


def norm(ks, x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Llama RMSNorm: weight * x * rsqrt(mean(x^2) + eps)."""
    return ks.rms_norm_across_heads(x, weight, eps)


def head_norm(ks, x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """The same RMSNorm over each head's head_dim (q/k norms): [L, H, hd] -> [L, H, hd]."""
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    return ks.rms_norm_across_heads(rows, weight, eps).reshape(x.shape)


def feed_forward(ks, w: Mapping[str, Any], h: np.ndarray) -> np.ndarray:
    """Normed tokens [n, D] -> the MLP's residual update [n, D]."""
    return ks.feed_forward(h, w["ffn_gate_up.weight"], None, w["ffn_down.weight"], None, "silu_glu")


def prefix_pass(ks, cfg: LlamaConfig, layers: Sequence[Mapping[str, Any]], x: np.ndarray,
                rope: tuple[np.ndarray, np.ndarray], bias: np.ndarray | None, cache: PrefixCacheBuilder,
                full_last_layer: bool = False) -> np.ndarray:
    """Run the prefix [n, D] through `layers` once, writing each layer's K/V into `cache`.

    Returns the last layer's output when `full_last_layer`, else the input of the last layer
    (whose attention output and MLP a reader of the cache alone never needs).
    """
    cos, sin = rope
    for index, w in enumerate(layers):
        h = norm(ks, x, w["attn_norm.weight"], cfg.eps)
        if index == len(layers) - 1 and not full_last_layer:
            cache.write(index, *gemma.project_kv(ks, cfg, gemma.with_kv_rows(cfg, w), h, cos, sin))
            break
        queries, keys, values = gemma.project_qkv(ks, cfg, w, h, cos, sin)
        cache.write(index, keys, values)
        x = x + gemma.attention_output(ks, w, attention_for(ks, w["attn_qkv.weight"])(queries, keys, values, bias))
        x = x + feed_forward(ks, w, norm(ks, x, w["ffn_norm.weight"], cfg.eps))
    return x
