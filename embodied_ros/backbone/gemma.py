"""Gemma decoder layers and the prefix pass that fills the K/V cache.

Axes: n prefix tokens, D width, H query heads, K kv heads (1 in pi0.5), d head width, F mlp width.

    h = rms(x) * (1 + w_attn)
    q, k, v = h [Wq; Wk; Wv]                       -> [n, H, d], [n, K, d], [n, K, d]; RoPE on q, k
    x += attn_out(attention(q, k, v, bias))        k (after RoPE) and v go to the cache
    h = rms(x) * (1 + w_ffn)
    x += ffn_down(gelu_tanh(ffn_gate(h)) * ffn_up(h))       (gate and up as one product)

Layer weights come with q/k/v and gate/up stacked (models/pi05/weights.py): fewer, larger matrix
products, which matters most for the action expert's 50-token steps. Products are token-major,
[n, out], the layout the CPU product writes with whole vectors; q, k and v are column views of
one result, and the MLP's gate and up halves are read by one fused kernel (`gelu_tanh_glu`).

pi0.5 reads only the per-layer K/V of the prefix (the LM's output hidden state is unused), so the
last layer stops after its K/V projections unless the caller asks for the full output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone.checks import positive, require
from embodied_ros.backbone.prefix_cache import PrefixCacheBuilder
from embodied_ros.kernels.attention_bf16 import attention_for
from embodied_ros.kernels.linear import PANEL, PackedWeight, pack_weight
from embodied_ros.kernels.linear_bf16 import Bf16Weight, to_bf16_weight
from embodied_ros.kernels.linear_int16 import I16Weight, pack_i16
from embodied_ros.kernels.linear_int8 import Q8Weight, pack_q8_0
from embodied_ros.kernels.quant import QuantTensor


@dataclass(frozen=True)
class GemmaConfig:
    """A Gemma decoder stack (the language model or the action expert)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float = 1e-6
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        positive("gemma", width=self.width, depth=self.depth, mlp_dim=self.mlp_dim, num_heads=self.num_heads,
                  num_kv_heads=self.num_kv_heads, head_dim=self.head_dim)
        require(self.num_heads % self.num_kv_heads == 0,
                 f"{self.num_heads} query heads cannot share {self.num_kv_heads} key/value heads")
        require(self.head_dim % 2 == 0, f"head_dim must be even for rotary embeddings, got {self.head_dim}")




# transformers' Gemma decoder-layer parameter names -> the runtime's (q/k/v and gate/up are stacked
# into `attn_qkv` and `ffn_gate_up` when a bundle is written)
TRANSFORMERS_LAYER_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                            "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                            "mlp.down_proj": "ffn_down"}
TRANSFORMERS_NORM_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def linear_shapes(cfg: GemmaConfig) -> dict[str, tuple[int, int]]:
    """Shapes of one layer's (stacked) linear weights, by the runtime's layer-relative names."""
    q_rows, kv_rows = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {"attn_qkv": (q_rows + 2 * kv_rows, cfg.width), "attn_out": (cfg.width, q_rows),
            "ffn_gate_up": (2 * cfg.mlp_dim, cfg.width), "ffn_down": (cfg.width, cfg.mlp_dim)}


