"""The initial noise of the stochastic stages, reproducible from (seed, stage, index): the one
noise source of the graph's nodes and of every runtime.

One seed: the bundle's `solver.noise_seed` (ModelSpec.noise_seed), unless a graph sets
`stages.noise_seed` (an evaluation seeds each episode). The graph's nodes index by step (in
lock-step mode the schedule step, so a replay gives the same noise every time and a test can hand
the same noise to a direct `pipeline.stages.infer` call); a runtime called without noise indexes by
the observation's stamp. The stochastic stages (named as their graph nodes) have a stream each.
"""

from __future__ import annotations

import numpy as np

NOISE_STREAMS = {"world": 1, "action": 2}


def stage_noise(seed: int, stage: str, step: int, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal noise of `stage` at `step`."""
    stream = NOISE_STREAMS.get(stage)
    if stream is None:
        raise ValueError(f"stage {stage!r} draws no noise; the stochastic stages are {', '.join(NOISE_STREAMS)}")
    rng = np.random.default_rng([seed, stream, step])
    return rng.standard_normal(shape).astype(np.float32)
