"""The Wan transformer block (diffusers `WanTransformerBlock`, Wan2.2 TI2V-5B settings) as functions.

Axes: S query tokens, P past (cached) tokens, T context tokens, D = H * Dh model width, H heads,
Dh head width, F feed-forward width.

    m = table + temb                     -> shift_a, scale_a, gate_a, shift_f, scale_f, gate_f
    x += self_attn(LN(x) * (1 + scale_a) + shift_a) * gate_a     (q/k RMS-normed across heads, 3-axis RoPE)
    x += cross_attn(LN(x) * norm2.w + norm2.b, context)          (q/k RMS-normed, no RoPE, no gate)
    x += ffn(LN(x) * (1 + scale_f) + shift_f) * gate_f           (GELU-tanh)

Every weight matrix goes through `ks.linear`, so a weight may be a float32 array or a quantized
tensor. Keys and values can be cached: `context_kv` computes the cross-attention K/V of the context
once, and self-attention takes the K/V of earlier (clean) tokens as `past` and returns its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

MODULATION_ROWS = 6  # shift_a, scale_a, gate_a, shift_f, scale_f, gate_f


@dataclass(frozen=True)
class WanBlockConfig:
    dim: int
    num_heads: int
    ffn_dim: int
    eps: float = 1e-6
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if min(self.dim, self.num_heads, self.ffn_dim) < 1:
            raise ValueError(f"Wan block sizes must be positive: dim={self.dim}, heads={self.num_heads}, "
                             f"ffn_dim={self.ffn_dim}")
        if self.dim % self.num_heads:
            raise ValueError(f"dim {self.dim} is not divisible by num_heads {self.num_heads}")
        if self.head_dim % 2 or self.head_dim < 6:
            raise ValueError(f"head width {self.head_dim} must be even and >= 6 for 3-axis RoPE")
        if not self.eps > 0:
            raise ValueError(f"eps must be positive, got {self.eps}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads


@dataclass(frozen=True)
class AttentionWeights:
    q: Any  # [D, D] float32 array or quantized tensor, (out, in)
    q_bias: np.ndarray
    k: Any
    k_bias: np.ndarray
    v: Any
    v_bias: np.ndarray
    out: Any
    out_bias: np.ndarray
    q_norm: np.ndarray  # [D]
    k_norm: np.ndarray  # [D]


@dataclass(frozen=True)
class WanBlockWeights:
    modulation: np.ndarray  # [6, D]
    self_attn: AttentionWeights
    cross_attn: AttentionWeights
    cross_norm_weight: np.ndarray  # [D]
    cross_norm_bias: np.ndarray  # [D]
    ffn_in: Any  # [F, D]
    ffn_in_bias: np.ndarray
    ffn_out: Any  # [D, F]
    ffn_out_bias: np.ndarray


# Bundle tensor names of one block, relative to its prefix (e.g. "blk.3.").
ATTENTION_TENSORS = {
    "q": "q.weight", "q_bias": "q.bias", "k": "k.weight", "k_bias": "k.bias",
    "v": "v.weight", "v_bias": "v.bias", "out": "o.weight", "out_bias": "o.bias",
    "q_norm": "q_norm.weight", "k_norm": "k_norm.weight",
}
BLOCK_TENSORS = {
    "modulation": "modulation",
    "cross_norm_weight": "cross_norm.weight", "cross_norm_bias": "cross_norm.bias",
    "ffn_in": "ffn_in.weight", "ffn_in_bias": "ffn_in.bias",
    "ffn_out": "ffn_out.weight", "ffn_out_bias": "ffn_out.bias",
    **{f"self_attn.{field}": f"self_attn.{name}" for field, name in ATTENTION_TENSORS.items()},
    **{f"cross_attn.{field}": f"cross_attn.{name}" for field, name in ATTENTION_TENSORS.items()},
}

# diffusers' `WanTransformerBlock` tensor names (inside "blocks.{i}.") -> the bundle's (inside "blk.{i}.")
DIFFUSERS_BLOCK_NAMES = {
    "scale_shift_table": "modulation",
    "norm2.weight": "cross_norm.weight",
    "norm2.bias": "cross_norm.bias",
    "ffn.net.0.proj.weight": "ffn_in.weight",
    "ffn.net.0.proj.bias": "ffn_in.bias",
    "ffn.net.2.weight": "ffn_out.weight",
    "ffn.net.2.bias": "ffn_out.bias",
    **{f"{source}.{projection}.{kind}": f"{target}.{short}.{kind}"
       for source, target in (("attn1", "self_attn"), ("attn2", "cross_attn"))
       for projection, short in (("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "o"))
       for kind in ("weight", "bias")},
    **{f"{source}.norm_{axis}.weight": f"{target}.{axis}_norm.weight"
       for source, target in (("attn1", "self_attn"), ("attn2", "cross_attn")) for axis in ("q", "k")},
}


def block_tensor_shapes(cfg: WanBlockConfig) -> dict[str, tuple[int, ...]]:
    """Bundle name (relative to the block prefix) -> expected shape."""
    d, f = cfg.dim, cfg.ffn_dim
    shapes = {"modulation": (MODULATION_ROWS, d), "cross_norm.weight": (d,), "cross_norm.bias": (d,),
              "ffn_in.weight": (f, d), "ffn_in.bias": (f,), "ffn_out.weight": (d, f), "ffn_out.bias": (d,)}
    for attn in ("self_attn", "cross_attn"):
        for projection in "qkvo":
            shapes[f"{attn}.{projection}.weight"] = (d, d)
            shapes[f"{attn}.{projection}.bias"] = (d,)
        shapes[f"{attn}.q_norm.weight"] = shapes[f"{attn}.k_norm.weight"] = (d,)
    return shapes


def is_weight_matrix(name: str) -> bool:
    """Tensors that go through `ks.linear` (and so may be quantized); the rest stay float32."""
    return name.endswith(".weight") and "norm" not in name


def load_block_weights(get: Callable[[str], Any], prefix: str, cfg: WanBlockConfig) -> WanBlockWeights:
    """Gather one block's tensors by bundle name (`get(prefix + name)`), checking every shape."""
    shapes = block_tensor_shapes(cfg)
    values = {}
    for field, name in BLOCK_TENSORS.items():
        tensor = get(prefix + name)
        if tuple(tensor.shape) != shapes[name]:
            raise ValueError(f"{prefix}{name}: shape {tuple(tensor.shape)}, expected {shapes[name]} "
                             f"for dim {cfg.dim}, ffn_dim {cfg.ffn_dim}")
        values[field] = tensor
    attention = {attn: AttentionWeights(**{field: values.pop(f"{attn}.{field}") for field in ATTENTION_TENSORS})
                 for attn in ("self_attn", "cross_attn")}
    return WanBlockWeights(**values, **attention)


