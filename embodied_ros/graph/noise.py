"""The initial noise of the stochastic stages, reproducible from (seed, stage, step).

In lock-step mode `step` is the schedule step, so a replay gives the same noise every time and a
test can hand the same noise to a direct `pipeline.stages.infer` call.
"""

from __future__ import annotations

import numpy as np

_STREAMS = {"world": 1, "action": 2}


def stage_noise(seed: int, stage: str, step: int, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng([seed, _STREAMS[stage], step])
    return rng.standard_normal(shape).astype(np.float32)