def row_slice(weight: Any, start: int, stop: int) -> Any:
    """Rows start..stop of a weight (float array, packed or quantized tensor), as a view where the
    layout allows (packed panels start every 32 rows; elsewhere the rows are packed anew)."""
    if isinstance(weight, QuantTensor):
        return QuantTensor(weight.qtype, (stop - start, weight.shape[1]), weight.data[start:stop])
    if isinstance(weight, PackedWeight):
        if start % PANEL:
            return pack_weight(weight.dense()[start:stop])
        return PackedWeight(weight.panels[start // PANEL:-(-stop // PANEL)], (stop - start, weight.shape[1]))
    if isinstance(weight, Q8Weight):
        if start % PANEL:
            q_w, d_w = weight.blocks()
            blocks = np.concatenate([d_w[start:stop, :, None].astype(np.float16).view(np.uint8).reshape(
                stop - start, -1, 2), q_w[start:stop].reshape(stop - start, -1, 32).view(np.uint8)], axis=2)
            return pack_q8_0(blocks.reshape(stop - start, -1), (stop - start, weight.shape[1]))
        panels = slice(start // PANEL, -(-stop // PANEL))
        return Q8Weight(weight.quants[panels], weight.scales[panels], weight.sums[panels],
                        (stop - start, weight.shape[1]))
    if isinstance(weight, Bf16Weight):
        if start % PANEL:
            return to_bf16_weight(weight.dense()[start:stop])
        return Bf16Weight(weight.panels[start // PANEL:-(-stop // PANEL)], (stop - start, weight.shape[1]))
    if isinstance(weight, I16Weight):
        if start % PANEL:
            return pack_i16(weight.dense()[start:stop])  # the same integers: each row keeps its scale
        first, end = start // PANEL, -(-stop // PANEL)
        return I16Weight(weight.quants[first:end], weight.scales[PANEL * first:PANEL * end], (stop - start, weight.shape[1]))
    return weight[start:stop]


def with_kv_rows(cfg: GemmaConfig, w: Mapping[str, Any]) -> dict[str, Any]:
    """A layer's tensors plus `attn_kv.weight`, the K/V rows of its stacked q/k/v (a view), for
    layers whose queries nobody reads."""
    q_rows = cfg.num_heads * cfg.head_dim
    kv = row_slice(w["attn_qkv.weight"], q_rows, q_rows + 2 * cfg.num_kv_heads * cfg.head_dim)
    return {**w, "attn_kv.weight": kv}


def _split_heads(projected: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    return projected.reshape(projected.shape[0], heads, head_dim)


def project_kv(ks, cfg: GemmaConfig, w: Mapping[str, Any], h: np.ndarray, cos: np.ndarray,
               sin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normed tokens [n, D] -> keys (after RoPE) and values [n, K, d]."""
    kv = ks.linear(h, w["attn_kv.weight"])  # [n, 2 K d]
    width = cfg.num_kv_heads * cfg.head_dim
    keys = ks.rope(_split_heads(kv[:, :width], cfg.num_kv_heads, cfg.head_dim), cos, sin)
    return keys, _split_heads(kv[:, width:], cfg.num_kv_heads, cfg.head_dim)


def project_qkv(ks, cfg: GemmaConfig, w: Mapping[str, Any], h: np.ndarray, cos: np.ndarray,
                sin: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normed tokens [n, D] -> queries [n, H, d], keys [n, K, d] (both after RoPE), values [n, K, d]."""
    qkv = ks.linear(h, w["attn_qkv.weight"])  # [n, (H + 2K) d]
    q_width, kv_width = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    queries = ks.rope(_split_heads(qkv[:, :q_width], cfg.num_heads, cfg.head_dim), cos, sin)
    keys = ks.rope(_split_heads(qkv[:, q_width:q_width + kv_width], cfg.num_kv_heads, cfg.head_dim), cos, sin)
    return queries, keys, _split_heads(qkv[:, q_width + kv_width:], cfg.num_kv_heads, cfg.head_dim)


def attention_output(ks, w: Mapping[str, Any], attended: np.ndarray) -> np.ndarray:
    """Attention result [n, H, d] -> the residual update [n, D]."""
    return ks.linear(attended.reshape(attended.shape[0], -1), w["attn_out.weight"])


def feed_forward(ks, w: Mapping[str, Any], h: np.ndarray) -> np.ndarray:
    """Normed tokens [n, D] -> the MLP's residual update [n, D]."""
    # the stacked gate_up weight [2F, D]: the gate rows, then the up rows
    return ks.feed_forward(h, w["ffn_gate_up.weight"], None, w["ffn_down.weight"], None, "gelu_tanh_glu")


def prefix_pass(ks, cfg: GemmaConfig, layers: Sequence[Mapping[str, Any]], x: np.ndarray,
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
        x = x + attention_output(ks, w, attention_for(ks, w["attn_qkv.weight"])(queries, keys, values, bias))
        x = x + feed_forward(ks, w, ks.rms_norm(x, w["ffn_norm.weight"], cfg.eps))
    return x
