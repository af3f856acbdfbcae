"""GR00T N1.7 flow-matching action head, pure functions over arrays.

    vl = vl_self_attention(vlln(backbone rows))            unmasked transformer blocks over all rows
    sf = state_encoder(state)                              one row, embodiment-specific weights
    per Euler step k (integer timestep t_k = int(k/N * buckets), x from noise at t=0 to actions at t=1):
        f = action_encoder(x, t_k) + position_embedding    embodiment-specific, H rows
        z = DiT([sf ; f], temb(t_k), vl)                    blocks alternate self-attention and
                                                            cross-attention to the text or image rows
        x += action_decoder(z)[1:] / N

Embodiment-specific ("category-specific") layers store W [categories, in, out], b [categories, out]
and compute x @ W[e] + b[e]; `embodiment_weights` takes one embodiment's slices once, as [out, in]
products. Conditioning splits: DiT blocks take (scale, shift) = split(norm1(silu(temb))) and apply
LN(z) * (1 + scale) + shift; the output takes (shift, scale) = split(out_1(silu(temb))).

Nothing is computed twice: the conditioning depends only on the step (`step_conditioning`, once per
model), the cross-attention keys and values only on the vl rows (`cross_keys_values`, once per chunk).
Weights use the runtime names of models/groot/weights.py (`head.*`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.kernels.silu import silu
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels.quant import QuantTensor

Weights = Mapping[str, Any]
LN_EPS = 1e-5
OUTPUT_LN_EPS = 1e-6
TIMESTEP_FEATURES = 256


CATEGORY_LAYERS = ("head.state.1", "head.state.2", "head.action_in.1", "head.action_in.2", "head.action_in.3",
                   "head.action_out.1", "head.action_out.2")


def is_category_tensor(name: str) -> bool:
    return name.rsplit(".", 1)[0] in CATEGORY_LAYERS


def _category_slice(tensor: Any, embodiment: int) -> np.ndarray:
    """tensor[embodiment] as float32, reading only that embodiment's part of a stored tensor."""
    if isinstance(tensor, QuantTensor):
        return QuantTensor(tensor.qtype, tensor.shape[1:], tensor.data[embodiment]).dequantize()
    return np.asarray(tensor[embodiment], np.float32)


def embodiment_weights(w: Weights, embodiment: int) -> dict[str, np.ndarray]:
    """One embodiment's category-specific layers as [out, in] weights and [out] biases. The stored
    tensors hold every embodiment (32 at the released size, 620 MB in BF16); only this one's
    slice is read and made float32."""
    chosen = {}
    for prefix in CATEGORY_LAYERS:
        chosen[f"{prefix}.weight"] = np.ascontiguousarray(_category_slice(w[f"{prefix}.weight"], embodiment).T)
        chosen[f"{prefix}.bias"] = _category_slice(w[f"{prefix}.bias"], embodiment)
    return chosen


def category_linear(ks: KernelSet, ew: Weights, prefix: str, x: np.ndarray) -> np.ndarray:
    return ks.linear(np.ascontiguousarray(x, np.float32), ew[f"{prefix}.weight"], ew[f"{prefix}.bias"])


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
              context: np.ndarray | None = None, keys_values: tuple[np.ndarray, np.ndarray] | None = None
              ) -> np.ndarray:
    """Unmasked multi-head attention with biased q/k/v/out projections; `keys_values` are the
    context's projections when they were made before (`context_keys_values`)."""
    q = ks.linear(queries, layer["attn_q.weight"], layer["attn_q.bias"]).reshape(queries.shape[0], heads, head_dim)
    k, v = keys_values if keys_values is not None else context_keys_values(ks, layer, heads, head_dim, context)
    attended = ks.attention(q, k, v).reshape(queries.shape[0], heads * head_dim)
    return ks.linear(attended, layer["attn_out.weight"], layer["attn_out.bias"])


