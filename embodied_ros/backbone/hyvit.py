"""HYViT2, Hy-Embodied's vision tower, and its 2x2 pooling merger: camera images -> image tokens in the
LM's width. With memory frames, every `spacetime_stride`-th block also mixes each token's values
over the frames (MEM's space-time attention) and only the current frame's features leave the tower.

Axes: N cameras, K frames, T patches per frame (h x w, row-major), W tower width, D LM width.

    x = patch_linear(patches) + position(h, w)       position: the learned grid resized bilinearly
                                                      (half-pixel centres, edge-clamped); rounded to
                                                      bf16 on the single-frame path, as the reference
    block:  x += proj(MHA(LN1(x)))                    per frame, no mask; qkv with bias
            x += fc2(gelu(fc1(LN2(x))))               exact (erf) GELU
    space-time block (K > 1):
            h = LN1(x + e(t))                         e(t): fixed sin / cos(t) - 1 of base 100, e(0) = 0
            q, k, v = qkv(h)
            v <- softmax_t'<=t(q_t k_t' / sqrt(d)) v  per token and head, causal over the frames
            x += proj(MHA(q, k, v)) per frame; then the MLP as above
    merger: y = proj1(x) per patch; per 2x2 group g (rows then columns inside it):
            s = predictor([y_g, mean(y_g)]) = L2(gelu(L1(.)))   per patch and channel
            z = sum_g softmax_g(s) * y_g;  tokens = proj2(gelu(z))      [(h/2) (w/2), D]

Runtime tensor names (`vision.` prefix), and the checkpoint's under `visual.`:
    patch.{weight,bias}        vision_tower.patch_embed.proj   [W, 3 p p] (the conv flattened)
    position                   vision_tower.pos_embed          [G G, W]
    blk.{i}.{ln1,ln2,attn_qkv,attn_out,fc1,fc2}.{weight,bias}
                               vision_tower.blocks.{i}.{norm1,norm2,attn.qkv,attn.proj,mlp.fc1,mlp.fc2}
    merger.{proj1,proj2,score1,score2}.{weight,bias}
                               merger.{proj1,proj2,pooler.predictor.0,pooler.predictor.2}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.checks import positive, require
from embodied_ros.backbone.siglip import patchify
from embodied_ros.kernels.attention import softmax
from embodied_ros.kernels.attention_bf16 import attention_for, to_bf16_values
from embodied_ros.sequence.images import resize_bilinear

TIME_EMBED_BASE = 100.0

LAYER_NAMES = {"norm1": "ln1", "norm2": "ln2", "attn.qkv": "attn_qkv", "attn.proj": "attn_out", "mlp.fc1": "fc1",
               "mlp.fc2": "fc2"}
MERGER_NAMES = {"proj1": "proj1", "proj2": "proj2", "pooler.predictor.0": "score1", "pooler.predictor.2": "score2"}


@dataclass(frozen=True)
class HyViTConfig:
    image_size: int
    patch_size: int
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    position_grid: int  # side of the learned position table
    out_width: int  # the LM's width (merger output)
    spacetime_stride: int = 0  # 0: no memory frames; else blocks stride-1, 2 stride-1, ... mix over frames
    eps: float = 1e-6

    def __post_init__(self) -> None:
        positive("vision", image_size=self.image_size, patch_size=self.patch_size, width=self.width,
                 depth=self.depth, mlp_dim=self.mlp_dim, num_heads=self.num_heads, position_grid=self.position_grid,
                 out_width=self.out_width)
        require(self.image_size % (2 * self.patch_size) == 0,
                f"vision.image_size {self.image_size} must be a multiple of twice the patch {self.patch_size} "
                "(2x2 merger)")
        require(self.width % self.num_heads == 0, f"vision.width {self.width} is not divisible by {self.num_heads} heads")
        require(self.spacetime_stride >= 0, f"spacetime_stride must be >= 0, got {self.spacetime_stride}")

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def grid(self) -> int:
        """Image tokens per side after the 2x2 merger."""
        return self.patches_per_side // 2

    @property
    def tokens_per_camera(self) -> int:
        return self.grid ** 2

    def is_spacetime(self, block: int) -> bool:
        return self.spacetime_stride > 0 and block % self.spacetime_stride == self.spacetime_stride - 1


def positions(cfg: HyViTConfig, table: np.ndarray) -> np.ndarray:
    """The learned [G G, W] table resized to the image's patch grid -> [T, W] (once, at load); rounded to
    bf16 as the reference's single-frame path samples it (its memory path does not)."""
    side = cfg.patches_per_side
    grid = np.asarray(table, np.float32).reshape(cfg.position_grid, cfg.position_grid, cfg.width).transpose(2, 0, 1)
    resized = grid if side == cfg.position_grid else resize_bilinear(grid, side, side)
    flat = np.ascontiguousarray(resized.reshape(cfg.width, -1).T)
    return flat if cfg.spacetime_stride else to_bf16_values(flat)


def time_embedding(frames: int, width: int) -> np.ndarray:
    """MEM's fixed e(t) [K, W]: sin(t f_i) at even and cos(t f_i) - 1 at odd columns, f_i = 100^(-2i/W)."""
    t = np.arange(frames, dtype=np.float32)[:, None]
    frequencies = np.exp(np.arange(0, width, 2, dtype=np.float32) * np.float32(-math.log(TIME_EMBED_BASE) / width))
    out = np.empty((frames, width), np.float32)
    out[:, 0::2] = np.sin(t * frequencies)
    out[:, 1::2] = np.cos(t * frequencies) - np.float32(1.0)
    return out


