"""SmolVLM's vision tower and connector: camera images -> image tokens in the text model's width.

Axes: N images, P patches per image (n x n, row-major), W vision width, s pixel-shuffle scale,
T = P / s^2 tokens per image, D text width.

    x = patch_linear(patches) + position[patch index]   (a conv with kernel = stride = patch)
    depth x SigLIP-style pre-LN encoder layers           (backbone/siglip.encoder_layer)
    hidden = LN_post(x)                                  [N, P, W]
    shuffled = pixel_shuffle(hidden, s)                  [N, T, s^2 W]
    tokens = connector(shuffled)                         [N, T, D], a linear without bias

Pixel shuffle: output token (i, j), i, j < n/s, row-major; its channel (a*s + b)*W + c is channel c
of patch (i*s + a, j*s + b). Images come at image_size exactly, so the tower's bucketed position
ids are the plain patch index.

Runtime tensor names (prefix `vision.` and `connector.`), with their transformers names under
`vision_model.` / `connector.` of a SmolVLM:

    vision.patch.{weight,bias}         embeddings.patch_embedding   [W, 3*p*p] (conv flattened)
    vision.position                    embeddings.position_embedding.weight   [P, W]
    vision.blk.{i}.{ln1,ln2}.{weight,bias}                 encoder.layers.{i}.layer_norm{1,2}
    vision.blk.{i}.attn_qkv.{weight,bias}                  self_attn.{q,k,v}_proj stacked
    vision.blk.{i}.{attn_out,fc1,fc2}.{weight,bias}        self_attn.out_proj, mlp.fc1, mlp.fc2
    vision.post_ln.{weight,bias}       post_layernorm
    connector.weight                   modality_projection.proj.weight   [D, s^2 W]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone import siglip

# transformers name under `vision_model.encoder.layers.{i}.` -> runtime name under `vision.blk.{i}.`
VISION_LAYER_NAMES = {"layer_norm1": "ln1", "layer_norm2": "ln2", "self_attn.q_proj": "attn_q",
                      "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.out_proj": "attn_out",
                      "mlp.fc1": "fc1", "mlp.fc2": "fc2"}


@dataclass(frozen=True)
class SmolVLMVisionConfig:
    image_size: int
    patch_size: int
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    scale_factor: int  # pixel shuffle
    eps: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "width", "depth", "mlp_dim", "num_heads", "scale_factor"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"vision.{name} must be a positive integer, got {value!r}")
        if self.image_size % self.patch_size:
            raise ValueError(f"vision.image_size {self.image_size} is not a multiple of patch_size {self.patch_size}")
        if self.patches_per_side % self.scale_factor:
            raise ValueError(f"{self.patches_per_side} patches per side cannot be pixel-shuffled by "
                             f"scale {self.scale_factor}")
        if self.width % self.num_heads:
            raise ValueError(f"vision.width {self.width} is not divisible by num_heads {self.num_heads}")

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def patches(self) -> int:
        return self.patches_per_side ** 2

    @property
    def patch_features(self) -> int:
        return 3 * self.patch_size ** 2

    @property
    def tokens_per_image(self) -> int:
        return self.patches // self.scale_factor ** 2

    @property
    def connector_in(self) -> int:
        return self.width * self.scale_factor ** 2


def expected_shapes(cfg: SmolVLMVisionConfig, text_width: int) -> dict[str, tuple[int, ...]]:
    w = cfg.width
    shapes: dict[str, tuple[int, ...]] = {
        "vision.patch.weight": (w, cfg.patch_features), "vision.patch.bias": (w,),
        "vision.position": (cfg.patches, w), "vision.post_ln.weight": (w,), "vision.post_ln.bias": (w,),
        "connector.weight": (text_width, cfg.connector_in),
    }
    for i in range(cfg.depth):
        for part, out_in in {"attn_qkv": (3 * w, w), "attn_out": (w, w), "fc1": (cfg.mlp_dim, w),
                             "fc2": (w, cfg.mlp_dim)}.items():
            shapes[f"vision.blk.{i}.{part}.weight"], shapes[f"vision.blk.{i}.{part}.bias"] = out_in, out_in[:1]
        for norm in ("ln1", "ln2"):
            shapes[f"vision.blk.{i}.{norm}.weight"] = shapes[f"vision.blk.{i}.{norm}.bias"] = (w,)
    return shapes


def pixel_shuffle(hidden: np.ndarray, scale: int) -> np.ndarray:
    """[N, n*n, W] -> [N, (n/s)^2, s*s*W] (see the module doc for the channel order)."""
    images, patches, width = hidden.shape
    side = int(round(patches ** 0.5))
    grid = hidden.reshape(images, side // scale, scale, side // scale, scale, width)  # (i, a, j, b, c)
    return grid.transpose(0, 1, 3, 2, 4, 5).reshape(images, patches // scale ** 2, scale * scale * width)


def vision_hidden(ks, cfg: SmolVLMVisionConfig, weights: Mapping[str, Any], layers: Sequence[Mapping[str, Any]],
                  images: np.ndarray) -> np.ndarray:
    """[N, 3, S, S] images in [-1, 1] -> [N, P, W], the tower's output after its post LayerNorm."""
    expected = (3, cfg.image_size, cfg.image_size)
    if images.ndim != 4 or images.shape[1:] != expected:
        raise ValueError(f"vision tower expects images [N, {expected[0]}, {expected[1]}, {expected[2]}], "
                         f"got {images.shape}")
    n = images.shape[0]
    patches = siglip.patchify(np.ascontiguousarray(images, dtype=np.float32), cfg.patch_size)
    x = ks.linear(patches.reshape(n * cfg.patches, cfg.patch_features),
                  weights["vision.patch.weight"], weights["vision.patch.bias"])
    x = (x.reshape(n, cfg.patches, cfg.width) + weights["vision.position"]).reshape(-1, cfg.width)
    for layer in layers:
        x = siglip.encoder_layer(ks, cfg, layer, x, n)
    x = ks.layer_norm(x, weights["vision.post_ln.weight"], weights["vision.post_ln.bias"], cfg.eps)
    return x.reshape(n, cfg.patches, cfg.width)


def image_tokens(ks, cfg: SmolVLMVisionConfig, weights: Mapping[str, Any], layers: Sequence[Mapping[str, Any]],
                 images: np.ndarray) -> np.ndarray:
    """[N, 3, S, S] images in [-1, 1] -> [N, T, D] connector output (not yet scaled)."""
    shuffled = pixel_shuffle(vision_hidden(ks, cfg, weights, layers, images), cfg.scale_factor)
    n = shuffled.shape[0]
    tokens = ks.linear(np.ascontiguousarray(shuffled.reshape(n * cfg.tokens_per_image, cfg.connector_in)),
                       weights["connector.weight"])
    return tokens.reshape(n, cfg.tokens_per_image, -1)
