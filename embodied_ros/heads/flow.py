"""Euler integration of the flow from noise (t = 1) to actions (t = 0).

    dt = -1 / steps;  for s in 0..steps-1:  t_s = float32(1 + s * dt);  x <- x + dt * v(x, t_s)

The step times are fixed by the step count, so everything that depends only on t can be computed
once, before any observation arrives (see `action_expert.StepConditioning`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def step_times(num_steps: int) -> list[float]:
    """The step times 1 + s * dt as Python floats, 1 down to 1/num_steps."""
    if num_steps < 1:
        raise ValueError(f"the solver needs at least one step, got {num_steps}")
    dt = -1.0 / num_steps
    return [1.0 + step * dt for step in range(num_steps)]


def euler_times(num_steps: int) -> np.ndarray:
    """[num_steps] float32 times, 1 down to 1/num_steps."""
    return np.array(step_times(num_steps), dtype=np.float32)


def euler_solve(velocity: Callable[[np.ndarray, int], np.ndarray], noise: np.ndarray, num_steps: int,
                guide: Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None = None) -> np.ndarray:
    """x(t=1) = noise -> x(t=0); velocity(x, step) is v at time euler_times(num_steps)[step].
    guide(x, v, step), when given, replaces the velocity the step uses (real-time chunking: heads/rtc.py)."""
    dt = np.float32(-1.0 / num_steps)
    x = np.array(noise, dtype=np.float32)
    for step in range(num_steps):
        v = velocity(x, step)
        x = x + dt * (v if guide is None else guide(x, v, step))
    return x