def context_keys_values(ks: KernelSet, layer: Weights, heads: int, head_dim: int,
                        context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = ks.linear(context, layer["attn_k.weight"], layer["attn_k.bias"]).reshape(context.shape[0], heads, head_dim)
    v = ks.linear(context, layer["attn_v.weight"], layer["attn_v.bias"]).reshape(context.shape[0], heads, head_dim)
    return k, v


def feed_forward(ks: KernelSet, layer: Weights, x: np.ndarray) -> np.ndarray:
    return ks.feed_forward(x, layer["ff_in.weight"], layer["ff_in.bias"], layer["ff_out.weight"], layer["ff_out.bias"],
                           "gelu_tanh")


def vl_embeddings(ks: KernelSet, cfg, w: Weights, layers: Sequence[Weights], backbone_rows: np.ndarray) -> np.ndarray:
    """vl_self_attention(vlln(rows)): [L, d] -> [L, d]."""
    x = ks.layer_norm(backbone_rows, w["head.vlln.weight"], w["head.vlln.bias"], LN_EPS)
    for layer in layers:
        h = ks.layer_norm(x, layer["ln1.weight"], layer["ln1.bias"], LN_EPS)
        x = x + attention(ks, layer, cfg.vl_num_heads, cfg.vl_head_dim, h, h)
        x = x + feed_forward(ks, layer, ks.layer_norm(x, layer["ln3.weight"], layer["ln3.bias"], LN_EPS))
    return x


def state_features(ks: KernelSet, ew: Weights, state: np.ndarray) -> np.ndarray:
    """Normalized, zero-padded state [max_state_dim] -> [1, D]."""
    hidden = np.maximum(category_linear(ks, ew, "head.state.1", state[None, :]), 0)
    return category_linear(ks, ew, "head.state.2", hidden)


def action_features(ks: KernelSet, cfg, w: Weights, ew: Weights, x: np.ndarray, t: float) -> np.ndarray:
    """Noisy actions [H, max_action_dim] at integer timestep t -> [H, D]."""
    embedded = category_linear(ks, ew, "head.action_in.1", x)
    time = np.broadcast_to(sinusoid(t, cfg.width), embedded.shape)
    hidden = silu(category_linear(ks, ew, "head.action_in.2", np.concatenate([embedded, time], axis=-1)))
    return category_linear(ks, ew, "head.action_in.3", hidden) + w["head.position"][: x.shape[0]]


def step_conditioning(ks: KernelSet, w: Weights, blocks: Sequence[Weights], temb: np.ndarray) -> dict[str, Any]:
    """Each block's (scale, shift) and the output's (shift, scale) for one step's temb [1, D]."""
    conditioning = silu(temb)
    blocks_split = [tuple(np.split(ks.linear(conditioning, b["ada.weight"], b["ada.bias"]), 2, axis=-1))
                    for b in blocks]
    output = tuple(np.split(ks.linear(conditioning, w["head.out_1.weight"], w["head.out_1.bias"]), 2, axis=-1))
    return {"blocks": blocks_split, "output": output}


def cross_keys_values(ks: KernelSet, cfg, blocks: Sequence[Weights], vl: np.ndarray, text_rows: np.ndarray,
                      image_rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Keys and values of every cross-attention block over its rows of vl (text or image)."""
    context = {"cross_attn_text": vl[text_rows], "cross_attn_image": vl[image_rows]}
    return {b: context_keys_values(ks, block, cfg.num_heads, cfg.head_dim, context[kind])
            for b, (kind, block) in enumerate(zip(cfg.block_kinds, blocks)) if kind != "self_attn"}


def dit(ks: KernelSet, cfg, w: Weights, blocks: Sequence[Weights], z: np.ndarray, conditioning: Mapping[str, Any],
        cross: Mapping[int, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """DiT over [state; actions] rows z [1+H, D] -> [1+H, hidden_size]."""
    for b, (kind, block) in enumerate(zip(cfg.block_kinds, blocks)):
        scale, shift = conditioning["blocks"][b]
        y = plain_layer_norm(ks, z, LN_EPS) * (np.float32(1.0) + scale) + shift
        if kind == "self_attn":
            z = z + attention(ks, block, cfg.num_heads, cfg.head_dim, y, y)
        else:
            z = z + attention(ks, block, cfg.num_heads, cfg.head_dim, y, keys_values=cross[b])
        z = z + feed_forward(ks, block, plain_layer_norm(ks, z, LN_EPS))
    shift, scale = conditioning["output"]
    z = plain_layer_norm(ks, z, OUTPUT_LN_EPS) * (np.float32(1.0) + scale) + shift
    return ks.linear(z, w["head.out_2.weight"], w["head.out_2.bias"])


def velocity(ks: KernelSet, cfg, w: Weights, ew: Weights, blocks: Sequence[Weights], x: np.ndarray, t: float,
             state_rows: np.ndarray, conditioning: Mapping[str, Any],
             cross: Mapping[int, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Action decoder output at the action rows [H, max_action_dim]."""
    z = np.concatenate([state_rows, action_features(ks, cfg, w, ew, x, t)])
    hidden = dit(ks, cfg, w, blocks, z, conditioning, cross)
    decoded = category_linear(ks, ew, "head.action_out.2",
                              np.maximum(category_linear(ks, ew, "head.action_out.1", hidden), 0))
    return decoded[state_rows.shape[0]:]
