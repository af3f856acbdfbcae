"""LingBot-VA's episode as the graph's world predictor carries it from run to run.

The graph runs the model at its own period (`schedule.world`) rather than when the queued actions
run out, as lerobot's `select_action` does (closed_loop.py); a chunk's executed rows are streamed
on the time axis, row r reached at the chunk's observation stamp + (r + 1) * action period
(deploy/chunk.py). Run j of an episode, on the frames of its observation:

    j = 0        a new episode (also whenever the instruction changes): the prompt rows' context,
                 fresh VAE streams per camera; the frames -> the chunk-0 latent frame; chunk 0 sampled
    j > 0        the keyframes of chunk j-1's executed rows: each row r whose sub-step n has
                 (n + 1) % max(1, P // 4) == 0 (lerobot's rule) takes the newest frames observed at or
                 before its instant (all frames reach `observe`); they go through the VAE streams
                 (after the chunk-0 latent for j = 1) and are fed back with chunk j-1's actions; chunk j
                 is sampled

With one row per step and a world period of one chunk's rows this is `select_action`'s episode
(test/test_lingbot_va_graph.py checks it). The noise of a run is one flat vector: the video noise
[C, F, R, W] then the action noise [A, F, P].
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from embodied_ros.backbone import wan_vae
from embodied_ros.heads import dual_stream as ds
from embodied_ros.models.lingbot_va.closed_loop import encode_clips
from embodied_ros.models.lingbot_va.policy import ChunkConfig, Episode


def noise_sizes(cfg: ds.DualStreamConfig, chunk: ChunkConfig, latent_hw: tuple[int, int]) -> tuple[int, int]:
    """Sizes of a run's video and action noise."""
    frames = chunk.frame_chunk_size
    return (cfg.latent_channels * frames * latent_hw[0] * latent_hw[1],
            cfg.action_dim * frames * chunk.action_per_frame)


class WorldEpisode:
    def __init__(self, ks, cfg: ds.DualStreamConfig, chunk: ChunkConfig, weights: ds.DualStreamWeights,
                 vae: wan_vae.WanVAEEncoder, cameras: int, latent_hw: tuple[int, int], action_period_ns: int) -> None:
        if action_period_ns <= 0:
            raise ValueError(f"lingbot_va: the action period must be positive, got {action_period_ns} ns")
        self.ks, self.cfg, self.chunk, self.weights, self.vae = ks, cfg, chunk, weights, vae
        self.cameras, self.latent_hw, self.action_period_ns = cameras, tuple(latent_hw), action_period_ns
        self.history: list[tuple[int, np.ndarray]] = []  # (stamp, frames (n_cam, 3, H, W)), oldest first
        self.instruction: str | None = None
        self.episode: Episode | None = None

    @property
    def runs_until_steady(self) -> int:
        """Runs of an episode before its KV pool holds the whole attention window: each run after
        them attends to as much as the last, so costs the same."""
        return self.chunk.attn_window // 2

    def observe(self, stamp_ns: int, frames: np.ndarray) -> None:
        """Frames of one observation (every step's, in stamp order; older or repeated stamps are ignored)."""
        if self.history and stamp_ns <= self.history[-1][0]:
            return
        self.history.append((stamp_ns, frames))

    def predict(self, stamp_ns: int, frames: np.ndarray, instruction: str, prompt_rows: Sequence[np.ndarray],
                noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """One run: (predicted latents [C, F, R, W], the chunk's executed rows [rows, used channels] in
        model space, the chunk's index in its episode)."""
        video_size, action_size = noise_sizes(self.cfg, self.chunk, self.latent_hw)
        noise = np.asarray(noise, np.float32)
        if noise.shape != (video_size + action_size,) or not np.isfinite(noise).all():
            raise ValueError(f"lingbot_va: world noise must be {video_size + action_size} finite values, "
                             f"got shape {noise.shape}")
        self.observe(stamp_ns, frames)
        if instruction != self.instruction:
            self._start(instruction, prompt_rows)
        episode = self.episode
        index = episode.index
        noise_latents = noise[:video_size].reshape(episode.video_shape)
        noise_actions = noise[video_size:].reshape(episode.action_shape)
        if index == 0:
            self.init_latent = encode_clips(self.vae, frames[:, :, None], self.streams)
            latents, actions = episode.sample(noise_latents, noise_actions, self.init_latent)
        else:
            observed = encode_clips(self.vae, np.stack(self._keyframes(index - 1), axis=2), self.streams)
            if index == 1:
                observed = np.concatenate([self.init_latent, observed], axis=1)
            episode.feed_back(observed)
            latents, actions = episode.sample(noise_latents, noise_actions)
        self.chunk_stamp_ns = stamp_ns
        self.history = [entry for entry in self.history if entry[0] >= stamp_ns]
        return latents, episode.executed_rows(actions, index), index

    def _start(self, instruction: str, prompt_rows: Sequence[np.ndarray]) -> None:
        self.instruction = instruction
        self.episode = Episode(self.ks, self.cfg, self.chunk, self.weights, list(prompt_rows), self.latent_hw)
        self.streams = [wan_vae.Stream() for _ in range(self.cameras)]
        self.init_latent: np.ndarray | None = None

    def _keyframes(self, previous: int) -> list[np.ndarray]:
        """Frames after each keyframe row of chunk `previous` (executed from `chunk_stamp_ns`)."""
        per_frame = self.chunk.action_per_frame
        rows = (self.chunk.frame_chunk_size - (1 if previous == 0 else 0)) * per_frame
        stamps = [stamp for stamp, _ in self.history]
        keyframes = []
        for row in range(rows):
            if (row % per_frame + 1) % self.chunk.keyframe_stride:
                continue
            instant = self.chunk_stamp_ns + (row + 1) * self.action_period_ns
            newest = int(np.searchsorted(stamps, instant, side="right")) - 1
            keyframes.append(self.history[max(newest, 0)][1])
        return keyframes
