"""A flow-matching VLA's runtime (pi0.5, pi0, SmolVLA): `FlowVLARuntime`, which a family subclasses with
what differs, and what it does around its model: the camera batch and the state of an observation,
the normalization checks, stage checks, actions from model space to physical units and back, and
real-time chunking's guidance of a solve."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.heads import rtc
from embodied_ros.models.kit.configs import action_model_spec, config_of
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.pipeline.types import ActionChunkResult, ChunkContinuation, Observation, StageResult
from embodied_ros.sequence.images import model_image
from embodied_ros.sequence.normalize import normalizer_of

def check_stats(config, state_stats, action_stats) -> None:
    """Normalization stats must have the model's state and action sizes."""
    for stats, dim, what in ((state_stats, config.state_dim, "state"), (action_stats, config.action_dim, "action")):
        if stats is not None and stats.dim != dim:
            raise ValueError(f"{what} normalization stats have {stats.dim} values, the model has {dim} {what}s")


def raw_state(observation: Observation, config, missing: str) -> np.ndarray:
    """The observation's state as float32 [state_dim]; `missing` says why a state-less observation is refused."""
    if observation.state is None:
        raise ValueError(f"{missing}; the observation has no state")
    state = np.asarray(observation.state, dtype=np.float32).reshape(-1)
    if state.size != config.state_dim:
        raise ValueError(f"state has {state.size} values, the model expects {config.state_dim} "
                         f"({', '.join(config.state_names)})")
    return state


def require_stage(result, stage: str, reader: str) -> None:
    if result.stage != stage:
        raise ValueError(f"{reader} needs the {stage} stage's result, got stage {result.stage!r}")


def camera_batch(observation: Observation, camera_names, size: int, family: str,
                 to_model_image=model_image) -> tuple[np.ndarray, np.ndarray]:
    """(images [cameras, 3, size, size] in [-1, 1], present [cameras]) in model camera order; a missing
    camera's slot is filled with -1 and never read. No camera at all is refused. `to_model_image(image,
    size, camera)` makes one camera's image the model's."""
    present = np.array([observation.images.get(name) is not None for name in camera_names])
    if not present.any():
        raise ValueError(f"no camera image in the observation; {family} reads {', '.join(camera_names)}")
    images = np.full((len(camera_names), 3, size, size), -1.0, np.float32)
    for index, name in enumerate(camera_names):
        if present[index]:
            images[index] = to_model_image(observation.images[name], size, name)
    return images, present


def physical_actions(actions: np.ndarray, raw_state: np.ndarray | None, config, action_stats) -> np.ndarray:
    """Model-space actions [C, action_dim] -> physical units (de-normalized, relative made absolute)."""
    if action_stats is not None:
        actions = action_stats.denormalize(actions)
    if config.relative_action_mask:
        if raw_state is None:
            raise ValueError("relative actions need the raw state of the observation")
        mask = np.array(config.relative_action_mask, dtype=np.float32)
        actions = actions + raw_state[: config.action_dim] * mask
    return actions.astype(np.float32)


def model_actions(actions: np.ndarray, raw_state: np.ndarray | None, config, action_stats) -> np.ndarray:
    """Physical actions [R, action_dim] -> model space, the inverse of `physical_actions` for the
    observation whose raw state is given (relative actions are taken from that state)."""
    actions = np.asarray(actions, dtype=np.float32)
    if actions.ndim != 2 or actions.shape[1] != config.action_dim:
        raise ValueError(f"actions must be [rows, {config.action_dim}], got shape {actions.shape}")
    if config.relative_action_mask:
        if raw_state is None:
            raise ValueError("relative actions need the raw state of the observation")
        mask = np.array(config.relative_action_mask, dtype=np.float32)
        actions = actions - raw_state[: config.action_dim] * mask
    if action_stats is not None:
        actions = action_stats.normalize(actions)
    return actions.astype(np.float32)


def continuation_guidance(continuation: ChunkContinuation | None, raw_state: np.ndarray | None, config,
                          action_stats) -> rtc.Guidance | None:
    """The real-time chunking guidance of an action solve over noise [chunk, max_action_dim] that
    continues `continuation` (its leftover in physical units); None for plain sampling."""
    if continuation is None:
        return None
    leftover = continuation.leftover
    if leftover is not None:
        leftover = model_actions(leftover, raw_state, config, action_stats)
    return rtc.chunk_guidance(continuation.settings, leftover, continuation.delay_rows,
                              (config.chunk_size, config.max_action_dim), config.num_inference_steps)


def newline_prompt(task: str) -> str:
    """The task as given, ending with one newline (PaliGemma's convention for pi0, and SmolVLA's)."""
    return task if task.endswith("\n") else f"{task}\n"


