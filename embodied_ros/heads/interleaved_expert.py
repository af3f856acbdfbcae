"""SmolVLA's action expert: Llama-style layers that alternate self-attention over [prefix ; actions]
with cross-attention to the VLM's cached keys and values; one velocity evaluation of the flow.

Axes: C chunk (action tokens), A padded action width, E expert width, n prefix rows, H heads,
K kv heads, d head width (heads and head width are the VLM's).

Action tokens (per step):
    a = action_time_out(silu(action_time_in([action_in(x_t) | time_emb(t)])))         [C, E]
Expert layer paired with VLM layer i, h = w_in * rms(x):
    self   q, k, v = expert projections of h, RoPE at positions n_valid + 0..C-1;
           keys/values = [VLM cache_i ; k, v]; action j reads the valid prefix and actions 0..j
    cross  q = expert q_proj(h), RoPE at positions 0..C-1;
           keys, values = expert k_proj / v_proj of the VLM cache_i rows (post-RoPE keys flattened
           to K*d per row, no second RoPE); reads the valid prefix only
    x += attn_out(attention);  h = w_post * rms(x);  x += down(silu(gate(h)) * up(h))
    v = action_out(w_final * rms(x))                                                   [C, A]

The cross layers' keys and values depend on the observation only, so `SuffixContext` projects
them once per prefix cache and every solver step reuses them.

Runtime tensor names under `expert.blk.{j}.`: the Llama names of backbone/llama.py for self
layers; cross layers have `attn_q.weight` [H d, E] and `attn_kv.weight` [2 K d, K d] (k_proj and
v_proj stacked) instead of `attn_qkv.weight`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone import gemma, llama
from embodied_ros.backbone.llama import LlamaConfig
from embodied_ros.backbone.prefix_cache import PrefixCache
from embodied_ros.kernels.attention import MASKED
from embodied_ros.kernels.attention_bf16 import attention_for

SELF, CROSS = "self_attn", "cross_attn"


@dataclass(frozen=True)
class ExpertLayer:
    kind: str  # SELF or CROSS
    vlm_layer: int  # the VLM layer whose cache it reads
    weights: Mapping[str, Any]  # tensors without the `expert.blk.{j}.` prefix


def layer_plan(num_vlm_layers: int, num_expert_layers: int, self_attn_every_n_layers: int) -> list[tuple[str, int]]:
    """(kind, VLM layer) of each expert layer, in order. With m = vlm / expert layers, VLM layer i
    has an expert layer iff i % m == 0; its kind is self-attention iff i % every_n == 0."""
    if num_expert_layers <= 0 or num_vlm_layers % num_expert_layers:
        raise ValueError(f"{num_vlm_layers} VLM layers cannot be paired with {num_expert_layers} expert layers")
    if self_attn_every_n_layers <= 0:
        raise ValueError(f"self_attn_every_n_layers must be positive, got {self_attn_every_n_layers}")
    step = num_vlm_layers // num_expert_layers
    return [(SELF if i % self_attn_every_n_layers == 0 else CROSS, i) for i in range(0, num_vlm_layers, step)]


def layer_shapes(cfg: LlamaConfig, kind: str) -> dict[str, tuple[int, ...]]:
    shapes = llama.layer_shapes(cfg)
    if kind == CROSS:
        del shapes["attn_qkv.weight"]
        shapes["attn_q.weight"] = (cfg.q_rows, cfg.width)
        shapes["attn_kv.weight"] = (2 * cfg.kv_rows, cfg.kv_rows)
    return shapes


@dataclass(frozen=True)
class SuffixContext:
    """What every solver step of one observation shares: RoPE tables, masks, cross keys/values."""

    self_rope: tuple[np.ndarray, np.ndarray]  # [C, d] at n_valid + 0..C-1
    cross_rope: tuple[np.ndarray, np.ndarray]  # [C, d] at 0..C-1
    self_bias: np.ndarray  # [C, n + C]: masked prefix rows, causal among the actions
    cross_bias: np.ndarray | None  # [C, n] masked prefix rows, None when every row is valid
    cross_kv: Mapping[int, tuple[np.ndarray, np.ndarray]]  # expert layer index -> keys, values [n, K, d]


def suffix_context(ks, cfg: LlamaConfig, layers: Sequence[ExpertLayer], cache: PrefixCache,
                   chunk: int) -> SuffixContext:
    n = cache.num_rows
    key_bias = np.zeros(n, np.float32) if cache.key_bias is None else cache.key_bias
    causal = np.where(np.tril(np.ones((chunk, chunk), bool)), np.float32(0.0), MASKED).astype(np.float32)
    self_bias = np.concatenate([np.broadcast_to(key_bias, (chunk, n)), causal], axis=1)
    cross_bias = None if cache.key_bias is None else np.ascontiguousarray(np.broadcast_to(key_bias, (chunk, n)))
    cross_kv = {}
    for index, layer in enumerate(layers):
        if layer.kind == CROSS:
            rows = lambda a: np.ascontiguousarray(a[layer.vlm_layer]).reshape(n, cfg.kv_rows)  # noqa: E731
            keys_in, values_in = rows(cache.keys), rows(cache.values)
            k_w = gemma.row_slice(layer.weights["attn_kv.weight"], 0, cfg.kv_rows)
            v_w = gemma.row_slice(layer.weights["attn_kv.weight"], cfg.kv_rows, 2 * cfg.kv_rows)
            shape = (n, cfg.num_kv_heads, cfg.head_dim)
            cross_kv[index] = (ks.linear(keys_in, k_w).reshape(shape), ks.linear(values_in, v_w).reshape(shape))
    positions = np.arange(chunk)
    return SuffixContext(llama.rope_tables(cache.n_valid + positions, cfg.head_dim, cfg.rope_theta),
                         llama.rope_tables(positions, cfg.head_dim, cfg.rope_theta),
                         self_bias, cross_bias, cross_kv)


def action_tokens(ks, weights: Mapping[str, Any], x_t: np.ndarray, time_emb: np.ndarray) -> np.ndarray:
    """x_t [C, A], time_emb [E] -> [C, E]."""
    actions = ks.linear(x_t, weights["action_in.weight"], weights["action_in.bias"])
    joined = np.concatenate([actions, np.broadcast_to(time_emb, actions.shape)], axis=1)
    hidden = ks.silu(ks.linear(joined, weights["action_time_in.weight"], weights["action_time_in.bias"]))
    return ks.linear(hidden, weights["action_time_out.weight"], weights["action_time_out.bias"])


def _split(projected: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    return projected.reshape(projected.shape[0], heads, head_dim)


def attend(ks, cfg: LlamaConfig, index: int, layer: ExpertLayer, h: np.ndarray, cache: PrefixCache,
           context: SuffixContext) -> np.ndarray:
    """Normed action tokens [C, E] -> attention result [C, H, d] of expert layer `index`."""
    w = layer.weights
    if layer.kind == SELF:
        queries, keys, values = gemma.project_qkv(ks, cfg, w, h, *context.self_rope)
        keys = np.concatenate([cache.keys[layer.vlm_layer], keys])
        values = np.concatenate([cache.values[layer.vlm_layer], values])
        return attention_for(ks, w["attn_qkv.weight"])(queries, keys, values, context.self_bias)
    queries = ks.rope(_split(ks.linear(h, w["attn_q.weight"]), cfg.num_heads, cfg.head_dim), *context.cross_rope)
    keys, values = context.cross_kv[index]
    return attention_for(ks, w["attn_q.weight"])(queries, keys, values, context.cross_bias)


def hidden_states(ks, cfg: LlamaConfig, layers: Sequence[ExpertLayer], tokens: np.ndarray, cache: PrefixCache,
                  context: SuffixContext) -> np.ndarray:
    """Action tokens [C, E] -> output of the last expert layer (before the final norm)."""
    x = tokens
    for index, layer in enumerate(layers):
        h = llama.norm(ks, x, layer.weights["attn_norm.weight"], cfg.eps)
        x = x + gemma.attention_output(ks, layer.weights, attend(ks, cfg, index, layer, h, cache, context))
        x = x + llama.feed_forward(ks, layer.weights, llama.norm(ks, x, layer.weights["ffn_norm.weight"], cfg.eps))
    return x


def velocity(ks, cfg: LlamaConfig, weights: Mapping[str, Any], layers: Sequence[ExpertLayer], cache: PrefixCache,
             context: SuffixContext, x_t: np.ndarray, time_emb: np.ndarray) -> np.ndarray:
    """x_t [C, A] -> v [C, A]."""
    x = hidden_states(ks, cfg, layers, action_tokens(ks, weights, x_t, time_emb), cache, context)
    normed = llama.norm(ks, x, weights["expert.final_norm.weight"], cfg.eps)
    return ks.linear(normed, weights["action_out.weight"], weights["action_out.bias"])
