"""The Wan2.2 VAE encoder (diffusers `AutoencoderKLWan`, encoder + quant_conv) as streaming functions.

Axes: C channels, T frames, H x W pixels (or cells). One `EncoderStream` per camera and episode
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
                   in_channels=int(config.get("in_channels", 12)))


def encoder_tensor_shapes(cfg: WanVAEConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the encoder reads (diffusers names) -> shape."""
    dims, shapes = cfg.dims, {}

    def conv(name: str, out: int, inp: int, kernel: tuple[int, ...]) -> None:
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (out, inp, *kernel), (out,)

    def residual(name: str, inp: int, out: int) -> None:
        shapes[f"{name}.norm1.gamma"], shapes[f"{name}.norm2.gamma"] = (inp, 1, 1, 1), (out, 1, 1, 1)
        conv(f"{name}.conv1", out, inp, (3, 3, 3))
        conv(f"{name}.conv2", out, out, (3, 3, 3))
        if inp != out:
            conv(f"{name}.conv_shortcut", out, inp, (1, 1, 1))

    conv("encoder.conv_in", dims[0], cfg.in_channels, (3, 3, 3))
    for i in range(len(cfg.dim_mult)):
        for r in range(cfg.num_res_blocks):
            residual(f"encoder.down_blocks.{i}.resnets.{r}", dims[i] if r == 0 else dims[i + 1], dims[i + 1])
        if i < len(cfg.dim_mult) - 1:
            conv(f"encoder.down_blocks.{i}.downsampler.resample.1", dims[i + 1], dims[i + 1], (3, 3))
            if cfg.temporal_downsample[i]:
                conv(f"encoder.down_blocks.{i}.downsampler.time_conv", dims[i + 1], dims[i + 1], (3, 1, 1))
    top = dims[-1]
    for r in range(2):
        residual(f"encoder.mid_block.resnets.{r}", top, top)
    shapes["encoder.mid_block.attentions.0.norm.gamma"] = (top, 1, 1)
    conv("encoder.mid_block.attentions.0.to_qkv", 3 * top, top, (1, 1))
    conv("encoder.mid_block.attentions.0.proj", top, top, (1, 1))
    shapes["encoder.norm_out.gamma"] = (top, 1, 1, 1)
    conv("encoder.conv_out", 2 * cfg.z_dim, top, (3, 3, 3))
    conv("quant_conv", 2 * cfg.z_dim, 2 * cfg.z_dim, (1, 1, 1))
    return shapes


@dataclass
class EncoderStream:
    """Per-layer history of one camera's stream (empty at the start of an episode)."""

    frames: dict[str, np.ndarray] = field(default_factory=dict)
    started: bool = False


