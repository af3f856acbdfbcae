"""The initial noise of the stochastic stages, reproducible from (seed, stage, index): the one
noise source of the graph's nodes and of every runtime.

The graph's nodes index by step (in lock-step mode the schedule step, so a replay gives the same
noise every time and a test can hand the same noise to a direct `pipeline.stages.infer` call) with
`stages.noise_seed`; a runtime called without noise draws the same way, indexed by the
observation's stamp, with the bundle's seed.
"""

from __future__ import annotations

import numpy as np

_STREAMS = {"world": 1, "action": 2}


def stage_noise(seed: int, stage: str, step: int, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng([seed, _STREAMS[stage], step])
    return rng.standard_normal(shape).astype(np.float32)
