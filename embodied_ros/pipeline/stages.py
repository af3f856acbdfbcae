"""The stage contract every model family implements, and how a bundle finds its family.

A model family is a subpackage `embodied_ros.models.<architecture>` exposing
`load_runtime(bundle, backend) -> Runtime` and `spec_of(bundle) -> ModelSpec` (from the bundle's
metadata alone, no weights read); the bundle's `general.architecture` names it, so adding a family
needs no edit here. A loaded runtime compiles nothing until `warm_up()`, which whoever serves
control steps calls once (nodes/runtime_cache.py).

Stages, in data-flow order (each a node in the graph, each may run at its own period):
  encode        perception encoder: images -> embeddings                      (every N steps)
  build_prefix  sequence builder + backbone: embeddings, instruction, state
                -> prefix cache (K/V of the observation prefix, read-only)    (every N steps)
  predict_world world predictor: prefix -> predicted future world state
                (None for models without one, e.g. pi0.5)                     (every N steps)
                in an episode it carries from run to run (`world_episode()`, models with a
                world model: the world node holds it, a new one per node)
  act           head: prefix (+ world) + noise -> action chunk                (every step)
                (+ continuation: the executing chunk's leftover, real-time chunking)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from embodied_ros.pipeline.types import ActionChunkResult, ChunkContinuation, Observation, StageResult


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
    real_time_chunking: bool = False  # `act` takes a ChunkContinuation (flow-matching heads)
    noise_seed: int = 0  # the bundle's solver.noise_seed: the seed of every noise draw unless a graph sets its own


class Runtime(Protocol):
    spec: ModelSpec

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) every kernel the stages run, before the first control step."""

    def encode(self, observation: Observation) -> StageResult: ...

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult: ...

    def world_episode(self) -> Any:
        """Models with a world model: the state predict_world carries from run to run (None: none).
        An episode whose runs cost more as it fills says after how many runs they stop growing
        (`runs_until_steady`), so that a run timed alone is timed as a graph's later runs are."""

    def observe_world(self, episode: Any, prefix: StageResult) -> None:
        """Models with a world model: every prefix output reaches the episode, also on the steps the
        world predictor does not run."""

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None,
                      episode: Any = None) -> StageResult | None: ...

    def act(
        self, prefix: StageResult, world: StageResult | None, noise: np.ndarray | None = None,
        continuation: ChunkContinuation | None = None,
    ) -> ActionChunkResult: ...


def infer(runtime: Runtime, observation: Observation, noise: np.ndarray | None = None,
          world_noise: np.ndarray | None = None, episode: Any = None) -> ActionChunkResult:
    """All stages once, in order: the direct call the node graph must reproduce (`episode`: the
    world predictor's, for models with a world model)."""
    embeddings = runtime.encode(observation)
    prefix = runtime.build_prefix(embeddings, observation)
    world = runtime.predict_world(prefix, world_noise, episode)
    return runtime.act(prefix, world, noise)


def blank_inference(runtime: Runtime, chunks: int = 1) -> None:
    """Full inferences on blank observations (black images, zero state), `chunks` of them in one
    world episode: a warm-up for runtimes whose model has no smaller one."""
    spec = runtime.spec
    height, width = spec.image_size
    episode = runtime.world_episode() if spec.has_world_model else None
    world_noise = np.zeros(spec.world_noise_shape, np.float32) if spec.has_world_model else None
    for index in range(chunks):
        observation = Observation(
            stamp_ns=index, images={name: np.zeros((height, width, 3), np.uint8) for name in spec.camera_names},
            state=np.zeros(len(spec.state_names), np.float32), instruction="warm up")
        infer(runtime, observation, np.zeros(spec.noise_shape, np.float32), world_noise, episode)


def _family(bundle, bundle_path):
    try:
        return importlib.import_module(f"embodied_ros.models.{bundle.architecture}")
    except ModuleNotFoundError as error:
        if error.name != f"embodied_ros.models.{bundle.architecture}":
            raise
        raise ValueError(
            f"{bundle.path}: architecture {bundle.architecture!r} is not supported by this runtime"
        ) from None


# an allowance beside the weights for activations, the prefix cache, packing buffers and numba's
# compiled code (pi05_small peaks at 220-260 MiB with 13-56 MiB of weights; the full-size pi0.5's
# activations at 968 prefix tokens are tens of MiB per layer)
WORKING_BYTES = 1 << 30


def load_runtime(bundle_path: str | Path, backend: str = "numba") -> Runtime:
    """Open a bundle and build the runtime of its model family (not yet warmed up). A bundle whose
    weights and working memory do not fit in the memory available is refused before anything is
    loaded (BundleMemoryError, one line)."""
    from embodied_ros.bundle import open_bundle

    return runtime_of(open_bundle(bundle_path), backend)


def check_bundle_fits(bundle) -> None:
    """The memory check of `load_runtime`: ValueError (one line) where the bundle's weights and working
    memory do not fit in what the machine or the cgroup has available."""
    from embodied_ros.bundle.memory import check_fits

    check_fits(bundle.weight_bytes + WORKING_BYTES, f"{bundle.path}: {bundle.architecture} with "
               f"{bundle.weight_bytes / 2**30:.1f} GiB of weights")


def runtime_of(bundle, backend: str = "numba") -> Runtime:
    """The runtime of an open bundle's model family, after the memory check of `load_runtime`."""
    family = _family(bundle, bundle.path)
    check_bundle_fits(bundle)
    return family.load_runtime(bundle, backend)


def read_spec(bundle_path: str | Path) -> ModelSpec:
    """The model spec of a bundle from its metadata: no weights mapped, no kernels compiled."""
    from embodied_ros.bundle import open_bundle

    bundle = open_bundle(bundle_path, verify_digest=False)  # the process that loads the weights checks them
    spec_of = getattr(_family(bundle, bundle_path), "spec_of", None)
    if spec_of is None:
        raise ValueError(f"{bundle_path}: model family {bundle.architecture!r} cannot describe its inputs (no spec_of)")
    return spec_of(bundle)