class FlowVLARuntime:
    """A flow-matching VLA behind the stage contract of pipeline/stages.py (pi0.5, pi0, SmolVLA):

        encode        images (uint8, any size) -> image tokens [N, T, D] + camera mask
        build_prefix  task (+ state) -> prompt -> token ids; image tokens + tokens (+ state) -> prefix cache
        predict_world None (no world model)
        act           prefix cache + noise -> Euler solve -> actions in physical units; with a
                      continuation, the solve is guided toward its leftover (heads/rtc.py)

    The prefix result's tensors are the cache's own arrays (keys, values, valid), the token ids and
    mask, and the raw state (for relative actions), so the result is passed by reference inside a
    process or rebuilt from its tensors in another one. A family's runtime says what differs:

        architecture, config_type          its bundle architecture and config class
        state_use                          why it reads the state (said when an observation has none)
        make_model(config, weights, backend), make_tokenizer(data, max_length)
        model_image(image, size, camera)   one camera image -> [3, size, size] in [-1, 1]
        prompt(observation)                the prompt text (default: the task, ending with a newline)
        prefix_state(observation)          what the model's build_prefix takes after the tokens: () or (state,)
    """

    architecture: str
    config_type: type
    state_use = "the model reads the robot state"
    model_image = staticmethod(model_image)

    def __init__(self, model, tokenizer=None, state_stats=None, action_stats=None) -> None:
        config = model.config
        check_stats(config, state_stats, action_stats)
        self.model = model
        self.config = config
        self.tokenizer = tokenizer
        self.state_stats = state_stats
        self.action_stats = action_stats
        self.spec = self.model_spec(config)

    # ---- making one ----------------------------------------------------------------------------

    @classmethod
    def model_spec(cls, config) -> ModelSpec:
        """The stage contract's spec; `act` takes a continuation (real-time chunking)."""
        return action_model_spec(config, cls.architecture, real_time_chunking=True)

    @classmethod
    def spec_of(cls, bundle) -> ModelSpec:
        return cls.model_spec(config_of(bundle, cls.config_type))

    @classmethod
    def from_parts(cls, config, weights: Mapping[str, Any], tokenizer_data: bytes | None = None,
                   stats: Mapping[str, Mapping[str, np.ndarray]] | None = None, backend: str = "numba"):
        stats = stats or {}
        tokenizer = None if tokenizer_data is None else cls.make_tokenizer(tokenizer_data, config.tokenizer_max_length)
        return cls(cls.make_model(config, weights, backend), tokenizer, normalizer_of(stats.get("state")),
                   normalizer_of(stats.get("action")))

    @classmethod
    def from_bundle(cls, bundle, backend: str = "numba"):
        """A runtime over an open bundle (embodied_ros.bundle.Bundle); weights stay memory-mapped. Kernels
        compile at `warm_up()` or else at first use."""
        return cls.from_parts(config_of(bundle, cls.config_type), bundle.weights(), bundle.tokenizer_model,
                              bundle.stats, backend)

    def warm_up(self) -> None:
        self.model.warm_up()

    # ---- perception ------------------------------------------------------------------------

    def encode(self, observation: Observation) -> StageResult:
        images, present = camera_batch(observation, self.config.camera_names, self.config.vision.image_size,
                                       self.architecture, self.model_image)
        tokens = self.model.image_tokens(images, present)
        return StageResult("perception", observation.stamp_ns, {"image_tokens": tokens, "camera_mask": present})

    # ---- prefix ----------------------------------------------------------------------------

    def normalized_state(self, observation: Observation) -> np.ndarray:
        state = raw_state(observation, self.config, self.state_use)
        return state if self.state_stats is None else self.state_stats.normalize(state)

    def prompt(self, observation: Observation) -> str:
        return newline_prompt(observation.instruction)

    def prefix_state(self, observation: Observation) -> tuple:
        return (self.normalized_state(observation),)

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        require_stage(embeddings, "perception", "build_prefix")
        if self.tokenizer is None:
            raise ValueError("this bundle has no tokenizer; convert the checkpoint with its tokenizer")
        text = self.prompt(observation)
        tokens, token_mask = self.tokenizer.encode(text)
        cache = self.model.build_prefix(embeddings.tensors["image_tokens"], embeddings.tensors["camera_mask"],
                                        tokens, token_mask, *self.prefix_state(observation), observation.stamp_ns)
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
        require_stage(prefix, "prefix", "act")
        cache = self.model.cache_from_tensors(prefix.tensors, prefix.stamp_ns)
        noise = self.draw_noise(prefix.stamp_ns) if noise is None else noise
        state = prefix.tensors.get("state")
        guidance = continuation_guidance(continuation, state, self.config, self.action_stats)
        actions = self.model.sample_actions(cache, noise, guidance)[:, : self.config.action_dim]
        return ActionChunkResult(prefix.stamp_ns, self.to_physical(actions, state), self.config.action_period_s,
                                 self.config.action_names)

    def to_physical(self, actions: np.ndarray, state: np.ndarray | None) -> np.ndarray:
        """Model-space actions [C, action_dim] -> physical units (de-normalized, relative made absolute)."""
        return physical_actions(actions, state, self.config, self.action_stats)
