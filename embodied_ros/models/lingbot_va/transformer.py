"""The LingBot-VA transformer around the shared Wan blocks: embeddings in, output heads out.

Axes: C latent channels, F latent frames, R latent rows, W latent columns (cameras side by side),
S video tokens, N action tokens, T context tokens, L blocks, D width, A action width.

Two token streams share the blocks (mixture-of-transformers): video tokens come from Wan's patch
embedding and time embedder, action tokens from their own Linear(A -> D) and time embedder; each
stream has its own output head. Attention is causal between chunks: the clean observation frame
attends to itself, predicted frames to [observation ; themselves], actions to [observation ;
predicted frames ; themselves], so each earlier part's keys/values are computed once and cached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from embodied_ros.backbone.wan_block import (KV, Rope, WanBlockWeights, block_tensor_shapes, context_kv,
                                             load_block_weights, wan_block)
from embodied_ros.heads.flow import silu
from embodied_ros.kernels.rope3d import rope3d_tables
from embodied_ros.models.lingbot_va.config import LingbotVAConfig

TIMESTEP_SCALE = 1000.0  # flow time t in [0, 1] -> Wan's timestep t * 1000


@dataclass(frozen=True)
class TimeEmbedder:
    in_w: Any  # [D, freq]
    in_b: np.ndarray
    out_w: Any  # [D, D]
    out_b: np.ndarray
    proj_w: Any  # [6D, D]
    proj_b: np.ndarray


@dataclass(frozen=True)
class OutputHead:
    modulation: np.ndarray  # [2, D]: shift, scale
    proj_w: Any  # [out, D]
    proj_b: np.ndarray


@dataclass(frozen=True)
class LingbotVAWeights:
    image_encoder_w: Any  # [C, 3*p*p]
    image_encoder_b: np.ndarray
    patch_embed_w: Any  # [D, C*2*2]
    patch_embed_b: np.ndarray
    video_time: TimeEmbedder
    video_out: OutputHead  # proj: [2*2*C, D]
    text_token_embedding: Any  # [V, text_dim]
    text_in_w: Any  # [D, text_dim]
    text_in_b: np.ndarray
    text_out_w: Any  # [D, D]
    text_out_b: np.ndarray
    state_in_w: Any  # [D, state_dim]
    state_in_b: np.ndarray
    action_in_w: Any  # [D, A]
    action_in_b: np.ndarray
    action_time: TimeEmbedder
    action_out: OutputHead  # proj: [A, D]
    blocks: tuple[WanBlockWeights, ...]


def _time_shapes(prefix: str, cfg: LingbotVAConfig) -> dict[str, tuple[int, ...]]:
    d = cfg.dim
    return {f"{prefix}time_embed.in.weight": (d, cfg.freq_dim), f"{prefix}time_embed.in.bias": (d,),
            f"{prefix}time_embed.out.weight": (d, d), f"{prefix}time_embed.out.bias": (d,),
            f"{prefix}time_proj.weight": (6 * d, d), f"{prefix}time_proj.bias": (6 * d,)}


def tensor_shapes(cfg: LingbotVAConfig) -> dict[str, tuple[int, ...]]:
    """Every bundle tensor of the model -> its shape."""
    d, c, p = cfg.dim, cfg.latent_channels, cfg.latent_patch
    shapes = {
        "image_encoder.weight": (c, 3 * cfg.pixel_patch ** 2), "image_encoder.bias": (c,),
        "patch_embed.weight": (d, c * p * p), "patch_embed.bias": (d,),
        "out.modulation": (2, d), "out.proj.weight": (p * p * c, d), "out.proj.bias": (p * p * c,),
        "text.token_embedding": (cfg.vocab_size, cfg.text_dim),
        "text_embed.in.weight": (d, cfg.text_dim), "text_embed.in.bias": (d,),
        "text_embed.out.weight": (d, d), "text_embed.out.bias": (d,),
        "state.in.weight": (d, cfg.state_dim), "state.in.bias": (d,),
        "action.in.weight": (d, cfg.action_dim), "action.in.bias": (d,),
        "action.out.modulation": (2, d), "action.out.proj.weight": (cfg.action_dim, d),
        "action.out.proj.bias": (cfg.action_dim,),
        **_time_shapes("", cfg), **_time_shapes("action.", cfg),
    }
    for i in range(cfg.num_layers):
        shapes.update({f"blk.{i}.{name}": shape for name, shape in block_tensor_shapes(cfg.block).items()})
    return shapes


def load_weights(get: Callable[[str], Any], cfg: LingbotVAConfig) -> LingbotVAWeights:
    """Gather the model's tensors by bundle name, checking every shape against the config."""
    shapes = tensor_shapes(cfg)

    def tensor(name: str) -> Any:
        value = get(name)
        if tuple(value.shape) != shapes[name]:
            raise ValueError(f"{name}: shape {tuple(value.shape)}, expected {shapes[name]} for this config")
        return value

    def time_embedder(prefix: str) -> TimeEmbedder:
        return TimeEmbedder(*(tensor(f"{prefix}{name}") for name in (
            "time_embed.in.weight", "time_embed.in.bias", "time_embed.out.weight", "time_embed.out.bias",
            "time_proj.weight", "time_proj.bias")))

    def head(prefix: str) -> OutputHead:
        return OutputHead(tensor(f"{prefix}modulation"), tensor(f"{prefix}proj.weight"), tensor(f"{prefix}proj.bias"))

    blocks = tuple(load_block_weights(get, f"blk.{i}.", cfg.block) for i in range(cfg.num_layers))
    return LingbotVAWeights(
        tensor("image_encoder.weight"), tensor("image_encoder.bias"),
        tensor("patch_embed.weight"), tensor("patch_embed.bias"), time_embedder(""), head("out."),
        tensor("text.token_embedding"), tensor("text_embed.in.weight"), tensor("text_embed.in.bias"),
        tensor("text_embed.out.weight"), tensor("text_embed.out.bias"),
        tensor("state.in.weight"), tensor("state.in.bias"), tensor("action.in.weight"), tensor("action.in.bias"),
        time_embedder("action."), head("action.out."), blocks)


