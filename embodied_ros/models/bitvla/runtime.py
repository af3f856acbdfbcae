"""BitVLA behind the stage contract (pipeline/stages.py):

    encode        camera images (uint8, model camera order; a missing camera is one image fewer, as
                  the evaluation drops an absent wrist view) -> SigLIP (BitLinear) + connector features
    build_prefix  task -> prompt -> token ids; state -> normalized proprio; the whole LM pass
                  (bidirectional, over prompt + proprio token + the action slots) -> the hidden states
                  the head reads
    predict_world None (no world model)
    act           OFT's L1 head + un-normalization -> the chunk in physical units

State and action normalization are OpenVLA-OFT's BOUNDS_Q99 with a mask: the state
2 (x - q01) / (q99 - q01 + 1e-8) - 1 clipped to [-1, 1], the actions back with
(a + 1) / 2 (q99 - q01 + 1e-8) + q01, each where the mask is set (a gripper left as predicted), in
float64 as the reference computes them.

Products: `products` (default from EMBODIED_ROS_BITVLA_PRODUCTS, else "integer"): see model.py.
"""

from __future__ import annotations

import os

import numpy as np

from embodied_ros.models.bitvla import prompt as prompts
from embodied_ros.models.bitvla.config import ARCHITECTURE, INPUT_SIZE, BitVLAConfig
from embodied_ros.models.bitvla.images import model_pixels
from embodied_ros.models.bitvla.model import PRODUCTS, BitVLAModel
from embodied_ros.pipeline.stages import ModelSpec, blank_inference
from embodied_ros.pipeline.types import ActionChunkResult, ChunkContinuation, Observation, StageResult
from embodied_ros.sequence.tokenizer import tokenizer_from_json

EPS = 1e-8  # OFT's range guard in both directions


def default_products() -> str:
    products = os.environ.get("EMBODIED_ROS_BITVLA_PRODUCTS", "integer")
    if products not in PRODUCTS:
        raise ValueError(f"EMBODIED_ROS_BITVLA_PRODUCTS must be one of {PRODUCTS}, got {products!r}")
    return products


class BoundsQ99:
    """OFT's masked BOUNDS_Q99 (de)normalization of one quantity (module doc)."""

    def __init__(self, stats, dim: int, what: str) -> None:
        try:
            self.low, self.high = (np.asarray(stats[key], np.float64).reshape(-1) for key in ("q01", "q99"))
        except (KeyError, TypeError):
            raise ValueError(f"this bundle has no {what} q01/q99 statistics") from None
        mask = stats.get("mask")
        self.mask = np.ones(dim, bool) if mask is None else np.asarray(mask).reshape(-1) != 0
        if not self.low.size == self.high.size == self.mask.size == dim:
            raise ValueError(f"{what} statistics have {self.low.size} values, the model has {dim}")

    def normalize(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, np.float64)
        scaled = 2 * (values - self.low) / (self.high - self.low + EPS) - 1
        return np.clip(np.where(self.mask, scaled, values), -1.0, 1.0).astype(np.float32)

    def denormalize(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, np.float64)
        scaled = 0.5 * (values + 1) * (self.high - self.low + EPS) + self.low
        return np.where(self.mask, scaled, values).astype(np.float32)


