"""pi0 assembled from its layers, in model space (no tokenizer, no normalization).

    image_tokens(images, camera_mask)                   SigLIP + projector, present cameras only
    build_prefix(image_tokens, camera_mask, tokens, token_mask, state)
                                                        -> PrefixCache: one LM pass, then the state
                                                           token's K/V appended as one more row
    sample_actions(cache, noise)                        Euler solve, every step reads the cache

The prefix is PaliGemma's, shared with pi0.5 (backbone/paligemma.py); pi0's own part is the
action-time-MLP expert (heads/action_time_expert.py).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.paligemma import PaliGemmaPrefix
from embodied_ros.backbone.prefix_cache import PrefixCache
from embodied_ros.heads import action_time_expert as expert
from embodied_ros.heads import flow, rtc
from embodied_ros.kernels.linear import pack_for_products
from embodied_ros.kernels.rope import rope_tables
from embodied_ros.models.pi0.config import Pi0Config
from embodied_ros.models.pi0.weights import check_weights, is_linear_weight


class Pi0Model(PaliGemmaPrefix):
    def __init__(self, config: Pi0Config, weights: Mapping[str, Any], backend: str = "numba") -> None:
        check_weights(weights, config)
        super().__init__(config, weights, backend, is_linear_weight)
        action_part, time_part = expert.split_action_time_in(self.weights["action_time_in.weight"],
                                                             config.expert.width)
        self.action_part = pack_for_products(action_part) if backend == "numba" else action_part
        self.step_time_bias = tuple(
            expert.time_bias(time_part, self.weights["action_time_in.bias"], t, config.time_min_period,
                             config.time_max_period)
            for t in flow.euler_times(config.num_inference_steps))

    def warm_up(self) -> None:
        """One small pass through every stage (see Pi05Model.warm_up)."""
        cfg = self.config
        cache = self.with_state(self.warm_up_prefix(), np.zeros(cfg.state_dim, np.float32))
        self.sample_actions(cache, np.zeros((cfg.chunk_size, cfg.max_action_dim), np.float32))

    # ---- prefix ----------------------------------------------------------------------------

    def padded_state(self, state: np.ndarray) -> np.ndarray:
        """Model-space state [state_dim] -> [max_state_dim], zero-padded."""
        state = np.asarray(state, np.float32).reshape(-1)
        if state.size != self.config.state_dim:
            raise ValueError(f"state has {state.size} values, the model expects {self.config.state_dim}")
        if not np.all(np.isfinite(state)):
            raise ValueError(f"state has non-finite values: {state.tolist()}")
        padded = np.zeros(self.config.max_state_dim, np.float32)
        padded[: state.size] = state
        return padded

    def state_pass(self, cache: PrefixCache, state: np.ndarray,
                   full_last_layer: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lm = self.config.lm
        rope = rope_tables(np.array([cache.n_valid]), lm.head_dim, lm.rope_theta)
        return expert.state_pass(self.ks, self.config.expert, self.weights, self.expert_layers, cache,
                                 self.padded_state(state), rope, full_last_layer)

    def with_state(self, cache: PrefixCache, state: np.ndarray) -> PrefixCache:
        """The prefix cache with the state token appended (what the action tokens read)."""
        keys, values, _ = self.state_pass(cache, state)
        return expert.append_state_token(cache, keys, values)

    def build_prefix(self, image_tokens: np.ndarray, camera_mask: np.ndarray, tokens: np.ndarray,
                     token_mask: np.ndarray, state: np.ndarray | None = None, stamp_ns: int = 0,
                     compact: bool = True) -> PrefixCache:
        if state is None:
            raise ValueError("pi0 reads the robot state as a token; no state given")
        cache = self.prefix_pass(image_tokens, camera_mask, tokens, token_mask, stamp_ns, compact)[0]
        return self.with_state(cache, state)

    # ---- actions ---------------------------------------------------------------------------

    def suffix_rope(self, cache: PrefixCache) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin [C, d] of the action tokens: positions n_valid + 0..C-1 of the cache that
        holds the state token (which sits one before them)."""
        positions = cache.n_valid + np.arange(self.config.chunk_size)
        return rope_tables(positions, self.config.lm.head_dim, self.config.lm.rope_theta)

    def velocity(self, cache: PrefixCache, x_t: np.ndarray, step: int,
                 rope: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        rope = self.suffix_rope(cache) if rope is None else rope
        return expert.velocity(self.ks, self.config.expert, self.weights, self.expert_layers, self.action_part,
                               cache, x_t, self.step_time_bias[step], rope)

    def sample_actions(self, cache: PrefixCache, noise: np.ndarray,
                       guidance: rtc.Guidance | None = None) -> np.ndarray:
        """noise x(t=1) [C, A] -> x(t=0) [C, A] (model space, padded action width); `cache` from
        build_prefix (state token included); `guidance` steers each step's velocity (real-time
        chunking, heads/rtc.py)."""
        noise = self.checked_noise(noise, cache)
        rope = self.suffix_rope(cache)
        return flow.euler_solve(lambda x, step: self.velocity(cache, x, step, rope), noise,
                                self.config.num_inference_steps, guidance=guidance)
