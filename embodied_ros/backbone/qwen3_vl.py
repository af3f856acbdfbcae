"""Qwen3-VL backbone layers (GR00T N1.7's Cosmos-Reason2 backbone), pure functions over arrays.

Vision tower, every view of an observation in one sequence:
    patch embedding (a linear over each patch flattened in (channel, time, y, x) order)
    + learned position table bilinearly interpolated to the view's patch grid
    blocks: x += proj(attn(LN1(x))) with 2D RoPE (row, column) and attention within each view only;
            x += fc2(gelu_tanh(fc1(LN2(x))))
    after the blocks named in deepstack_indexes: a deepstack merger (group each m x m block of
    patches into one row, LN, fc1, exact GELU, fc2) gives a feature added to the LM's image rows
    merger: LN on every patch row, then the grouping, fc1, exact GELU, fc2 -> one LM row per block
Patch rows come in block order: (block row, block column, row in block, column in block), so the
m*m patches of one LM token are consecutive rows.

Language model (the first `depth` layers, no final norm): RMSNorm pre-norm layers with per-head
q/k RMSNorm, multimodal RoPE (M-RoPE: each image token has a (t, h, w) position, frequencies
interleaved t/h/w), causal grouped-query attention, SiLU-gated MLP; after layer i the i-th
deepstack feature is added to the image rows.

Weights use the runtime names of models/groot/weights.py; a layer is the dict of its tensors
without the `vision.blk.{i}.` / `lm.blk.{i}.` prefix. The two configs (`QwenVisionConfig`,
`QwenTextConfig`) are validated once, here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone import llama
from embodied_ros.backbone.checks import positive, require
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels.attention import MASKED


@dataclass(frozen=True)
class QwenVisionConfig:
    """Qwen3-VL vision tower: patches of patch_size^2 x temporal_patch_size, merged m x m into LM tokens."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    num_position_embeddings: int
    deepstack_indexes: tuple[int, ...]
    out_dim: int
    eps: float = 1e-6
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        positive("vision", width=self.width, depth=self.depth, mlp_dim=self.mlp_dim, num_heads=self.num_heads,
                  patch_size=self.patch_size, temporal_patch_size=self.temporal_patch_size,
                  spatial_merge_size=self.spatial_merge_size, out_dim=self.out_dim)
        require(self.width % self.num_heads == 0 and self.head_dim % 4 == 0,
                 f"vision.width {self.width} / num_heads {self.num_heads} must be a multiple of 4")
        side = math.isqrt(self.num_position_embeddings)
        require(side * side == self.num_position_embeddings,
                 f"vision.num_position_embeddings {self.num_position_embeddings} is not a square")
        require(all(0 <= i < self.depth for i in self.deepstack_indexes),
                 f"vision.deepstack_indexes {self.deepstack_indexes} must lie in 0..{self.depth - 1}")

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def position_grid_side(self) -> int:
        return math.isqrt(self.num_position_embeddings)

    @property
    def patch_features(self) -> int:
        return 3 * self.temporal_patch_size * self.patch_size ** 2

    @property
    def merge_rows(self) -> int:
        return self.spatial_merge_size ** 2


