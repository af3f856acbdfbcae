"""World predictor head: flow matching over future latent frames, then their keys/values.

The observation is clean and cached by the prefix stage (its per-block keys/values and the context
keys/values). Starting from noise at t = 1, a few Euler steps integrate the velocity of the future
frames to t = 0; each step reads those caches and recomputes none of them. The predicted frames are
then run once more as clean tokens (t = 0) to get their own per-block keys/values: what the action
head attends to, computed once per prediction rather than once per action step.

The model family supplies the two passes as functions (`velocity`, `clean_kv`), so this solver
knows nothing of the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from embodied_ros.backbone.wan_block import KV
from embodied_ros.heads import flow


def euler_flow(velocity: Callable[[np.ndarray, float], np.ndarray], noise: np.ndarray, steps: int) -> np.ndarray:
    """Integrate dx/dt = velocity(x, t) from t = 1 (x = noise) to t = 0 in `steps` equal Euler steps
    (heads/flow.py's solver, for a velocity that takes the time itself). The times are summed in
    float32, 1 + s * dt, which differs from `flow.euler_times` by an ulp at some step counts; the
    world-action bundles' reference records were made with these."""
    if steps < 1:
        raise ValueError(f"flow matching needs at least one step, got {steps}")
    dt = np.float32(-1.0 / steps)
    times = [float(np.float32(1.0) + np.float32(step) * dt) for step in range(steps)]
    return flow.euler_solve(lambda x, step: velocity(x, times[step]), noise, steps)


@dataclass(frozen=True)
class WorldPrediction:
    latents: np.ndarray  # [C, F, R, W] predicted clean latent frames
    kv: Sequence[KV]  # per block: keys/values of the predicted frames' tokens


def predict_world(velocity: Callable[[np.ndarray, float], np.ndarray],
                  clean_kv: Callable[[np.ndarray], Sequence[KV]], noise: np.ndarray, steps: int) -> WorldPrediction:
    """Future latents from `noise` by `steps` Euler steps of `velocity`, with their clean keys/values."""
    latents = euler_flow(velocity, noise, steps)
    return WorldPrediction(latents, clean_kv(latents))
