"""LingBot-VA-style world-action model: its configuration, validated once, and named sizes.

The transformer is Wan2.2 TI2V-5B's (dim 3072 = 24 heads x 128, FFN 14336, 30 blocks, patch
(1, 2, 2)); LingBot-VA adds an action stream (own input projection, time embedder and output head)
that shares the blocks. Cameras are tiled side by side along the latent width, so one latent frame is
a grid of (rows, cameras * columns) tokens.

Simplifications of this runtime, each a documented stand-in (see README.md in this folder):
- image encoder: one linear map per `pixel_patch` x `pixel_patch` pixel patch to `latent_channels`
  (Wan2.2's VAE also compresses 16x spatially, to 48 channels; there is no VAE here);
- text: token ids of a SentencePiece model trained at bundle-build time -> an embedding table of
  width `text_dim` (umT5's output width in Wan) -> Wan's text embedder;
- state: one extra context token, Linear(state_dim -> dim) of the normalized state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from embodied_ros.backbone.wan_block import WanBlockConfig

ARCHITECTURE = "lingbot_va"


@dataclass(frozen=True)
class LingbotVAConfig:
    # Wan transformer
    dim: int
    num_heads: int
    ffn_dim: int
    num_layers: int
    freq_dim: int  # width of the sinusoidal timestep features
    text_dim: int  # width of the text token features fed to the text embedder
    # observation and latents
    camera_names: tuple[str, ...]
    image_size: tuple[int, int]  # (height, width) of every camera image
    pixel_patch: int  # image encoder: pixels per latent cell along each axis
    latent_channels: int
    future_frames: int  # latent frames predicted per world step
    # condition and actions
    vocab_size: int
    max_text_tokens: int
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    chunk_size: int
    action_period_s: float
    world_steps: int = 3  # Euler steps of the latent (world) flow
    action_steps: int = 10  # Euler steps of the action flow
    latent_patch: int = 2  # Wan patch (1, p, p) over the latent grid
    eps: float = 1e-6
    rope_theta: float = 10000.0
    noise_seed: int = 0  # default noise: generator seeded by (noise_seed, observation stamp)

    def __post_init__(self) -> None:
        object.__setattr__(self, "camera_names", tuple(self.camera_names))
        object.__setattr__(self, "state_names", tuple(self.state_names))
        object.__setattr__(self, "action_names", tuple(self.action_names))
        object.__setattr__(self, "image_size", tuple(int(n) for n in self.image_size))
        positive = ("dim", "num_heads", "ffn_dim", "num_layers", "freq_dim", "text_dim", "pixel_patch",
                    "latent_channels", "future_frames", "vocab_size", "max_text_tokens", "chunk_size",
                    "world_steps", "action_steps", "latent_patch")
        bad = {name: getattr(self, name) for name in positive if getattr(self, name) < 1}
        if bad:
            raise ValueError(f"lingbot_va config: these sizes must be positive: {bad}")
        if self.freq_dim % 2:
            raise ValueError(f"lingbot_va config: freq_dim must be even, got {self.freq_dim}")
        if not self.camera_names or not self.state_names or not self.action_names:
            raise ValueError(f"lingbot_va config needs camera, state and action names; got cameras "
                             f"{self.camera_names}, {len(self.state_names)} state, {len(self.action_names)} action")
        height, width = self.image_size
        cell = self.pixel_patch * self.latent_patch
        if height % cell or width % cell or height < cell or width < cell:
            raise ValueError(f"lingbot_va config: image size {self.image_size} must be a positive multiple of "
                             f"pixel_patch * latent_patch = {cell} in both axes")
        if not self.action_period_s > 0:
            raise ValueError(f"lingbot_va config: action_period_s must be positive, got {self.action_period_s}")
        WanBlockConfig(self.dim, self.num_heads, self.ffn_dim, self.eps, self.rope_theta)  # raises on bad sizes

    @property
    def block(self) -> WanBlockConfig:
        return WanBlockConfig(self.dim, self.num_heads, self.ffn_dim, self.eps, self.rope_theta)

    @property
    def state_dim(self) -> int:
        return len(self.state_names)

    @property
    def action_dim(self) -> int:
        return len(self.action_names)

    @property
    def latent_hw(self) -> tuple[int, int]:
        """Latent cells of one frame, all cameras tiled along the width."""
        height, width = self.image_size
        return height // self.pixel_patch, len(self.camera_names) * (width // self.pixel_patch)

    def token_grid(self, frames: int) -> tuple[int, int, int]:
        """(frames, rows, columns) of transformer tokens for `frames` latent frames."""
        rows, cols = self.latent_hw
        return frames, rows // self.latent_patch, cols // self.latent_patch

    @property
    def tokens_per_frame(self) -> int:
        _, rows, cols = self.token_grid(1)
        return rows * cols

    @property
    def world_noise_shape(self) -> tuple[int, int, int, int]:
        """(channels, frames, rows, columns) of the predicted latents (and of their initial noise)."""
        return (self.latent_channels, self.future_frames, *self.latent_hw)

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        return {key: list(value) if isinstance(value, tuple) else value for key, value in values.items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "LingbotVAConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.name not in values and f.default is dataclasses.MISSING)
        if unknown or missing:
            raise ValueError(f"lingbot_va config: unknown keys {unknown}, missing keys {missing}")
        return cls(**values)


def _joint_names(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(count))


# RoboTwin-like bimanual setup: 3 cameras, 14 joints (two 6-DoF arms + grippers)
_ROBOTWIN = dict(camera_names=("cam_high", "cam_left_wrist", "cam_right_wrist"),
                 state_names=_joint_names("joint_", 14), action_names=_joint_names("joint_", 14))

PRESETS: dict[str, LingbotVAConfig] = {
    # tests and the demo: a chunk in a few tens of milliseconds on two CPU cores
    "small": LingbotVAConfig(
        dim=64, num_heads=4, ffn_dim=160, num_layers=2, freq_dim=64, text_dim=32,
        image_size=(64, 80), pixel_patch=8, latent_channels=16, future_frames=2,
        vocab_size=160, max_text_tokens=24, chunk_size=16, action_period_s=0.05, **_ROBOTWIN),
    # Wan2.2-TI2V-5B transformer at LingBot-VA's RoboTwin setting: 256x320 cameras -> 16x20 latent
    # cells -> 8x10 tokens per camera per latent frame; a chunk of 4 latent frames = 960 tokens
    "wan22_ti2v_5b": LingbotVAConfig(
        dim=3072, num_heads=24, ffn_dim=14336, num_layers=30, freq_dim=256, text_dim=4096,
        image_size=(256, 320), pixel_patch=16, latent_channels=48, future_frames=4,
        vocab_size=256, max_text_tokens=512, chunk_size=50, action_period_s=0.02, **_ROBOTWIN),
}
