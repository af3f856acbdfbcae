"""GR00T N1.7 flow-matching action head, pure functions over arrays.

    vl = vl_self_attention(vlln(backbone rows))            unmasked transformer blocks over all rows
    sf = state_encoder(state)                              one row, embodiment-specific weights
    per Euler step k (integer timestep t_k = int(k/N * buckets), x from noise at t=0 to actions at t=1):
        f = action_encoder(x, t_k) + position_embedding    embodiment-specific, H rows
        z = DiT([sf ; f], temb(t_k), vl)                    blocks alternate self-attention and
                                                            cross-attention to the text or image rows
        x += action_decoder(z)[1:] / N

Embodiment-specific ("category-specific") layers store W [categories, in, out], b [categories, out]
and compute x @ W[e] + b[e]. Conditioning splits: DiT blocks take (scale, shift) = split(norm1(silu(temb)))
and apply LN(z) * (1 + scale) + shift; the output takes (shift, scale) = split(out_1(silu(temb))).
Weights use the runtime names of models/groot/weights.py (`head.*`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.heads.flow import silu
from embodied_ros.kernels import KernelSet

Weights = Mapping[str, Any]
LN_EPS = 1e-5
OUTPUT_LN_EPS = 1e-6
TIMESTEP_FEATURES = 256


def category_linear(w: Weights, prefix: str, x: np.ndarray, embodiment: int) -> np.ndarray:
    return x @ w[f"{prefix}.weight"][embodiment] + w[f"{prefix}.bias"][embodiment]


def plain_layer_norm(ks: KernelSet, x: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm without affine parameters."""
    width = x.shape[-1]
    return ks.layer_norm(x, np.ones(width, np.float32), np.zeros(width, np.float32), eps)


def euler_timesteps(steps: int, buckets: int) -> list[int]:
    return [int(k / steps * buckets) for k in range(steps)]


def sinusoid(t: float, width: int) -> np.ndarray:
    """The action encoder's time features [width]: [sin(t * f), cos(t * f)], f_i = exp(-i ln(10000) / (width/2))."""
    half = width // 2
    freq = np.exp(-np.arange(half, dtype=np.float32) * np.float32(math.log(10000.0) / half)).astype(np.float32)
    angles = np.float32(t) * freq
    return np.concatenate([np.sin(angles), np.cos(angles)]).astype(np.float32)


def timestep_projection(t: float) -> np.ndarray:
    """The DiT timestep features [256]: [cos(t * g), sin(t * g)], g_i = exp(-ln(10000) i / 127)."""
    half = TIMESTEP_FEATURES // 2
    g = np.exp(-np.float32(math.log(10000.0)) * np.arange(half, dtype=np.float32) / np.float32(half - 1))
    angles = np.float32(t) * g.astype(np.float32)
    return np.concatenate([np.cos(angles), np.sin(angles)]).astype(np.float32)


def time_embedding(ks: KernelSet, w: Weights, t: float) -> np.ndarray:
    """temb [1, D] of an integer timestep."""
    hidden = silu(ks.linear(timestep_projection(t)[None, :], w["head.time.1.weight"], w["head.time.1.bias"]))
    return ks.linear(hidden, w["head.time.2.weight"], w["head.time.2.bias"])


def attention(ks: KernelSet, layer: Weights, heads: int, head_dim: int, queries: np.ndarray,
              context: np.ndarray) -> np.ndarray:
    """Unmasked multi-head attention with biased q/k/v/out projections."""
    q = ks.linear(queries, layer["attn_q.weight"], layer["attn_q.bias"]).reshape(queries.shape[0], heads, head_dim)
    k = ks.linear(context, layer["attn_k.weight"], layer["attn_k.bias"]).reshape(context.shape[0], heads, head_dim)
    v = ks.linear(context, layer["attn_v.weight"], layer["attn_v.bias"]).reshape(context.shape[0], heads, head_dim)
    attended = ks.attention(q, k, v).reshape(queries.shape[0], heads * head_dim)
    return ks.linear(attended, layer["attn_out.weight"], layer["attn_out.bias"])


