"""pi0.5 behind the stage contract of pipeline/stages.py.

    encode        images (uint8, any size) -> image tokens [N, T, D] + camera mask
    build_prefix  task text + state -> prompt -> token ids; image tokens + tokens -> prefix cache
    predict_world None (pi0.5 has no world model)
    act           prefix cache + noise -> Euler solve -> actions in physical units; with a
                  continuation, the solve is guided toward its leftover (heads/rtc.py)

Stage results carry plain arrays. The prefix result's tensors are the cache's own arrays (keys,
values, valid; plus the token ids, mask and raw state for diagnostics and relative actions), so
the result can be passed by reference inside a process or rebuilt from its tensors in another
one without a copy.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.models.pi05.config import Pi05Config
from embodied_ros.models.pi05.model import Pi05Model
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.pipeline.types import ActionChunkResult, ChunkContinuation, Observation, StageResult
from embodied_ros.models.kit import configs, flow_vla
from embodied_ros.models.pi05 import prompt as prompts
from embodied_ros.sequence.normalize import Normalizer, normalizer_of
from embodied_ros.sequence.tokenizer import PromptTokenizer


def model_spec(config: Pi05Config) -> ModelSpec:
    """The stage contract's spec; pi0.5's `act` takes a continuation (real-time chunking)."""
    return configs.action_model_spec(config, "pi05", real_time_chunking=True)


class Pi05Runtime:
    def __init__(self, model: Pi05Model, tokenizer: PromptTokenizer | None = None,
                 state_stats: Normalizer | None = None, action_stats: Normalizer | None = None) -> None:
        config = model.config
        flow_vla.check_stats(config, state_stats, action_stats)
        self.model = model
        self.config = config
        self.tokenizer = tokenizer
        self.state_stats = state_stats
        self.action_stats = action_stats
        self.spec = model_spec(config)

    def warm_up(self) -> None:
        self.model.warm_up()

    @classmethod
    def from_parts(cls, config: Pi05Config, weights: Mapping[str, Any], tokenizer_model: bytes | None = None,
                   stats: Mapping[str, Mapping[str, np.ndarray]] | None = None,
                   backend: str = "numba") -> "Pi05Runtime":
        stats = stats or {}
        tokenizer = None if tokenizer_model is None else PromptTokenizer(tokenizer_model, config.tokenizer_max_length)
        return cls(model_for(config, weights, backend), tokenizer, normalizer_of(stats.get("state")),
                   normalizer_of(stats.get("action")))

    # ---- perception ------------------------------------------------------------------------

    def encode(self, observation: Observation) -> StageResult:
        images, present = flow_vla.camera_batch(observation, self.config.camera_names,
                                                  self.config.vision.image_size, "pi0.5")
        tokens = self.model.image_tokens(images, present)
        return StageResult("perception", observation.stamp_ns, {"image_tokens": tokens, "camera_mask": present})

    # ---- prefix ----------------------------------------------------------------------------

    def prompt(self, observation: Observation) -> tuple[str, np.ndarray]:
        """The prompt text and the normalized state it was built from."""
        state = flow_vla.raw_state(observation, self.config, "pi0.5 writes the robot state into its prompt")
        normalized = state if self.state_stats is None else self.state_stats.normalize(state)
        return prompts.build_prompt(observation.instruction, prompts.discretize_state(normalized)), normalized

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        flow_vla.require_stage(embeddings, "perception", "build_prefix")
        if self.tokenizer is None:
            raise ValueError("this bundle has no tokenizer model; convert the checkpoint with its tokenizer.model")
        text, _ = self.prompt(observation)
        tokens, token_mask = self.tokenizer.encode(text)
        cache = self.model.build_prefix(embeddings.tensors["image_tokens"], embeddings.tensors["camera_mask"],
                                        tokens, token_mask, observation.stamp_ns)
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
        cache = self.model.cache_from_tensors(prefix.tensors, prefix.stamp_ns)
        noise = self.draw_noise(prefix.stamp_ns) if noise is None else noise
        raw_state = prefix.tensors.get("state")
        guidance = flow_vla.continuation_guidance(continuation, raw_state, self.config, self.action_stats)
        actions = self.model.sample_actions(cache, noise, guidance)[:, : self.config.action_dim]
        actions = self.to_physical(actions, raw_state)
        return ActionChunkResult(prefix.stamp_ns, actions, self.config.action_period_s, self.config.action_names)

    def to_physical(self, actions: np.ndarray, raw_state: np.ndarray | None) -> np.ndarray:
        """Model-space actions [C, action_dim] -> physical units (de-normalized, relative made absolute)."""
        return flow_vla.physical_actions(actions, raw_state, self.config, self.action_stats)


def model_for(config: Pi05Config, weights: Mapping[str, Any], backend: str):
    """The model on `backend`: on "cuda" the device-resident one (gpu/pi05.py), else on a kernel set."""
    if backend == "cuda":
        from embodied_ros.gpu import cuda_engine
        from embodied_ros.gpu.pi05 import DevicePi05Model
        return DevicePi05Model(config, weights, cuda_engine())
    return Pi05Model(config, weights, backend)


def config_of(bundle) -> Pi05Config:
    """The model config from a bundle's metadata alone (no weights read)."""
    return configs.config_of(bundle, Pi05Config)


def spec_of(bundle) -> ModelSpec:
    return model_spec(config_of(bundle))


def load_runtime(bundle, backend: str = "numba") -> Pi05Runtime:
    """A runtime over an open bundle (embodied_ros.bundle.Bundle); weights stay memory-mapped.
    Kernels compile at `warm_up()` (see Pi05Model.warm_up) or else at first use."""
    return Pi05Runtime.from_parts(config_of(bundle), bundle.weights(), bundle.tokenizer_model, bundle.stats,
                                  backend)
