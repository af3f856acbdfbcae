"""GR00T N1.7 behind the stage contract of pipeline/stages.py, with LeRobot's processor side.

    encode        camera frames (uint8, any size) -> the views' image rows and deepstack features
    build_prefix  task text -> the chat prompt's token ids; the LM pass over it; normalized state
    predict_world None (GR00T has no world model)
    act           DiT Euler solve from noise (t = 0) to actions (t = 1), decoded to physical units

The processing is processor.py's; the model's is model.py's. A bundle converted from a model-level
record (no tokenizer, no statistics) runs only in model space (`load_model`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied_ros.models.kit import flow_vla
from embodied_ros.models.groot import processor
from embodied_ros.models.groot.config import GrootConfig
from embodied_ros.models.groot.model import Backbone, GrootModel
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import ModelSpec, blank_inference
from embodied_ros.pipeline.types import ActionChunkResult, Observation, StageResult
from embodied_ros.sequence.tokenizer import tokenizer_from_json


def load_model(bundle, backend: str = "numba") -> GrootModel:
    return GrootModel(GrootConfig.from_dict(bundle.config), bundle.weights(), backend)


class QwenTokenizer:
    """The Hugging Face tokenizer.json a bundle carries; special tokens in the text are matched as such."""

    def __init__(self, tokenizer_json: bytes) -> None:
        self.tokenizer = tokenizer_from_json(tokenizer_json)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, np.int64)


def _min_max(stats, what: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    entry = (stats or {}).get(what) or {}
    if "min" not in entry or "max" not in entry:
        raise ValueError(f"this GR00T bundle has no {what} min/max statistics; convert a LeRobot save with its "
                         "processors (policy_preprocessor.json, policy_postprocessor.json)")
    low, high = (np.asarray(entry[key], np.float32).reshape(-1) for key in ("min", "max"))
    if low.size != dim or high.size != dim:
        raise ValueError(f"{what} statistics have {low.size} values, the model has {dim}")
    return low, high


class GrootRuntime:
    def __init__(self, model: GrootModel, tokenizer: QwenTokenizer, stats, robot, noise_seed: int = 0) -> None:
        config = model.config
        self.model = model
        self.config = config
        self.tokenizer = tokenizer
        self.state_range = _min_max(stats, "state", config.state_dim)
        self.action_range = _min_max(stats, "action", config.action_dim)
        self.spec = model_spec(config, robot, noise_seed)

    def warm_up(self) -> None:
        blank_inference(self)

    # ---- perception ------------------------------------------------------------------------

    def encode(self, observation: Observation) -> StageResult:
        names = self.config.camera_names
        present = [name for name in names if observation.images.get(name) is not None]
        if not present:
            raise ValueError(f"no camera image in the observation; groot reads {', '.join(names)}")
        vision, settings = self.config.vision, self.config.processor
        rows, grids = [], []
        for name in present:
            frame = processor.view_frame(observation.images[name], settings, name)
            view_rows, grid = processor.patch_rows(frame, settings, vision.patch_size, vision.temporal_patch_size,
                                                   vision.spatial_merge_size)
            rows.append(view_rows)
            grids.append(grid)
        image, deepstack = self.model.image_rows(np.concatenate(rows), grids)
        return StageResult("perception", observation.stamp_ns,
                           {"image_rows": image, "deepstack": np.stack(deepstack) if deepstack else
                            np.zeros((0, *image.shape), np.float32), "grids": np.asarray(grids, np.int64)})

    # ---- prefix ----------------------------------------------------------------------------

    def prompt(self, instruction: str | None, grids) -> str:
        merged = self.config.vision.merge_rows
        task = processor.task_text(instruction, self.config.processor.formalize_language)
        return processor.prompt_text(task, [int(gh) * int(gw) // merged for gh, gw in grids])

    def normalized_state(self, observation: Observation) -> np.ndarray:
        state = flow_vla.raw_state(observation, self.config, "groot reads the robot state")
        low, high = self.state_range
        return processor.normalize_state(state, low, high, self.config.head.max_state_dim,
                                         self.config.processor.clip_state)

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        flow_vla.require_stage(embeddings, "perception", "build_prefix")
        grids = [tuple(int(v) for v in grid) for grid in embeddings.tensors["grids"]]
        tokens = self.tokenizer.encode(self.prompt(observation.instruction, grids))
        backbone = self.model.language_backbone(embeddings.tensors["image_rows"], embeddings.tensors["deepstack"],
                                                grids, tokens)
        tensors = {"features": backbone.features, "image_mask": backbone.image_mask, "tokens": tokens,
                   "state": self.normalized_state(observation)}
        return StageResult("prefix", observation.stamp_ns, tensors, {"n_tokens": int(tokens.size)})

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None, episode=None) -> None:
        return None

    # ---- actions ---------------------------------------------------------------------------

    def draw_noise(self, stamp_ns: int) -> np.ndarray:
        return stage_noise(self.spec.noise_seed, "action", stamp_ns, self.spec.noise_shape)

    def model_actions(self, prefix: StageResult, noise: np.ndarray) -> np.ndarray:
        backbone = Backbone(prefix.tensors["features"], prefix.tensors["image_mask"])
        actions = self.model.sample_actions(backbone, prefix.tensors["state"], noise,
                                            self.config.processor.embodiment_id)
        return actions[:, : self.config.action_dim]

    def act(self, prefix: StageResult, world: StageResult | None = None, noise: np.ndarray | None = None,
            continuation: Any = None) -> ActionChunkResult:
        flow_vla.require_stage(prefix, "prefix", "act")
        noise = self.draw_noise(prefix.stamp_ns) if noise is None else noise
        low, high = self.action_range
        actions = processor.decode_actions(self.model_actions(prefix, noise), low, high,
                                           self.config.processor.clip_actions)
        return ActionChunkResult(prefix.stamp_ns, actions, self.spec.action_period_s, self.spec.action_names)


def load_runtime(bundle, backend: str = "numba") -> GrootRuntime:
    """A runtime over an open bundle; weights stay memory-mapped until the model expands them. Call
    `warm_up()` before the first control step."""
    if bundle.tokenizer_model is None:
        raise ValueError(f"{bundle.path}: this GR00T bundle has no tokenizer; convert a LeRobot save with its Qwen "
                         "tokenizer.json (--tokenizer FILE, or tokenizer/tokenizer.json beside the checkpoint)")
    robot = _robot(bundle)
    tokenizer = QwenTokenizer(bundle.tokenizer_model)
    stats = bundle.stats
    _min_max(stats, "state", len(robot.state_names))  # refuse before the weights are expanded
    return GrootRuntime(load_model(bundle, backend), tokenizer, stats, robot, (bundle.solver or {}).get("noise_seed", 0))


def model_spec(config: GrootConfig, robot, noise_seed: int) -> ModelSpec:
    head = config.head
    return ModelSpec(
        architecture="groot", camera_names=config.camera_names, image_size=config.processor.image_target_size,
        state_names=tuple(robot.state_names), action_names=tuple(robot.action_names), chunk_size=head.horizon,
        action_period_s=float(robot.action_period_s), noise_shape=(head.horizon, head.max_action_dim),
        world_noise_shape=None, has_world_model=False, noise_seed=int(noise_seed))


def _robot(bundle):
    if bundle.robot is None:
        raise ValueError(f"{bundle.path}: GR00T bundle lacks robot metadata (state/action names, action period)")
    return bundle.robot


def spec_of(bundle) -> ModelSpec:
    """The stage contract's spec from a bundle's metadata alone (no weights read)."""
    return model_spec(GrootConfig.from_dict(bundle.config), _robot(bundle), (bundle.solver or {}).get("noise_seed", 0))
