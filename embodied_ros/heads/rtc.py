"""Real-time chunking (RTC): the flow solve of the next chunk is guided toward the actions of the
executing chunk that the robot will still run (Black et al. 2025), computed as LeRobot 0.6.1 does.

Axes: C chunk rows, A padded action width, R leftover rows. Time: t = 1 noise, t = 0 actions.

Once per chunk, from the leftover Y [R, a] (the not yet executed rows of the executing chunk, model
space), the inference delay d (rows executed while this chunk is computed) and the execution
horizon h:
    h_eff = min(h, R);  Y zero-padded to [C, A];  prefix weights w [C] by schedule (`prefix_weights`)
Each Euler step s at time t_s, with the plain velocity v = v(x, t_s) of any flow-matching head:
    x1  = x - t_s * v                          estimate of the clean chunk
    err = (Y - x1) * w                         no gradient through the head: one forward per step
    tau = 1 - t_s;  c = (1 - tau) / tau (inf -> beta);  r = ((1 - tau)^2 + tau^2) / (1 - tau)^2
    v  <- v - min(beta, c * r) * err           beta = max guidance weight
With w all zero (no leftover, ZEROS at d = 0, h_eff = 0) the guidance is skipped: plain sampling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from embodied_ros.heads import flow

SCHEDULES = ("zeros", "ones", "linear", "exp")


@dataclass(frozen=True)
class RtcSettings:
    """How strongly and how far the next chunk is pulled toward the leftover (LeRobot's RTCConfig)."""

    schedule: str = "linear"  # prefix-attention schedule of the weights after the frozen rows
    max_guidance_weight: float = 10.0  # beta, caps the guidance weight of the early (noisy) steps
    execution_horizon: int = 10  # rows of the leftover that guide; fewer when the leftover is shorter

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"RTC schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if not self.max_guidance_weight > 0 or not math.isfinite(self.max_guidance_weight):
            raise ValueError(f"RTC max guidance weight must be a positive number, got {self.max_guidance_weight}")
        if self.execution_horizon < 0:
            raise ValueError(f"RTC execution horizon must be >= 0 rows, got {self.execution_horizon}")


def _torch_linspace_inner(count: int) -> np.ndarray:
    """The `count` values strictly between 1 and 0 of a float32 linspace over count + 2 points,
    rounded as torch.linspace(1, 0, count + 2)[1:-1] rounds them (from both ends toward the middle)."""
    steps = count + 2
    step = np.float32(-1.0) / np.float32(steps - 1)
    index = np.arange(steps)
    from_start = np.float32(1.0) + step * index.astype(np.float32)
    from_end = np.float32(0.0) - step * (steps - index - 1).astype(np.float32)
    return np.where(index < steps // 2, from_start, from_end).astype(np.float32)[1:-1]


def prefix_weights(schedule: str, delay: int, horizon: int, chunk: int) -> np.ndarray:
    """[chunk] float32 row weights: 1 on the first min(delay, horizon) rows (the frozen prefix),
    then by schedule down to 0 at row `horizon`; "ones" is 1 on every row below the horizon."""
    if schedule not in SCHEDULES:
        raise ValueError(f"RTC schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if delay < 0 or not 0 <= horizon <= chunk:
        raise ValueError(f"RTC needs delay >= 0 and 0 <= horizon <= chunk ({chunk}), got delay {delay}, "
                         f"horizon {horizon}")
    frozen = min(delay, horizon)
    weights = np.zeros(chunk, np.float32)
    if schedule == "ones":
        weights[:horizon] = 1.0
        return weights
    weights[:frozen] = 1.0
    if schedule == "zeros" or horizon == frozen:
        return weights
    middle = _torch_linspace_inner(horizon - frozen)  # (horizon - i) / (horizon - frozen + 1)
    if schedule == "exp":
        middle = middle * np.expm1(middle) / np.float32(math.e - 1.0)
    weights[frozen:horizon] = middle
    return weights


def guidance_weight(t: float, max_weight: float) -> np.float32:
    """min(beta, c * r) at solver time t (a Python float, as the step times are made), in float32."""
    one, beta = np.float32(1.0), np.float32(max_weight)
    tau = np.float32(1.0 - t)
    squared = (one - tau) ** 2
    ratio = (squared + tau * tau) / squared
    with np.errstate(divide="ignore", invalid="ignore"):
        c = (one - tau) / tau
        c = beta if np.isposinf(c) else c
        product = c * ratio
    product = beta if np.isposinf(product) else product
    return np.float32(min(product, beta))


def fit_rows(leftover: np.ndarray, rows: int) -> np.ndarray:
    """The first `rows` rows of a leftover [R, a], zero rows appended when R < rows: a fixed-length
    leftover, as LeRobot's inference engine passes it (padded rows are weighted like real ones)."""
    leftover = np.asarray(leftover, dtype=np.float32)
    if leftover.shape[0] >= rows:
        return leftover[:rows]
    return np.concatenate([leftover, np.zeros((rows - leftover.shape[0], leftover.shape[1]), np.float32)])


def padded_leftover(leftover: np.ndarray, chunk: int, width: int) -> np.ndarray:
    """Leftover [R, a] -> [chunk, width] float32, zeros below row R and right of column a."""
    rows, columns = leftover.shape
    padded = np.zeros((chunk, width), np.float32)
    padded[:rows, :columns] = leftover
    return padded


@dataclass(frozen=True)
class Guidance:
    """The guidance of one chunk's solve; called as the solver's `guidance(x, v, step) -> v`."""

    target: np.ndarray  # [C, A] the zero-padded leftover Y
    weights: np.ndarray  # [C, 1] prefix weights w
    step_times: np.ndarray  # [N] float32 t_s
    step_weights: np.ndarray  # [N] float32 guidance weight per step

    def __call__(self, x: np.ndarray, velocity: np.ndarray, step: int) -> np.ndarray:
        clean_estimate = x - self.step_times[step] * velocity
        error = (self.target - clean_estimate) * self.weights
        return velocity - self.step_weights[step] * error


def chunk_guidance(settings: RtcSettings | None, leftover: np.ndarray | None, delay: int,
                   sample_shape: tuple[int, int], num_steps: int,
                   execution_horizon: int | None = None) -> Guidance | None:
    """The guidance of a solve over samples of `sample_shape` (C, A); None when it would change
    nothing (RTC off, no leftover, all weights zero), so the solve is plain sampling bit for bit.

    leftover: [R, a] model-space rows, R <= C, a <= A; row i lines up with row i of the new chunk.
    execution_horizon: overrides settings.execution_horizon for this chunk.
    """
    if settings is None or leftover is None:
        return None
    leftover = np.asarray(leftover, dtype=np.float32)
    chunk, width = sample_shape
    if leftover.ndim != 2 or leftover.shape[0] > chunk or leftover.shape[1] > width:
        raise ValueError(f"RTC leftover must be [rows <= {chunk}, columns <= {width}], got shape {leftover.shape}")
    if not np.isfinite(leftover).all():
        raise ValueError("RTC leftover has non-finite values")
    if isinstance(delay, bool) or not isinstance(delay, (int, np.integer)) or delay < 0:
        raise ValueError(f"RTC inference delay must be a whole number of rows >= 0, got {delay!r}")
    horizon = settings.execution_horizon if execution_horizon is None else execution_horizon
    if horizon < 0:
        raise ValueError(f"RTC execution horizon must be >= 0 rows, got {horizon}")
    weights = prefix_weights(settings.schedule, int(delay), min(horizon, leftover.shape[0]), chunk)
    if not weights.any():
        return None
    times = flow.step_times(num_steps)
    return Guidance(target=padded_leftover(leftover, chunk, width), weights=weights[:, None],
                    step_times=np.array(times, dtype=np.float32),
                    step_weights=np.array([guidance_weight(t, settings.max_guidance_weight) for t in times],
                                          dtype=np.float32))
