"""SmolVLA behind the stage contract of pipeline/stages.py.

    encode        images (uint8, any size) -> image tokens [S, T, D] of the present cameras
    build_prefix  task text -> token ids; image tokens + tokens + normalized state -> prefix cache
    predict_world None (SmolVLA has no world model)
    act           prefix cache + noise -> Euler solve -> actions in physical units; with a
                  continuation, the solve is guided toward its leftover (heads/rtc.py)

Images of another size than the model's are resized keeping their aspect ratio and padded with
black on the left and top (LeRobot's SmolVLA convention). Padding image slots for absent cameras
are masked and never read, so the runtime does not build them. The task text gets a trailing
newline, as LeRobot's SmolVLA preprocessor adds, before it is tokenized.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.models.kit import configs, flow_vla
from embodied_ros.models.smolvla.config import SmolVLAConfig
from embodied_ros.models.smolvla.model import SmolVLAModel
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.pipeline.types import ActionChunkResult, ChunkContinuation, Observation, StageResult
from embodied_ros.sequence.images import resize_bilinear, to_unit_chw
from embodied_ros.sequence.normalize import Normalizer, normalizer_of


def model_image(image: np.ndarray, size: int, camera: str = "camera") -> np.ndarray:
    """(H, W, 3) uint8 -> (3, size, size) float32 in [-1, 1]; aspect ratio kept, zero padding left and top."""
    unit = to_unit_chw(image, camera)
    _, height, width = unit.shape
    if (height, width) != (size, size):
        ratio = max(width / size, height / size)
        new_height, new_width = max(1, int(height / ratio)), max(1, int(width / ratio))
        padded = np.zeros((3, size, size), np.float32)
        padded[:, size - new_height:, size - new_width:] = resize_bilinear(unit, new_height, new_width)
        unit = padded
    return unit * np.float32(2.0) - np.float32(1.0)


def task_prompt(instruction: str) -> str:
    return instruction if instruction.endswith("\n") else instruction + "\n"


class SmolVLARuntime:
    def __init__(self, model: SmolVLAModel, tokenizer: Any = None, state_stats: Normalizer | None = None,
                 action_stats: Normalizer | None = None) -> None:
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
    def from_parts(cls, config: SmolVLAConfig, weights: Mapping[str, Any], tokenizer_json: bytes | None = None,
                   stats: Mapping[str, Mapping[str, np.ndarray]] | None = None,
                   backend: str = "numba") -> "SmolVLARuntime":
        from embodied_ros.models.smolvla.tokenizer import SmolVLATokenizer

        stats = stats or {}
        tokenizer = None if tokenizer_json is None else SmolVLATokenizer(tokenizer_json, config.tokenizer_max_length)
        return cls(model_for(config, weights, backend), tokenizer, normalizer_of(stats.get("state")),
                   normalizer_of(stats.get("action")))

    # ---- perception ------------------------------------------------------------------------

    def encode(self, observation: Observation) -> StageResult:
        size = self.config.vision.image_size
        names = self.config.camera_names
        present = [name for name in names if observation.images.get(name) is not None]
        if not present:
            raise ValueError(f"no camera image in the observation; smolvla reads {', '.join(names)}")
        images = np.stack([model_image(observation.images[name], size, name) for name in present])
        tokens = self.model.image_tokens(images)
        return StageResult("perception", observation.stamp_ns,
                           {"image_tokens": tokens, "camera_mask": np.array([name in present for name in names])})

    # ---- prefix ----------------------------------------------------------------------------

    def normalized_state(self, observation: Observation) -> np.ndarray:
        state = flow_vla.raw_state(observation, self.config, "smolvla reads the robot state")
        return state if self.state_stats is None else self.state_stats.normalize(state)

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        flow_vla.require_stage(embeddings, "perception", "build_prefix")
        if self.tokenizer is None:
            raise ValueError("this bundle has no tokenizer; convert the checkpoint with its tokenizer.json")
        tokens, token_mask = self.tokenizer.encode(task_prompt(observation.instruction))
        image_tokens = embeddings.tensors["image_tokens"]
        state = self.normalized_state(observation)
        cache = self.model.build_prefix(image_tokens, np.ones(image_tokens.shape[0], bool), tokens, token_mask,
                                        state, observation.stamp_ns)
        tensors = {**cache.tensors(), "tokens": tokens, "token_mask": token_mask, "state": state}
        return StageResult("prefix", observation.stamp_ns, tensors,
                           {"n_valid": cache.n_valid, "n_tokens": int(token_mask.sum())})

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
        guidance = flow_vla.continuation_guidance(continuation, None, self.config, self.action_stats)
        actions = self.model.sample_actions(cache, noise, guidance)[:, : self.config.action_dim]
        return ActionChunkResult(prefix.stamp_ns, flow_vla.physical_actions(actions, None, self.config,
                                                                              self.action_stats),
                                 self.config.action_period_s, self.config.action_names)


def model_for(config: SmolVLAConfig, weights: Mapping[str, Any], backend: str):
    """The model on `backend`: on "cuda" the device-resident one (gpu/smolvla.py), else on a kernel set."""
    if backend == "cuda":
        from embodied_ros.gpu import cuda_engine
        from embodied_ros.gpu.smolvla import DeviceSmolVLAModel
        return DeviceSmolVLAModel(config, weights, cuda_engine())
    return SmolVLAModel(config, weights, backend)


def model_spec(config: SmolVLAConfig) -> ModelSpec:
    """The stage contract's spec; SmolVLA's `act` takes a continuation (real-time chunking)."""
    return configs.action_model_spec(config, "smolvla", real_time_chunking=True)


def config_of(bundle) -> SmolVLAConfig:
    """The model config from a bundle's metadata alone (no weights read)."""
    return configs.config_of(bundle, SmolVLAConfig)


def spec_of(bundle) -> ModelSpec:
    return model_spec(config_of(bundle))


def load_runtime(bundle, backend: str = "numba") -> SmolVLARuntime:
    """A runtime over an open bundle; weights stay memory-mapped. Call `warm_up()` before the first
    control step."""
    return SmolVLARuntime.from_parts(config_of(bundle), bundle.weights(), bundle.tokenizer_model, bundle.stats,
                                     backend)