def _frame_mixed_values(cfg: HyViTConfig, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q, k, v [N, K, T, H, d] -> v mixed over the frames, causally, per token and head."""
    scores = np.einsum("nkthd,njthd->nthkj", q, k) * np.float32(cfg.head_dim ** -0.5)
    frames = q.shape[1]
    weights = softmax(np.where(np.tril(np.ones((frames, frames), bool)), scores, -np.inf)).astype(np.float32)
    return np.einsum("nthkj,njthd->nkthd", weights, v).astype(np.float32)


def block(ks, cfg: HyViTConfig, w: Mapping[str, Any], x: np.ndarray, frames: int,
          time: np.ndarray | None) -> np.ndarray:
    """One block over x [S, T, W] (S = cameras x frames, frame-major per camera)."""
    sequences, tokens, width = x.shape
    flat = x.reshape(-1, width)
    source = flat if time is None else (x.reshape(-1, frames, tokens, width) + time[None, :, None]).reshape(-1, width)
    h = ks.layer_norm(source, w["ln1.weight"], w["ln1.bias"], cfg.eps)
    qkv = ks.linear(h, w["attn_qkv.weight"], w["attn_qkv.bias"]).reshape(sequences, tokens, 3, cfg.num_heads,
                                                                          cfg.head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if time is not None:
        shape = (-1, frames, tokens, cfg.num_heads, cfg.head_dim)
        v = _frame_mixed_values(cfg, q.reshape(shape), k.reshape(shape), v.reshape(shape)).reshape(q.shape)
    attend = attention_for(ks, w["attn_qkv.weight"])
    attended = np.concatenate([attend(np.ascontiguousarray(q[s]), np.ascontiguousarray(k[s]),
                                      np.ascontiguousarray(v[s])) for s in range(sequences)])
    flat = flat + ks.linear(attended.reshape(-1, width), w["attn_out.weight"], w["attn_out.bias"])
    h = ks.layer_norm(flat, w["ln2.weight"], w["ln2.bias"], cfg.eps)
    flat = flat + ks.linear(ks.gelu_erf(ks.linear(h, w["fc1.weight"], w["fc1.bias"])), w["fc2.weight"], w["fc2.bias"])
    return flat.reshape(sequences, tokens, width)


def merge(ks, cfg: HyViTConfig, weights: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    """[N, T, W] tower features -> [N, grid^2, D] image tokens (module doc)."""
    n, g = x.shape[0], cfg.grid
    y = ks.linear(x.reshape(-1, cfg.width), weights["vision.merger.proj1.weight"], weights["vision.merger.proj1.bias"])
    width = y.shape[-1]
    groups = y.reshape(n, g, 2, g, 2, width).transpose(0, 1, 3, 2, 4, 5).reshape(-1, 4, width)
    pooled = np.broadcast_to(groups.mean(axis=1, keepdims=True), groups.shape)
    fused = np.concatenate([groups, pooled], axis=-1).reshape(-1, 2 * width)
    hidden = ks.gelu_erf(ks.linear(fused, weights["vision.merger.score1.weight"], weights["vision.merger.score1.bias"]))
    scores = ks.linear(hidden, weights["vision.merger.score2.weight"],
                       weights["vision.merger.score2.bias"]).reshape(groups.shape)
    merged = (groups * softmax(scores, axis=1)).sum(axis=1).astype(np.float32)
    tokens = ks.linear(ks.gelu_erf(merged), weights["vision.merger.proj2.weight"], weights["vision.merger.proj2.bias"])
    return tokens.reshape(n, g * g, width)


def image_tokens(ks, cfg: HyViTConfig, weights: Mapping[str, Any], layers: list[Mapping[str, Any]],
                 position: np.ndarray, images: np.ndarray) -> np.ndarray:
    """[N, 3, S, S] (or [N, K, 3, S, S] with memory frames, the current frame last) in [-1, 1] ->
    [N, grid^2, D] image tokens; `position` from `positions`."""
    frames_given = images.ndim == 5
    frames = images.shape[1] if frames_given else 1
    expected = (3, cfg.image_size, cfg.image_size)
    if images.shape[-3:] != expected or images.ndim not in (4, 5):
        raise ValueError(f"HYViT2 expects images [N, (K,) {', '.join(map(str, expected))}], got {images.shape}")
    if frames_given and not cfg.spacetime_stride and frames > 1:
        raise ValueError(f"{frames} memory frames given to a tower without space-time blocks")
    n = images.shape[0]
    flat_images = np.ascontiguousarray(images, np.float32).reshape(n * frames, *expected)
    patches = patchify(flat_images, cfg.patch_size)
    tokens = patches.shape[1]
    x = ks.linear(patches.reshape(-1, patches.shape[-1]), weights["vision.patch.weight"], weights["vision.patch.bias"])
    x = x.reshape(n * frames, tokens, cfg.width) + position
    time = time_embedding(frames, cfg.width) if frames > 1 else None
    for index, w in enumerate(layers):
        x = block(ks, cfg, w, x, frames, time if cfg.is_spacetime(index) else None)
    current = x.reshape(n, frames, tokens, cfg.width)[:, -1]
    return merge(ks, cfg, weights, np.ascontiguousarray(current))
