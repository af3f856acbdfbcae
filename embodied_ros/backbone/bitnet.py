"""BitNet b1.58 decoder layers (BitVLA's LM: BitNet b1.58 2B4T) and their BitLinear products.

Axes: n tokens, D width, H query heads, K kv heads (grouped-query attention), d head width, F mlp width.

    h = w_attn * rms(x)                                 (RMSNorm, the weight multiplies directly)
    q, k, v = BitLinear(h)                              no biases; RoPE (rotate-half) on q and k
    a = attention(q, k, v)                              bidirectional when the caller passes no bias
    x += o_proj(BitLinear(w_attn_sub * rms(a)))         an extra RMSNorm before o_proj
    h = w_ffn * rms(x)
    m = relu(gate(h))^2 * up(h)                         ReLU-squared gated MLP, both BitLinear
    x += down(BitLinear(w_ffn_sub * rms(m)))            an extra RMSNorm before down_proj
    out = w_final * rms(x)

A BitLinear product reads a weight of one of three kinds (`bit_linear`):

    TernaryWeight   ternary weights x int8 activations, integer sums (kernels/cpu/ternary_gemm.py)
    FakeQuant       the reference's float arithmetic: activations fake-quantized per token (when its
                    act bits are 8) times a float32 weight (q / s_w for ternary weights), `ks.linear`
    float array     a plain full-precision linear (a BitLinear configured with 32 weight and act bits)

q/k/v and gate/up are stacked into one weight each: they read the same normed input, whose per-token
quantization is therefore the same, and a stacked ternary weight keeps each part's scale per row.

Runtime tensor names under `<stack>.blk.{i}.` and their transformers names under `layers.{i}.`:

    attn_norm.weight       input_layernorm.weight
    attn_{q,k,v}.weight    self_attn.{q,k,v}_proj.weight      stacked into attn_qkv at load
    attn_sub_norm.weight   self_attn.attn_sub_norm.weight
    attn_out.weight        self_attn.o_proj.weight
    ffn_norm.weight        post_attention_layernorm.weight
    ffn_{gate,up}.weight   mlp.{gate,up}_proj.weight          stacked into ffn_gate_up at load
    ffn_sub_norm.weight    mlp.ffn_sub_norm.weight
    ffn_down.weight        mlp.down_proj.weight
  plus `<stack>.token_embd` (embed_tokens.weight) and `<stack>.final_norm.weight` (norm.weight).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone.checks import positive, require
from embodied_ros.backbone.llama import norm
from embodied_ros.kernels.cpu.ternary_gemm import TernaryWeight, fake_quantize_tokens, stack_ternary
from embodied_ros.kernels.linear import pack_for_products
from embodied_ros.kernels.rope import rope_tables

LAYER_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_out", "self_attn.attn_sub_norm": "attn_sub_norm",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "mlp.ffn_sub_norm": "ffn_sub_norm"}
BIT_LINEARS = ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down")


@dataclass(frozen=True)
class BitNetConfig:
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    eps: float = 1e-5
    rope_theta: float = 500000.0

    def __post_init__(self) -> None:
        positive("lm", width=self.width, depth=self.depth, mlp_dim=self.mlp_dim, num_heads=self.num_heads,
                 num_kv_heads=self.num_kv_heads, vocab_size=self.vocab_size)
        require(self.width % self.num_heads == 0, f"lm.width {self.width} is not divisible by {self.num_heads} heads")
        require(self.num_heads % self.num_kv_heads == 0,
                f"{self.num_heads} query heads cannot share {self.num_kv_heads} key/value heads")
        require(self.head_dim % 2 == 0, f"lm head_dim must be even for rotary embeddings, got {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def kv_rows(self) -> int:
        return self.num_kv_heads * self.head_dim


def layer_shapes(cfg: BitNetConfig) -> dict[str, tuple[int, ...]]:
    """Shapes of one layer's stored tensors (names without the `<stack>.blk.{i}.` prefix)."""
    return {"attn_norm.weight": (cfg.width,), "attn_q.weight": (cfg.width, cfg.width),
            "attn_k.weight": (cfg.kv_rows, cfg.width), "attn_v.weight": (cfg.kv_rows, cfg.width),
            "attn_sub_norm.weight": (cfg.width,), "attn_out.weight": (cfg.width, cfg.width),
            "ffn_norm.weight": (cfg.width,), "ffn_gate.weight": (cfg.mlp_dim, cfg.width),
            "ffn_up.weight": (cfg.mlp_dim, cfg.width), "ffn_sub_norm.weight": (cfg.mlp_dim,),
            "ffn_down.weight": (cfg.width, cfg.mlp_dim)}


# ---- BitLinear -------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class FakeQuant:
    """A BitLinear product in the reference's float arithmetic: `weight` (float32 [out, in], possibly
    packed for products) read by activations fake-quantized per token when `quantize_acts`."""

    weight: Any
    quantize_acts: bool = True

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape)


