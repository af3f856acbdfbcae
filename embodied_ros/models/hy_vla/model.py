"""HY-VLA assembled from its layers, in model space (no tokenizer, no normalization).

    image_tokens(images, camera_mask)                   HYViT2 + merger, present cameras only
    build_prefix(image_tokens, camera_mask, tokens, token_mask, state)
                                                        -> PrefixCache: one MoT LM pass, then the state
                                                           token's K/V appended as one more row
    sample_actions(cache, noise)                        Euler solve, every step reads the cache

The prefix, as the reference lays it out, is
    <bos> <user>, per camera: <vision_start> [g patches, <vision_split>] x g rows <vision_end>, the prompt
with image-patch rows on the LM's vision weights and every other row on its text weights. Attention is
causal, except inside images: with `visual_segment_isolation` an image's rows (patches and splits) read
exactly their own image; without it an image's patches read each other and no other image's patches,
and the rest stays causal. Positions are the row index. Absent cameras and padding tokens are dropped
before the pass (the reference masks them; no kept row reads them, so nothing changes).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import hunyuan_mot, hyvit, llama
from embodied_ros.backbone.paligemma import TOKEN_EMBEDDING, prepare_weights, stack_layers, take_rows
from embodied_ros.backbone.prefix_cache import PrefixCache, PrefixCacheBuilder
from embodied_ros.heads import action_time_expert as action_time
from embodied_ros.heads import flow, rtc
from embodied_ros.kernels import KernelSet, reuse_freed_memory
from embodied_ros.kernels.attention import MASKED
from embodied_ros.kernels.linear import pack_for_products
from embodied_ros.models.hy_vla.config import HyVLAConfig

LINEAR = frozenset({"attn_qkv", "attn_qkv_v", "attn_out", "attn_out_v", "ffn_gate_up", "ffn_gate_up_v", "ffn_down",
                    "ffn_down_v", "fc1", "fc2", "patch", "proj1", "proj2", "score1", "score2", "state_in", "action_in",
                    "action_time_out", "action_out"})


def is_linear_weight(name: str) -> bool:
    """A matrix the products read (action_time_in is split at load, so it is not one)."""
    parts = name.split(".")
    return parts[-1] == "weight" and parts[-2] in LINEAR


SPECIAL_ORDER = ("bos", "user", "vision_start", "vision_end", "vision_split")
BOS, USER, START, END, SPLIT = range(len(SPECIAL_ORDER))
EMBEDDED = -1  # a row of image tokens or of the prompt


def prefix_layout(config: HyVLAConfig, cameras: int, empty_slots: int, prompt_tokens: int
                  ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """The kept prefix's rows: (kind [n]: a special token's index in SPECIAL_ORDER or EMBEDDED; patch [n]
    bool; per camera its (first, end) rows of patches and splits).
    An empty slot (a padding image for an absent camera) keeps its start and end rows, which the
    reference leaves unmasked; its image rows are masked there and dropped here."""
    g = config.vision.grid
    kinds, patch, segments = [BOS, USER], [False, False], []
    for _ in range(cameras):
        kinds.append(START)
        patch.append(False)
        first = len(kinds)
        for _ in range(g):
            kinds += [EMBEDDED] * g + [SPLIT]
            patch += [True] * g + [False]
        segments.append((first, len(kinds)))
        kinds.append(END)
        patch.append(False)
    kinds += [START, END] * empty_slots
    patch += [False, False] * empty_slots
    kinds += [EMBEDDED] * prompt_tokens
    patch += [False] * prompt_tokens
    return np.array(kinds), np.array(patch), segments


def prefix_allowed(config: HyVLAConfig, patch: np.ndarray, segments: list[tuple[int, int]]) -> np.ndarray:
    """[n, n] bool: row i reads row j (module doc)."""
    n = patch.size
    allowed = np.tril(np.ones((n, n), bool))
    if config.visual_segment_isolation:
        for start, end in segments:
            allowed[start:end] = False
            allowed[start:end, start:end] = True
        return allowed
    allowed[np.ix_(patch, patch)] = False
    for start, end in segments:
        rows = np.flatnonzero(patch[start:end]) + start
        allowed[np.ix_(rows, rows)] = True
    return allowed


class HyVLAModel:
    def __init__(self, config: HyVLAConfig, weights: Mapping[str, Any], backend: str = "numba") -> None:
        self.config = config
        self.ks = KernelSet(backend)
        reuse_freed_memory()
        self.weights = prepare_weights(weights, is_linear_weight, pack=backend == "numba")
        self.vision_layers = stack_layers(self.weights, "vision", config.vision.depth)
        self.lm_layers = stack_layers(self.weights, "lm", config.lm.depth)
        self.expert_layers = stack_layers(self.weights, "expert", config.expert.depth)
        self.position = hyvit.positions(config.vision, self.weights["vision.position"])
        action_part, time_part = action_time.split_action_time_in(self.weights["action_time_in.weight"],
                                                                  config.expert.width)
        self.action_part = pack_for_products(action_part) if backend == "numba" else action_part
        self.step_time_bias = tuple(action_time.time_bias(time_part, self.weights["action_time_in.bias"], t,
                                                          config.time_min_period, config.time_max_period)
                                    for t in flow.accumulated_times(config.num_inference_steps))

    def warm_up(self) -> None:
        """One small pass through every stage so that each kernel compiles before the first observation."""
        cfg = self.config
        shape = (1, 3, cfg.vision.image_size, cfg.vision.image_size)
        images = np.zeros(shape if cfg.memory_frames == 1 else (1, cfg.memory_frames, *shape[1:]), np.float32)
        mask = np.ones(1, bool)
        cache = self.build_prefix(self.image_tokens(images, mask), mask, np.zeros(2, np.int64), np.array([True, False]),
                                  np.zeros(cfg.state_dim, np.float32))
        self.sample_actions(cache, np.zeros((cfg.chunk_size, cfg.max_action_dim), np.float32))

    # ---- perception ------------------------------------------------------------------------

    def image_tokens(self, images: np.ndarray, camera_mask: np.ndarray | None = None) -> np.ndarray:
        """[N, 3, S, S] (or [N, K, 3, S, S]) in [-1, 1] -> [N, T, D]; absent cameras are skipped (zeros)."""
        cfg = self.config
        mask = np.ones(images.shape[0], bool) if camera_mask is None else np.asarray(camera_mask, bool)
        out = np.zeros((images.shape[0], cfg.vision.tokens_per_camera, cfg.lm.width), np.float32)
        if mask.any():
            out[mask] = hyvit.image_tokens(self.ks, cfg.vision, self.weights, self.vision_layers, self.position,
                                           images[mask])
        return out

    # ---- prefix ----------------------------------------------------------------------------

    def embedded(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"token ids must lie in 0..{self.config.vocab_size - 1}, got {ids.min()}..{ids.max()}")
        return take_rows(self.weights[TOKEN_EMBEDDING], ids)

    def prefix_rows(self, image_tokens: np.ndarray, empty_slots: int, tokens: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Present cameras' tokens [N, T, D], the number of empty slots and the valid prompt ids [L] ->
        (rows [n, D], patch rows [n], attention allowed [n, n])."""
        cfg = self.config
        kinds, patch, segments = prefix_layout(cfg, image_tokens.shape[0], empty_slots, tokens.size)
        specials = self.embedded(np.array([cfg.special_ids[name] for name in SPECIAL_ORDER]))
        x = np.empty((kinds.size, cfg.lm.width), np.float32)
        special = kinds != EMBEDDED
        x[special] = specials[kinds[special]]
        x[patch] = image_tokens.reshape(-1, cfg.lm.width)
        x[kinds.size - tokens.size:] = self.embedded(tokens)
        return x, patch, prefix_allowed(cfg, patch, segments)

    def state_token(self, state: np.ndarray) -> np.ndarray:
        cfg = self.config
        state = np.asarray(state, dtype=np.float32).reshape(-1)
        if state.size > cfg.max_state_dim:
            raise ValueError(f"state has {state.size} values, more than max_state_dim {cfg.max_state_dim}")
        if not np.all(np.isfinite(state)):
            raise ValueError(f"state has non-finite values: {state.tolist()}")
        padded = np.zeros((1, cfg.max_state_dim), np.float32)
        padded[0, : state.size] = state
        return self.ks.linear(padded, self.weights["state_in.weight"], self.weights["state_in.bias"])

    def build_prefix(self, image_tokens: np.ndarray, camera_mask: np.ndarray, tokens: np.ndarray,
                     token_mask: np.ndarray, state: np.ndarray | None = None, stamp_ns: int = 0) -> PrefixCache:
        if state is None:
            raise ValueError("hy_vla reads the robot state as a token; no state given")
        lm = self.config.lm
        present = np.asarray(camera_mask, bool)
        if not present.any():
            raise ValueError("no camera image: hy_vla's prefix needs at least one")
        empty_slots = min(int((~present).sum()), self.config.empty_cameras)
        x, patch, allowed = self.prefix_rows(image_tokens[present], empty_slots,
                                             np.asarray(tokens)[np.asarray(token_mask, bool)])
        builder = PrefixCacheBuilder.allocate(lm.depth, x.shape[0], lm.num_kv_heads, lm.head_dim)
        bias = np.where(allowed, np.float32(0.0), MASKED).astype(np.float32)
        hunyuan_mot.prefix_pass(self.ks, lm, self.lm_layers, x, patch, np.arange(x.shape[0]), bias, builder)
        cache = builder.seal(np.ones(x.shape[0], bool), stamp_ns)
        keys, values = hunyuan_mot.state_kv(self.ks, self.config.expert, self.expert_layers, self.lm_layers, cache,
                                            self.state_token(state))
        return action_time.append_state_token(cache, keys, values)

    cache_from_tensors = staticmethod(PrefixCache.from_tensors)

    # ---- actions ---------------------------------------------------------------------------

    def velocity(self, cache: PrefixCache, x_t: np.ndarray, step: int, rope) -> np.ndarray:
        cfg = self.config
        x = action_time.action_tokens(self.ks, self.weights, self.action_part, x_t, self.step_time_bias[step])
        x = hunyuan_mot.expert_pass(self.ks, cfg.expert, self.expert_layers, self.lm_layers, cache, x, rope)
        normed = llama.norm(self.ks, x, self.weights["expert.final_norm.weight"], cfg.expert.eps)
        return self.ks.linear(normed, self.weights["action_out.weight"], self.weights["action_out.bias"])

    def checked_noise(self, noise: np.ndarray, cache: PrefixCache) -> np.ndarray:
        expected = (self.config.chunk_size, self.config.max_action_dim)
        noise = np.asarray(noise, dtype=np.float32)
        if noise.shape != expected:
            raise ValueError(f"noise must have shape {expected}, got {noise.shape}")
        if cache.num_layers != self.config.lm.depth:
            raise ValueError(f"prefix cache has {cache.num_layers} layers, the expert reads {self.config.lm.depth}")
        return noise

    def sample_actions(self, cache: PrefixCache, noise: np.ndarray, guidance: rtc.Guidance | None = None) -> np.ndarray:
        """noise x(t=1) [C, A] -> x(t=0) [C, A] (model space, padded action width); `cache` from build_prefix
        (state token included); `guidance` steers each step's velocity (real-time chunking)."""
        noise = self.checked_noise(noise, cache)
        rope = self.config.expert.rope(cache.n_valid + np.arange(self.config.chunk_size))
        return flow.euler_solve(lambda x, step: self.velocity(cache, x, step, rope), noise,
                                self.config.num_inference_steps, guidance=guidance)

    def sample(self, images: np.ndarray, camera_mask: np.ndarray, tokens: np.ndarray, token_mask: np.ndarray,
               state: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Model-space inputs of one observation -> actions [C, A] (the reference's `sample_actions`)."""
        mask = np.asarray(camera_mask, bool)
        cache = self.build_prefix(self.image_tokens(images, mask), mask, tokens, token_mask, state)
        return self.sample_actions(cache, noise)
