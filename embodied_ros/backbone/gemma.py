"""Gemma decoder layers and the prefix pass that fills the K/V cache.

Axes: n prefix tokens, D width, H query heads, K kv heads (1 in pi0.5), d head width, F mlp width.

    h = rms(x) * (1 + w_attn)
    q, k, v = h [Wq; Wk; Wv]                       -> [n, H, d], [n, K, d], [n, K, d]; RoPE on q, k
    x += attn_out(attention(q, k, v, bias))        k (after RoPE) and v go to the cache
    h = rms(x) * (1 + w_ffn)
    x += ffn_down(gelu_tanh(ffn_gate(h)) * ffn_up(h))       (gate and up as one product)

Layer weights come with q/k/v and gate/up stacked (models/pi05/weights.py): fewer, larger matrix
products, which matters most for the action expert's 50-token steps. The products run
feature-major (`linear_t`: W @ h^T -> [out, n]), which OpenBLAS runs faster than h @ W^T at these
token counts (10% at the 223-row prefix of pi05_small, 15-20% at the expert's 50 rows); their
results are read as transposed views, the MLP's gate and up halves as contiguous rows.

pi0.5 reads only the per-layer K/V of the prefix (the LM's output hidden state is unused), so the
last layer stops after its K/V projections unless the caller asks for the full output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone.prefix_cache import PrefixCacheBuilder
from embodied_ros.kernels.quant import QuantTensor

if TYPE_CHECKING:
    from embodied_ros.models.pi05.config import GemmaConfig


def row_slice(weight: Any, start: int, stop: int) -> Any:
    """Rows start..stop of a weight (float array or quantized tensor), as a view."""
    if isinstance(weight, QuantTensor):
        return QuantTensor(weight.qtype, (stop - start, weight.shape[1]), weight.data[start:stop])
    return weight[start:stop]


def with_kv_rows(cfg: "GemmaConfig", w: Mapping[str, Any]) -> dict[str, Any]:
    """A layer's tensors plus `attn_kv.weight`, the K/V rows of its stacked q/k/v (a view), for
    layers whose queries nobody reads."""
    q_rows = cfg.num_heads * cfg.head_dim
    kv = row_slice(w["attn_qkv.weight"], q_rows, q_rows + 2 * cfg.num_kv_heads * cfg.head_dim)
    return {**w, "attn_kv.weight": kv}


def _split_heads(projected: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    return projected.reshape(projected.shape[0], heads, head_dim)


def project_kv(ks, cfg: "GemmaConfig", w: Mapping[str, Any], h: np.ndarray, cos: np.ndarray,
               sin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normed tokens [n, D] -> keys (after RoPE) and values [n, K, d]."""
    kv = ks.linear_t(h, w["attn_kv.weight"]).T  # [n, 2 K d], a transposed view
    width = cfg.num_kv_heads * cfg.head_dim
    keys = ks.rope(_split_heads(kv[:, :width], cfg.num_kv_heads, cfg.head_dim), cos, sin)
    return keys, _split_heads(kv[:, width:], cfg.num_kv_heads, cfg.head_dim)


def project_qkv(ks, cfg: "GemmaConfig", w: Mapping[str, Any], h: np.ndarray, cos: np.ndarray,
                sin: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normed tokens [n, D] -> queries [n, H, d], keys [n, K, d] (both after RoPE), values [n, K, d]."""
    qkv = ks.linear_t(h, w["attn_qkv.weight"]).T  # [n, (H + 2K) d], a transposed view
    q_width, kv_width = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    queries = ks.rope(_split_heads(qkv[:, :q_width], cfg.num_heads, cfg.head_dim), cos, sin)
    keys = ks.rope(_split_heads(qkv[:, q_width:q_width + kv_width], cfg.num_kv_heads, cfg.head_dim), cos, sin)
    return queries, keys, _split_heads(qkv[:, q_width + kv_width:], cfg.num_kv_heads, cfg.head_dim)


def attention_output(ks, w: Mapping[str, Any], attended: np.ndarray) -> np.ndarray:
    """Attention result [n, H, d] -> the residual update, feature-major [D, n]."""
    return ks.linear_t(attended.reshape(attended.shape[0], -1), w["attn_out.weight"])


def feed_forward(ks, w: Mapping[str, Any], h: np.ndarray) -> np.ndarray:
    """Normed tokens [n, D] -> the MLP's residual update, feature-major [D, n]."""
    gate_up = ks.linear_t(h, w["ffn_gate_up.weight"])  # [2F, n]: the gate rows, then the up rows
    half = gate_up.shape[0] // 2
    return ks.linear_t(ks.gelu_tanh_mul(gate_up[:half], gate_up[half:]).T, w["ffn_down.weight"])


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
        if index == len(layers) - 1 and not full_last_layer:
            cache.write(index, *project_kv(ks, cfg, w, h, cos, sin))
            break
        queries, keys, values = project_qkv(ks, cfg, w, h, cos, sin)
        cache.write(index, keys, values)
        x = x + attention_output(ks, w, ks.attention(queries, keys, values, bias)).T
        x = x + feed_forward(ks, w, ks.rms_norm(x, w["ffn_norm.weight"], cfg.eps)).T
    return x
