"""LingBot-VA's step loop as lerobot 0.6.1's `LingBotVAPolicy.select_action` runs it: one call per
environment step, the policy keeping the episode between calls (`reset()` starts a new one).

    step 0      encode the instruction (and "" for guidance) once; observation 0 -> the chunk-0
                latent frame; sample chunk 0; queue its frames 1..F-1 (frame 0 is the observation)
    step t > 0  observation t joins the keyframe buffer when (n + 1) % max(1, P // 4) == 0, n the
                sub-step of the action returned at step t-1; with the queue empty: encode the
                buffer through each camera's VAE stream (chunk 1: after the frame-0 latent), feed it
                back with the executed actions, sample the next chunk, queue all its F*P actions
    output      the next queued row of the used action channels (model space); `unnormalize` maps
                it to the robot's units (lerobot's QUANTILES post-processor)
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Mapping, Sequence

import numpy as np

from embodied_ros.backbone import wan_vae
from embodied_ros.heads import dual_stream as ds
from embodied_ros.models.lingbot_va.policy import ChunkConfig, Episode, unnormalize_quantiles
from embodied_ros.models.lingbot_va.prompt import PromptEncoder
from embodied_ros.sequence.images import resize_bilinear

NoiseSource = Callable[[int, tuple, tuple], tuple[np.ndarray, np.ndarray]]  # (chunk, video, action shapes)


def seeded_noise(seed: int) -> NoiseSource:
    """Standard normal noise for chunk j from a generator seeded by (seed, j)."""
    def draw(chunk: int, video_shape: tuple, action_shape: tuple) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng((seed, chunk))
        return (rng.standard_normal(video_shape, dtype=np.float32), rng.standard_normal(action_shape, dtype=np.float32))
    return draw


def camera_frames(images: Mapping[str, np.ndarray], camera_names: Sequence[str], image_hw: tuple[int, int]) -> np.ndarray:
    """uint8 HWC camera images -> (n_cam, 3, H, W) in [-1, 1] at the model size."""
    frames = []
    for name in camera_names:
        image = images.get(name)
        if image is None or np.ndim(image) != 3 or np.shape(image)[2] != 3 or np.asarray(image).dtype != np.uint8:
            raise ValueError(f"lingbot_va: camera {name!r} needs an (h, w, 3) uint8 image, got "
                             f"{None if image is None else (np.shape(image), np.asarray(image).dtype)}")
        rgb = np.asarray(image, np.float32).transpose(2, 0, 1) / np.float32(255.0)
        frames.append(resize_bilinear(rgb, *image_hw) * np.float32(2.0) - np.float32(1.0))
    return np.stack(frames).astype(np.float32)


def encode_clips(vae: wan_vae.WanVAEEncoder, clips: np.ndarray, streams: Sequence[wan_vae.Stream]) -> np.ndarray:
    """(n_cam, 3, T, H, W) through each camera's stream -> latents (48, T', R, n_cam*W') side by side."""
    return np.concatenate([vae.latents(clip, stream) for clip, stream in zip(clips, streams)], axis=3)


def prompt_rows(prompts: PromptEncoder, chunk: ChunkConfig, task: str) -> list[np.ndarray]:
    """The UMT5 embeddings of the instruction, and of "" (the negative prompt) when a stream is guided."""
    return [prompts(task)] + ([prompts("")] if chunk.cfg_rows == 2 else [])


class LingbotVAPolicy:
    def __init__(self, ks, cfg: ds.DualStreamConfig, chunk: ChunkConfig, weights: ds.DualStreamWeights,
                 prompts: PromptEncoder, vae: wan_vae.WanVAEEncoder, camera_names: Sequence[str],
                 image_hw: tuple[int, int], q01: np.ndarray, q99: np.ndarray, noise: NoiseSource) -> None:
        factor = vae.cfg.spatial_factor
        if image_hw[0] % factor or image_hw[1] % factor or not camera_names:
            raise ValueError(f"lingbot_va: model image size {image_hw} must be a multiple of {factor}, with cameras")
        self.ks, self.cfg, self.chunk, self.weights = ks, cfg, chunk, weights
        self.prompts, self.vae, self.noise = prompts, vae, noise
        self.camera_names, self.image_hw = tuple(camera_names), tuple(image_hw)
        self.q01, self.q99 = np.asarray(q01, np.float32), np.asarray(q99, np.float32)
        self.latent_hw = (image_hw[0] // factor, len(self.camera_names) * image_hw[1] // factor)
        self.reset()

    def reset(self) -> None:
        self.episode: Episode | None = None
        self.streams = [wan_vae.Stream() for _ in self.camera_names]
        self.queue: deque[tuple[np.ndarray, int]] = deque()  # (action row, sub-step n)
        self.keyframes: list[np.ndarray] = []
        self.init_latent: np.ndarray | None = None
        self.predicted_latents: np.ndarray | None = None  # the last chunk's, normalized (48, F, R, n_cam*W')
        self.last_substep = -1

    def _queue(self, actions: np.ndarray, chunk_index: int) -> None:
        used = actions[list(self.chunk.used_action_channel_ids)]  # [a, F, P]
        for f in range(1 if chunk_index == 0 else 0, used.shape[1]):
            for n in range(used.shape[2]):
                self.queue.append((used[:, f, n].copy(), n))

    def _sample(self, init_latent: np.ndarray | None = None) -> None:
        index = self.episode.index
        noise_latents, noise_actions = self.noise(index, self.episode.video_shape, self.episode.action_shape)
        self.predicted_latents, actions = self.episode.sample(noise_latents, noise_actions, init_latent)
        self._queue(actions, index)

    def select_action(self, images: Mapping[str, np.ndarray], task: str) -> np.ndarray:
        """One environment step: the next action (used channels, model space)."""
        frames = camera_frames(images, self.camera_names, self.image_hw)
        if self.episode is None:
            self.episode = Episode(self.ks, self.cfg, self.chunk, self.weights, prompt_rows(self.prompts, self.chunk, task),
                                   self.latent_hw)
            self.init_latent = encode_clips(self.vae, frames[:, :, None], self.streams)
            self._sample(self.init_latent)
        else:
            if (self.last_substep + 1) % self.chunk.keyframe_stride == 0:
                self.keyframes.append(frames)
            if not self.queue:
                observed = encode_clips(self.vae, np.stack(self.keyframes, axis=2), self.streams)
                if self.episode.index == 1:
                    observed = np.concatenate([self.init_latent, observed], axis=1)
                self.keyframes = []
                self.episode.feed_back(observed)
                self._sample()
        action, self.last_substep = self.queue.popleft()
        return action

    def unnormalize(self, action: np.ndarray) -> np.ndarray:
        return unnormalize_quantiles(action, self.q01, self.q99)