def feed_forward(ks: KernelSet, layer: Weights, x: np.ndarray) -> np.ndarray:
    hidden = ks.gelu_tanh(ks.linear(x, layer["ff_in.weight"], layer["ff_in.bias"]))
    return ks.linear(hidden, layer["ff_out.weight"], layer["ff_out.bias"])


def vl_embeddings(ks: KernelSet, cfg, w: Weights, layers: Sequence[Weights], backbone_rows: np.ndarray) -> np.ndarray:
    """vl_self_attention(vlln(rows)): [L, d] -> [L, d]."""
    x = ks.layer_norm(backbone_rows, w["head.vlln.weight"], w["head.vlln.bias"], LN_EPS)
    for layer in layers:
        h = ks.layer_norm(x, layer["ln1.weight"], layer["ln1.bias"], LN_EPS)
        x = x + attention(ks, layer, cfg.vl_num_heads, cfg.vl_head_dim, h, h)
        x = x + feed_forward(ks, layer, ks.layer_norm(x, layer["ln3.weight"], layer["ln3.bias"], LN_EPS))
    return x


def state_features(w: Weights, state: np.ndarray, embodiment: int) -> np.ndarray:
    """Normalized, zero-padded state [max_state_dim] -> [1, D]."""
    hidden = np.maximum(category_linear(w, "head.state.1", state[None, :].astype(np.float32), embodiment), 0)
    return category_linear(w, "head.state.2", hidden, embodiment)


def action_features(cfg, w: Weights, x: np.ndarray, t: float, embodiment: int) -> np.ndarray:
    """Noisy actions [H, max_action_dim] at integer timestep t -> [H, D]."""
    embedded = category_linear(w, "head.action_in.1", x, embodiment)
    time = np.broadcast_to(sinusoid(t, cfg.width), embedded.shape)
    hidden = silu(category_linear(w, "head.action_in.2", np.concatenate([embedded, time], axis=-1), embodiment))
    return category_linear(w, "head.action_in.3", hidden, embodiment) + w["head.position"][: x.shape[0]]


def dit(ks: KernelSet, cfg, w: Weights, blocks: Sequence[Weights], z: np.ndarray, temb: np.ndarray,
        vl: np.ndarray, text_rows: np.ndarray, image_rows: np.ndarray) -> np.ndarray:
    """DiT over [state; actions] rows z [1+H, D] -> [1+H, hidden_size]."""
    conditioning = silu(temb)
    context = {"cross_attn_text": vl[text_rows], "cross_attn_image": vl[image_rows]}
    for kind, block in zip(cfg.block_kinds, blocks):
        scale, shift = np.split(ks.linear(conditioning, block["ada.weight"], block["ada.bias"]), 2, axis=-1)
        y = plain_layer_norm(ks, z, LN_EPS) * (np.float32(1.0) + scale) + shift
        z = z + attention(ks, block, cfg.num_heads, cfg.head_dim, y, y if kind == "self_attn" else context[kind])
        z = z + feed_forward(ks, block, plain_layer_norm(ks, z, LN_EPS))
    shift, scale = np.split(ks.linear(conditioning, w["head.out_1.weight"], w["head.out_1.bias"]), 2, axis=-1)
    z = plain_layer_norm(ks, z, OUTPUT_LN_EPS) * (np.float32(1.0) + scale) + shift
    return ks.linear(z, w["head.out_2.weight"], w["head.out_2.bias"])


def velocity(ks: KernelSet, cfg, w: Weights, blocks: Sequence[Weights], x: np.ndarray, t: float,
             state_rows: np.ndarray, vl: np.ndarray, text_rows: np.ndarray, image_rows: np.ndarray,
             embodiment: int, temb: np.ndarray | None = None) -> np.ndarray:
    """Action decoder output at the action rows [H, max_action_dim]."""
    temb = time_embedding(ks, w, t) if temb is None else temb
    z = np.concatenate([state_rows, action_features(cfg, w, x, t, embodiment)])
    hidden = dit(ks, cfg, w, blocks, z, temb, vl, text_rows, image_rows)
    decoded = category_linear(w, "head.action_out.2",
                              np.maximum(category_linear(w, "head.action_out.1", hidden, embodiment), 0), embodiment)
    return decoded[state_rows.shape[0]:]