@dataclass(frozen=True)
class KV:
    """Keys (after norm and RoPE) and values of some tokens, per head."""

    k: np.ndarray  # [P, H, Dh]
    v: np.ndarray  # [P, H, Dh]

    def __len__(self) -> int:
        return self.k.shape[0]


@dataclass(frozen=True)
class Rope:
    cos: np.ndarray  # [S, Dh]
    sin: np.ndarray  # [S, Dh]


def modulation(table: np.ndarray, temb: np.ndarray) -> list[np.ndarray]:
    """Six modulation vectors; each [1, D] for a global temb [6, D], [S, D] for a per-token temb [S, 6, D]."""
    if temb.ndim == 2 and temb.shape == table.shape:
        return list((table + temb)[:, None, :])
    if temb.ndim == 3 and temb.shape[1:] == table.shape:
        return list((table[None] + temb).transpose(1, 0, 2))
    raise ValueError(f"temb has shape {temb.shape}; expected {table.shape} (global) or "
                     f"(tokens, {table.shape[0]}, {table.shape[1]}) (per token)")


def _heads(x: np.ndarray, cfg: WanBlockConfig) -> np.ndarray:
    return x.reshape(x.shape[0], cfg.num_heads, cfg.head_dim)  # [N, D] -> [N, H, Dh]


def context_kv(ks, cfg: WanBlockConfig, attn: AttentionWeights, context: np.ndarray) -> KV:
    """Cross-attention keys and values of the context tokens: computed once, read by every step."""
    # context: [T, D]
    k = ks.rms_norm_across_heads(ks.linear(context, attn.k, attn.k_bias), attn.k_norm, cfg.eps)
    v = ks.linear(context, attn.v, attn.v_bias)
    return KV(_heads(k, cfg), _heads(v, cfg))


