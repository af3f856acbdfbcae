"""What the device models of the flow-matching VLAs share (gpu/pi05.py, gpu/smolvla.py): perception
captured once per number of images present, the prefix cache taken from stage tensors (uploaded when it
came from another process), the noise check, the warm-up. A model calls `DeviceVLA.__init__` with its
image slots, the vision tower's rows per image and perception's output tokens per image, sets `solve`
(a gpu.flow_solve.FlowSolve), and defines `_encode(patches, images)`: float32 patches [images *
patches_per_image, 3 p p] on the engine -> image tokens [images * tokens_per_image, D], and
`_blank_prefix(image_tokens, image_mask)`: a two-token prefix over them."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.siglip import patchify
from embodied_ros.gpu.captured import Captured
from embodied_ros.gpu.layers import F32, DevicePrefixCache


class DeviceVLA:
    def __init__(self, config, engine, image_slots: int, patches_per_image: int, tokens_per_image: int) -> None:
        self.config = config
        self.engine = engine
        self.image_slots = image_slots
        self.patches_per_image = patches_per_image
        self.tokens_per_image = tokens_per_image
        self._perceptions: dict[int, Captured] = {}

    def _encode(self, patches, images: int):  # pragma: no cover - defined by each model
        raise NotImplementedError

    def _blank_prefix(self, image_tokens, image_mask: np.ndarray):  # pragma: no cover - defined by each model
        raise NotImplementedError

    def warm_up(self) -> None:
        """Perception captured for every number of images, a one-image prefix, the solve captured (guided
        too): nothing is compiled or captured in a control step."""
        cfg = self.config
        for count in range(1, self.image_slots + 1):
            self._perception(count)
        images = np.zeros((self.image_slots, 3, cfg.vision.image_size, cfg.vision.image_size), np.float32)
        mask = np.arange(self.image_slots) == 0
        cache = self._blank_prefix(self.image_tokens(images, mask), mask)
        self.solve.capture(guided=True)
        self.sample_actions(cache, np.zeros((cfg.chunk_size, cfg.max_action_dim), np.float32))

    def image_tokens(self, images: np.ndarray, image_mask: np.ndarray | None = None):
        """[N, 3, S, S] in [-1, 1] -> device [N, T, D] float32; images masked False are zeros."""
        vision = self.config.vision
        image_mask = np.ones(images.shape[0], bool) if image_mask is None else np.asarray(image_mask, bool)
        expected = (3, vision.image_size, vision.image_size)
        if images.ndim != 4 or images.shape[1:] != expected:
            raise ValueError(f"vision tower expects images [N, {expected[0]}, {expected[1]}, {expected[2]}], "
                             f"got {images.shape}")
        e, t = self.engine, self.tokens_per_image
        present = np.flatnonzero(image_mask)
        tokens = None
        if present.size:
            patches = patchify(np.ascontiguousarray(images[present], dtype=np.float32), vision.patch_size)
            tokens = self._perception(present.size)(patches.reshape(present.size * self.patches_per_image, -1))
        with e.active():
            out = e.zeros((images.shape[0], t, self.config.lm.width), F32)
            for slot, image in enumerate(present):
                out[int(image)] = tokens[slot * t:(slot + 1) * t]
        return out

    def _perception(self, images: int) -> Captured:
        """Perception of `images` images, captured once per count."""
        if images not in self._perceptions:
            shape = (images * self.patches_per_image, self.config.vision.patch_features)
            self._perceptions[images] = Captured(self.engine, lambda patches: self._encode(patches, images),
                                                 [(shape, F32)])
        return self._perceptions[images]

    def cache_from_tensors(self, tensors: Mapping[str, Any], stamp_ns: int = 0) -> DevicePrefixCache:
        cache = DevicePrefixCache.from_tensors(tensors, stamp_ns)
        if isinstance(cache.keys, np.ndarray):  # it came from another process
            with self.engine.active():
                return DevicePrefixCache(self.engine.upload(cache.keys), self.engine.upload(cache.values),
                                         cache.valid, stamp_ns)
        return cache

    def checked_tokens(self, tokens: np.ndarray, compact: bool) -> np.ndarray:
        """Prompt token ids as int64, in the vocabulary; only the compacted prefix runs on the device."""
        if not compact:
            raise ValueError("the device runtime builds the compacted prefix only")
        ids = np.asarray(tokens, dtype=np.int64)
        vocab = self.config.vocab_size
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise ValueError(f"token ids must lie in 0..{vocab - 1}, got {ids.min()}..{ids.max()}")
        return ids

    def checked_noise(self, noise: np.ndarray) -> np.ndarray:
        expected = (self.config.chunk_size, self.config.max_action_dim)
        noise = np.asarray(noise, dtype=np.float32)
        if noise.shape != expected:
            raise ValueError(f"noise must have shape {expected} (chunk, max_action_dim), got {noise.shape}")
        return noise
