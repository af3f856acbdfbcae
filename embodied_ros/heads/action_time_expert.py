"""pi0's action expert: plain Gemma layers over [state token, action tokens], the flow time mixed
into each action token by an MLP (no adaptive norm).

Axes: C chunk (action tokens), A padded action width, S padded state width, E expert width,
H heads, K kv heads, d head width.

    state token  s = state_in(state)                                           [1, E]
    action token a_j = action_time_out(silu(action_time_in([action_in(x_t[j]) | emb(t)])))   [C, E]
    suffix [s, a_0..a_{C-1}] at positions n_valid + 0..C
    per layer i:  h = rms(x) * (1 + w_attn);  q, k, v from h, RoPE
                  x += attn_out(attention over [cache_i ; suffix k, v]);  h = rms(x) * (1 + w_ffn);  x += ffn(h)
    v = action_out(rms(a rows) * (1 + w_final))                                [C, A]

The state token reads only the prefix and itself, never an action token, so its keys and values
in every layer depend on the observation alone: `append_state_token` runs it through the expert
once per observation and appends its K/V to the prefix cache as one more row. Every solver step
then runs only the C action tokens, each reading [prefix ; state ; all action tokens] with no
mask inside the suffix: exactly the reference's block mask. `action_time_in`'s columns split into
an action part (a product per step) and a time part, which with its bias becomes one [E] vector
per solver time, computed at load (`time_bias`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone import gemma
from embodied_ros.backbone.prefix_cache import PrefixCache
from embodied_ros.heads.flow import time_embedding
from embodied_ros.kernels.attention_bf16 import cached_attention_for
from embodied_ros.kernels.silu import silu
from embodied_ros.kernels.quant import QuantTensor

if TYPE_CHECKING:
    from embodied_ros.backbone.gemma import GemmaConfig


def split_action_time_in(weight: Any, width: int) -> tuple[np.ndarray, np.ndarray]:
    """action_time_in [E, 2E] -> (action part [E, E], time part [E, E]), float32 C-contiguous."""
    dense = weight.dequantize() if isinstance(weight, QuantTensor) else np.asarray(weight, np.float32)
    return np.ascontiguousarray(dense[:, :width]), np.ascontiguousarray(dense[:, width:])


def time_bias(time_part: np.ndarray, bias: np.ndarray, t: float, min_period: float,
              max_period: float) -> np.ndarray:
    """The time half of action_time_in plus its bias at solver time t: [E] float32."""
    emb = time_embedding(t, time_part.shape[1], min_period, max_period)
    return (time_part @ emb + np.asarray(bias, np.float32)).astype(np.float32)


def decoder_layer(ks, cfg: "GemmaConfig", w: Mapping[str, Any], x: np.ndarray, cache_keys: np.ndarray,
                  cache_values: np.ndarray, cache_bias: np.ndarray | None,
                  rope: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """One expert layer: x [n, E] -> [n, E], attending to [cache rows ; its own n tokens]."""
    queries, keys, values = gemma.project_qkv(ks, cfg, w, ks.rms_norm(x, w["attn_norm.weight"], cfg.eps), *rope)
    attend = cached_attention_for(ks, w["attn_qkv.weight"])
    x = x + gemma.attention_output(ks, w, attend(queries, cache_keys, cache_values, cache_bias, keys, values))
    return x + gemma.feed_forward(ks, w, ks.rms_norm(x, w["ffn_norm.weight"], cfg.eps))


def state_pass(ks, cfg: "GemmaConfig", weights: Mapping[str, Any], layers: Sequence[Mapping[str, Any]],
               cache: PrefixCache, state: np.ndarray, rope: tuple[np.ndarray, np.ndarray],
               full_last_layer: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The state token through every expert layer -> (keys, values [layers, 1, K, d], hidden [1, E]).

    state: [S] model-space, padded; rope: (cos, sin) [1, d] at position cache.n_valid. The hidden
    state is the last layer's output with `full_last_layer` (a test tap), else that layer's input:
    nothing reads the state token's output, so the last layer stops after its K/V.
    """
    x = ks.linear(np.asarray(state, np.float32)[None, :], weights["state_in.weight"], weights["state_in.bias"])
    keys = np.empty((len(layers), 1, cfg.num_kv_heads, cfg.head_dim), np.float32)
    values = np.empty_like(keys)
    for index, w in enumerate(layers):
        h = ks.rms_norm(x, w["attn_norm.weight"], cfg.eps)
        queries, keys[index], values[index] = gemma.project_qkv(ks, cfg, w, h, *rope)
        if index == len(layers) - 1 and not full_last_layer:
            break
        attended = cached_attention_for(ks, w["attn_qkv.weight"])(queries, cache.keys[index], cache.values[index],
                                                                  cache.key_bias, keys[index], values[index])
        x = x + gemma.attention_output(ks, w, attended)
        x = x + gemma.feed_forward(ks, w, ks.rms_norm(x, w["ffn_norm.weight"], cfg.eps))
    return keys, values, x


def append_state_token(cache: PrefixCache, keys: np.ndarray, values: np.ndarray) -> PrefixCache:
    """The prefix cache with the state token's K/V [layers, 1, K, d] as one more valid row."""
    layers = keys.shape[0]
    return PrefixCache(np.concatenate([cache.keys[:layers], keys], axis=1),
                       np.concatenate([cache.values[:layers], values], axis=1),
                       np.append(cache.valid, True), cache.stamp_ns)


def action_tokens(ks, weights: Mapping[str, Any], action_part: Any, x_t: np.ndarray,
                  step_time_bias: np.ndarray) -> np.ndarray:
    """x_t [C, A] -> action tokens [C, E] at the step's time."""
    actions = ks.linear(x_t, weights["action_in.weight"], weights["action_in.bias"])
    hidden = silu(ks.linear(actions, action_part, step_time_bias))
    return ks.linear(hidden, weights["action_time_out.weight"], weights["action_time_out.bias"])


def velocity(ks, cfg: "GemmaConfig", weights: Mapping[str, Any], layers: Sequence[Mapping[str, Any]],
             action_part: Any, cache: PrefixCache, x_t: np.ndarray, step_time_bias: np.ndarray,
             rope: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """x_t [C, A] -> v [C, A]. cache: the prefix with the state token appended; rope: (cos, sin)
    [C, d] at positions cache.n_valid + 0..C-1."""
    x = action_tokens(ks, weights, action_part, x_t, step_time_bias)
    for index, w in enumerate(layers):
        x = decoder_layer(ks, cfg, w, x, cache.keys[index], cache.values[index], cache.key_bias, rope)
    return ks.linear(ks.rms_norm(x, weights["expert.final_norm.weight"], cfg.eps), weights["action_out.weight"],
                     weights["action_out.bias"])
