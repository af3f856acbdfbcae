"""Hy-Embodied's Mixture-of-Transformers decoder (HunYuan MoT) and HY-VLA's action expert, which shares
its attention.

Axes: n prefix rows, D width, E expert width, H query heads, K kv heads, d head width.

Every LM layer holds two sets of weights: one for text rows, one (`_v`) for image-patch rows; a row's
modality chooses the set for its norms and projections, attention is one over all rows.

    h = w_attn * rms(x)                                  (plain RMSNorm weight, per modality)
    q, k, v = h [Wq; Wk; Wv]                             per modality; RoPE on q, k; then
    q, k = w_q * rms_head(q), w_k * rms_head(k)          per head, the LM layer's norms (after RoPE)
    x += attn_out(attention(q, k, v, mask))              per modality; k, v go to the cache
    x += ffn_down(silu(ffn_gate(h)) * ffn_up(h)), h = w_ffn * rms(x)      per modality

RoPE is the dynamic-alpha form: base = theta * alpha^(d / (d - 2)). The expert runs every suffix row
through its image-patch weights (the suffix's modality is all-vision in the reference), with the
LM layer's q/k norms, reading [prefix cache ; its own rows]. As in pi0 (heads/action_time_expert.py),
the state token reads only the prefix and itself, so its K/V are appended to the cache once per
observation and each solver step runs only the action rows.

Runtime tensor names under `<stack>.blk.{i}.` (LM: `lm`, expert: `expert`, which keeps only its `_v`
set, named without the suffix) and the checkpoint's under `layers.{i}.`:
    attn_norm[_v].weight        input_layernorm[_v].weight
    ffn_norm[_v].weight         post_attention_layernorm[_v].weight
    attn_qkv[_v].weight         self_attn.{q,k,v}_proj[_v].weight stacked     [(H + 2K) d, D]
    attn_out[_v].weight         self_attn.o_proj[_v].weight
    ffn_gate_up[_v].weight      mlp[_v].{gate,up}_proj.weight stacked          [2F, D]
    ffn_down[_v].weight         mlp[_v].down_proj.weight
    q_norm.weight, k_norm.weight     self_attn.{query,key}_layernorm.weight (LM only)   [d]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from embodied_ros.backbone import llama
from embodied_ros.backbone.checks import require
from embodied_ros.backbone.llama import LlamaConfig
from embodied_ros.backbone.prefix_cache import PrefixCache, PrefixCacheBuilder
from embodied_ros.kernels.attention_bf16 import attention_for, cached_attention_for
from embodied_ros.kernels.rope import rope_tables

VISION = "_v"
LAYER_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}
HEAD_NORM_NAMES = {"self_attn.query_layernorm": "q_norm", "self_attn.key_layernorm": "k_norm"}


@dataclass(frozen=True)
class MoTConfig(LlamaConfig):
    """A Llama-shaped stack (one of its two weight sets per layer) with dynamic-alpha RoPE."""

    rope_alpha: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.head_dim > 2 and self.rope_alpha > 0,
                f"dynamic-alpha RoPE needs head_dim > 2 and alpha > 0, got {self.head_dim}, {self.rope_alpha}")

    @property
    def rope_base(self) -> float:
        return self.rope_theta * self.rope_alpha ** (self.head_dim / (self.head_dim - 2))

    def rope(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return rope_tables(positions, self.head_dim, self.rope_base)


def split_qkv(ks, cfg: MoTConfig, qkv: np.ndarray, rope, head_norms: Mapping[str, Any]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Projected rows [n, (H + 2K) d] -> queries [n, H, d], keys [n, K, d] (RoPE, then the q/k norms of
    `head_norms`, an LM layer's tensors), values [n, K, d]."""
    n, q_width, kv_width = qkv.shape[0], cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    queries = ks.rope(np.ascontiguousarray(qkv[:, :q_width]).reshape(n, cfg.num_heads, cfg.head_dim), *rope)
    keys = ks.rope(np.ascontiguousarray(qkv[:, q_width:q_width + kv_width]).reshape(n, cfg.num_kv_heads,
                                                                                    cfg.head_dim), *rope)
    values = np.ascontiguousarray(qkv[:, q_width + kv_width:]).reshape(n, cfg.num_kv_heads, cfg.head_dim)
    return (llama.head_norm(ks, queries, head_norms["q_norm.weight"], cfg.eps),
            llama.head_norm(ks, keys, head_norms["k_norm.weight"], cfg.eps), values)


def normed_qkv(ks, cfg: MoTConfig, w: Mapping[str, Any], x: np.ndarray, modality: str = "") -> np.ndarray:
    """Rows [n, D] of one modality -> their projections [n, (H + 2K) d] (the attention norm included)."""
    return ks.linear(llama.norm(ks, x, w[f"attn_norm{modality}.weight"], cfg.eps), w[f"attn_qkv{modality}.weight"])


