"""pi0.5 behind the stage contract of pipeline/stages.py.

    encode        images (uint8, any size) -> image tokens [N, T, D] + camera mask
    build_prefix  task text + state -> prompt -> token ids; image tokens + tokens -> prefix cache
    predict_world None (pi0.5 has no world model)
    act           prefix cache + noise -> Euler solve -> actions in physical units

Stage results carry plain arrays. The prefix result's tensors are the cache's own arrays (keys,
values, valid; plus the token ids, mask and raw state for diagnostics and relative actions), so
the result can be passed by reference inside a process or rebuilt from its tensors in another
one without a copy.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.prefix_cache import PrefixCache
from embodied_ros.models.pi05.config import Pi05Config
from embodied_ros.models.pi05.model import Pi05Model
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.pipeline.types import ActionChunkResult, Observation, StageResult
from embodied_ros.sequence import prompt as prompts
from embodied_ros.sequence.images import model_image
from embodied_ros.sequence.normalize import QuantileStats
from embodied_ros.sequence.tokenizer import PromptTokenizer


class Pi05Runtime:
    def __init__(self, model: Pi05Model, tokenizer: PromptTokenizer | None = None,
                 state_stats: QuantileStats | None = None, action_stats: QuantileStats | None = None) -> None:
        config = model.config
        for stats, dim, what in ((state_stats, config.state_dim, "state"), (action_stats, config.action_dim, "action")):
            if stats is not None and stats.dim != dim:
                raise ValueError(f"{what} normalization stats have {stats.dim} values, the model has {dim} {what}s")
        self.model = model
        self.config = config
        self.tokenizer = tokenizer
        self.state_stats = state_stats
        self.action_stats = action_stats
        self.noise_rng = np.random.default_rng(config.noise_seed)
        self.spec = model_spec_of(config)

    @classmethod
    def from_parts(cls, config: Pi05Config, weights: Mapping[str, Any], tokenizer_model: bytes | None = None,
                   stats: Mapping[str, Mapping[str, np.ndarray]] | None = None,
                   backend: str = "numba") -> "Pi05Runtime":
        stats = stats or {}
        tokenizer = None if tokenizer_model is None else PromptTokenizer(tokenizer_model, config.tokenizer_max_length)
        state = QuantileStats(stats["state"]["q01"], stats["state"]["q99"]) if "state" in stats else None
        action = QuantileStats(stats["action"]["q01"], stats["action"]["q99"]) if "action" in stats else None
        return cls(Pi05Model(config, weights, backend), tokenizer, state, action)

    # ---- perception ------------------------------------------------------------------------

    def encode(self, observation: Observation) -> StageResult:
        size = self.config.vision.image_size
        names = self.config.camera_names
        present = np.array([observation.images.get(name) is not None for name in names])
        if not present.any():
            raise ValueError(f"no camera image in the observation; pi0.5 reads {', '.join(names)}")
        images = np.full((len(names), 3, size, size), -1.0, np.float32)  # a missing camera is never read
        for index, name in enumerate(names):
            if present[index]:
                images[index] = model_image(observation.images[name], size, name)
        tokens = self.model.image_tokens(images, present)
        return StageResult("perception", observation.stamp_ns, {"image_tokens": tokens, "camera_mask": present})

    # ---- prefix ----------------------------------------------------------------------------

    def prompt(self, observation: Observation) -> tuple[str, np.ndarray]:
        """The prompt text and the normalized state it was built from."""
        if observation.state is None:
            raise ValueError("pi0.5 writes the robot state into its prompt; the observation has no state")
        state = np.asarray(observation.state, dtype=np.float32).reshape(-1)
        if state.size != self.config.state_dim:
            raise ValueError(f"state has {state.size} values, the model expects {self.config.state_dim} "
                             f"({', '.join(self.config.state_names)})")
        normalized = state if self.state_stats is None else self.state_stats.normalize(state)
        return prompts.build_prompt(observation.instruction, prompts.discretize_state(normalized)), normalized

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        if embeddings.stage != "perception":
            raise ValueError(f"build_prefix needs the perception stage's result, got stage {embeddings.stage!r}")
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

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None) -> None:
        return None

    # ---- actions ---------------------------------------------------------------------------

    def draw_noise(self) -> np.ndarray:
        return self.noise_rng.standard_normal(self.spec.noise_shape, dtype=np.float32)

    def act(self, prefix: StageResult, world: StageResult | None = None,
            noise: np.ndarray | None = None) -> ActionChunkResult:
        if prefix.stage != "prefix":
            raise ValueError(f"act needs the prefix stage's result, got stage {prefix.stage!r}")
        cache = PrefixCache.from_tensors(prefix.tensors, prefix.stamp_ns)
        noise = self.draw_noise() if noise is None else noise
        actions = self.model.sample_actions(cache, noise)[:, : self.config.action_dim]
        actions = self.to_physical(actions, prefix.tensors.get("state"))
        return ActionChunkResult(prefix.stamp_ns, actions, self.config.action_period_s, self.config.action_names)

    def to_physical(self, actions: np.ndarray, raw_state: np.ndarray | None) -> np.ndarray:
        """Model-space actions [C, action_dim] -> physical units (de-normalized, relative made absolute)."""
        if self.action_stats is not None:
            actions = self.action_stats.denormalize(actions)
        if self.config.relative_action_mask:
            if raw_state is None:
                raise ValueError("relative actions need the raw state of the observation")
            mask = np.array(self.config.relative_action_mask, dtype=np.float32)
            actions = actions + raw_state[: self.config.action_dim] * mask
        return actions.astype(np.float32)


def model_spec_of(config: Pi05Config) -> ModelSpec:
    size = config.vision.image_size
    return ModelSpec(
        architecture="pi05", camera_names=config.camera_names, image_size=(size, size),
        state_names=config.state_names, action_names=config.action_names, chunk_size=config.chunk_size,
        action_period_s=config.action_period_s, noise_shape=(config.chunk_size, config.max_action_dim),
        world_noise_shape=None, has_world_model=False)


def model_spec(bundle) -> ModelSpec:
    """The ModelSpec of an open bundle, from its metadata alone (no weights read)."""
    return model_spec_of(_bundle_config(bundle))


def _bundle_config(bundle) -> Pi05Config:
    robot = bundle.robot
    if robot is None:
        raise ValueError(f"{bundle.path}: pi05 bundle lacks robot metadata (state/action names, action period)")
    return Pi05Config.from_bundle_sections(
        bundle.config, bundle.solver,
        {"state_names": robot.state_names, "action_names": robot.action_names,
         "action_period_s": robot.action_period_s})


def load_runtime(bundle, backend: str = "numba", warm_up: bool = True) -> Pi05Runtime:
    """A runtime over an open bundle (embodied_ros.bundle.Bundle); weights stay memory-mapped.

    With `warm_up` (the default) every kernel is compiled before this returns, so that no
    compilation happens inside a control step (see Pi05Model.warm_up).
    """
    config = _bundle_config(bundle)
    runtime = Pi05Runtime.from_parts(config, bundle.weights(), bundle.tokenizer_model, bundle.stats, backend)
    if warm_up:
        runtime.model.warm_up()
    return runtime