def bit_linear(ks, x: np.ndarray, weight, bias: np.ndarray | None = None) -> np.ndarray:
    """One BitLinear product, x [n, in] -> [n, out], in the arithmetic the weight's kind says (module doc)."""
    if isinstance(weight, TernaryWeight):
        return ks.linear_ternary(x, weight, bias)
    if isinstance(weight, FakeQuant):
        return ks.linear(fake_quantize_tokens(x) if weight.quantize_acts else x, weight.weight, bias)
    return ks.linear(x, weight, bias)


def stack_bit_linears(parts: Sequence[Any], backend: str):
    """Weights of one kind read by the same input -> one weight of their stacked outputs."""
    if all(isinstance(part, TernaryWeight) for part in parts):
        return stack_ternary(list(parts))
    if all(isinstance(part, FakeQuant) for part in parts):
        stacked = np.concatenate([dense(part.weight) for part in parts])
        return FakeQuant(for_products(stacked, backend), parts[0].quantize_acts)
    return for_products(np.concatenate([dense(part) for part in parts]), backend)


def dense(weight) -> np.ndarray:
    """A float weight as a float32 array (a packed one unpacked)."""
    return weight.dense() if hasattr(weight, "dense") else np.asarray(weight, dtype=np.float32)


def for_products(weight: np.ndarray, backend: str):
    return pack_for_products(np.ascontiguousarray(weight, dtype=np.float32)) if backend == "numba" else weight


def prepare_layer(stored: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """One layer's tensors as the products read them: q/k/v and gate/up stacked."""
    layer = {name: stored[name] for name in ("attn_norm.weight", "attn_sub_norm.weight", "ffn_norm.weight",
                                             "ffn_sub_norm.weight", "attn_out.weight", "ffn_down.weight")}
    layer["attn_qkv.weight"] = stack_bit_linears([stored[f"attn_{p}.weight"] for p in "qkv"], backend)
    layer["ffn_gate_up.weight"] = stack_bit_linears([stored["ffn_gate.weight"], stored["ffn_up.weight"]], backend)
    return layer


# ---- the layers ------------------------------------------------------------------------------------

def attention_block(ks, cfg: BitNetConfig, w: Mapping[str, Any], x: np.ndarray, rope: tuple[np.ndarray, np.ndarray],
                    bias: np.ndarray | None, query_rows: np.ndarray | None = None) -> np.ndarray:
    """The attention's residual update of x [n, D]; with `query_rows`, only those rows' ([m, D])."""
    n = x.shape[0]
    h = norm(ks, x, w["attn_norm.weight"], cfg.eps)
    qkv = bit_linear(ks, h, w["attn_qkv.weight"])
    cos, sin = rope
    queries = qkv[:, :cfg.width].reshape(n, cfg.num_heads, cfg.head_dim)
    keys = ks.rope(qkv[:, cfg.width:cfg.width + cfg.kv_rows].reshape(n, cfg.num_kv_heads, cfg.head_dim), cos, sin)
    values = np.ascontiguousarray(qkv[:, cfg.width + cfg.kv_rows:].reshape(n, cfg.num_kv_heads, cfg.head_dim))
    if query_rows is not None:
        queries, cos, sin = queries[query_rows], cos[query_rows], sin[query_rows]
        bias = None if bias is None else bias[query_rows]
    queries = ks.rope(queries, cos, sin)
    attended = ks.attention(queries, keys, values, bias).reshape(queries.shape[0], cfg.width)
    return bit_linear(ks, norm(ks, attended, w["attn_sub_norm.weight"], cfg.eps), w["attn_out.weight"])


def mlp_block(ks, cfg: BitNetConfig, w: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    h = norm(ks, x, w["ffn_norm.weight"], cfg.eps)
    gate_up = bit_linear(ks, h, w["ffn_gate_up.weight"])
    gate = np.maximum(gate_up[:, :cfg.mlp_dim], np.float32(0.0))
    hidden = gate * gate * gate_up[:, cfg.mlp_dim:]
    return bit_linear(ks, norm(ks, hidden, w["ffn_sub_norm.weight"], cfg.eps), w["ffn_down.weight"])


def forward(ks, cfg: BitNetConfig, layers: Sequence[Mapping[str, Any]], final_norm: np.ndarray, x: np.ndarray,
            bias: np.ndarray | None = None, out_rows: np.ndarray | None = None) -> np.ndarray:
    """x [n, D] (the input embeddings at positions 0..n-1) through every layer and the final norm.

    bias: an additive attention bias [n, n] (None: every token reads every token, BitVLA's
    bidirectional pass). out_rows: the rows whose output is wanted (default all); the last layer
    computes attention outputs and the MLP for those rows only."""
    rope = rope_tables(np.arange(x.shape[0]), cfg.head_dim, cfg.rope_theta)
    x = np.ascontiguousarray(x, dtype=np.float32)
    for index, w in enumerate(layers):
        if index == len(layers) - 1 and out_rows is not None:
            x = x[out_rows] + attention_block(ks, cfg, w, x, rope, bias, out_rows)
        else:
            x = x + attention_block(ks, cfg, w, x, rope, bias)
        x = x + mlp_block(ks, cfg, w, x)
    if out_rows is not None and not layers:
        x = x[out_rows]
    return norm(ks, x, final_norm, cfg.eps)
