"""The Wan2.2 VAE encoder (diffusers `AutoencoderKLWan`, encoder + quant_conv) as streaming functions.

Axes: C channels, T frames, H x W pixels (or cells). One `Stream` per camera and episode
carries each causal layer's last input frames between calls, so encoding a clip after earlier ones
equals encoding all frames at once: frame 0 alone gives latent frame 0, every 4 later frames one more.

    patchify 2 -> conv_in -> 4 down blocks [2 residual blocks, downsampler, + AvgDown3D(x_in)]
    -> mid [residual, attention, residual] -> rms, SiLU, conv_out -> quant_conv -> (mean | logvar)

causal conv 3x3x3: output frame n reads input frames n-2, n-1, n of the stream (zeros before its
start), zero padding 1 in space. rms over channels: x / max(|x|_2, 1e-12) * sqrt(C) * gamma.
Weights are read by diffusers' names from a mapping of float32 arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from embodied_ros.kernels.silu import silu

CAUSAL_FRAMES = 2  # frames of history a 3x3x3 causal conv reads


@dataclass(frozen=True)
class WanVAEConfig:
    base_dim: int
    z_dim: int
    dim_mult: tuple[int, ...]
    num_res_blocks: int
    temporal_downsample: tuple[bool, ...]
    patch_size: int
    latents_mean: tuple[float, ...]
    latents_std: tuple[float, ...]
    in_channels: int = 12
    decoder_base_dim: int | None = None  # None: base_dim

    def __post_init__(self) -> None:
        if len(self.temporal_downsample) != len(self.dim_mult) - 1:
            raise ValueError(f"Wan VAE: {len(self.dim_mult)} levels need {len(self.dim_mult) - 1} temporal_downsample "
                             f"flags, got {len(self.temporal_downsample)}")
        if len(self.latents_mean) != self.z_dim or len(self.latents_std) != self.z_dim:
            raise ValueError(f"Wan VAE: latents_mean/std need {self.z_dim} values each")
        if self.patch_size != 2 or self.in_channels != 3 * self.patch_size ** 2:
            raise ValueError(f"Wan VAE: only patch 2 over RGB (12 input channels) is supported, got patch "
                             f"{self.patch_size}, {self.in_channels} channels")

    @property
    def dims(self) -> list[int]:
        return [self.base_dim * m for m in (1, *self.dim_mult)]

    @property
    def decoder_dims(self) -> list[int]:
        base = self.decoder_base_dim or self.base_dim
        return [base * m for m in (self.dim_mult[-1], *self.dim_mult[::-1])]

    @property
    def temporal_upsample(self) -> tuple[bool, ...]:
        return self.temporal_downsample[::-1]

    @property
    def spatial_factor(self) -> int:
        return self.patch_size * 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_factor(self) -> int:
        return 2 ** sum(self.temporal_downsample)

    @classmethod
    def from_diffusers(cls, config: Mapping[str, Any]) -> "WanVAEConfig":
        if not config.get("is_residual", False) or config.get("attn_scales"):
            raise ValueError("Wan VAE: only the Wan2.2 residual layout without attention scales is supported")
        return cls(base_dim=int(config["base_dim"]), z_dim=int(config["z_dim"]),
                   dim_mult=tuple(int(m) for m in config["dim_mult"]), num_res_blocks=int(config["num_res_blocks"]),
                   temporal_downsample=tuple(bool(t) for t in config["temperal_downsample"]),
                   patch_size=int(config.get("patch_size", 2)),
                   latents_mean=tuple(float(v) for v in config["latents_mean"]),
                   latents_std=tuple(float(v) for v in config["latents_std"]),
                   in_channels=int(config.get("in_channels", 12)),
                   decoder_base_dim=int(config["decoder_base_dim"]) if config.get("decoder_base_dim") else None)


class _Shapes(dict):
    def conv(self, name: str, out: int, inp: int, kernel: tuple[int, ...]) -> None:
        self[f"{name}.weight"], self[f"{name}.bias"] = (out, inp, *kernel), (out,)

    def residual(self, name: str, inp: int, out: int) -> None:
        self[f"{name}.norm1.gamma"], self[f"{name}.norm2.gamma"] = (inp, 1, 1, 1), (out, 1, 1, 1)
        self.conv(f"{name}.conv1", out, inp, (3, 3, 3))
        self.conv(f"{name}.conv2", out, out, (3, 3, 3))
        if inp != out:
            self.conv(f"{name}.conv_shortcut", out, inp, (1, 1, 1))

    def mid_block(self, name: str, dim: int) -> None:
        for r in range(2):
            self.residual(f"{name}.resnets.{r}", dim, dim)
        self[f"{name}.attentions.0.norm.gamma"] = (dim, 1, 1)
        self.conv(f"{name}.attentions.0.to_qkv", 3 * dim, dim, (1, 1))
        self.conv(f"{name}.attentions.0.proj", dim, dim, (1, 1))


def encoder_tensor_shapes(cfg: WanVAEConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the encoder reads (diffusers names) -> shape."""
    dims, shapes = cfg.dims, _Shapes()
    shapes.conv("encoder.conv_in", dims[0], cfg.in_channels, (3, 3, 3))
    for i in range(len(cfg.dim_mult)):
        for r in range(cfg.num_res_blocks):
            shapes.residual(f"encoder.down_blocks.{i}.resnets.{r}", dims[i] if r == 0 else dims[i + 1], dims[i + 1])
        if i < len(cfg.dim_mult) - 1:
            shapes.conv(f"encoder.down_blocks.{i}.downsampler.resample.1", dims[i + 1], dims[i + 1], (3, 3))
            if cfg.temporal_downsample[i]:
                shapes.conv(f"encoder.down_blocks.{i}.downsampler.time_conv", dims[i + 1], dims[i + 1], (3, 1, 1))
    shapes.mid_block("encoder.mid_block", dims[-1])
    shapes["encoder.norm_out.gamma"] = (dims[-1], 1, 1, 1)
    shapes.conv("encoder.conv_out", 2 * cfg.z_dim, dims[-1], (3, 3, 3))
    shapes.conv("quant_conv", 2 * cfg.z_dim, 2 * cfg.z_dim, (1, 1, 1))
    return dict(shapes)


