"""pi0-FAST behind the stage contract of pipeline/stages.py:

    encode        images (uint8, any size) -> image tokens [N, T, D] + camera mask
    build_prefix  task + normalized state -> prompt -> ids; one LM pass -> prefix cache + bos's hidden state
    predict_world None (no world model)
    act           greedy decoding over the prefix (never written) -> FAST detokenization -> physical actions

`act` takes no noise (the spec's noise shape is (0,)) and no continuation: real-time chunking steers a
flow solve, and decoding tokens has none to steer. Its result is a `Pi0FastChunk`, an ActionChunkResult
that also says how the tokens read: the generated ids, whether "|" ended them, and, when LeRobot
would fall back to zeros (ids that are not action tokens, no "Action:" prefix), `fallback` and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from embodied_ros.models.kit.configs import config_of
from embodied_ros.models.kit.flow_vla import camera_batch, check_stats, physical_actions, raw_state, require_stage
from embodied_ros.models.pi0_fast.config import ARCHITECTURE, Pi0FastConfig
from embodied_ros.models.pi0_fast.model import Pi0FastModel
from embodied_ros.models.pi0_fast.tokens import build_prompt
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.pipeline.types import ActionChunkResult, ChunkContinuation, Observation, StageResult
from embodied_ros.sequence.normalize import normalizer_of
from embodied_ros.sequence.tokenizer import PromptTokenizer


@dataclass(frozen=True)
class Pi0FastChunk(ActionChunkResult):
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # generated ids, "|" included
    stopped: bool = True  # "|" came within max_decoding_steps
    fallback: bool = False  # the ids were undecodable and the actions are LeRobot's zeros (de-normalized)
    problem: str = ""  # why the chunk is not an exact decoding, "" when it is


def model_spec(config: Pi0FastConfig) -> ModelSpec:
    size = config.vision.image_size
    return ModelSpec(architecture=ARCHITECTURE, camera_names=config.camera_names, image_size=(size, size),
                     state_names=config.state_names, action_names=config.action_names, chunk_size=config.chunk_size,
                     action_period_s=config.action_period_s, noise_shape=(0,), world_noise_shape=None,
                     has_world_model=False, real_time_chunking=False)


class Pi0FastRuntime:
    architecture = ARCHITECTURE

    def __init__(self, model: Pi0FastModel, tokenizer: PromptTokenizer | None = None, state_stats=None,
                 action_stats=None) -> None:
        self.model, self.config = model, model.config
        check_stats(self.config, state_stats, action_stats)
        self.tokenizer, self.state_stats, self.action_stats = tokenizer, state_stats, action_stats
        self.spec = model_spec(self.config)

    @classmethod
    def from_bundle(cls, bundle, backend: str = "numba") -> "Pi0FastRuntime":
        """A runtime over an open bundle; weights stay memory-mapped, kernels compile at `warm_up()`."""
        config = config_of(bundle, Pi0FastConfig)
        data = bundle.tokenizer_model
        tokenizer = None if data is None else PromptTokenizer(data, config.tokenizer_max_length)
        stats = bundle.stats
        return cls(Pi0FastModel(config, bundle.weights(), backend), tokenizer, normalizer_of(stats.get("state")),
                   normalizer_of(stats.get("action")))

    def warm_up(self) -> None:
        self.model.warm_up()

    def encode(self, observation: Observation) -> StageResult:
        images, present = camera_batch(observation, self.config.camera_names, self.config.vision.image_size,
                                       self.architecture)
        return StageResult("perception", observation.stamp_ns,
                           {"image_tokens": self.model.image_tokens(images, present), "camera_mask": present})

    def prompt(self, observation: Observation) -> str:
        state = raw_state(observation, self.config, "pi0-FAST writes the robot state into its prompt")
        return build_prompt(observation.instruction,
                            state if self.state_stats is None else self.state_stats.normalize(state))

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        require_stage(embeddings, "perception", "build_prefix")
        if self.tokenizer is None:
            raise ValueError("this bundle has no tokenizer; convert the checkpoint with its tokenizer")
        text = self.prompt(observation)
        tokens, token_mask = self.tokenizer.encode(text)
        prefix = self.model.build_prefix(embeddings.tensors["image_tokens"], embeddings.tensors["camera_mask"],
                                         tokens, token_mask, observation.stamp_ns)
        state = np.asarray(observation.state, dtype=np.float32).reshape(-1)
        tensors = {**prefix.cache.tensors(), "last_hidden": prefix.last_hidden, "tokens": tokens,
                   "token_mask": token_mask, "state": state}
        return StageResult("prefix", observation.stamp_ns, tensors,
                           {"prompt": text, "n_valid": prefix.cache.n_valid, "n_tokens": int(token_mask.sum())})

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None, episode=None) -> None:
        return None

    def act(self, prefix: StageResult, world: StageResult | None = None, noise: np.ndarray | None = None,
            continuation: ChunkContinuation | None = None) -> Pi0FastChunk:
        require_stage(prefix, "prefix", "act")
        if continuation is not None:
            raise ValueError("pi0_fast decodes tokens: real-time chunking does not apply (rtc.enabled must be false)")
        decoded = self.model.decode(self.model.prefix_from_tensors(prefix.tensors, prefix.stamp_ns))
        actions = physical_actions(decoded.actions, prefix.tensors.get("state"), self.config, self.action_stats)
        return Pi0FastChunk(prefix.stamp_ns, actions, self.config.action_period_s, self.config.action_names,
                            decoded.tokens, decoded.stopped, decoded.fallback, decoded.problem)


def spec_of(bundle) -> ModelSpec:
    return model_spec(config_of(bundle, Pi0FastConfig))


def load_runtime(bundle, backend: str = "numba") -> Pi0FastRuntime:
    return Pi0FastRuntime.from_bundle(bundle, backend)
