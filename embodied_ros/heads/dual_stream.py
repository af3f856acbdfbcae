"""LingBot-VA's dual-stream transformer as lerobot 0.6.1 runs it (`WanTransformer3DModel` of
`LingBotVAPolicy`): video latents and action tokens through the same Wan blocks, each stream with
its own input embedding, time conditioning and output head, and a pool of key/value slots that
carries the observed past across chunks.

Axes: C = 48 latent channels, F latent frames of a chunk, R x W latent rows x columns (cameras side
by side on W), A action channels, P actions per frame, S tokens of a call, D = H * Dh width.

    video tokens  x[C, F, R, W] -> (1, 2, 2) patches -> patch_embedding_mlp
    action tokens x[A, F, P]    -> one token per action -> action_embedder
    context       text_embedder(prompt_embeds)                  (condition_embedder, both streams)
    time          per frame timestep -> temb [S, D], block modulation input [S, 6, D]
    RoPE          grid ids (frame, row, column); actions at (frame + (n+1)/(P+1), -1, -1)
    blocks        Wan blocks (backbone/wan_block.py); self-attention over the occupied pool slots
    heads         proj_out (video) / action_proj_out, modulated by scale_shift_table + temb

Only the math is here; which calls run in which order is `policy.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from embodied_ros.backbone.wan_block import (DIFFUSERS_BLOCK_NAMES, KV, Rope, WanBlockConfig, WanBlockWeights,
                                             context_kv, load_block_weights, wan_block)
from embodied_ros.kernels.silu import silu

VIDEO, ACTION = "video", "action"
# update_cache values of lerobot's transformer call
TEMPORARY, PREDICTED, OBSERVED = 0, 1, 2
LATENT_PATCH = 2  # patch (1, 2, 2) over the latent grid


@dataclass(frozen=True)
class DualStreamConfig:
    dim: int
    num_heads: int
    ffn_dim: int
    num_layers: int
    freq_dim: int
    text_dim: int
    action_dim: int
    latent_channels: int = 48
    eps: float = 1e-6
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        WanBlockConfig(self.dim, self.num_heads, self.ffn_dim, self.eps, self.rope_theta)  # raises on bad sizes
        if (self.head_dim // 3) % 2:
            raise ValueError(f"lingbot_va: head width {self.head_dim} does not split into RoPE pairs "
                             f"(floor(head_dim / 3) = {self.head_dim // 3} must be even)")
        if self.freq_dim % 2 or min(self.num_layers, self.text_dim, self.action_dim) < 1:
            raise ValueError(f"lingbot_va: freq_dim must be even and layers, text_dim, action_dim positive; got "
                             f"{self.freq_dim}, {self.num_layers}, {self.text_dim}, {self.action_dim}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def block(self) -> WanBlockConfig:
        return WanBlockConfig(self.dim, self.num_heads, self.ffn_dim, self.eps, self.rope_theta)

    @classmethod
    def from_lerobot(cls, config: Mapping[str, Any]) -> "DualStreamConfig":
        """From lerobot's `LingBotVAConfig` (the checkpoint's config.json)."""
        if tuple(config.get("patch_size", (1, 2, 2))) != (1, 2, 2):
            raise ValueError(f"lingbot_va: only patch (1, 2, 2) is supported, got {config['patch_size']}")
        if config.get("in_channels", 48) != config.get("out_channels", 48):
            raise ValueError("lingbot_va: in_channels and out_channels differ")
        heads, head_dim = int(config["num_attention_heads"]), int(config["attention_head_dim"])
        return cls(dim=heads * head_dim, num_heads=heads, ffn_dim=int(config["ffn_dim"]),
                   num_layers=int(config["num_layers"]), freq_dim=int(config["freq_dim"]),
                   text_dim=int(config["text_dim"]), action_dim=int(config["action_dim"]),
                   latent_channels=int(config.get("in_channels", 48)), eps=float(config.get("eps", 1e-6)))


# ---- weights -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Linear:
    weight: Any  # [out, in] float32 array or quantized tensor
    bias: np.ndarray


@dataclass(frozen=True)
class Conditioning:
    """A stream's `condition_embedder`: sinusoid -> temb -> block modulation input."""

    time_in: Linear  # [D, freq]
    time_out: Linear  # [D, D]
    time_proj: Linear  # [6D, D]


