"""Euler integration of the flow from noise (t = 1) to actions (t = 0).

    dt = -1 / steps;  for s in 0..steps-1:  t_s = float32(1 + s * dt);  x <- x + dt * v(x, t_s)

The step times are fixed by the step count, so everything that depends only on t can be computed
once, before any observation arrives (see `adarms_expert.StepConditioning`). The experts read t
through the same sinusoid (`time_embedding`).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


def euler_times(num_steps: int) -> np.ndarray:
    """[num_steps] float32 times, 1 down to 1/num_steps."""
    if num_steps < 1:
        raise ValueError(f"the solver needs at least one step, got {num_steps}")
    dt = -1.0 / num_steps
    return np.array([1.0 + step * dt for step in range(num_steps)], dtype=np.float32)


def euler_solve(velocity: Callable[[np.ndarray, int], np.ndarray], noise: np.ndarray, num_steps: int) -> np.ndarray:
    """x(t=1) = noise -> x(t=0); velocity(x, step) is v at time euler_times(num_steps)[step]."""
    dt = np.float32(-1.0 / num_steps)
    x = np.array(noise, dtype=np.float32)
    for step in range(num_steps):
        x = x + dt * velocity(x, step)
    return x


def time_embedding(t: float, width: int, min_period: float, max_period: float) -> np.ndarray:
    """Sinusoidal embedding of a float32 time, computed in float64 and returned as [width] float32:
    [sin(a), cos(a)], a = t * 2 pi / period, period = min * (max / min)^linspace(0, 1, width / 2)."""
    fraction = np.linspace(0.0, 1.0, width // 2, dtype=np.float64)
    period = min_period * (max_period / min_period) ** fraction
    angles = (1.0 / period * 2.0 * math.pi) * np.float64(np.float32(t))
    return np.concatenate([np.sin(angles), np.cos(angles)]).astype(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1.0) + np.exp(-x))