class BitVLARuntime:
    architecture = ARCHITECTURE

    def __init__(self, model: BitVLAModel, tokenizer, stats) -> None:
        config = model.config
        self.model, self.config, self.tokenizer = model, config, tokenizer
        self.action_stats = BoundsQ99((stats or {}).get("action"), config.action_dim, "action")
        self.state_stats = BoundsQ99((stats or {}).get("state"), config.proprio_dim, "state") if config.use_proprio \
            else None
        self.spec = self.model_spec(config)

    # ---- making one ------------------------------------------------------------------------------

    @staticmethod
    def model_spec(config: BitVLAConfig) -> ModelSpec:
        """real_time_chunking is False: the chunk is a regression from one LM pass, with no iterative
        solve whose steps a leftover chunk could guide. The noise `act` is handed is not read."""
        return ModelSpec(architecture=ARCHITECTURE, camera_names=config.camera_names, image_size=(INPUT_SIZE, INPUT_SIZE),
                         state_names=config.state_names, action_names=config.action_names,
                         chunk_size=config.chunk_size, action_period_s=config.action_period_s,
                         noise_shape=(config.chunk_size, config.action_dim), world_noise_shape=None,
                         has_world_model=False, real_time_chunking=False, noise_seed=0)

    @classmethod
    def from_bundle(cls, bundle, backend: str = "numba", products: str | None = None) -> "BitVLARuntime":
        config = BitVLAConfig.from_bundle(bundle)
        if bundle.tokenizer_model is None:
            raise ValueError(f"{bundle.path}: this bitvla bundle has no tokenizer; convert the checkpoint with its "
                             "tokenizer.json")
        model = BitVLAModel(config, bundle.weights(), backend, products or default_products())
        return cls(model, tokenizer_from_json(bundle.tokenizer_model), bundle.stats)

    def warm_up(self) -> None:
        blank_inference(self)

    # ---- stages ----------------------------------------------------------------------------------

    def encode(self, observation: Observation) -> StageResult:
        cfg = self.config
        present = np.array([observation.images.get(name) is not None for name in cfg.camera_names])
        if not present.any():
            raise ValueError(f"no camera image in the observation; bitvla reads {', '.join(cfg.camera_names)}")
        pixels = np.stack([model_pixels(observation.images[name], cfg.vision.image_size, INPUT_SIZE, cfg.center_crop,
                                        cfg.pixel_bf16) for name, here in zip(cfg.camera_names, present) if here])
        features = self.model.image_features(pixels)
        return StageResult("perception", observation.stamp_ns, {"image_features": features, "camera_mask": present})

    def prompt(self, observation: Observation, n_images: int) -> str:
        cfg = self.config
        return prompts.prompt_text(observation.instruction, n_images, cfg.prompt_before, cfg.prompt_after, cfg.question)

    def token_ids(self, text: str) -> np.ndarray:
        return prompts.token_ids(self.tokenizer, text, self.config.tokens.image, self.config.vision.tokens_per_camera)

    def normalized_state(self, observation: Observation) -> np.ndarray | None:
        if self.state_stats is None:
            return None
        if observation.state is None:
            raise ValueError("bitvla reads the robot state as its proprio token; the observation has no state")
        state = np.asarray(observation.state, np.float64).reshape(-1)
        if state.size != self.config.proprio_dim:
            raise ValueError(f"state has {state.size} values, the model expects {self.config.proprio_dim} "
                             f"({', '.join(self.config.state_names)})")
        return self.state_stats.normalize(state)

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        if embeddings.stage != "perception":
            raise ValueError(f"build_prefix needs the perception stage's result, got stage {embeddings.stage!r}")
        features = embeddings.tensors["image_features"]
        text = self.prompt(observation, features.shape[0])
        ids = self.token_ids(text)
        hidden = self.model.action_hidden(features, ids, self.normalized_state(observation))
        return StageResult("prefix", observation.stamp_ns, {"action_hidden": hidden, "tokens": ids},
                           {"prompt": text, "n_tokens": int(ids.size)})

    def world_episode(self):
        return None

    def observe_world(self, episode, prefix: StageResult) -> None:
        return None

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None, episode=None) -> None:
        return None

    def act(self, prefix: StageResult, world: StageResult | None = None, noise: np.ndarray | None = None,
            continuation: ChunkContinuation | None = None) -> ActionChunkResult:
        if prefix.stage != "prefix":
            raise ValueError(f"act needs the prefix stage's result, got stage {prefix.stage!r}")
        if continuation is not None:
            raise ValueError("bitvla has no real-time chunking (its spec says so)")
        normalized = self.model.actions(prefix.tensors["action_hidden"])
        return ActionChunkResult(prefix.stamp_ns, self.action_stats.denormalize(normalized),
                                 self.config.action_period_s, self.config.action_names)


def spec_of(bundle) -> ModelSpec:
    return BitVLARuntime.model_spec(BitVLAConfig.from_bundle(bundle))


def load_runtime(bundle, backend: str = "numba", products: str | None = None) -> BitVLARuntime:
    return BitVLARuntime.from_bundle(bundle, backend, products)
