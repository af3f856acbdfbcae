"""pi0.5 assembled from its layers, in model space (no prompt text, no normalization).

    image_tokens(images, camera_mask)                   SigLIP + projector, present cameras only
    build_prefix(image_tokens, camera_mask, tokens, token_mask)  -> PrefixCache (one LM pass)
    sample_actions(cache, noise, guidance)              Euler solve, every step reads the cache
                                                        (guidance: real-time chunking, heads/rtc.py)

The prefix (perception and the LM pass) is PaliGemma's, shared with pi0 (backbone/paligemma.py);
pi0.5's own part is the adaRMS action expert conditioned on the flow time.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.paligemma import PaliGemmaPrefix
from embodied_ros.backbone.prefix_cache import PrefixCache
from embodied_ros.heads import adarms_expert, flow, rtc
from embodied_ros.kernels.rope import rope_tables
from embodied_ros.models.pi05.config import Pi05Config
from embodied_ros.models.pi05.weights import check_weights, is_linear_weight


class Pi05Model(PaliGemmaPrefix):
    def __init__(self, config: Pi05Config, weights: Mapping[str, Any], backend: str = "numba") -> None:
        check_weights(weights, config)
        super().__init__(config, weights, backend, is_linear_weight)
        self.step_conditioning = tuple(
            adarms_expert.step_conditioning(self.ks, self.weights, self.expert_layers, t,
                                            config.time_min_period, config.time_max_period)
            for t in flow.euler_times(config.num_inference_steps))

    def warm_up(self) -> None:
        """One small pass through every stage, so that numba compiles (or loads from its disk
        cache) each kernel for the argument types the model really passes before the first
        observation arrives: layouts and read-only weights make types, not just shapes."""
        cfg = self.config
        self.sample_actions(self.warm_up_prefix(), np.zeros((cfg.chunk_size, cfg.max_action_dim), np.float32))

    # ---- actions ---------------------------------------------------------------------------

    def suffix_rope(self, cache: PrefixCache) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin [C, d] of the action tokens, at positions n_valid + 0..C-1."""
        positions = cache.n_valid + np.arange(self.config.chunk_size)
        return rope_tables(positions, self.config.lm.head_dim, self.config.lm.rope_theta)

    def velocity(self, cache: PrefixCache, x_t: np.ndarray, step: int,
                 rope: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        rope = self.suffix_rope(cache) if rope is None else rope
        return adarms_expert.velocity(self.ks, self.config.expert, self.weights, self.expert_layers, cache, x_t,
                                      self.step_conditioning[step], rope)

    def sample_actions(self, cache: PrefixCache, noise: np.ndarray, guidance: rtc.Guidance | None = None) -> np.ndarray:
        """noise x(t=1) [C, A] -> x(t=0) [C, A] (model space, padded action width)."""
        noise = self.checked_noise(noise, cache)
        rope = self.suffix_rope(cache)
        return flow.euler_solve(lambda x, step: self.velocity(cache, x, step, rope), noise,
                                self.config.num_inference_steps, guidance=guidance)
