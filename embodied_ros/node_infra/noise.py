"""The initial noise of the stochastic stages, reproducible from (seed, stage, step).

In lock-step mode `step` is the schedule step, so a replay gives the same noise every time and a
test can hand the same noise to a direct `pipeline.stages.infer` call.
"""

from __future__ import annotations

import numpy as np

from embodied_ros.node_infra.node_table import node_spec


def stage_noise(seed: int, stage: str, step: int, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal noise of `stage` (its node table `noise_stream`) at `step`."""
    stream = node_spec(stage).noise_stream
    if stream is None:
        raise ValueError(f"the {stage} node has no noise stream in the node table")
    rng = np.random.default_rng([seed, stream, step])
    return rng.standard_normal(shape).astype(np.float32)
