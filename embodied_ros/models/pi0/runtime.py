"""pi0 behind the stage contract of pipeline/stages.py.

    encode        images (uint8, any size) -> image tokens [N, T, D] + camera mask
    build_prefix  task text -> "task\\n" -> token ids; state -> normalized; image tokens + tokens
                  -> prefix cache, the state token's K/V appended
    predict_world None (pi0 has no world model)
    act           prefix cache + noise -> Euler solve -> actions in physical units; with a
                  continuation, the solve is guided toward its leftover (heads/rtc.py)

The stage results carry the same tensors as pi0.5's (the cache's own arrays, token ids, mask, raw
state), so the graph passes them the same way.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.prefix_cache import PrefixCache
from embodied_ros.models.kit import configs, flow_vla
from embodied_ros.models.pi0.config import ARCHITECTURE, Pi0Config
from embodied_ros.models.pi0.model import Pi0Model
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.pipeline.types import ActionChunkResult, ChunkContinuation, Observation, StageResult
from embodied_ros.sequence.normalize import Normalizer, normalizer_of
from embodied_ros.sequence.tokenizer import PromptTokenizer


def model_spec(config: Pi0Config) -> ModelSpec:
    """The stage contract's spec; pi0's `act` takes a continuation (real-time chunking)."""
    return configs.action_model_spec(config, ARCHITECTURE, real_time_chunking=True)


def prompt_text(task: str) -> str:
    """LeRobot's pi0 prompt: the task as given, ending with one newline (PaliGemma's convention)."""
    return task if task.endswith("\n") else f"{task}\n"


class Pi0Runtime:
    def __init__(self, model: Pi0Model, tokenizer: PromptTokenizer | None = None,
                 state_stats: Normalizer | None = None, action_stats: Normalizer | None = None) -> None:
        config = model.config
        flow_vla.check_stats(config, state_stats, action_stats)
        self.model = model
        self.config = config
        self.tokenizer = tokenizer
        self.state_stats = state_stats
        self.action_stats = action_stats
        self.spec = model_spec(config)

    @classmethod
    def from_parts(cls, config: Pi0Config, weights: Mapping[str, Any], tokenizer_model: bytes | None = None,
                   stats: Mapping[str, Mapping[str, np.ndarray]] | None = None,
                   backend: str = "numba") -> "Pi0Runtime":
        stats = stats or {}
        tokenizer = None if tokenizer_model is None else PromptTokenizer(tokenizer_model, config.tokenizer_max_length)
        return cls(Pi0Model(config, weights, backend), tokenizer, normalizer_of(stats.get("state")),
                   normalizer_of(stats.get("action")))

    def warm_up(self) -> None:
        self.model.warm_up()

    # ---- perception ------------------------------------------------------------------------

    def encode(self, observation: Observation) -> StageResult:
        images, present = flow_vla.camera_batch(observation, self.config.camera_names,
                                                  self.config.vision.image_size, "pi0")
        tokens = self.model.image_tokens(images, present)
        return StageResult("perception", observation.stamp_ns, {"image_tokens": tokens, "camera_mask": present})

    # ---- prefix ----------------------------------------------------------------------------

    def normalized_state(self, observation: Observation) -> np.ndarray:
        state = flow_vla.raw_state(observation, self.config, "pi0 reads the robot state as a token")
        return state if self.state_stats is None else self.state_stats.normalize(state)

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        flow_vla.require_stage(embeddings, "perception", "build_prefix")
        if self.tokenizer is None:
            raise ValueError("this bundle has no tokenizer model; convert the checkpoint with its tokenizer.model")
        text = prompt_text(observation.instruction)
        tokens, token_mask = self.tokenizer.encode(text)
        cache = self.model.build_prefix(embeddings.tensors["image_tokens"], embeddings.tensors["camera_mask"],
                                        tokens, token_mask, self.normalized_state(observation), observation.stamp_ns)
        state = np.asarray(observation.state, dtype=np.float32).reshape(-1)
        tensors = {**cache.tensors(), "tokens": tokens, "token_mask": token_mask, "state": state}
        return StageResult("prefix", observation.stamp_ns, tensors,
                           {"prompt": text, "n_valid": cache.n_valid, "n_tokens": int(token_mask.sum())})

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None, episode=None) -> None:
        return None

    # ---- actions ---------------------------------------------------------------------------

    def draw_noise(self, stamp_ns: int) -> np.ndarray:
        return stage_noise(self.spec.noise_seed, "action", stamp_ns, self.spec.noise_shape)

    def act(self, prefix: StageResult, world: StageResult | None = None, noise: np.ndarray | None = None,
            continuation: ChunkContinuation | None = None) -> ActionChunkResult:
        flow_vla.require_stage(prefix, "prefix", "act")
        cache = PrefixCache.from_tensors(prefix.tensors, prefix.stamp_ns)
        noise = self.draw_noise(prefix.stamp_ns) if noise is None else noise
        raw_state = prefix.tensors.get("state")
        guidance = flow_vla.continuation_guidance(continuation, raw_state, self.config, self.action_stats)
        actions = self.model.sample_actions(cache, noise, guidance)[:, : self.config.action_dim]
        actions = self.to_physical(actions, raw_state)
        return ActionChunkResult(prefix.stamp_ns, actions, self.config.action_period_s, self.config.action_names)

    def to_physical(self, actions: np.ndarray, raw_state: np.ndarray | None) -> np.ndarray:
        """Model-space actions [C, action_dim] -> physical units (de-normalized, relative made absolute)."""
        return flow_vla.physical_actions(actions, raw_state, self.config, self.action_stats)


def spec_of(bundle) -> ModelSpec:
    return model_spec(configs.config_of(bundle, Pi0Config))


def load_runtime(bundle, backend: str = "numba") -> Pi0Runtime:
    """A runtime over an open bundle (embodied_ros.bundle.Bundle); weights stay memory-mapped.
    Kernels compile at `warm_up()` or else at first use."""
    return Pi0Runtime.from_parts(configs.config_of(bundle, Pi0Config), bundle.weights(), bundle.tokenizer_model,
                                 bundle.stats, backend)