@dataclass(frozen=True)
class Stream:
    embed: Linear  # patch_embedding_mlp [D, 4C] / action_embedder [D, A]
    conditioning: Conditioning
    head_modulation: np.ndarray  # [2, D]: shift, scale (shared scale_shift_table)
    head: Linear  # proj_out [4C, D] / action_proj_out [A, D]


@dataclass(frozen=True)
class DualStreamWeights:
    video: Stream
    action: Stream
    text_in: Linear  # [D, text_dim]
    text_out: Linear  # [D, D]
    blocks: tuple[WanBlockWeights, ...]


def tensor_shapes(cfg: DualStreamConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of lerobot's state dict (names after `transformer.`) -> shape."""
    d, c = cfg.dim, cfg.latent_channels
    shapes: dict[str, tuple[int, ...]] = {
        "patch_embedding_mlp.weight": (d, 4 * c), "patch_embedding_mlp.bias": (d,),
        "action_embedder.weight": (d, cfg.action_dim), "action_embedder.bias": (d,),
        "scale_shift_table": (1, 2, d), "proj_out.weight": (4 * c, d), "proj_out.bias": (4 * c,),
        "action_proj_out.weight": (cfg.action_dim, d), "action_proj_out.bias": (cfg.action_dim,),
    }
    for embedder in ("condition_embedder", "condition_embedder_action"):
        shapes.update({
            f"{embedder}.time_embedder.linear_1.weight": (d, cfg.freq_dim),
            f"{embedder}.time_embedder.linear_1.bias": (d,),
            f"{embedder}.time_embedder.linear_2.weight": (d, d), f"{embedder}.time_embedder.linear_2.bias": (d,),
            f"{embedder}.time_proj.weight": (6 * d, d), f"{embedder}.time_proj.bias": (6 * d,),
            f"{embedder}.text_embedder.linear_1.weight": (d, cfg.text_dim),
            f"{embedder}.text_embedder.linear_1.bias": (d,),
            f"{embedder}.text_embedder.linear_2.weight": (d, d), f"{embedder}.text_embedder.linear_2.bias": (d,),
        })
    f = cfg.ffn_dim
    block = {"scale_shift_table": (1, 6, d), "norm2.weight": (d,), "norm2.bias": (d,),
             "ffn.net.0.proj.weight": (f, d), "ffn.net.0.proj.bias": (f,),
             "ffn.net.2.weight": (d, f), "ffn.net.2.bias": (d,)}
    for attn in ("attn1", "attn2"):
        for projection in ("to_q", "to_k", "to_v", "to_out.0"):
            block[f"{attn}.{projection}.weight"], block[f"{attn}.{projection}.bias"] = (d, d), (d,)
        block[f"{attn}.norm_q.weight"] = block[f"{attn}.norm_k.weight"] = (d,)
    for i in range(cfg.num_layers):
        shapes.update({f"blocks.{i}.{name}": shape for name, shape in block.items()})
    return shapes


_BUNDLE_TO_BLOCK = {bundle: source for source, bundle in DIFFUSERS_BLOCK_NAMES.items()}


def load_weights(get: Callable[[str], Any], cfg: DualStreamConfig) -> DualStreamWeights:
    """Gather the transformer by lerobot's names (without the `transformer.` prefix), checking shapes.
    Unused tensors (`condition_embedder_action.text_embedder.*`) are not read."""
    shapes = tensor_shapes(cfg)

    def tensor(name: str) -> Any:
        value = get(name)
        if tuple(value.shape) != shapes[name]:
            raise ValueError(f"transformer.{name}: shape {tuple(value.shape)}, expected {shapes[name]}")
        return value

    def linear(name: str) -> Linear:
        return Linear(tensor(f"{name}.weight"), tensor(f"{name}.bias"))

    def conditioning(embedder: str) -> Conditioning:
        return Conditioning(linear(f"{embedder}.time_embedder.linear_1"), linear(f"{embedder}.time_embedder.linear_2"),
                            linear(f"{embedder}.time_proj"))

    def block(i: int) -> WanBlockWeights:
        def block_tensor(bundle_name: str) -> Any:
            name = f"blocks.{i}.{_BUNDLE_TO_BLOCK[bundle_name.split('.', 2)[2]]}"
            value = tensor(name)
            return value.reshape(6, cfg.dim) if name.endswith("scale_shift_table") else value
        return load_block_weights(block_tensor, f"blk.{i}.", cfg.block)

    head_modulation = np.asarray(tensor("scale_shift_table"), np.float32).reshape(2, cfg.dim)
    return DualStreamWeights(
        video=Stream(linear("patch_embedding_mlp"), conditioning("condition_embedder"), head_modulation,
                     linear("proj_out")),
        action=Stream(linear("action_embedder"), conditioning("condition_embedder_action"), head_modulation,
                      linear("action_proj_out")),
        text_in=linear("condition_embedder.text_embedder.linear_1"),
        text_out=linear("condition_embedder.text_embedder.linear_2"),
        blocks=tuple(block(i) for i in range(cfg.num_layers)))


# ---- flow-matching schedules ---------------------------------------------------------------------

def linspace_float32(start: float, end: float, steps: int) -> np.ndarray:
    """torch.linspace in float32: step = (end - start) / (steps - 1) rounded to float32; entry p is
    start + p*step for the first half and end - (steps-1-p)*step for the rest, each rounded once (a
    fused multiply-add; the product and sum are exact in float64). Equal to torch 2.13's on an AVX-512
    CPU for 2..60 points (test/data/torch_linspace.npz); rounding the product first differs by 1 ulp
    in some entries from 10 points on."""
    if steps < 2:
        raise ValueError(f"linspace needs at least 2 points, got {steps}")
    step = np.float64(np.float32((np.float32(end) - np.float32(start)) / np.float32(steps - 1)))
    i = np.arange(steps, dtype=np.float64)
    low = np.float64(np.float32(start)) + i * step
    high = np.float64(np.float32(end)) - (steps - 1 - i) * step
    return np.where(i < steps // 2, low, high).astype(np.float32)


@dataclass(frozen=True)
class Schedule:
    sigmas: np.ndarray  # [N] float32, sigma_0 = 1 ... (the noise level of each call)
    timesteps: np.ndarray  # [N + 1] float32: 1000 * sigma_i, then 0 for the cache-writing last call

    @property
    def steps(self) -> int:
        return len(self.sigmas)

    def delta(self, i: int) -> np.float32:
        """sigma_{i+1} - sigma_i (sigma_N = 0), the Euler step of call i."""
        following = self.sigmas[i + 1] if i + 1 < self.steps else np.float32(0.0)
        return np.float32(following - self.sigmas[i])


def flow_schedule(steps: int, shift: float) -> Schedule:
    """lerobot's shifted flow-matching schedule in float32: sigma = shift*s / (1 + (shift - 1)*s) over
    s = linspace(1, 0, steps + 1)[:-1]. (A float64 table moves the timesteps by up to 2.4e-4.)"""
    if steps < 1 or not shift > 0:
        raise ValueError(f"flow schedule needs steps >= 1 and shift > 0, got {steps}, {shift}")
    s = linspace_float32(1.0, 0.0, steps + 1)[:-1]
    shift32 = np.float32(shift)
    sigmas = (shift32 * s / (np.float32(1.0) + (shift32 - np.float32(1.0)) * s)).astype(np.float32)
    timesteps = np.concatenate([(np.float32(1000.0) * sigmas).astype(np.float32), np.zeros(1, np.float32)])
    return Schedule(sigmas, timesteps)


# ---- positions -----------------------------------------------------------------------------------

def video_grid(frame_start: int, frames: int, rows: int, cols: int) -> np.ndarray:
    """Grid ids [S, 3] (frame, row, column) of video tokens, s = (f*rows + i)*cols + j."""
    f, i, j = np.meshgrid(np.arange(frames) + frame_start, np.arange(rows), np.arange(cols), indexing="ij")
    return np.stack([f.ravel(), i.ravel(), j.ravel()], axis=1).astype(np.float32)


def action_grid(frame_start: int, frames: int, per_frame: int) -> np.ndarray:
    """Grid ids [S, 3] of action tokens, s = f*per_frame + n: frame (frame_start + f) + (n+1)/(per_frame+1)
    in float32, row and column -1."""
    frame = (np.arange(frames, dtype=np.float32) + np.float32(frame_start))[:, None]
    fraction = (np.arange(1, per_frame + 1, dtype=np.float32) / np.float32(per_frame + 1))[None, :]
    positions = (frame + fraction).astype(np.float32).ravel()
    return np.stack([positions, -np.ones_like(positions), -np.ones_like(positions)], axis=1)


def rope_split(head_dim: int) -> tuple[int, int, int]:
    """Channels of a head given to (frame, row, column): lerobot's hd - 2*(hd//3), hd//3, hd//3."""
    third = head_dim // 3
    return head_dim - 2 * third, third, third


def rope_tables(grid: np.ndarray, head_dim: int, theta: float = 10000.0) -> Rope:
    """cos/sin [S, Dh] (each value repeated for its adjacent channel pair) from grid ids [S, 3]:
    inside a part of size d, pair k turns by pos * theta^(-2k/d), the product taken in float64 and
    rounded to float32, cos and sin in float32."""
    cos_parts, sin_parts = [], []
    for axis, width in enumerate(rope_split(head_dim)):
        inv_freq = 1.0 / theta ** (np.arange(0, width, 2, dtype=np.float64) / width)
        angles = np.outer(grid[:, axis].astype(np.float64), inv_freq).astype(np.float32)
        cos_parts.append(np.repeat(np.cos(angles), 2, axis=1))
        sin_parts.append(np.repeat(np.sin(angles), 2, axis=1))
    return Rope(np.ascontiguousarray(np.concatenate(cos_parts, axis=1), np.float32),
                np.ascontiguousarray(np.concatenate(sin_parts, axis=1), np.float32))


# ---- the key/value slot pool ---------------------------------------------------------------------

class SlotPool:
    """lerobot's per-block KV cache: a fixed pool of token slots; the bookkeeping (which slot holds
    which entry) is shared by every CFG row and block, keys/values are per row and block.

    A call reserves slots for its tokens before attending (releasing the occupied slots with the
    smallest entry ids first, for good, when too few are free), writes its keys/values there, attends
    over every occupied slot, then frees the slots again (TEMPORARY) or keeps them as one entry whose
    id is 1 + the largest occupied id (PREDICTED, OBSERVED)."""

    FREE = -1

    def __init__(self, slots: int, rows: int, layers: int, heads: int, head_dim: int) -> None:
        if slots < 1:
            raise ValueError(f"KV pool needs at least one slot, got {slots}")
        self.entry = np.full(slots, self.FREE, np.int64)  # entry id per slot
        self.predicted = np.zeros(slots, bool)
        self.keys = np.zeros((rows, layers, slots, heads, head_dim), np.float32)
        self.values = np.zeros_like(self.keys)
        self.keys_attended: list[int] = []  # per call, the keys its tokens attended (own included)

    @property
    def slots(self) -> int:
        return len(self.entry)

    def occupied(self) -> np.ndarray:
        return np.flatnonzero(self.entry != self.FREE)

    def reserve(self, tokens: int) -> np.ndarray:
        """Free slot indices for `tokens` new tokens (evicting the oldest entries if needed)."""
        if tokens > self.slots:
            raise ValueError(f"a call of {tokens} tokens does not fit a KV pool of {self.slots} slots")
        free = np.flatnonzero(self.entry == self.FREE)
        if len(free) < tokens:
            taken = self.occupied()
            oldest = taken[np.argsort(self.entry[taken], kind="stable")][:tokens - len(free)]
            self.release(oldest)
            free = np.flatnonzero(self.entry == self.FREE)
        return free[:tokens]

    def release(self, slots: np.ndarray) -> None:
        self.entry[slots] = self.FREE
        self.predicted[slots] = False

    def release_predicted(self) -> None:
        self.release(np.flatnonzero(self.predicted))

    def past(self, row: int, layer: int, exclude: np.ndarray) -> KV:
        """Keys/values of the occupied slots other than `exclude` (the call's own)."""
        taken = np.setdiff1d(self.occupied(), exclude)
        return KV(self.keys[row, layer, taken], self.values[row, layer, taken])

    def write(self, row: int, layer: int, slots: np.ndarray, kv: KV) -> None:
        self.keys[row, layer, slots] = kv.k
        self.values[row, layer, slots] = kv.v

    def commit(self, slots: np.ndarray, update: int) -> None:
        """After the call: free the slots (TEMPORARY) or keep them as a new entry."""
        if update == TEMPORARY:
            return
        taken = self.occupied()
        self.entry[slots] = 1 + int(self.entry[taken].max()) if len(taken) else 0
        self.predicted[slots] = update == PREDICTED

    def occupy(self, slots: np.ndarray) -> None:
        """Mark reserved slots as attended during the call (they hold this call's keys)."""
        self.entry[slots] = np.iinfo(np.int64).max  # not an eviction candidate while the call runs


# ---- tokens and time features ------------------------------------------------------------------

def timestep_features(timestep: float, freq_dim: int) -> np.ndarray:
    """Sinusoidal features [1, freq] of a timestep: [cos, sin] halves (diffusers Timesteps with
    flip_sin_to_cos=True, downscale_freq_shift=0), in float32 as diffusers computes them."""
    half = freq_dim // 2
    exponent = np.float32(-math.log(10000.0)) * np.arange(half, dtype=np.float32) / np.float32(half)
    angles = np.float32(timestep) * np.exp(exponent)
    return np.concatenate([np.cos(angles), np.sin(angles)])[None, :].astype(np.float32)


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


# ---- one transformer call ------------------------------------------------------------------------

def context(ks, w: DualStreamWeights, prompt_embeds: np.ndarray) -> np.ndarray:
    """text_embedder: prompt embeddings [L, text_dim] (zero rows included) -> [L, D]."""
    return ks.feed_forward(np.ascontiguousarray(prompt_embeds, np.float32), w.text_in.weight, w.text_in.bias,
                           w.text_out.weight, w.text_out.bias, "gelu_tanh")


def context_kvs(ks, cfg: DualStreamConfig, w: DualStreamWeights, ctx: np.ndarray) -> list[KV]:
    """Cross-attention keys/values of the context in every block (once per prompt)."""
    return [context_kv(ks, cfg.block, block.cross_attn, ctx) for block in w.blocks]


def conditioning(ks, cfg: DualStreamConfig, cond: Conditioning, frame_timesteps: np.ndarray,
                 tokens_per_frame: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame timesteps -> per-token temb [S, D] and block modulation input [S, 6, D]."""
    features = np.concatenate([timestep_features(float(t), cfg.freq_dim) for t in frame_timesteps])
    temb = ks.linear(silu(ks.linear(features, cond.time_in.weight, cond.time_in.bias)),
                     cond.time_out.weight, cond.time_out.bias)
    proj = ks.linear(silu(temb), cond.time_proj.weight, cond.time_proj.bias).reshape(-1, 6, cfg.dim)
    return np.repeat(temb, tokens_per_frame, axis=0), np.repeat(proj, tokens_per_frame, axis=0)


def video_tokens(x: np.ndarray) -> np.ndarray:
    """[C, F, R, W] -> [S, 4C], s = (f*R/2 + i)*W/2 + j, feature c*4 + ph*2 + pw."""
    return patchify(np.asarray(x, np.float32), LATENT_PATCH)


def action_tokens(x: np.ndarray) -> np.ndarray:
    """[A, F, P] -> [F*P, A]."""
    return np.ascontiguousarray(np.asarray(x, np.float32).reshape(x.shape[0], -1).T)


@dataclass(frozen=True)
class Call:
    """One transformer call of one stream (all CFG rows)."""

    stream: str  # VIDEO or ACTION
    x: np.ndarray  # [C, F, R, W] or [A, F, P] (the same sample for every row)
    frame_timesteps: np.ndarray  # [F] float32
    frame_start: int
    update: int  # TEMPORARY, PREDICTED or OBSERVED


def transformer_call(ks, cfg: DualStreamConfig, w: DualStreamWeights, call: Call, contexts: list[list[KV]],
                     pool: SlotPool, taps: dict | None = None) -> np.ndarray:
    """Run one call for every CFG row (`contexts[row]` = that row's per-block context K/V); returns
    the raw outputs [B, *x.shape] and updates the pool."""
    stream = w.video if call.stream == VIDEO else w.action
    if call.stream == VIDEO:
        channels, frames, rows, cols = call.x.shape
        tokens_in = video_tokens(call.x)
        grid = video_grid(call.frame_start, frames, rows // LATENT_PATCH, cols // LATENT_PATCH)
    else:
        _, frames, per_frame = call.x.shape
        tokens_in = action_tokens(call.x)
        grid = action_grid(call.frame_start, frames, per_frame)
    per_frame_tokens = tokens_in.shape[0] // frames
    temb, block_temb = conditioning(ks, cfg, stream.conditioning, call.frame_timesteps, per_frame_tokens)
    rope = rope_tables(grid, cfg.head_dim, cfg.rope_theta)
    if taps is not None:
        taps["grid"], taps["timestep_proj"] = grid, block_temb.reshape(block_temb.shape[0], -1)
    embedded = ks.linear(tokens_in, stream.embed.weight, stream.embed.bias)
    own = pool.reserve(len(tokens_in))
    pool.occupy(own)
    pool.keys_attended.append(len(pool.occupied()))
    outputs = []
    for row, ctx in enumerate(contexts):
        x = embedded
        for layer, block in enumerate(w.blocks):
            x, kv = wan_block(ks, cfg.block, block, x, block_temb, rope, ctx[layer], pool.past(row, layer, own))
            pool.write(row, layer, own, kv)
            if taps is not None and layer == 0:
                taps.setdefault("block0", []).append(x)
        shift, scale = stream.head_modulation[0] + temb, stream.head_modulation[1] + temb
        out = ks.linear(ks.modulated_layer_norm(x, shift, scale, cfg.eps), stream.head.weight, stream.head.bias)
        if call.stream == VIDEO:
            outputs.append(unpatchify(out, (frames, rows // LATENT_PATCH, cols // LATENT_PATCH), LATENT_PATCH,
                                      channels))
        else:
            outputs.append(np.ascontiguousarray(out.T.reshape(call.x.shape)))
    pool.release(own)
    pool.commit(own, call.update)
    return np.stack(outputs)


def pool_slots(attn_window: int, video_tokens_per_chunk: int, action_tokens_per_chunk: int) -> int:
    """lerobot's pool size: (attn_window // 2) chunks of video and action tokens."""
    return (attn_window // 2) * (video_tokens_per_chunk + action_tokens_per_chunk)


def guided(v: np.ndarray, scale: float) -> np.ndarray:
    """Classifier-free guidance over the CFG rows [B, ...]: v_u + g*(v_c - v_u) if g > 1, else row 0."""
    if scale > 1.0 and v.shape[0] > 1:
        return (v[1] + np.float32(scale) * (v[0] - v[1])).astype(np.float32)
    return v[0]


__all__ = ["ACTION", "Call", "DualStreamConfig", "DualStreamWeights", "OBSERVED", "PREDICTED", "Schedule",
           "SlotPool", "TEMPORARY", "VIDEO", "action_grid", "context", "context_kvs", "flow_schedule", "guided",
           "linspace_float32", "load_weights", "pool_slots", "rope_tables", "tensor_shapes", "transformer_call",
           "video_grid"]
