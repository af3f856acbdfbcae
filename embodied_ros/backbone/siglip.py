"""SigLIP vision tower + PaliGemma projector: camera images -> image tokens in the LM's width.

Axes: N cameras, T tokens per camera (patches, row-major), W vision width, H heads, P patch
features (3 * patch^2, in (channel, row, column) order).

    x = patch_linear(patches) + position          (the reference's conv with kernel = stride = patch)
    depth x:  x += attn_out(MHA(LN1(x)))           (q/k/v stacked, with bias; no mask; per camera)
              x += fc2(gelu_tanh(fc1(LN2(x))))
    tokens = projector(LN_post(x))                 (no scaling)

Cameras are independent sequences but share every linear, so all cameras go through each linear
as one [N * T, W] matrix; only attention is per camera.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.checks import positive, require
from embodied_ros.kernels.attention_bf16 import attention_for


@dataclass(frozen=True)
class VisionConfig:
    """SigLIP tower: square images cut into patch_size patches, pre-LN encoder layers."""

    image_size: int
    patch_size: int
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    eps: float = 1e-6

    def __post_init__(self) -> None:
        positive("vision", image_size=self.image_size, patch_size=self.patch_size, width=self.width,
                  depth=self.depth, mlp_dim=self.mlp_dim, num_heads=self.num_heads)
        require(self.image_size % self.patch_size == 0,
                 f"vision.image_size {self.image_size} is not a multiple of patch_size {self.patch_size}")
        require(self.width % self.num_heads == 0,
                 f"vision.width {self.width} is not divisible by num_heads {self.num_heads}")

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def tokens_per_camera(self) -> int:
        return self.patches_per_side ** 2

    @property
    def patch_features(self) -> int:
        return 3 * self.patch_size ** 2




# transformers' SigLIP encoder-layer parameter names -> the runtime's (q/k/v are stacked into
# `attn_qkv` when a bundle is written)
TRANSFORMERS_LAYER_NAMES = {"layer_norm1": "ln1", "layer_norm2": "ln2", "self_attn.q_proj": "attn_q",
                            "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                            "self_attn.out_proj": "attn_out", "mlp.fc1": "fc1", "mlp.fc2": "fc2"}


def tensor_shapes(cfg: VisionConfig, stack: str = "vision") -> dict[str, tuple[int, ...]]:
    """Every tensor the tower reads, named `{stack}.patch.weight`, `{stack}.blk.{i}.attn_qkv.weight`, ..."""
    v = cfg
    shapes: dict[str, tuple[int, ...]] = {
        f"{stack}.patch.weight": (v.width, v.patch_features), f"{stack}.patch.bias": (v.width,),
        f"{stack}.position": (v.tokens_per_camera, v.width),
        f"{stack}.post_ln.weight": (v.width,), f"{stack}.post_ln.bias": (v.width,),
    }
    for i in range(v.depth):
        layer = {"ln1": (v.width,), "ln2": (v.width,), "attn_qkv": (3 * v.width, v.width),
                 "attn_out": (v.width, v.width), "fc1": (v.mlp_dim, v.width), "fc2": (v.width, v.mlp_dim)}
        for part, shape in layer.items():
            shapes[f"{stack}.blk.{i}.{part}.weight"] = shape
            shapes[f"{stack}.blk.{i}.{part}.bias"] = shape[:1]
    return shapes


def patchify(images: np.ndarray, patch: int) -> np.ndarray:
    """[N, 3, S, S] -> [N, T, P] with T = (S / patch)^2 patches in row-major order."""
    n, channels, height, width = images.shape
    rows, cols = height // patch, width // patch
    grid = images.reshape(n, channels, rows, patch, cols, patch)
    return grid.transpose(0, 2, 4, 1, 3, 5).reshape(n, rows * cols, channels * patch * patch)


def encoder_layer(ks, cfg: VisionConfig, w: Mapping[str, Any], x: np.ndarray, n_cameras: int) -> np.ndarray:
    """One encoder layer over the tokens of N cameras, x: [N*T, W] -> [N*T, W] (attention per camera)."""
    tokens = x.shape[0] // n_cameras
    h = ks.layer_norm(x, w["ln1.weight"], w["ln1.bias"], cfg.eps)
    qkv = ks.linear(h, w["attn_qkv.weight"], w["attn_qkv.bias"]).reshape(n_cameras, tokens, 3, cfg.num_heads,
                                                                          cfg.head_dim)
    attend = attention_for(ks, w["attn_qkv.weight"])
    attended = np.concatenate([attend(qkv[c, :, 0], qkv[c, :, 1], qkv[c, :, 2])
                               for c in range(n_cameras)])  # [N*T, H, hd]
    x = x + ks.linear(attended.reshape(x.shape), w["attn_out.weight"], w["attn_out.bias"])
    h = ks.layer_norm(x, w["ln2.weight"], w["ln2.bias"], cfg.eps)
    return x + ks.feed_forward(h, w["fc1.weight"], w["fc1.bias"], w["fc2.weight"], w["fc2.bias"], "gelu_tanh")


def image_tokens(ks, cfg: VisionConfig, weights: Mapping[str, Any], layers: list[Mapping[str, Any]],
                 images: np.ndarray) -> np.ndarray:
    """[N, 3, S, S] images in [-1, 1] -> [N, T, LM width] image tokens.

    weights: the runtime tensors (`vision.*`, `projector.*`); layers: per encoder layer, its tensors
    with the `vision.blk.{i}.` prefix removed.
    """
    expected = (3, cfg.image_size, cfg.image_size)
    if images.ndim != 4 or images.shape[1:] != expected:
        raise ValueError(f"vision tower expects images [N, {expected[0]}, {expected[1]}, {expected[2]}], "
                         f"got {images.shape}")
    n = images.shape[0]
    patches = patchify(np.ascontiguousarray(images, dtype=np.float32), cfg.patch_size)
    x = ks.linear(patches.reshape(n * cfg.tokens_per_camera, cfg.patch_features),
                  weights["vision.patch.weight"], weights["vision.patch.bias"])
    x = (x.reshape(n, cfg.tokens_per_camera, cfg.width) + weights["vision.position"]).reshape(-1, cfg.width)
    for layer in layers:
        x = encoder_layer(ks, cfg, layer, x, n)
    x = ks.layer_norm(x, weights["vision.post_ln.weight"], weights["vision.post_ln.bias"], cfg.eps)
    projected = ks.linear(x, weights["projector.weight"], weights["projector.bias"])
    return projected.reshape(n, cfg.tokens_per_camera, -1)
