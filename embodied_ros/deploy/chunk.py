"""An action chunk placed on the time axis: row i is the target at stamp + (i + 1) * period."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TimedChunk:
    stamp_ns: int  # observation stamp the chunk was computed from
    period_ns: int  # time between rows
    positions: np.ndarray  # (horizon, n_joints) float64, columns in commanded-joint order

    def __post_init__(self) -> None:
        if self.period_ns <= 0:
            raise ValueError(f"action period must be positive, got {self.period_ns} ns")
        if self.positions.ndim != 2 or self.positions.shape[0] == 0:
            raise ValueError(f"a chunk needs at least one row of joint targets, got shape {self.positions.shape}")

    @property
    def end_ns(self) -> int:
        """Time of the last row; after it the chunk has run out."""
        return self.stamp_ns + self.positions.shape[0] * self.period_ns

    def sample(self, t_ns: int) -> np.ndarray | None:
        """Targets at `t_ns`, linear between rows; row 0 before its time; None once the chunk ran out."""
        if t_ns > self.end_ns:
            return None
        position = (t_ns - self.stamp_ns) / self.period_ns - 1.0  # fractional row index
        if position <= 0.0:
            return self.positions[0].copy()
        row = min(int(position), self.positions.shape[0] - 1)
        if row == self.positions.shape[0] - 1:
            return self.positions[row].copy()
        weight = position - row
        return (1.0 - weight) * self.positions[row] + weight * self.positions[row + 1]
