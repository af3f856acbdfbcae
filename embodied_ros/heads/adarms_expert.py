"""The pi0.5 action expert: one velocity evaluation of the flow, reading the prefix cache.

Axes: C chunk (action tokens), A padded action width (max_action_dim), E expert width, H heads,
K kv heads, d head width.

Time conditioning (depends on t only):
    emb  = [sin(a), cos(a)],  a = t * 2 pi / period,  period = min * (max / min)^linspace(0, 1, E / 2)
    cond = silu(time_out(silu(time_in(emb))))
    (scale, shift, gate) = split3(norm_dense(cond)) for each adaptive norm
Velocity:
    x = action_in(x_t)                                            [C, E]
    per layer i:  h = rms(x) * (1 + scale) + shift
                  q, k, v from h, RoPE at positions n_valid + 0..C-1
                  x += attn_out(cached_attention(q, [cache_i ; k], [cache_i ; v])) * gate
                  h = rms(x) * (1 + scale2) + shift2;   x += ffn(h) * gate2
    v = action_out(rms(x) * (1 + scale_f) + shift_f)              [C, A]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone import gemma
from embodied_ros.backbone.prefix_cache import PrefixCache
from embodied_ros.heads.flow import time_embedding
from embodied_ros.kernels.attention_bf16 import cached_attention_for
from embodied_ros.kernels.silu import silu

if TYPE_CHECKING:
    from embodied_ros.backbone.gemma import GemmaConfig

Modulation = tuple[np.ndarray, np.ndarray, np.ndarray]  # scale [E], shift [E], gate [1, E]


@dataclass(frozen=True)
class StepConditioning:
    """Everything of one solver step that depends on t alone: the same for every observation."""

    t: float
    attn: tuple[Modulation, ...]  # per layer, before attention
    ffn: tuple[Modulation, ...]  # per layer, before the MLP
    final: Modulation  # final norm (its gate is unused)


def modulation(ks, dense_weight: Any, dense_bias: np.ndarray, cond: np.ndarray) -> Modulation:
    """(scale, shift, gate) of one adaptive norm from the time conditioning cond [1, E]."""
    scale, shift, gate = np.split(ks.linear(cond, dense_weight, dense_bias)[0], 3)
    return scale, shift, gate[None, :]


def step_conditioning(ks, weights: Mapping[str, Any], layers: Sequence[Mapping[str, Any]], t: float,
                      min_period: float, max_period: float) -> StepConditioning:
    """weights: runtime tensors (`time_*`, `expert.final_norm.*`); layers: expert layer tensors."""
    width = weights["time_in.weight"].shape[1]
    emb = time_embedding(t, width, min_period, max_period)[None, :]
    hidden = silu(ks.linear(emb, weights["time_in.weight"], weights["time_in.bias"]))
    cond = silu(ks.linear(hidden, weights["time_out.weight"], weights["time_out.bias"]))  # [1, E]
    return StepConditioning(
        t=float(t),
        attn=tuple(modulation(ks, w["attn_norm.weight"], w["attn_norm.bias"], cond) for w in layers),
        ffn=tuple(modulation(ks, w["ffn_norm.weight"], w["ffn_norm.bias"], cond) for w in layers),
        final=modulation(ks, weights["expert.final_norm.weight"], weights["expert.final_norm.bias"], cond),
    )


def expert_layer(ks, cfg: "GemmaConfig", w: Mapping[str, Any], x: np.ndarray, cache_keys: np.ndarray,
                 cache_values: np.ndarray, cache_bias: np.ndarray | None, attn: Modulation, ffn: Modulation,
                 rope: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """One expert layer: x [C, E] -> [C, E], reading its LM layer's cache [n, K, d] (bias [n] or None)."""
    scale, shift, gate = attn
    queries, keys, values = gemma.project_qkv(ks, cfg, w, ks.ada_rms_norm(x, scale, shift, cfg.eps), *rope)
    attended = cached_attention_for(ks, w["attn_qkv.weight"])(queries, cache_keys, cache_values, cache_bias, keys,
                                                             values)
    x = ks.gated_residual(x, gemma.attention_output(ks, w, attended), gate)
    scale, shift, gate = ffn
    return ks.gated_residual(x, gemma.feed_forward(ks, w, ks.ada_rms_norm(x, scale, shift, cfg.eps)), gate)


def velocity(ks, cfg: "GemmaConfig", weights: Mapping[str, Any], layers: Sequence[Mapping[str, Any]],
             cache: PrefixCache, x_t: np.ndarray, conditioning: StepConditioning,
             rope: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """x_t [C, A] -> v [C, A]; rope: (cos, sin) [C, d] at positions cache.n_valid + 0..C-1."""
    x = ks.linear(x_t, weights["action_in.weight"], weights["action_in.bias"])
    for index, w in enumerate(layers):
        x = expert_layer(ks, cfg, w, x, cache.keys[index], cache.values[index], cache.key_bias,
                         conditioning.attn[index], conditioning.ffn[index], rope)
    scale, shift, _ = conditioning.final
    return ks.linear(ks.ada_rms_norm(x, scale, shift, cfg.eps), weights["action_out.weight"],
                     weights["action_out.bias"])
