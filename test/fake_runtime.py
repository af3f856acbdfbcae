"""A tiny runtime implementing the stage contract, for tests of scheduling and transport.

Every output is a deterministic function of its inputs, so a test can tell which observation,
embeddings or prediction a stage used. It logs each call as (stage, observation stamp).
"""

from __future__ import annotations

import threading

import numpy as np

from embodied_ros.pipeline.stages import ModelSpec, blank_inference
from embodied_ros.pipeline.types import ActionChunkResult, Observation, StageResult


class FakeRuntime:
    def __init__(self, has_world_model: bool = False, cameras=("front", "wrist"), image_size=(6, 8)):
        self.spec = ModelSpec(
            architecture="fake", camera_names=tuple(cameras), image_size=image_size,
            state_names=("j0", "j1", "j2"), action_names=("j0", "j1", "j2"), chunk_size=10,
            action_period_s=0.02, noise_shape=(10, 3), world_noise_shape=(2, 3) if has_world_model else None,
            has_world_model=has_world_model, noise_seed=23,  # a bundle seed no graph config has by default
        )
        self.calls: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        blank_inference(self)

    def _log(self, stage: str, stamp_ns: int) -> None:
        with self._lock:
            self.calls.append((stage, stamp_ns))

    def encode(self, observation: Observation) -> StageResult:
        self._log("perception", observation.stamp_ns)
        means = [float(observation.images[c].mean()) for c in self.spec.camera_names if c in observation.images]
        return StageResult("perception", observation.stamp_ns, {"embeddings": np.asarray(means, np.float32)})

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        self._log("prefix", observation.stamp_ns)
        summary = np.concatenate([embeddings.tensors["embeddings"], observation.state,
                                  [len(observation.instruction)]]).astype(np.float32)
        return StageResult("prefix", observation.stamp_ns, {"summary": summary},
                           meta={"embeddings_stamp": embeddings.stamp_ns})

    def world_episode(self) -> list[int]:
        """The world predictor's state: the stamps of the prefixes it observed."""
        return []

    def observe_world(self, episode: list[int], prefix: StageResult) -> None:
        episode.append(prefix.stamp_ns)

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None,
                      episode: list[int] | None = None) -> StageResult | None:
        if not self.spec.has_world_model:
            return None
        self._log("world", prefix.stamp_ns)
        return StageResult("world", prefix.stamp_ns, {"future": prefix.tensors["summary"] * 2.0},
                           meta={"prefix_stamp": prefix.stamp_ns})

    def act(self, prefix: StageResult, world: StageResult | None, noise: np.ndarray | None = None
            ) -> ActionChunkResult:
        self._log("action", prefix.stamp_ns)
        level = float(prefix.tensors["summary"].sum()) * 1e-3
        if world is not None:
            level += float(world.tensors["future"].sum()) * 1e-4
        noise = np.zeros(self.spec.noise_shape, np.float32) if noise is None else noise
        actions = (level + 0.01 * noise).astype(np.float32)
        return ActionChunkResult(prefix.stamp_ns, actions, self.spec.action_period_s, self.spec.action_names)


def random_images(runtime: FakeRuntime, rng: np.random.Generator) -> dict[str, np.ndarray]:
    height, width = runtime.spec.image_size
    return {c: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for c in runtime.spec.camera_names}
