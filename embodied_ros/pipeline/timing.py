"""What each stage of a runtime costs on its own: the reference the graph's stage compute times are
held against (the same calls `bench_pi05.py` times, with no graph around them)."""

from __future__ import annotations

import threading
import time
from typing import Callable, TypeVar

import numpy as np

from embodied_ros.pipeline.stages import Runtime
from embodied_ros.pipeline.types import Observation

T = TypeVar("T")
GRAPH_STAGES = ("perception", "prefix", "world", "action")  # node names of encode, build_prefix, predict_world, act


def sample_observation(runtime: Runtime, seed: int = 0) -> Observation:
    """Random images and state of the model's sizes (the cost of a stage does not depend on the values)."""
    spec = runtime.spec
    rng = np.random.default_rng(seed)
    height, width = spec.image_size
    images = {name: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for name in spec.camera_names}
    state = rng.uniform(-1, 1, len(spec.state_names)).astype(np.float32)
    return Observation(stamp_ns=time.time_ns(), images=images, state=state, instruction="pick up the red cube")


def stage_times_ms(runtime: Runtime, repeats: int = 5, observation: Observation | None = None,
                   period_s: float = 0.0) -> dict[str, float]:
    """Median wall time (ms) of each stage's call over `repeats` chunks, run one after another on a
    thread of their own (as a graph stage runs on its executor's thread), keyed by the graph's node
    names; models without a world model have no "world".

    `period_s` 0 runs the chunks back to back, as `bench_pi05.py` does; otherwise each chunk starts
    `period_s` after the one before, the core idle in between, as a graph's step does. Paced that
    way the same calls cost more: after the pause the caches (and, in a VM, the core's clock) are
    cold, and small models feel it most (pi0_tiny's action 1.8 ms back to back, 3.2 ms one chunk
    every 90 ms, on the 2-core development machine).

    A world episode first runs, untimed, until its runs stop growing (`runs_until_steady`):
    LingBot-VA's world run costs 27, 35, then 37.5 ms from the third on as its KV pool fills, and a
    graph's episode is past the first two within a second.

    Not on the calling thread (`on_stage_thread`)."""
    observation = observation or sample_observation(runtime)
    runs = on_stage_thread(lambda: _time_stages(runtime, repeats, observation, period_s))
    return {stage: float(np.median(values)) for stage, values in runs.items()}


def on_stage_thread(work: Callable[[], T]) -> T:
    """`work()` run on a thread of its own, as a graph stage runs on its executor's thread; its
    result, or its exception re-raised here. With numba's OpenMP threading layer, the same calls
    from the main thread of a loaded 2-core machine took 5-10x as long as from any other thread."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as error:  # re-raised on the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="stage-timing")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _time_stages(runtime: Runtime, repeats: int, observation: Observation,
                 period_s: float) -> dict[str, list[float]]:
    spec = runtime.spec
    runs: dict[str, list[float]] = {stage: [] for stage in GRAPH_STAGES}
    # one world episode across the repeats: its chunks after the first are fed back, as in a graph
    episode = runtime.world_episode() if spec.has_world_model else None
    world_noise = np.zeros(spec.world_noise_shape, np.float32) if spec.has_world_model else None
    for _ in range(getattr(episode, "runs_until_steady", 0)):  # untimed: a graph's episode is past them
        prefix = runtime.build_prefix(runtime.encode(observation), observation)
        runtime.predict_world(prefix, world_noise, episode)
    next_start = time.perf_counter()
    for _ in range(repeats):
        if period_s > 0:
            time.sleep(max(0.0, next_start - time.perf_counter()))
            next_start = max(next_start + period_s, time.perf_counter())
        start = time.perf_counter()
        embeddings = runtime.encode(observation)
        encoded = time.perf_counter()
        prefix = runtime.build_prefix(embeddings, observation)
        prefixed = time.perf_counter()
        world = runtime.predict_world(prefix, world_noise, episode)
        predicted = time.perf_counter()
        runtime.act(prefix, world, np.zeros(spec.noise_shape, np.float32))
        acted = time.perf_counter()
        for stage, seconds in zip(GRAPH_STAGES, (encoded - start, prefixed - encoded, predicted - prefixed,
                                                 acted - predicted)):
            runs[stage].append(seconds * 1e3)
    if not spec.has_world_model:
        del runs["world"]
    return runs