@dataclass(frozen=True)
class QwenTextConfig:
    """The Qwen3 language model, cut to its first `depth` layers (GR00T's select_layer)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    mrope_section: tuple[int, int, int]
    rope_theta: float = 5e6
    eps: float = 1e-6

    def __post_init__(self) -> None:
        positive("text", width=self.width, depth=self.depth, mlp_dim=self.mlp_dim, num_heads=self.num_heads,
                  num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, vocab_size=self.vocab_size)
        require(self.num_heads % self.num_kv_heads == 0,
                 f"text.num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        require(len(self.mrope_section) == 3 and sum(self.mrope_section) == self.head_dim // 2,
                 f"text.mrope_section {self.mrope_section} must have 3 parts summing to head_dim/2")


Weights = Mapping[str, Any]


# ---- vision ---------------------------------------------------------------------------------

def pixel_rows(image: np.ndarray, patch: int, temporal: int, merge: int, mean=(0.5, 0.5, 0.5),
               std=(0.5, 0.5, 0.5)) -> tuple[np.ndarray, tuple[int, int]]:
    """One uint8 HWC RGB view -> (patch rows [gh*gw, 3*T*P*P] in block order, (gh, gw)).

    Values (u8/255 - mean)/std per channel, the still image repeated `temporal` times along a time
    axis; each row is one patch flattened in (channel, time, y, x) order. Sides must be multiples of
    patch * merge.
    """
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected a uint8 HxWx3 RGB image, got {image.dtype} {image.shape}")
    height, width = image.shape[:2]
    if height % (patch * merge) or width % (patch * merge):
        raise ValueError(f"image {height}x{width} is not a multiple of patch {patch} x merge {merge} on both sides")
    gh, gw = height // patch, width // patch
    scaled = (image.astype(np.float32) * np.float32(1 / 255) - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    channels = np.broadcast_to(scaled.transpose(2, 0, 1)[:, None], (3, temporal, height, width))
    blocks = channels.reshape(3, temporal, gh // merge, merge, patch, gw // merge, merge, patch)
    rows = blocks.transpose(2, 5, 3, 6, 0, 1, 4, 7)  # (bi, bj, a, b, c, t, y, x)
    return np.ascontiguousarray(rows).reshape(gh * gw, 3 * temporal * patch * patch), (gh, gw)


def patch_grid(grid_hw: tuple[int, int], merge: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of every patch of a gh x gw view in block order: two [gh*gw] int arrays."""
    gh, gw = grid_hw
    block_row, block_col, in_row, in_col = np.meshgrid(np.arange(gh // merge), np.arange(gw // merge),
                                                       np.arange(merge), np.arange(merge), indexing="ij")
    return (block_row * merge + in_row).reshape(-1), (block_col * merge + in_col).reshape(-1)


def interpolated_positions(table: np.ndarray, grid_hw: tuple[int, int], merge: int) -> np.ndarray:
    """The n x n position table [n*n, w] blended bilinearly onto a gh x gw grid -> [gh*gw, w], block order."""
    side = int(round(np.sqrt(table.shape[0])))
    grid = table.reshape(side, side, -1)
    gh, gw = grid_hw
    ys = np.linspace(0, side - 1, gh, dtype=np.float32)
    xs = np.linspace(0, side - 1, gw, dtype=np.float32)
    y0, x0 = np.floor(ys).astype(np.int64), np.floor(xs).astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, side - 1), np.minimum(x0 + 1, side - 1)
    dy, dx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    one = np.float32(1.0)
    blended = ((one - dy) * (one - dx) * grid[y0][:, x0] + (one - dy) * dx * grid[y0][:, x1]
               + dy * (one - dx) * grid[y1][:, x0] + dy * dx * grid[y1][:, x1])
    rows, cols = patch_grid(grid_hw, merge)
    return blended[rows, cols].astype(np.float32)


