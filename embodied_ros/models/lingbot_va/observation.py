"""Observation -> model inputs: camera images -> one latent frame, instruction + state -> context.

Axes: K cameras, H x Wi pixels, p pixel patch, C latent channels, R x W latent cells (cameras side
by side along W), T context tokens, D width.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.models.lingbot_va import transformer as tf
from embodied_ros.models.lingbot_va.config import LingbotVAConfig
from embodied_ros.models.lingbot_va.text import Tokenizer
from embodied_ros.sequence.normalize import Normalizer


def check_images(cfg: LingbotVAConfig, images: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The cameras' images in model order; clear errors for a missing camera or a wrong image."""
    missing = [name for name in cfg.camera_names if name not in images]
    if missing:
        raise ValueError(f"camera(s) {', '.join(missing)} missing from the observation; this model needs "
                         f"{', '.join(cfg.camera_names)} (got {', '.join(images) or 'none'})")
    expected = (*cfg.image_size, 3)
    ordered = []
    for name in cfg.camera_names:
        image = np.asarray(images[name])
        if image.shape != expected:
            raise ValueError(f"camera {name!r}: image of shape {image.shape}, this model needs {expected} "
                             "(height, width, RGB); resize it in the input adapter")
        if image.dtype != np.uint8:
            raise ValueError(f"camera {name!r}: image of dtype {image.dtype}, expected uint8 RGB")
        ordered.append(image)
    return ordered


def encode_images(ks, cfg: LingbotVAConfig, w: tf.LingbotVAWeights, images: list[np.ndarray]) -> np.ndarray:
    """uint8 images [K][H, Wi, 3] -> one clean latent frame [C, 1, R, K*Wi/p] (the VAE stand-in:
    each p x p pixel patch, read (rgb, dy, dx) and scaled to [-1, 1], maps linearly to C channels)."""
    p = cfg.pixel_patch
    height, width = cfg.image_size
    pixels = np.stack(images).astype(np.float32) * np.float32(2.0 / 255.0) - np.float32(1.0)  # [K, H, Wi, 3]
    k = pixels.shape[0]
    patches = pixels.reshape(k, height // p, p, width // p, p, 3).transpose(1, 0, 3, 5, 2, 4)  # [R, K, Wc, 3, p, p]
    cells = ks.linear(np.ascontiguousarray(patches.reshape(-1, 3 * p * p)), w.image_encoder_w, w.image_encoder_b)
    rows, cols = cfg.latent_hw
    return np.ascontiguousarray(cells.reshape(rows, cols, cfg.latent_channels).transpose(2, 0, 1)[:, None])


def normalized_state(cfg: LingbotVAConfig, state: np.ndarray | None, normalizer: Normalizer) -> np.ndarray:
    if state is None:
        raise ValueError(f"this model needs the robot state ({cfg.state_dim} values: {', '.join(cfg.state_names)})")
    state = np.asarray(state, dtype=np.float32)
    if state.shape != (cfg.state_dim,):
        raise ValueError(f"state has shape {state.shape}; this model needs ({cfg.state_dim},) in the order "
                         f"{', '.join(cfg.state_names)}")
    bad = [name for name, value in zip(cfg.state_names, state) if not np.isfinite(value)]
    if bad:
        raise ValueError(f"state is not finite (NaN or infinity) for joint(s): {', '.join(bad)}")
    return normalizer.normalize(state)


def context_tokens(ks, w: tf.LingbotVAWeights, tokenizer: Tokenizer, instruction: str,
                   state: np.ndarray) -> np.ndarray:
    """Context [T, D]: the instruction's text tokens (Wan's text embedder over the token features),
    then one token for the normalized state."""
    state_token = ks.linear(state[None, :], w.state_in_w, w.state_in_b)  # [1, D]
    ids = tokenizer.encode(instruction)
    if not ids.size:
        return state_token
    table = w.text_token_embedding
    features = table.take_rows(ids) if isinstance(table, QuantTensor) else np.asarray(table[ids], np.float32)
    hidden = ks.gelu_tanh(ks.linear(features, w.text_in_w, w.text_in_b))  # [T_text, D]
    return np.concatenate([ks.linear(hidden, w.text_out_w, w.text_out_b), state_token])
