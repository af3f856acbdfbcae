"""GR00T N1.7 assembled from its layers, in model space (pixel rows, token ids, normalized state).

    image_rows(pixel_rows, grids)                   vision tower -> (image-token rows, deepstack features)
    backbone(pixel_rows, grids, input_ids)          -> Backbone: the LM rows the action head reads
    language_backbone(image, deepstack, grids, ids) the same from the vision tower's output
    sample_actions(backbone, state, noise, embodiment)  Euler from noise (t=0) to actions (t=1)

`grids` holds each present view's patch grid (rows, columns); a missing camera is one image block
fewer in the prompt. The DiT's time conditioning depends only on the step, so it is computed once per model; the
cross-attention keys and values only on the backbone rows, so once per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.backbone import qwen3_vl
from embodied_ros.backbone.paligemma import TOKEN_EMBEDDING, prepare_weights
from embodied_ros.heads import groot_dit
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.models.groot.config import GrootConfig
from embodied_ros.models.groot.weights import check_weights, is_linear_weight


@dataclass(frozen=True)
class Backbone:
    features: np.ndarray  # [L, d] output of the last kept LM layer
    image_mask: np.ndarray  # [L] rows that are image tokens


def _layers(weights: Mapping[str, Any], prefix: str, depth: int) -> list[dict[str, Any]]:
    return [{name[len(f"{prefix}.{i}."):]: w for name, w in weights.items() if name.startswith(f"{prefix}.{i}.")}
            for i in range(depth)]


class GrootModel:
    def __init__(self, config: GrootConfig, weights: Mapping[str, Any], backend: str = "numba") -> None:
        check_weights(weights, config)
        self.config = config
        self.ks = KernelSet(backend)
        tables = {name: w.dequantize() if isinstance(w, QuantTensor) else w for name, w in weights.items()
                  if name == TOKEN_EMBEDDING}  # the LM input is a row lookup
        category = {name: w for name, w in weights.items() if groot_dit.is_category_tensor(name)}  # as stored
        rest = {name: w for name, w in {**weights, **tables}.items() if name not in category}
        self.weights = {**prepare_weights(rest, is_linear_weight, pack=backend == "numba"), **category}
        self.vision_layers = _layers(self.weights, "vision.blk", config.vision.depth)
        self.lm_layers = _layers(self.weights, "lm.blk", config.text.depth)
        self.vl_layers = _layers(self.weights, "head.vl", config.head.vl_depth)
        self.dit_blocks = _layers(self.weights, "head.dit", config.head.depth)
        head = config.head
        self.timesteps = groot_dit.euler_timesteps(head.num_inference_steps, head.num_timestep_buckets)
        self.step_conditioning = [
            groot_dit.step_conditioning(self.ks, self.weights, self.dit_blocks,
                                        groot_dit.time_embedding(self.ks, self.weights, t)) for t in self.timesteps]
        self._embodiments: dict[int, dict[str, np.ndarray]] = {}

    def embodiment_weights(self, embodiment: int) -> dict[str, np.ndarray]:
        """The embodiment's category-specific layers, sliced once on first use."""
        if embodiment not in self._embodiments:
            self._embodiments[embodiment] = groot_dit.embodiment_weights(self.weights, embodiment)
        return self._embodiments[embodiment]

    def image_rows(self, pixel_rows: np.ndarray, grids: Sequence[tuple[int, int]]) -> tuple[np.ndarray, list[np.ndarray]]:
        return qwen3_vl.vision_tower(self.ks, self.config.vision, self.weights, self.vision_layers,
                                     np.asarray(pixel_rows, np.float32), [tuple(map(int, g)) for g in grids])

    def backbone(self, pixel_rows: np.ndarray, grids: Sequence[tuple[int, int]], input_ids: np.ndarray) -> Backbone:
        image, deepstack = self.image_rows(pixel_rows, grids)
        return self.language_backbone(image, deepstack, grids, input_ids)

    def language_backbone(self, image: np.ndarray, deepstack: Sequence[np.ndarray], grids: Sequence[tuple[int, int]],
                          input_ids: np.ndarray) -> Backbone:
        """The LM pass over the prompt, its image rows given (the vision tower's output)."""
        cfg = self.config
        ids = np.asarray(input_ids, np.int64)
        if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= cfg.text.vocab_size:
            raise ValueError(f"input ids must be a non-empty 1-D array in 0..{cfg.text.vocab_size - 1}")
        grids = [tuple(map(int, g)) for g in grids]
        deepstack = list(deepstack)
        x = qwen3_vl.lm_inputs(self.weights["lm.token_embd"], ids, cfg.tokens.image, image)
        positions = qwen3_vl.mrope_positions(ids, cfg.tokens.image, grids, cfg.vision.spatial_merge_size)
        image_mask = ids == cfg.tokens.image
        features = qwen3_vl.lm_forward(self.ks, cfg.text, self.lm_layers, x, positions, image_mask, deepstack)
        return Backbone(features, image_mask)

    def vl_embeddings(self, backbone: Backbone) -> np.ndarray:
        return groot_dit.vl_embeddings(self.ks, self.config.head, self.weights, self.vl_layers, backbone.features)

    def sample_actions(self, backbone: Backbone, state: np.ndarray, noise: np.ndarray, embodiment: int) -> np.ndarray:
        """Normalized padded state [max_state_dim], noise [H, max_action_dim] -> x(t=1) [H, max_action_dim]."""
        head = self.config.head
        state = np.asarray(state, np.float32)
        noise = np.asarray(noise, np.float32)
        if state.shape != (head.max_state_dim,):
            raise ValueError(f"state must have shape ({head.max_state_dim},) (max_state_dim), got {state.shape}")
        if noise.shape != (head.horizon, head.max_action_dim):
            raise ValueError(f"noise must have shape {(head.horizon, head.max_action_dim)}, got {noise.shape}")
        if not 0 <= int(embodiment) < head.num_embodiments:
            raise ValueError(f"embodiment id must lie in 0..{head.num_embodiments - 1}, got {embodiment}")
        embodiment = int(embodiment)
        ew = self.embodiment_weights(embodiment)
        cross = self.cross_keys_values(backbone)
        state_rows = groot_dit.state_features(self.ks, ew, state)
        x = noise
        dt = np.float32(1.0 / head.num_inference_steps)
        for t, conditioning in zip(self.timesteps, self.step_conditioning):
            v = groot_dit.velocity(self.ks, head, self.weights, ew, self.dit_blocks, x, t, state_rows, conditioning,
                                   cross)
            x = x + dt * v
        return x

    def cross_keys_values(self, backbone: Backbone) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """The cross-attention blocks' keys and values over the vl rows: once per chunk."""
        return groot_dit.cross_keys_values(self.ks, self.config.head, self.dit_blocks, self.vl_embeddings(backbone),
                                           ~backbone.image_mask, backbone.image_mask)
