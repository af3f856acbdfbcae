"""Euler integration of a flow from noise to its sample, the one integrator of every flow head
(action experts, the world predictor), in either time direction:

    dt = (end - start) / steps;  for s in 0..steps-1:  t_s = float32(start + s * dt);
                                                       x <- x + float32(dt) * v(x, t_s)

pi0, pi0.5 and the world-action model run start = 1 (noise) to end = 0. The step times are fixed
by the step count, so everything that depends only on t can be computed once, before any
observation arrives (see `adarms_expert.StepConditioning`). The experts read t through the same
sinusoid (`time_embedding`).

`guidance`, when given, sees each step's velocity before it is applied and returns the one to
apply: the seam for guided sampling (real-time chunking steers v toward the previous chunk).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


Velocity = Callable[[np.ndarray, int], np.ndarray]  # (x, step) -> v at euler_times(...)[step]
Guidance = Callable[[np.ndarray, np.ndarray, int], np.ndarray]  # (x, v, step) -> the v to apply


def step_times(num_steps: int, start: float = 1.0, end: float = 0.0) -> list[float]:
    """The times at which the steps read the velocity, as Python floats (unrounded, as real-time
    chunking's guidance weights need them): start, start + dt, ..., end - dt."""
    if num_steps < 1:
        raise ValueError(f"the solver needs at least one step, got {num_steps}")
    dt = (end - start) / num_steps
    return [start + step * dt for step in range(num_steps)]


def euler_times(num_steps: int, start: float = 1.0, end: float = 0.0) -> np.ndarray:
    """[num_steps] float32 step times (step_times rounded)."""
    return np.array(step_times(num_steps, start, end), dtype=np.float32)


def accumulated_times(num_steps: int) -> np.ndarray:
    """[num_steps] float32 step times of a solver loop that adds dt to a float32 time from 1 while
    t >= -dt / 2 (HY-VLA's): t_s carries the rounding of s additions, unlike `euler_times`."""
    dt, t, times = np.float32(-1.0 / num_steps), np.float32(1.0), []
    while t >= -dt / np.float32(2.0):
        times.append(t)
        t = np.float32(t + dt)
    if len(times) != num_steps:
        raise ValueError(f"a float32 time loop of {num_steps} steps runs {len(times)}")
    return np.array(times, dtype=np.float32)


def euler_solve(velocity: Velocity, noise: np.ndarray, num_steps: int, start: float = 1.0, end: float = 0.0,
                guidance: Guidance | None = None) -> np.ndarray:
    """x(start) = noise -> x(end) in num_steps equal Euler steps; velocity(x, step) is v at
    euler_times(num_steps, start, end)[step]."""
    if num_steps < 1:
        raise ValueError(f"the solver needs at least one step, got {num_steps}")
    dt = np.float32((end - start) / num_steps)
    x = np.array(noise, dtype=np.float32)
    for step in range(num_steps):
        v = velocity(x, step)
        if guidance is not None:
            v = guidance(x, v, step)
        x = x + dt * v
    return x


def time_embedding(t: float, width: int, min_period: float, max_period: float) -> np.ndarray:
    """Sinusoidal embedding of a float32 time, computed in float64 and returned as [width] float32:
    [sin(a), cos(a)], a = t * 2 pi / period, period = min * (max / min)^linspace(0, 1, width / 2)."""
    fraction = np.linspace(0.0, 1.0, width // 2, dtype=np.float64)
    period = min_period * (max_period / min_period) ** fraction
    angles = (1.0 / period * 2.0 * math.pi) * np.float64(np.float32(t))
    return np.concatenate([np.sin(angles), np.cos(angles)]).astype(np.float32)