def feed_forward(ks, cfg: MoTConfig, w: Mapping[str, Any], x: np.ndarray, modality: str = "") -> np.ndarray:
    """Rows [n, D] of one modality -> the MLP's residual update (its norm included)."""
    h = llama.norm(ks, x, w[f"ffn_norm{modality}.weight"], cfg.eps)
    return ks.feed_forward(h, w[f"ffn_gate_up{modality}.weight"], None, w[f"ffn_down{modality}.weight"], None,
                           "silu_glu")


def _routed(x: np.ndarray, vision_rows: np.ndarray, out_width: int,
            fn: Callable[[np.ndarray, str], np.ndarray]) -> np.ndarray:
    """fn(rows, modality) on the text rows and on the image-patch rows of x [n, ...] -> [n, out_width]."""
    out = np.empty((x.shape[0], out_width), np.float32)
    for modality, rows in (("", ~vision_rows), (VISION, vision_rows)):
        if rows.any():
            out[rows] = fn(np.ascontiguousarray(x[rows]), modality)
    return out


def prefix_pass(ks, cfg: MoTConfig, layers: Sequence[Mapping[str, Any]], x: np.ndarray, vision_rows: np.ndarray,
                positions: np.ndarray, bias: np.ndarray, cache: PrefixCacheBuilder) -> None:
    """The prefix [n, D] through every layer once, writing each layer's K/V into `cache`; nothing reads the
    prefix's output, so the last layer stops after its K/V. bias: [n, n] additive attention mask."""
    rope = cfg.rope(positions)
    qkv_width = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
    for index, w in enumerate(layers):
        qkv = _routed(x, vision_rows, qkv_width, lambda rows, modality: normed_qkv(ks, cfg, w, rows, modality))
        queries, keys, values = split_qkv(ks, cfg, qkv, rope, w)
        cache.write(index, keys, values)
        if index == len(layers) - 1:
            break
        attended = attention_for(ks, w["attn_qkv.weight"])(queries, keys, values, bias).reshape(x.shape[0], -1)
        x = x + _routed(attended, vision_rows, cfg.width,
                        lambda rows, modality: ks.linear(rows, w[f"attn_out{modality}.weight"]))
        x = x + _routed(x, vision_rows, cfg.width, lambda rows, modality: feed_forward(ks, cfg, w, rows, modality))


# ---- the action expert --------------------------------------------------------------------------------

def expert_layer(ks, cfg: MoTConfig, w: Mapping[str, Any], head_norms: Mapping[str, Any], x: np.ndarray,
                 cache_keys: np.ndarray, cache_values: np.ndarray, cache_bias: np.ndarray | None, rope,
                 last: bool = False):
    """One expert layer over rows x [m, E] reading [cache rows ; its own rows] -> (x, keys, values)."""
    queries, keys, values = split_qkv(ks, cfg, normed_qkv(ks, cfg, w, x), rope, head_norms)
    if last:
        return x, keys, values
    attend = cached_attention_for(ks, w["attn_qkv.weight"])
    attended = attend(queries, cache_keys, cache_values, cache_bias, keys, values)
    x = x + ks.linear(attended.reshape(x.shape[0], -1), w["attn_out.weight"])
    return x + feed_forward(ks, cfg, w, x), keys, values


def state_kv(ks, cfg: MoTConfig, layers: Sequence[Mapping[str, Any]], lm_layers: Sequence[Mapping[str, Any]],
             cache: PrefixCache, token: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The state token [1, E] through every expert layer at position cache.n_valid -> its keys and values
    [layers, 1, K, d] (the last layer stops after them)."""
    rope = cfg.rope(np.array([cache.n_valid]))
    keys = np.empty((len(layers), 1, cfg.num_kv_heads, cfg.head_dim), np.float32)
    values = np.empty_like(keys)
    x = token
    for index, (w, norms) in enumerate(zip(layers, lm_layers)):
        x, keys[index], values[index] = expert_layer(ks, cfg, w, norms, x, cache.keys[index], cache.values[index],
                                                     cache.key_bias, rope, last=index == len(layers) - 1)
    return keys, values


def expert_pass(ks, cfg: MoTConfig, layers: Sequence[Mapping[str, Any]], lm_layers: Sequence[Mapping[str, Any]],
                cache: PrefixCache, x: np.ndarray, rope) -> np.ndarray:
    """Action rows [C, E] through every expert layer over the cache (state token included) -> [C, E]."""
    for index, (w, norms) in enumerate(zip(layers, lm_layers)):
        x = expert_layer(ks, cfg, w, norms, x, cache.keys[index], cache.values[index], cache.key_bias, rope)[0]
    return x
