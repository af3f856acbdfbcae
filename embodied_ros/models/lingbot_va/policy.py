"""LingBot-VA's chunk loop as lerobot 0.6.1's `LingBotVAPolicy` runs it, over encoded inputs.

An episode holds the KV slot pool and the prompt's context. Chunk j (latent frames j*F .. j*F+F-1):

    feedback (j >= 1)  release the predicted pool entries; observed latents (video, t = 0) and the
                       previous chunk's executed actions (t = 0) written as OBSERVED entries at
                       frames (j-1)*F ..
    video loop         N calls on the latent sample + one at t = 0 that writes PREDICTED entries;
                       Euler x += v * (sigma_{i+1} - sigma_i), guidance `guidance_scale`
    action loop        M calls + one at t = 0, reading the predicted video; `action_guidance_scale`

Chunk 0 pins latent frame 0 to the observation (timestep 0) and zeroes its actions, which are not
executed. Unused action channels are zeroed before every action call and at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from embodied_ros.heads import dual_stream as ds


@dataclass(frozen=True)
class ChunkConfig:
    """The inference settings of lerobot's `LingBotVAConfig`."""

    frame_chunk_size: int  # F latent frames per chunk
    action_per_frame: int  # P actions per latent frame
    attn_window: int
    num_inference_steps: int
    action_num_inference_steps: int
    snr_shift: float
    action_snr_shift: float
    guidance_scale: float
    action_guidance_scale: float
    used_action_channel_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "used_action_channel_ids", tuple(int(c) for c in self.used_action_channel_ids))
        small = {name: getattr(self, name) for name in ("frame_chunk_size", "action_per_frame", "num_inference_steps",
                                                        "action_num_inference_steps") if getattr(self, name) < 1}
        if small or self.attn_window < 2:
            raise ValueError(f"lingbot_va: these settings must be positive (attn_window >= 2): "
                             f"{small or {'attn_window': self.attn_window}}")

    @property
    def cfg_rows(self) -> int:
        """CFG batch: 2 (prompt, negative prompt) when either stream is guided, else 1."""
        return 2 if self.guidance_scale > 1.0 or self.action_guidance_scale > 1.0 else 1

    @property
    def keyframe_stride(self) -> int:
        return max(1, self.action_per_frame // 4)

    @classmethod
    def from_lerobot(cls, config: Mapping[str, Any], **overrides: Any) -> "ChunkConfig":
        names = [f.name for f in cls.__dataclass_fields__.values()]
        return cls(**{name: overrides.get(name, config[name]) for name in names})


@dataclass
class ChunkRecord:
    """What one chunk computed: samples entering each call and raw outputs (for parity checks)."""

    video_x: list = field(default_factory=list)
    video_v: list = field(default_factory=list)
    action_x: list = field(default_factory=list)
    action_v: list = field(default_factory=list)


class Episode:
    """One episode's transformer state: the KV slot pool, the prompt's per-row context K/V, the
    chunk index and the previous chunk's actions (fed back before the next chunk)."""

    def __init__(self, ks, cfg: ds.DualStreamConfig, chunk: ChunkConfig, weights: ds.DualStreamWeights,
                 prompt_rows: Sequence[np.ndarray], latent_hw: tuple[int, int]) -> None:
        if len(prompt_rows) != chunk.cfg_rows:
            raise ValueError(f"lingbot_va: {len(prompt_rows)} prompt rows given, the guidance needs {chunk.cfg_rows}")
        rows, cols = latent_hw
        if rows % ds.LATENT_PATCH or cols % ds.LATENT_PATCH:
            raise ValueError(f"lingbot_va: latent grid {latent_hw} is not a multiple of the (2, 2) patch")
        self.ks, self.cfg, self.chunk, self.weights = ks, cfg, chunk, weights
        self.latent_hw = (rows, cols)
        self.video_schedule = ds.flow_schedule(chunk.num_inference_steps, chunk.snr_shift)
        self.action_schedule = ds.flow_schedule(chunk.action_num_inference_steps, chunk.action_snr_shift)
        self.contexts = [ds.context_kvs(ks, cfg, weights, ds.context(ks, weights, p)) for p in prompt_rows]
        f = chunk.frame_chunk_size
        video_tokens = f * (rows // ds.LATENT_PATCH) * (cols // ds.LATENT_PATCH)
        self.pool = ds.SlotPool(ds.pool_slots(chunk.attn_window, video_tokens, f * chunk.action_per_frame),
                                len(prompt_rows), cfg.num_layers, cfg.num_heads, cfg.head_dim)
        self.index = 0
        self.previous_actions: np.ndarray | None = None
        self.unused = np.setdiff1d(np.arange(cfg.action_dim), chunk.used_action_channel_ids)

    @property
    def video_shape(self) -> tuple[int, int, int, int]:
        return (self.cfg.latent_channels, self.chunk.frame_chunk_size, *self.latent_hw)

    @property
    def action_shape(self) -> tuple[int, int, int]:
        return (self.cfg.action_dim, self.chunk.frame_chunk_size, self.chunk.action_per_frame)

    def _call(self, stream: str, x: np.ndarray, frame_timesteps: np.ndarray, frame_start: int, update: int,
              taps: dict | None = None) -> np.ndarray:
        call = ds.Call(stream, x, np.asarray(frame_timesteps, np.float32), frame_start, update)
        return ds.transformer_call(self.ks, self.cfg, self.weights, call, self.contexts, self.pool, taps)

    def feed_back(self, observed_latents: np.ndarray) -> None:
        """Before chunk j >= 1: the observed latents [C, F, R, W] of chunk j-1's frames and its actions."""
        if self.previous_actions is None:
            raise ValueError("lingbot_va: feedback before any chunk was sampled")
        if observed_latents.shape != self.video_shape:
            raise ValueError(f"lingbot_va: observed latents {observed_latents.shape}, expected {self.video_shape}")
        f, start = self.chunk.frame_chunk_size, (self.index - 1) * self.chunk.frame_chunk_size
        self.pool.release_predicted()
        zeros = np.zeros(f, np.float32)
        self._call(ds.VIDEO, observed_latents, zeros, start, ds.OBSERVED)
        self._call(ds.ACTION, self.previous_actions, zeros, start, ds.OBSERVED)

    def _timesteps(self, t: np.float32) -> np.ndarray:
        steps = np.full(self.chunk.frame_chunk_size, t, np.float32)
        if self.index == 0:
            steps[0] = 0.0
        return steps

    def sample(self, noise_latents: np.ndarray, noise_actions: np.ndarray, init_latent: np.ndarray | None = None,
               record: ChunkRecord | None = None, taps: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Sample the next chunk (feedback must have run for chunk >= 1). Chunk 0 needs the observed
        latent frame [C, 1, R, W]. Returns (predicted latents [C, F, R, W], actions [A, F, P])."""
        if noise_latents.shape != self.video_shape or noise_actions.shape != self.action_shape:
            raise ValueError(f"lingbot_va: noise {noise_latents.shape} / {noise_actions.shape}, expected "
                             f"{self.video_shape} / {self.action_shape}")
        first = self.index == 0
        if first and (init_latent is None or init_latent.shape != (self.video_shape[0], 1, *self.latent_hw)):
            raise ValueError(f"lingbot_va: chunk 0 needs the observed latent frame of shape "
                             f"{(self.video_shape[0], 1, *self.latent_hw)}")
        start = self.index * self.chunk.frame_chunk_size

        x = np.array(noise_latents, np.float32)
        schedule = self.video_schedule
        for i in range(schedule.steps + 1):
            if first:
                x[:, 0] = init_latent[:, 0]
            update = ds.TEMPORARY if i < schedule.steps else ds.PREDICTED
            call_taps = {} if taps is not None and i == 0 else None
            v = self._call(ds.VIDEO, x, self._timesteps(schedule.timesteps[i]), start, update, call_taps)
            if call_taps is not None:
                taps["video"] = call_taps
            if record is not None:
                record.video_x.append(x.copy())
            if i == schedule.steps:
                break
            if record is not None:
                record.video_v.append(v)
            x = (x + ds.guided(v, self.chunk.guidance_scale) * schedule.delta(i)).astype(np.float32)
            if first:
                x[:, 0] = init_latent[:, 0]
        predicted = x

        a = np.array(noise_actions, np.float32)
        schedule = self.action_schedule
        for i in range(schedule.steps + 1):
            if first:
                a[:, 0] = 0.0
            a[self.unused] = 0.0
            update = ds.TEMPORARY if i < schedule.steps else ds.PREDICTED
            call_taps = {} if taps is not None and i == 0 else None
            v = self._call(ds.ACTION, a, self._timesteps(schedule.timesteps[i]), start, update, call_taps)
            if call_taps is not None:
                taps["action"] = call_taps
            if record is not None:
                record.action_x.append(a.copy())
            if i == schedule.steps:
                break
            if record is not None:
                record.action_v.append(v)
            a = (a + ds.guided(v, self.chunk.action_guidance_scale) * schedule.delta(i)).astype(np.float32)
            if first:
                a[:, 0] = 0.0
        a[self.unused] = 0.0

        self.previous_actions = a
        self.index += 1
        return predicted, a

    def executed_rows(self, actions: np.ndarray, chunk_index: int) -> np.ndarray:
        """The robot's rows [(F or F-1)*P, used channels] of a chunk's actions, in execution order
        (chunk 0's frame 0 is the observation and not executed)."""
        used = actions[list(self.chunk.used_action_channel_ids)]  # [a, F, P]
        if chunk_index == 0:
            used = used[:, 1:]
        return np.ascontiguousarray(used.reshape(used.shape[0], -1).T)


def unnormalize_quantiles(actions: np.ndarray, q01: np.ndarray, q99: np.ndarray) -> np.ndarray:
    """lerobot's QUANTILES unnormalize: ((a + 1) * (q99 - q01)) / 2 + q01 (a zero range -> 1e-8)."""
    q01, q99 = np.asarray(q01, np.float32), np.asarray(q99, np.float32)
    span = q99 - q01
    span = np.where(span == 0, np.float32(1e-8), span).astype(np.float32)
    return (((actions + np.float32(1.0)) * span) / np.float32(2.0) + q01).astype(np.float32)
