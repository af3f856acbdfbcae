"""The stage contract every model family implements, and how a bundle finds its family.

A model family is a subpackage `embodied_ros.models.<architecture>` exposing
`load_runtime(bundle, backend) -> Runtime` and `model_spec(bundle) -> ModelSpec` (from the bundle's
metadata alone); the bundle's `general.architecture` names it, so adding a family needs no edit here.

Stages, in data-flow order (each a node in the graph, each may run at its own period):
  encode        perception encoder: images -> embeddings                      (every N steps)
  build_prefix  sequence builder + backbone: embeddings, instruction, state
                -> prefix cache (K/V of the observation prefix, read-only)    (every N steps)
  predict_world world predictor: prefix -> predicted future world state
                (None for models without one, e.g. pi0.5)                     (every N steps)
  act           head: prefix (+ world) + noise -> action chunk                (every step)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from embodied_ros.pipeline.types import ActionChunkResult, Observation, StageResult


@dataclass(frozen=True)
class ModelSpec:
    """What the graph needs to know about a model to feed it and to use its output."""

    architecture: str
    camera_names: tuple[str, ...]  # model camera order
    image_size: tuple[int, int]  # (height, width) the model consumes; inputs of other sizes are resized
    state_names: tuple[str, ...]  # joint order of the state vector
    action_names: tuple[str, ...]  # column names of an action chunk
    chunk_size: int
    action_period_s: float
    noise_shape: tuple[int, ...]  # shape of the initial noise `act` takes
    world_noise_shape: tuple[int, ...] | None  # shape of the noise `predict_world` takes; None without a world model
    has_world_model: bool


class Runtime(Protocol):
    spec: ModelSpec

    def encode(self, observation: Observation) -> StageResult: ...

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult: ...

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None) -> StageResult | None: ...

    def act(
        self, prefix: StageResult, world: StageResult | None, noise: np.ndarray | None = None
    ) -> ActionChunkResult: ...


def infer(runtime: Runtime, observation: Observation, noise: np.ndarray | None = None,
          world_noise: np.ndarray | None = None) -> ActionChunkResult:
    """All stages once, in order: the direct call the node graph must reproduce."""
    embeddings = runtime.encode(observation)
    prefix = runtime.build_prefix(embeddings, observation)
    world = runtime.predict_world(prefix, world_noise)
    return runtime.act(prefix, world, noise)


def load_runtime(bundle_path: str | Path, backend: str = "numba") -> Runtime:
    """Open a bundle and build the runtime of its model family."""
    from embodied_ros.bundle import open_bundle

    bundle = open_bundle(bundle_path)
    return _family(bundle).load_runtime(bundle, backend)


def read_spec(bundle_path: str | Path) -> ModelSpec:
    """A bundle's ModelSpec from its metadata, without loading weights or compiling kernels (for
    processes that only talk to a model's graph, like the synthetic robot)."""
    from embodied_ros.bundle import open_bundle

    bundle = open_bundle(bundle_path, verify_digest=False)
    model_spec = getattr(_family(bundle), "model_spec", None)
    if model_spec is None:
        raise ValueError(f"{bundle.path}: model family {bundle.architecture!r} cannot describe its inputs (no model_spec)")
    return model_spec(bundle)


def _family(bundle):
    try:
        return importlib.import_module(f"embodied_ros.models.{bundle.architecture}")
    except ModuleNotFoundError as error:
        if error.name != f"embodied_ros.models.{bundle.architecture}":
            raise
        raise ValueError(
            f"{bundle.path}: architecture {bundle.architecture!r} is not supported by this runtime"
        ) from None
