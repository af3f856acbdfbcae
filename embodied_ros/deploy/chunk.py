"""An action chunk placed on the time axis: row i is the target at stamp + (i + 1) * period.

Rows before `first_row` were dropped when the chunk landed (real-time chunking: deploy/continuation.py);
before that row's instant the chunk gives that row."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TimedChunk:
    stamp_ns: int  # observation stamp the chunk was computed from
    period_ns: int  # time between rows
    positions: np.ndarray  # (horizon, n_joints) float64, columns in commanded-joint order
    first_row: int = 0  # the first row the controller may execute

    def __post_init__(self) -> None:
        if self.period_ns <= 0:
            raise ValueError(f"action period must be positive, got {self.period_ns} ns")
        if self.positions.ndim != 2 or self.positions.shape[0] == 0:
            raise ValueError(f"a chunk needs at least one row of joint targets, got shape {self.positions.shape}")
        if not 0 <= self.first_row < self.positions.shape[0]:
            raise ValueError(f"first row {self.first_row} is outside the chunk's {self.positions.shape[0]} rows")

    @property
    def end_ns(self) -> int:
        """Time of the last row; after it the chunk has run out."""
        return self.stamp_ns + self.positions.shape[0] * self.period_ns

    def sample(self, t_ns: int) -> np.ndarray | None:
        """Targets at `t_ns`, linear between rows; the first row before its time; None once the chunk ran out."""
        if t_ns > self.end_ns:
            return None
        position = (t_ns - self.stamp_ns) / self.period_ns - 1.0  # fractional row index
        if position <= self.first_row:
            return self.positions[self.first_row].copy()
        row = min(int(position), self.positions.shape[0] - 1)
        if row == self.positions.shape[0] - 1:
            return self.positions[row].copy()
        weight = position - row
        return (1.0 - weight) * self.positions[row] + weight * self.positions[row + 1]
