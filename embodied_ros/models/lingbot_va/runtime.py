"""The world-action runtime: the four stages of pipeline/stages.py for a LingBot-VA-style model.

    encode         camera images -> one clean latent frame                         [C, 1, R, W]
    build_prefix   instruction + state -> context K/V of every block; the latent frame through
                   the blocks (clean, t = 0) -> its per-block self-attention K/V    (the prefix cache)
    predict_world  flow matching over the future latent frames reading the cache, then their own
                   per-block K/V                                                     (world result)
    act            flow matching over the action chunk, action tokens reading [observation ;
                   predicted frames ; themselves], unnormalized to physical units

Caches travel as stacked arrays [L, tokens, H, Dh] in the results' tensors; inside a process the
per-block views are taken without copying. Noise not given is drawn from a generator seeded by
(noise_seed, stage, observation stamp) by pipeline/noise.py, so a run is reproducible from its inputs.
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

import numpy as np

from embodied_ros.backbone.wan_block import KV
from embodied_ros.heads.world_predictor import euler_flow, predict_world
from embodied_ros.kernels import KernelSet
from embodied_ros.models.lingbot_va import observation as obs
from embodied_ros.models.lingbot_va import transformer as tf
from embodied_ros.models.lingbot_va.config import ARCHITECTURE, LingbotVAConfig
from embodied_ros.models.lingbot_va.text import Tokenizer
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.sequence.normalize import normalizer_of
from embodied_ros.pipeline.stages import ModelSpec, blank_inference
from embodied_ros.pipeline.types import ActionChunkResult, Observation, StageResult



def _stacked(kv: Sequence[KV]) -> dict[str, np.ndarray]:
    return {"k": np.stack([layer.k for layer in kv]), "v": np.stack([layer.v for layer in kv])}


def _layers(result: StageResult, name: str) -> list[KV]:
    keys, values = result.tensors[f"{name}_k"], result.tensors[f"{name}_v"]
    return [KV(keys[i], values[i]) for i in range(keys.shape[0])]


def _elapsed_ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1e3, 3)


def model_spec(cfg: LingbotVAConfig) -> ModelSpec:
    return ModelSpec(
        architecture=ARCHITECTURE, camera_names=cfg.camera_names, image_size=cfg.image_size,
        state_names=cfg.state_names, action_names=cfg.action_names, chunk_size=cfg.chunk_size,
        action_period_s=cfg.action_period_s, noise_shape=(cfg.chunk_size, cfg.action_dim),
        world_noise_shape=tuple(cfg.world_noise_shape), has_world_model=True, noise_seed=cfg.noise_seed)


class LingbotVARuntime:
    def __init__(self, cfg: LingbotVAConfig, weights: tf.LingbotVAWeights, stats: Mapping[str, Mapping[str, np.ndarray]],
                 tokenizer: Tokenizer, backend: str = "numba") -> None:
        if tokenizer.vocab_size != cfg.vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} pieces, the model's text table {cfg.vocab_size}")
        self.cfg, self.weights, self.tokenizer = cfg, weights, tokenizer
        # the reference divides by std alone (no eps added)
        self.state_stats = normalizer_of({k: stats["state"][k] for k in ("mean", "std")}, eps=0.0)
        self.action_stats = normalizer_of({k: stats["action"][k] for k in ("mean", "std")}, eps=0.0)
        self.ks = KernelSet(backend)
        self.spec = model_spec(cfg)
        self._action_rope = tf.action_rope(cfg)

    def warm_up(self) -> None:
        """Every stage once on a blank observation (its kernels compile for the shapes real steps use)."""
        blank_inference(self)

    @property
    def world_noise_shape(self) -> tuple[int, ...]:
        return self.cfg.world_noise_shape

    def _noise(self, stamp_ns: int, stage: str, shape: tuple[int, ...]) -> np.ndarray:
        return stage_noise(self.spec.noise_seed, stage, stamp_ns, shape)

    # ---- stages ------------------------------------------------------------------------------

    def encode(self, observation: Observation) -> StageResult:
        start = time.perf_counter()
        images = obs.check_images(self.cfg, observation.images)
        latents = obs.encode_images(self.ks, self.cfg, self.weights, images)
        return StageResult("perception", observation.stamp_ns, {"latents": latents},
                           {"infer_ms": _elapsed_ms(start)})

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        start = time.perf_counter()
        cfg, ks, w = self.cfg, self.ks, self.weights
        latents = embeddings.tensors["latents"]
        if latents.shape != (cfg.latent_channels, 1, *cfg.latent_hw):
            raise ValueError(f"perception latents have shape {latents.shape}, expected "
                             f"{(cfg.latent_channels, 1, *cfg.latent_hw)}")
        state = obs.normalized_state(cfg, observation.state, self.state_stats)
        context = tf.condition_kv(ks, cfg, w, obs.context_tokens(ks, w, self.tokenizer, observation.instruction, state))
        frame = tf.clean_video_kv(ks, cfg, w, latents, frame_start=0, context=context, past=None)
        tensors = {**{f"context_{k}": v for k, v in _stacked(context).items()},
                   **{f"frame_{k}": v for k, v in _stacked(frame).items()}, "latents": latents}
        return StageResult("prefix", observation.stamp_ns, tensors,
                           {"context_tokens": len(context[0]), "infer_ms": _elapsed_ms(start)})

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None) -> StageResult:
        start = time.perf_counter()
        cfg, ks, w = self.cfg, self.ks, self.weights
        context, observation_kv = _layers(prefix, "context"), _layers(prefix, "frame")
        if noise is None:
            noise = self._noise(prefix.stamp_ns, "world", cfg.world_noise_shape)
        noise = _checked_noise("world", noise, cfg.world_noise_shape)

        def velocity(latents: np.ndarray, t: float) -> np.ndarray:
            return tf.video_velocity(ks, cfg, w, latents, t, context, observation_kv)

        def clean_kv(latents: np.ndarray) -> list[KV]:
            return tf.clean_video_kv(ks, cfg, w, latents, frame_start=1, context=context, past=observation_kv)

        prediction = predict_world(velocity, clean_kv, noise, cfg.world_steps)
        tensors = {"latents": prediction.latents, **{f"world_{k}": v for k, v in _stacked(prediction.kv).items()}}
        return StageResult("world", prefix.stamp_ns, tensors,
                           {"steps": cfg.world_steps, "infer_ms": _elapsed_ms(start)})

    def act(self, prefix: StageResult, world: StageResult | None, noise: np.ndarray | None = None) -> ActionChunkResult:
        cfg, ks, w = self.cfg, self.ks, self.weights
        if world is None:
            raise ValueError("lingbot_va's action head reads a world prediction: run predict_world first")
        expected = (cfg.num_layers, cfg.future_frames * cfg.tokens_per_frame, cfg.num_heads, cfg.block.head_dim)
        if world.tensors["world_k"].shape != expected:
            raise ValueError(f"world prediction keys have shape {world.tensors['world_k'].shape}, this model "
                             f"makes {expected}: the prediction comes from another model")
        if noise is None:
            noise = self._noise(prefix.stamp_ns, "action", self.spec.noise_shape)
        noise = _checked_noise("action", noise, self.spec.noise_shape)
        context = _layers(prefix, "context")
        past = tf.join_kv(_layers(prefix, "frame"), _layers(world, "world"))  # once per chunk, read by every step

        def velocity(actions: np.ndarray, t: float) -> np.ndarray:
            return tf.action_velocity(ks, cfg, w, actions, t, self._action_rope, context, past)

        normalized = euler_flow(velocity, noise, cfg.action_steps)
        actions = self.action_stats.denormalize(normalized).astype(np.float32)
        return ActionChunkResult(prefix.stamp_ns, actions, cfg.action_period_s, cfg.action_names)


def _checked_noise(kind: str, noise: np.ndarray, expected: tuple[int, ...]) -> np.ndarray:
    noise = np.asarray(noise)
    if noise.shape != tuple(expected):
        raise ValueError(f"{kind} noise has shape {noise.shape}; this model needs {tuple(expected)}")
    if not np.isfinite(noise).all():
        raise ValueError(f"{kind} noise contains NaN or infinity")
    return noise.astype(np.float32, copy=False)