# ---- time conditioning ---------------------------------------------------------------------------

def timestep_features(timestep: float, freq_dim: int) -> np.ndarray:
    """Sinusoidal features [1, freq] of a timestep: [cos, sin] halves (diffusers Timesteps with
    flip_sin_to_cos=True, downscale_freq_shift=0), in float32 as diffusers computes them."""
    half = freq_dim // 2
    exponent = np.float32(-math.log(10000.0)) * np.arange(half, dtype=np.float32) / np.float32(half)
    angles = np.float32(timestep) * np.exp(exponent)
    return np.concatenate([np.cos(angles), np.sin(angles)])[None, :].astype(np.float32)


def time_conditioning(ks, emb: TimeEmbedder, t: float, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Flow time t -> (temb [1, D] for the output head, block modulation input [6, D])."""
    features = timestep_features(t * TIMESTEP_SCALE, emb.in_w.shape[1])
    temb = ks.linear(silu(ks.linear(features, emb.in_w, emb.in_b)), emb.out_w, emb.out_b)
    return temb, ks.linear(silu(temb), emb.proj_w, emb.proj_b).reshape(6, dim)


def output_head(ks, head: OutputHead, x: np.ndarray, temb: np.ndarray, eps: float) -> np.ndarray:
    # x: [S, D], temb: [1, D] -> [S, out]
    shift, scale = head.modulation[0:1] + temb, head.modulation[1:2] + temb
    return ks.linear(ks.modulated_layer_norm(x, shift, scale, eps), head.proj_w, head.proj_b)


# ---- the shared blocks ---------------------------------------------------------------------------

def condition_kv(ks, cfg: LingbotVAConfig, w: LingbotVAWeights, context: np.ndarray) -> list[KV]:
    """Cross-attention K/V of the context tokens [T, D] for every block."""
    return [context_kv(ks, cfg.block, block.cross_attn, context) for block in w.blocks]


def run_blocks(ks, cfg: LingbotVAConfig, w: LingbotVAWeights, x: np.ndarray, block_temb: np.ndarray,
               rope: Rope, context: list[KV], past: list[KV] | None) -> tuple[np.ndarray, list[KV]]:
    """All blocks over tokens x [S, D]; returns the output and each block's K/V of these tokens."""
    own = []
    for i, block in enumerate(w.blocks):
        x, kv = wan_block(ks, cfg.block, block, x, block_temb, rope, context[i], None if past is None else past[i])
        own.append(kv)
    return x, own


def join_kv(*parts: list[KV]) -> list[KV]:
    """Per block, the K/V of several token sets one after the other."""
    return [KV(np.concatenate([p[i].k for p in parts]), np.concatenate([p[i].v for p in parts]))
            for i in range(len(parts[0]))]


# ---- video stream --------------------------------------------------------------------------------

def video_rope(cfg: LingbotVAConfig, frames: int, frame_start: int) -> Rope:
    return Rope(*rope3d_tables(cfg.token_grid(frames), cfg.block.head_dim, cfg.rope_theta, frame_start))


def patchify(latents: np.ndarray, p: int) -> np.ndarray:
    """[C, F, R, W] -> tokens [F*(R/p)*(W/p), C*p*p], tokens row-major over (frame, row, column),
    features ordered (channel, dy, dx) as Wan's Conv3d patch embedding reads them."""
    c, f, r, w = latents.shape
    grid = latents.reshape(c, f, r // p, p, w // p, p)
    return np.ascontiguousarray(grid.transpose(1, 2, 4, 0, 3, 5).reshape(f * (r // p) * (w // p), c * p * p))


def unpatchify(tokens: np.ndarray, grid: tuple[int, int, int], p: int, channels: int) -> np.ndarray:
    """Output tokens [S, p*p*C] (features ordered (dy, dx, channel) as Wan's proj_out writes them)
    -> [C, F, R, W]."""
    f, rows, cols = grid
    patches = tokens.reshape(f, rows, cols, p, p, channels)
    return np.ascontiguousarray(patches.transpose(5, 0, 1, 3, 2, 4).reshape(channels, f, rows * p, cols * p))


def video_tokens(ks, w: LingbotVAWeights, latents: np.ndarray, p: int) -> np.ndarray:
    return ks.linear(patchify(latents, p), w.patch_embed_w, w.patch_embed_b)  # [S, D]


def video_velocity(ks, cfg: LingbotVAConfig, w: LingbotVAWeights, latents: np.ndarray, t: float,
                   context: list[KV], past: list[KV]) -> np.ndarray:
    """Flow velocity of the future latents [C, F, R, W] at time t, reading the cached observation."""
    temb, block_temb = time_conditioning(ks, w.video_time, t, cfg.dim)
    frames = latents.shape[1]
    x, _ = run_blocks(ks, cfg, w, video_tokens(ks, w, latents, cfg.latent_patch), block_temb,
                      video_rope(cfg, frames, frame_start=1), context, past)
    out = output_head(ks, w.video_out, x, temb, cfg.eps)
    return unpatchify(out, cfg.token_grid(frames), cfg.latent_patch, cfg.latent_channels)


def clean_video_kv(ks, cfg: LingbotVAConfig, w: LingbotVAWeights, latents: np.ndarray, frame_start: int,
                   context: list[KV], past: list[KV] | None) -> list[KV]:
    """Per-block K/V of clean latent frames (flow time 0), for later tokens to attend to."""
    _, block_temb = time_conditioning(ks, w.video_time, 0.0, cfg.dim)
    _, own = run_blocks(ks, cfg, w, video_tokens(ks, w, latents, cfg.latent_patch), block_temb,
                        video_rope(cfg, latents.shape[1], frame_start), context, past)
    return own


# ---- action stream -------------------------------------------------------------------------------

def action_rope(cfg: LingbotVAConfig) -> Rope:
    """Action tokens sit after the predicted frames; their index in the chunk is the column axis."""
    return Rope(*rope3d_tables((1, 1, cfg.chunk_size), cfg.block.head_dim, cfg.rope_theta,
                               frame_start=1 + cfg.future_frames))


def action_velocity(ks, cfg: LingbotVAConfig, w: LingbotVAWeights, actions: np.ndarray, t: float,
                    rope: Rope, context: list[KV], past: list[KV]) -> np.ndarray:
    """Flow velocity of normalized actions [N, A] at time t, reading observation and predicted frames."""
    temb, block_temb = time_conditioning(ks, w.action_time, t, cfg.dim)
    x, _ = run_blocks(ks, cfg, w, ks.linear(actions, w.action_in_w, w.action_in_b), block_temb, rope,
                      context, past)
    return output_head(ks, w.action_out, x, temb, cfg.eps)
