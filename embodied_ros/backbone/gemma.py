"""Gemma decoder layers and the prefix pass that fills the K/V cache.

Axes: n prefix tokens, D width, H query heads, K kv heads (1 in pi0.5), d head width, F mlp width.

    h = rms(x) * (1 + w_attn)
    q, k, v = h Wq, h Wk, h Wv                     -> [n, H, d], [n, K, d], [n, K, d]; RoPE on q, k
    x += attn_out(attention(q, k, v, bias))        k (after RoPE) and v go to the cache
    h = rms(x) * (1 + w_ffn)
    x += ffn_down(gelu_tanh(ffn_gate(h)) * ffn_up(h))

pi0.5 reads only the per-layer K/V of the prefix (the LM's output hidden state is unused), so the
last layer stops after its K/V projections unless the caller asks for the full output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone.prefix_cache import PrefixCacheBuilder

if TYPE_CHECKING:
    from embodied_ros.models.pi05.config import GemmaConfig


def project_kv(ks, cfg: "GemmaConfig", w: Mapping[str, Any], h: np.ndarray, cos: np.ndarray,
               sin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normed tokens [n, D] -> keys (after RoPE) and values [n, K, d]."""
    shape = (h.shape[0], cfg.num_kv_heads, cfg.head_dim)
    keys = ks.rope(ks.linear(h, w["attn_k.weight"]).reshape(shape), cos, sin)
    return keys, ks.linear(h, w["attn_v.weight"]).reshape(shape)


def project_queries(ks, cfg: "GemmaConfig", w: Mapping[str, Any], h: np.ndarray, cos: np.ndarray,
                    sin: np.ndarray) -> np.ndarray:
    """Normed tokens [n, D] -> queries after RoPE [n, H, d]."""
    return ks.rope(ks.linear(h, w["attn_q.weight"]).reshape(h.shape[0], cfg.num_heads, cfg.head_dim), cos, sin)


def feed_forward(ks, w: Mapping[str, Any], h: np.ndarray) -> np.ndarray:
    return ks.linear(ks.gelu_tanh_mul(ks.linear(h, w["ffn_gate.weight"]), ks.linear(h, w["ffn_up.weight"])),
                     w["ffn_down.weight"])


def prefix_pass(ks, cfg: "GemmaConfig", layers: Sequence[Mapping[str, Any]], x: np.ndarray,
                rope: tuple[np.ndarray, np.ndarray], bias: np.ndarray | None, cache: PrefixCacheBuilder,
                full_last_layer: bool = False) -> np.ndarray:
    """Run the prefix [n, D] through every layer once, writing each layer's K/V into `cache`.

    rope: (cos, sin) [n, d] at the prefix positions; bias: [n, n] additive mask or None (every
    token reads every token). Returns the last layer's output when `full_last_layer`, else the
    input of the last layer (whose attention output and MLP pi0.5 never reads).
    """
    cos, sin = rope
    for index, w in enumerate(layers):
        h = ks.rms_norm(x, w["attn_norm.weight"], cfg.eps)
        keys, values = project_kv(ks, cfg, w, h, cos, sin)
        cache.write(index, keys, values)
        if index == len(layers) - 1 and not full_last_layer:
            break
        attended = ks.attention(project_queries(ks, cfg, w, h, cos, sin), keys, values, bias)
        x = x + ks.linear(attended.reshape(x.shape[0], -1), w["attn_out.weight"])
        x = x + feed_forward(ks, w, ks.rms_norm(x, w["ffn_norm.weight"], cfg.eps))
    return x