def self_attention(ks, cfg: WanBlockConfig, attn: AttentionWeights, x: np.ndarray, rope: Rope,
                   past: KV | None) -> tuple[np.ndarray, KV]:
    """Attention of the tokens to [past ; themselves]; returns the output and the tokens' own K/V."""
    # x: [S, D] (already modulated) -> [S, D]
    q = ks.rms_norm_across_heads(ks.linear(x, attn.q, attn.q_bias), attn.q_norm, cfg.eps)
    k = ks.rms_norm_across_heads(ks.linear(x, attn.k, attn.k_bias), attn.k_norm, cfg.eps)
    q = ks.rope_pairs(_heads(q, cfg), rope.cos, rope.sin)
    own = KV(ks.rope_pairs(_heads(k, cfg), rope.cos, rope.sin), _heads(ks.linear(x, attn.v, attn.v_bias), cfg))
    if past is None or not len(past):
        heads_out = ks.attention(q, own.k, own.v)  # [S, H, Dh]
    else:
        heads_out = ks.cached_attention(q, past.k, past.v, None, own.k, own.v)
    return ks.linear(heads_out.reshape(x.shape[0], cfg.dim), attn.out, attn.out_bias), own


def cross_attention(ks, cfg: WanBlockConfig, attn: AttentionWeights, x: np.ndarray, context: KV) -> np.ndarray:
    # x: [S, D] (normed) -> [S, D]
    q = ks.rms_norm_across_heads(ks.linear(x, attn.q, attn.q_bias), attn.q_norm, cfg.eps)
    heads_out = ks.attention(_heads(q, cfg), context.k, context.v)
    return ks.linear(heads_out.reshape(x.shape[0], cfg.dim), attn.out, attn.out_bias)


def feed_forward(ks, w: WanBlockWeights, x: np.ndarray) -> np.ndarray:
    # x: [S, D] -> [S, F] -> [S, D]
    return ks.feed_forward(x, w.ffn_in, w.ffn_in_bias, w.ffn_out, w.ffn_out_bias, "gelu_tanh")


def wan_block(ks, cfg: WanBlockConfig, w: WanBlockWeights, x: np.ndarray, temb: np.ndarray, rope: Rope,
              context: KV, past: KV | None = None) -> tuple[np.ndarray, KV]:
    """One block over tokens x [S, D]; returns the new x and the tokens' self-attention K/V."""
    check_block_inputs(cfg, x, temb, rope, context)
    shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = modulation(w.modulation, temb)
    attended, own = self_attention(ks, cfg, w.self_attn, ks.modulated_layer_norm(x, shift_a, scale_a, cfg.eps),
                                   rope, past)
    x = ks.gated_residual(x, attended, gate_a)
    normed = ks.layer_norm(x, w.cross_norm_weight, w.cross_norm_bias, cfg.eps)
    x = x + cross_attention(ks, cfg, w.cross_attn, normed, context)
    x = ks.gated_residual(x, feed_forward(ks, w, ks.modulated_layer_norm(x, shift_f, scale_f, cfg.eps)), gate_f)
    return x, own


def check_block_inputs(cfg: WanBlockConfig, x: np.ndarray, temb: np.ndarray, rope: Rope, context: KV) -> None:
    """Clear errors for inputs that would otherwise fail deep inside a kernel."""
    if x.ndim != 2 or x.shape[1] != cfg.dim:
        raise ValueError(f"tokens have shape {x.shape}; expected (tokens, {cfg.dim})")
    if rope.cos.shape != (x.shape[0], cfg.head_dim) or rope.sin.shape != rope.cos.shape:
        raise ValueError(f"RoPE tables {rope.cos.shape} do not fit {x.shape[0]} tokens of head width {cfg.head_dim}")
    if temb.ndim == 3 and temb.shape[0] != x.shape[0]:
        raise ValueError(f"per-token temb covers {temb.shape[0]} tokens, the block has {x.shape[0]}")
    if context.k.shape[1:] != (cfg.num_heads, cfg.head_dim):
        raise ValueError(f"context keys {context.k.shape} do not match {cfg.num_heads} heads x {cfg.head_dim}")