def vision_rope(grid_hw: tuple[int, int], merge: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """2D RoPE tables [gh*gw, head_dim]: a quarter of the frequencies per axis, doubled for rotate-half."""
    exponents = np.arange(0, head_dim // 2, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim // 2)
    inv_freq = (np.float32(1.0) / np.power(np.float32(theta), exponents)).astype(np.float32)
    rows, cols = patch_grid(grid_hw, merge)
    angles = np.concatenate([rows[:, None].astype(np.float32) * inv_freq, cols[:, None].astype(np.float32) * inv_freq],
                            axis=-1)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def block_diagonal_bias(lengths: Sequence[int]) -> np.ndarray:
    """Additive attention bias [n, n]: each row attends only to the rows of its own view."""
    view = np.repeat(np.arange(len(lengths)), lengths)
    return np.where(view[:, None] == view[None, :], np.float32(0.0), MASKED).astype(np.float32)


def group_blocks(x: np.ndarray, merge_rows: int) -> np.ndarray:
    """[n, w] with each token's patches consecutive -> [n / merge_rows, merge_rows * w]."""
    return x.reshape(x.shape[0] // merge_rows, merge_rows * x.shape[1])


def _merger_mlp(ks: KernelSet, w: Weights, prefix: str, x: np.ndarray) -> np.ndarray:
    hidden = ks.gelu_erf(ks.linear(x, w[f"{prefix}.fc1.weight"], w[f"{prefix}.fc1.bias"]))
    return ks.linear(hidden, w[f"{prefix}.fc2.weight"], w[f"{prefix}.fc2.bias"])


def vision_block(ks: KernelSet, cfg: QwenVisionConfig, layer: Weights, x: np.ndarray,
                 rope: tuple[np.ndarray, np.ndarray], bias: np.ndarray) -> np.ndarray:
    heads, hd = cfg.num_heads, cfg.head_dim
    h = ks.layer_norm(x, layer["ln1.weight"], layer["ln1.bias"], cfg.eps)
    qkv = ks.linear(h, layer["attn_qkv.weight"], layer["attn_qkv.bias"]).reshape(x.shape[0], 3, heads, hd)
    q = ks.rope(np.ascontiguousarray(qkv[:, 0]), *rope)
    k = ks.rope(np.ascontiguousarray(qkv[:, 1]), *rope)
    attended = ks.attention(q, k, np.ascontiguousarray(qkv[:, 2]), bias).reshape(x.shape[0], cfg.width)
    x = x + ks.linear(attended, layer["attn_out.weight"], layer["attn_out.bias"])
    h = ks.layer_norm(x, layer["ln2.weight"], layer["ln2.bias"], cfg.eps)
    return x + ks.feed_forward(h, layer["fc1.weight"], layer["fc1.bias"], layer["fc2.weight"], layer["fc2.bias"],
                               "gelu_tanh")


def vision_embed(ks: KernelSet, cfg: QwenVisionConfig, w: Weights, pixel_rows: np.ndarray,
                 grids: Sequence[tuple[int, int]]) -> np.ndarray:
    """Patch rows [n, 3*T*P*P] of views with patch grids `grids` -> block-0 input [n, w]."""
    x = ks.linear(np.asarray(pixel_rows, np.float32), w["vision.patch.weight"], w["vision.patch.bias"])
    positions = np.concatenate([interpolated_positions(w["vision.position"], g, cfg.spatial_merge_size)
                                for g in grids])
    return x + positions


def vision_tower(ks: KernelSet, cfg: QwenVisionConfig, w: Weights, layers: Sequence[Weights], pixel_rows: np.ndarray,
                 grids: Sequence[tuple[int, int]]) -> tuple[np.ndarray, list[np.ndarray]]:
    """-> (LM rows of the image tokens [n / m^2, d], deepstack features [n / m^2, d] each)."""
    expected = sum(gh * gw for gh, gw in grids)
    if pixel_rows.ndim != 2 or pixel_rows.shape != (expected, cfg.patch_features):
        raise ValueError(f"pixel rows must have shape ({expected}, {cfg.patch_features}) for grids {list(grids)}, "
                         f"got {pixel_rows.shape}")
    x = vision_embed(ks, cfg, w, pixel_rows, grids)
    tables = [vision_rope(g, cfg.spatial_merge_size, cfg.head_dim, cfg.rope_theta) for g in grids]
    rope = (np.concatenate([c for c, _ in tables]), np.concatenate([s for _, s in tables]))
    bias = block_diagonal_bias([gh * gw for gh, gw in grids])
    deepstack = []
    for i, layer in enumerate(layers):
        x = vision_block(ks, cfg, layer, x, rope, bias)
        if i in cfg.deepstack_indexes:
            j = cfg.deepstack_indexes.index(i)
            grouped = group_blocks(x, cfg.merge_rows)
            normed = ks.layer_norm(grouped, w[f"vision.deepstack.{j}.ln.weight"], w[f"vision.deepstack.{j}.ln.bias"],
                                   cfg.eps)
            deepstack.append(_merger_mlp(ks, w, f"vision.deepstack.{j}", normed))
    normed = ks.layer_norm(x, w["vision.merger.ln.weight"], w["vision.merger.ln.bias"], cfg.eps)
    return _merger_mlp(ks, w, "vision.merger", group_blocks(normed, cfg.merge_rows)), deepstack


# ---- language model -------------------------------------------------------------------------

def mrope_positions(input_ids: np.ndarray, image_token: int, grids: Sequence[tuple[int, int]],
                    merge: int) -> np.ndarray:
    """(t, h, w) positions [3, L]: text tokens count up on all three; an image block of
    mh x mw tokens starting at counter c puts token (r, q) at (c, c + r, c + q), then c += max(mh, mw)."""
    ids = np.asarray(input_ids, np.int64)
    positions = np.zeros((3, ids.size), np.int64)
    counter, i, view = 0, 0, 0
    while i < ids.size:
        if ids[i] != image_token:
            positions[:, i] = counter
            counter, i = counter + 1, i + 1
            continue
        if view >= len(grids):
            raise ValueError(f"prompt has more image blocks than the {len(grids)} views given")
        mh, mw = grids[view][0] // merge, grids[view][1] // merge
        r, q = np.meshgrid(np.arange(mh), np.arange(mw), indexing="ij")
        n = mh * mw
        if not np.all(ids[i:i + n] == image_token):
            raise ValueError(f"image block {view} at token {i} has fewer than the {n} image tokens of its view")
        positions[0, i:i + n] = counter
        positions[1, i:i + n] = counter + r.reshape(-1)
        positions[2, i:i + n] = counter + q.reshape(-1)
        counter, i, view = counter + max(mh, mw), i + n, view + 1
    if view != len(grids):
        raise ValueError(f"prompt has {view} image blocks for {len(grids)} views")
    return positions


def mrope_tables(positions: np.ndarray, head_dim: int, theta: float,
                 section: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [L, head_dim] from (t, h, w) positions [3, L]: frequency j reads h when j % 3 == 1
    and j < 3 * section[1], w when j % 3 == 2 and j < 3 * section[2], t otherwise."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(theta), exponents)).astype(np.float32)
    j = np.arange(head_dim // 2)
    axis = np.zeros(head_dim // 2, np.int64)
    axis[(j % 3 == 1) & (j < 3 * section[1])] = 1
    axis[(j % 3 == 2) & (j < 3 * section[2])] = 2
    chosen = np.asarray(positions, np.float32)[axis, :].T  # [L, head_dim/2]
    angles = chosen * inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def causal_bias(n: int) -> np.ndarray:
    return np.where(np.tri(n, dtype=bool), np.float32(0.0), MASKED).astype(np.float32)


def lm_layer(ks: KernelSet, cfg: QwenTextConfig, layer: Weights, x: np.ndarray,
             rope: tuple[np.ndarray, np.ndarray], bias: np.ndarray) -> np.ndarray:
    n, hd = x.shape[0], cfg.head_dim
    h = ks.rms_norm_across_heads(x, layer["attn_norm.weight"], cfg.eps)
    q = ks.linear(h, layer["attn_q.weight"]).reshape(n, cfg.num_heads, hd)
    k = ks.linear(h, layer["attn_k.weight"]).reshape(n, cfg.num_kv_heads, hd)
    v = ks.linear(h, layer["attn_v.weight"]).reshape(n, cfg.num_kv_heads, hd)
    q = ks.rope(llama.head_norm(ks, q, layer["q_norm.weight"], cfg.eps), *rope)
    k = ks.rope(llama.head_norm(ks, k, layer["k_norm.weight"], cfg.eps), *rope)
    attended = ks.attention(q, k, np.ascontiguousarray(v), bias).reshape(n, cfg.num_heads * hd)
    x = x + ks.linear(attended, layer["attn_out.weight"])
    h = ks.rms_norm_across_heads(x, layer["ffn_norm.weight"], cfg.eps)
    gate = ks.linear(h, layer["ffn_gate.weight"])
    gated = gate / (np.float32(1.0) + np.exp(-gate)) * ks.linear(h, layer["ffn_up.weight"])
    return x + ks.linear(gated, layer["ffn_down.weight"])


def lm_inputs(token_embd: np.ndarray, input_ids: np.ndarray, image_token: int, image_rows: np.ndarray) -> np.ndarray:
    """Token embeddings [L, d] with the image-token rows replaced, in order, by the vision tower's rows."""
    ids = np.asarray(input_ids, np.int64)
    x = np.array(token_embd[ids], dtype=np.float32)
    image = ids == image_token
    if int(image.sum()) != image_rows.shape[0]:
        raise ValueError(f"prompt has {int(image.sum())} image tokens, the views give {image_rows.shape[0]}")
    x[image] = image_rows
    return x


def lm_forward(ks: KernelSet, cfg: QwenTextConfig, layers: Sequence[Weights], x: np.ndarray, positions: np.ndarray,
               image_mask: np.ndarray, deepstack: Sequence[np.ndarray]) -> np.ndarray:
    """The kept LM layers over the prompt rows [L, d] -> the last kept layer's output [L, d]."""
    rope = mrope_tables(positions, cfg.head_dim, cfg.rope_theta, cfg.mrope_section)
    bias = causal_bias(x.shape[0])
    for i, layer in enumerate(layers):
        x = lm_layer(ks, cfg, layer, x, rope, bias)
        if i < len(deepstack) and i < len(layers) - 1:
            x[image_mask] += deepstack[i]
    return x