def decoder_tensor_shapes(cfg: WanVAEConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the decoder reads (diffusers names) -> shape."""
    dims, shapes = cfg.decoder_dims, _Shapes()
    shapes.conv("post_quant_conv", cfg.z_dim, cfg.z_dim, (1, 1, 1))
    shapes.conv("decoder.conv_in", dims[0], cfg.z_dim, (3, 3, 3))
    shapes.mid_block("decoder.mid_block", dims[0])
    for i in range(len(cfg.dim_mult)):
        for r in range(cfg.num_res_blocks + 1):
            shapes.residual(f"decoder.up_blocks.{i}.resnets.{r}", dims[i] if r == 0 else dims[i + 1], dims[i + 1])
        if i < len(cfg.dim_mult) - 1:
            shapes.conv(f"decoder.up_blocks.{i}.upsampler.resample.1", dims[i + 1], dims[i + 1], (3, 3))
            if cfg.temporal_upsample[i]:
                shapes.conv(f"decoder.up_blocks.{i}.upsampler.time_conv", 2 * dims[i + 1], dims[i + 1], (3, 1, 1))
    shapes["decoder.norm_out.gamma"] = (dims[-1], 1, 1, 1)
    shapes.conv("decoder.conv_out", cfg.in_channels, dims[-1], (3, 3, 3))
    return dict(shapes)


@dataclass
class Stream:
    """Per-layer history of one camera's stream (empty at the start of an episode)."""

    frames: dict[str, np.ndarray] = field(default_factory=dict)
    started: bool = False


def patchify(video: np.ndarray, p: int = 2) -> np.ndarray:
    """(3, T, H, W) -> (3*p*p, T, H/p, W/p), channel c*p*p + p*pw + ph (column offset major)."""
    c, t, h, w = video.shape
    grid = video.reshape(c, t, h // p, p, w // p, p)  # c, t, i, ph, j, pw
    return np.ascontiguousarray(grid.transpose(0, 5, 3, 1, 2, 4).reshape(c * p * p, t, h // p, w // p))


def _rms(x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """Over channels (axis 0): x / max(|x|, 1e-12) * sqrt(C) * gamma."""
    norm = np.sqrt(np.sum(x * x, axis=0, keepdims=True))
    scale = np.float32(np.sqrt(x.shape[0]))
    gamma = gamma.reshape(-1, *([1] * (x.ndim - 1)))
    return (x / np.maximum(norm, np.float32(1e-12)) * scale * gamma).astype(np.float32)


def _conv(windows: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """windows (C, T, H, W, kt, kh, kw), weight (O, C, kt, kh, kw) -> (O, T, H, W)."""
    out = np.tensordot(weight, windows, axes=([1, 2, 3, 4], [0, 4, 5, 6]))
    return (out + bias[:, None, None, None]).astype(np.float32)


class _CausalStack:
    """Weights by name (checked against `shapes`) and the layers encoder and decoder share."""

    def __init__(self, cfg: WanVAEConfig, weights: Mapping[str, np.ndarray], shapes: dict, what: str) -> None:
        missing = sorted(name for name in shapes if name not in weights)
        if missing:
            raise ValueError(f"Wan VAE {what}: missing tensors {missing[:4]}{' ...' if len(missing) > 4 else ''}")
        values = {name: np.asarray(weights[name], np.float32) for name in shapes}
        wrong = {name: value.shape for name, value in values.items() if value.size != int(np.prod(shapes[name]))}
        if wrong:
            raise ValueError(f"Wan VAE {what}: tensors of other sizes than the config's: {wrong}")
        self.cfg = cfg
        self.w = {name: value.reshape(shapes[name]) for name, value in values.items()}
        self.mean = np.asarray(cfg.latents_mean, np.float32)
        self.std = np.asarray(cfg.latents_std, np.float32)

    # -- layers (each takes and updates the stream's history) --

    def _causal_conv(self, name: str, x: np.ndarray, stream: Stream) -> np.ndarray:
        weight, bias = self.w[f"{name}.weight"], self.w[f"{name}.bias"]
        if weight.shape[2:] == (1, 1, 1):
            return _conv(x[..., None, None, None], weight, bias)
        past = stream.frames.get(name)
        if past is None:
            past = np.zeros((x.shape[0], CAUSAL_FRAMES, *x.shape[2:]), np.float32)
        joined = np.concatenate([past, x], axis=1)
        stream.frames[name] = joined[:, -CAUSAL_FRAMES:]
        padded = np.pad(joined, ((0, 0), (0, 0), (1, 1), (1, 1)))
        return _conv(sliding_window_view(padded, (3, 3, 3), axis=(1, 2, 3)), weight, bias)

    def _residual(self, name: str, x: np.ndarray, stream: Stream) -> np.ndarray:
        y = self._causal_conv(f"{name}.conv1", silu(_rms(x, self.w[f"{name}.norm1.gamma"])), stream)
        y = self._causal_conv(f"{name}.conv2", silu(_rms(y, self.w[f"{name}.norm2.gamma"])), stream)
        shortcut = x
        if f"{name}.conv_shortcut.weight" in self.w:
            shortcut = self._causal_conv(f"{name}.conv_shortcut", x, stream)
        return (y + shortcut).astype(np.float32)

    def _attention(self, name: str, x: np.ndarray) -> np.ndarray:
        c, t, h, w = x.shape
        n = _rms(x, self.w[f"{name}.norm.gamma"])
        qkv = np.tensordot(self.w[f"{name}.to_qkv.weight"][:, :, 0, 0], n, axes=(1, 0))
        qkv = qkv + self.w[f"{name}.to_qkv.bias"][:, None, None, None]
        q, k, v = (part.reshape(c, t, h * w).transpose(1, 2, 0) for part in np.split(qkv, 3))  # T, HW, C
        scores = (q @ k.transpose(0, 2, 1)) * np.float32(c ** -0.5)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out = ((scores / scores.sum(axis=-1, keepdims=True)) @ v).transpose(2, 0, 1).reshape(c, t, h, w)
        proj = np.tensordot(self.w[f"{name}.proj.weight"][:, :, 0, 0], out, axes=(1, 0))
        return (proj + self.w[f"{name}.proj.bias"][:, None, None, None] + x).astype(np.float32)

    def _mid_block(self, name: str, x: np.ndarray, stream: Stream) -> np.ndarray:
        x = self._residual(f"{name}.resnets.0", x, stream)
        x = self._attention(f"{name}.attentions.0", x)
        return self._residual(f"{name}.resnets.1", x, stream)


class WanVAEEncoder(_CausalStack):
    def __init__(self, cfg: WanVAEConfig, weights: Mapping[str, np.ndarray]) -> None:
        super().__init__(cfg, weights, encoder_tensor_shapes(cfg), "encoder")
        self.inv_std = (np.float32(1.0) / self.std).astype(np.float32)

    def _downsample(self, name: str, x: np.ndarray, temporal: bool, stream: Stream) -> np.ndarray:
        padded = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 1)))  # one column right, one row bottom
        windows = sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]  # C, T, H/2, W/2, 3, 3
        weight = self.w[f"{name}.resample.1.weight"]
        x = _conv(windows[:, :, :, :, None], weight[:, :, None], self.w[f"{name}.resample.1.bias"])
        if not temporal:
            return x
        past = stream.frames.get(name)
        if past is None:  # the stream's first frame passes as it is
            first, x = x[:, :1], x[:, 1:]
            past = first
        else:
            first = None
        stream.frames[name] = (x if x.shape[1] else past)[:, -1:]
        if x.shape[1] % 2:
            raise ValueError(f"Wan VAE: a clip after the first frame must have a multiple of "
                             f"{self.cfg.temporal_factor} frames")
        out = x
        if x.shape[1]:
            windows = sliding_window_view(np.concatenate([past, x], axis=1), 3, axis=1)[:, ::2]  # C, T/2, H, W, 3
            out = _conv(windows[..., None, None], self.w[f"{name}.time_conv.weight"], self.w[f"{name}.time_conv.bias"])
        return out if first is None else np.concatenate([first, out], axis=1)

    @staticmethod
    def _avg_down(x: np.ndarray, out_channels: int, ft: int, fs: int) -> np.ndarray:
        c, t, h, w = x.shape
        if t % ft:
            x = np.concatenate([np.zeros((c, ft - t % ft, h, w), np.float32), x], axis=1)
            t = x.shape[1]
        blocks = x.reshape(c, t // ft, ft, h // fs, fs, w // fs, fs).transpose(0, 2, 4, 6, 1, 3, 5)
        blocks = blocks.reshape(c * ft * fs * fs, t // ft, h // fs, w // fs)
        group = c * ft * fs * fs // out_channels
        return blocks.reshape(out_channels, group, *blocks.shape[1:]).mean(axis=1, dtype=np.float32)

    # -- the encoder --

    def moments(self, video: np.ndarray, stream: Stream) -> np.ndarray:
        """A clip (3, T, H, W) in [-1, 1] continuing `stream` -> (2*z_dim, T', H/16, W/16): mean | log-variance.
        The stream's first clip starts with one frame alone; every later clip must have a multiple of 4."""
        video = np.asarray(video, np.float32)
        factor = self.cfg.spatial_factor
        if video.ndim != 4 or video.shape[0] != 3 or video.shape[2] % factor or video.shape[3] % factor:
            raise ValueError(f"Wan VAE: clips are (3, T, H, W) with H, W multiples of {factor}; got {video.shape}")
        frames = video.shape[1] - (0 if stream.started else 1)
        if frames % self.cfg.temporal_factor:
            raise ValueError(f"Wan VAE: after the first frame a stream takes clips of a multiple of "
                             f"{self.cfg.temporal_factor} frames, got {video.shape[1]}")
        stream.started = True
        dims = self.cfg.dims
        x = self._causal_conv("encoder.conv_in", patchify(video, self.cfg.patch_size), stream)
        for i in range(len(self.cfg.dim_mult)):
            name, x_in = f"encoder.down_blocks.{i}", x
            for r in range(self.cfg.num_res_blocks):
                x = self._residual(f"{name}.resnets.{r}", x, stream)
            last = i == len(self.cfg.dim_mult) - 1
            temporal = not last and self.cfg.temporal_downsample[i]
            if not last:
                x = self._downsample(f"{name}.downsampler", x, temporal, stream)
            x = x + self._avg_down(x_in, dims[i + 1], 2 if temporal else 1, 1 if last else 2)
        x = self._mid_block("encoder.mid_block", x, stream)
        x = self._causal_conv("encoder.conv_out", silu(_rms(x, self.w["encoder.norm_out.gamma"])), stream)
        return self._causal_conv("quant_conv", x, stream)

    def latents(self, video: np.ndarray, stream: Stream) -> np.ndarray:
        """Normalized latent means (z_dim, T', H/16, W/16) of a clip continuing `stream`."""
        mean = self.moments(video, stream)[:self.cfg.z_dim]
        return ((mean - self.mean[:, None, None, None]) * self.inv_std[:, None, None, None]).astype(np.float32)


class WanVAEDecoder(_CausalStack):
    """Latents -> frames (diffusers `AutoencoderKLWan.decode`), one latent frame per step of a stream:
    latent frame 0 gives frame 0, every later one 4 frames.

        post_quant_conv -> conv_in -> mid [residual, attention, residual]
        -> 4 up blocks [num_res_blocks + 1 residual blocks, upsampler, + DupUp3D(x_in)]
        -> rms, SiLU, conv_out -> unpatchify 2 -> clamp to [-1, 1]

    upsampler: temporal (first two blocks) `time_conv` (3, 1, 1) over the stream from latent frame 1 on
    (frame 0 passes as it is), its 2C output channels = two frames; then per frame nearest 2x and a
    3x3 conv. DupUp3D repeats channels and spreads them over time and space (the stream's first
    frame keeps only the last of its time copies)."""

    def __init__(self, cfg: WanVAEConfig, weights: Mapping[str, np.ndarray]) -> None:
        super().__init__(cfg, weights, decoder_tensor_shapes(cfg), "decoder")

    def _upsample(self, name: str, x: np.ndarray, temporal: bool, stream: Stream) -> np.ndarray:
        c, t, h, w = x.shape
        if temporal:
            if name not in stream.frames:  # the stream's first frame: no time conv
                stream.frames[name] = np.zeros((c, CAUSAL_FRAMES, h, w), np.float32)
            else:
                joined = np.concatenate([stream.frames[name], x], axis=1)
                stream.frames[name] = joined[:, -CAUSAL_FRAMES:]
                windows = sliding_window_view(joined, 3, axis=1)  # C, T, H, W, 3
                doubled = _conv(windows[..., None, None], self.w[f"{name}.time_conv.weight"],
                                self.w[f"{name}.time_conv.bias"])  # 2C, T, H, W
                x = doubled.reshape(2, c, t, h, w).transpose(1, 2, 0, 3, 4).reshape(c, 2 * t, h, w)
        x = np.repeat(np.repeat(x, 2, axis=2), 2, axis=3)
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = sliding_window_view(padded, (3, 3), axis=(2, 3))  # C, T, 2H, 2W, 3, 3
        weight = self.w[f"{name}.resample.1.weight"]
        return _conv(windows[:, :, :, :, None], weight[:, :, None], self.w[f"{name}.resample.1.bias"])

    @staticmethod
    def _dup_up(x: np.ndarray, out_channels: int, ft: int, fs: int, first: bool) -> np.ndarray:
        c, t, h, w = x.shape
        repeats = out_channels * ft * fs * fs // c
        x = np.repeat(x, repeats, axis=0).reshape(out_channels, ft, fs, fs, t, h, w)
        x = x.transpose(0, 4, 1, 5, 2, 6, 3).reshape(out_channels, t * ft, h * fs, w * fs)
        return x[:, ft - 1:] if first else x

    def _frame(self, z: np.ndarray, stream: Stream) -> np.ndarray:
        first = not stream.started
        stream.started = True
        dims = self.cfg.decoder_dims
        x = self._causal_conv("decoder.conv_in", z, stream)
        x = self._mid_block("decoder.mid_block", x, stream)
        for i in range(len(self.cfg.dim_mult)):
            name, x_in = f"decoder.up_blocks.{i}", x
            for r in range(self.cfg.num_res_blocks + 1):
                x = self._residual(f"{name}.resnets.{r}", x, stream)
            if i < len(self.cfg.dim_mult) - 1:
                temporal = self.cfg.temporal_upsample[i]
                x = self._upsample(f"{name}.upsampler", x, temporal, stream)
                x = x + self._dup_up(x_in, dims[i + 1], 2 if temporal else 1, 2, first)
        x = self._causal_conv("decoder.conv_out", silu(_rms(x, self.w["decoder.norm_out.gamma"])), stream)
        return x

    def frames(self, latents: np.ndarray, stream: Stream) -> np.ndarray:
        """Raw latents (z_dim, T, h, w) continuing `stream` -> frames (3, T', 16h, 16w) in [-1, 1]."""
        latents = np.asarray(latents, np.float32)
        if latents.ndim != 4 or latents.shape[0] != self.cfg.z_dim:
            raise ValueError(f"Wan VAE decoder: latents are ({self.cfg.z_dim}, T, h, w), got {latents.shape}")
        z = self._causal_conv("post_quant_conv", latents, stream)
        out = np.concatenate([self._frame(z[:, i:i + 1], stream) for i in range(z.shape[1])], axis=1)
        c, t, h, w = out.shape
        p = self.cfg.patch_size
        rgb = c // (p * p)  # channel c*p*p + p*pw + ph (column offset major), as the encoder's patchify
        video = out.reshape(rgb, p, p, t, h, w).transpose(0, 3, 4, 2, 5, 1).reshape(rgb, t, h * p, w * p)
        return np.clip(video, -1.0, 1.0).astype(np.float32)

    def denormalize(self, latents: np.ndarray) -> np.ndarray:
        """The transformer's normalized latents -> the VAE's: z * latents_std + latents_mean."""
        return (latents * self.std[:, None, None, None] + self.mean[:, None, None, None]).astype(np.float32)

    def camera_frames(self, latents: np.ndarray, cameras: int) -> np.ndarray:
        """Normalized latents (z_dim, T, h, cameras * w), cameras side by side, decoded per camera on a
        fresh stream -> (cameras, 3, T', 16h, 16w): a chunk's predicted frames, for viewing."""
        if latents.ndim != 4 or cameras < 1 or latents.shape[3] % cameras:
            raise ValueError(f"Wan VAE decoder: latents {latents.shape} do not split into {cameras} cameras")
        return np.stack([self.frames(self.denormalize(part), Stream())
                         for part in np.split(np.asarray(latents, np.float32), cameras, axis=3)])