def patchify(video: np.ndarray, p: int = 2) -> np.ndarray:
    """(3, T, H, W) -> (3*p*p, T, H/p, W/p), channel c*p*p + p*pw + ph (column offset major)."""
    c, t, h, w = video.shape
    grid = video.reshape(c, t, h // p, p, w // p, p)  # c, t, i, ph, j, pw
    return np.ascontiguousarray(grid.transpose(0, 5, 3, 1, 2, 4).reshape(c * p * p, t, h // p, w // p))


def _silu(x: np.ndarray) -> np.ndarray:
    return (x / (np.float32(1.0) + np.exp(-x))).astype(np.float32)


def _rms(x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """Over channels (axis 0): x / max(|x|, 1e-12) * sqrt(C) * gamma."""
    norm = np.sqrt(np.sum(x * x, axis=0, keepdims=True))
    scale = np.float32(np.sqrt(x.shape[0]))
    return (x / np.maximum(norm, np.float32(1e-12)) * scale * gamma.reshape(-1, *([1] * (x.ndim - 1)))).astype(np.float32)


def _conv(windows: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """windows (C, T, H, W, kt, kh, kw), weight (O, C, kt, kh, kw) -> (O, T, H, W)."""
    out = np.tensordot(weight, windows, axes=([1, 2, 3, 4], [0, 4, 5, 6]))
    return (out + bias[:, None, None, None]).astype(np.float32)


class WanVAEEncoder:
    def __init__(self, cfg: WanVAEConfig, weights: Mapping[str, np.ndarray]) -> None:
        self.cfg = cfg
        shapes = encoder_tensor_shapes(cfg)
        missing = sorted(name for name in shapes if name not in weights)
        if missing:
            raise ValueError(f"Wan VAE encoder: missing tensors {missing[:4]}{' ...' if len(missing) > 4 else ''}")
        self.w = {name: np.asarray(weights[name], np.float32) for name in shapes}
        wrong = {name: value.shape for name, value in self.w.items() if value.size != int(np.prod(shapes[name]))}
        if wrong:
            raise ValueError(f"Wan VAE encoder: tensors of other sizes than the config's: {wrong}")
        self.w = {name: value.reshape(shapes[name]) for name, value in self.w.items()}
        self.mean = np.asarray(cfg.latents_mean, np.float32)
        self.inv_std = (np.float32(1.0) / np.asarray(cfg.latents_std, np.float32)).astype(np.float32)

    # -- layers (each takes and updates the stream's history) --

    def _causal_conv(self, name: str, x: np.ndarray, stream: EncoderStream) -> np.ndarray:
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

    def _residual(self, name: str, x: np.ndarray, stream: EncoderStream) -> np.ndarray:
        y = self._causal_conv(f"{name}.conv1", _silu(_rms(x, self.w[f"{name}.norm1.gamma"])), stream)
        y = self._causal_conv(f"{name}.conv2", _silu(_rms(y, self.w[f"{name}.norm2.gamma"])), stream)
        shortcut = x
        if f"{name}.conv_shortcut.weight" in self.w:
            shortcut = self._causal_conv(f"{name}.conv_shortcut", x, stream)
        return (y + shortcut).astype(np.float32)

    def _downsample(self, name: str, x: np.ndarray, temporal: bool, stream: EncoderStream) -> np.ndarray:
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

    # -- the encoder --

    def moments(self, video: np.ndarray, stream: EncoderStream) -> np.ndarray:
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
        x = self._residual("encoder.mid_block.resnets.0", x, stream)
        x = self._attention("encoder.mid_block.attentions.0", x)
        x = self._residual("encoder.mid_block.resnets.1", x, stream)
        x = self._causal_conv("encoder.conv_out", _silu(_rms(x, self.w["encoder.norm_out.gamma"])), stream)
        return self._causal_conv("quant_conv", x, stream)

    def latents(self, video: np.ndarray, stream: EncoderStream) -> np.ndarray:
        """Normalized latent means (z_dim, T', H/16, W/16) of a clip continuing `stream`."""
        mean = self.moments(video, stream)[:self.cfg.z_dim]
        return ((mean - self.mean[:, None, None, None]) * self.inv_std[:, None, None, None]).astype(np.float32)


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """(C, h, w) -> (C, height, width) as torch's `interpolate(mode="bilinear", align_corners=False)`
    without antialiasing, in float32."""
    def axis(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        scale = np.float32(size_in / size_out)
        source = np.maximum((np.arange(size_out, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5),
                            np.float32(0.0)).astype(np.float32)
        low = source.astype(np.int64)
        high = np.minimum(low + 1, size_in - 1)
        return low, high, (source - low).astype(np.float32)

    if image.shape[1:] == (height, width):
        return np.asarray(image, np.float32)
    image = np.asarray(image, np.float32)
    r0, r1, rl = axis(image.shape[1], height)
    c0, c1, cl = axis(image.shape[2], width)
    top = image[:, r0][:, :, c0] * (1 - cl) + image[:, r0][:, :, c1] * cl
    bottom = image[:, r1][:, :, c0] * (1 - cl) + image[:, r1][:, :, c1] * cl
    return ((np.float32(1.0) - rl)[None, :, None] * top + rl[None, :, None] * bottom).astype(np.float32)
