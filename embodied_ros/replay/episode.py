"""A recorded episode in memory: the time series a bag holds, decoded into arrays.

All stamps are the bag's log (receive) times in integer nanoseconds, so every stream shares one clock
whatever the recording machine put in its headers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CameraStream:
    topic: str
    stamps_ns: np.ndarray  # (N,) int64, increasing
    frames: tuple[np.ndarray, ...]  # N images, each (H, W, 3) uint8 RGB

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of the frames."""
        return self.frames[0].shape[:2]


@dataclass(frozen=True)
class JointSeries:
    """Joint positions over time: measured joint states, or the targets recorded commands asked for."""

    topic: str
    stamps_ns: np.ndarray  # (N,) int64, increasing
    names: tuple[str, ...]  # one per column; empty when the source has no names (Float64MultiArray)
    positions: np.ndarray  # (N, J) float64

    def __post_init__(self) -> None:
        if self.positions.ndim != 2 or self.positions.shape[0] != self.stamps_ns.shape[0]:
            raise ValueError(f"{self.topic}: positions {self.positions.shape} do not match "
                             f"{self.stamps_ns.shape[0]} stamps")
        if self.names and len(self.names) != self.positions.shape[1]:
            raise ValueError(f"{self.topic}: {len(self.names)} names for {self.positions.shape[1]} columns")

    def at(self, times_ns: np.ndarray) -> np.ndarray:
        """Linear interpolation at `times_ns` -> (T, J); NaN outside the recorded span."""
        times = np.asarray(times_ns, dtype=np.float64)
        stamps = self.stamps_ns.astype(np.float64)
        out = np.full((times.shape[0], self.positions.shape[1]), np.nan)
        if stamps.size == 0:
            return out
        inside = (times >= stamps[0]) & (times <= stamps[-1])
        for j in range(self.positions.shape[1]):
            out[inside, j] = np.interp(times[inside], stamps, self.positions[:, j])
        return out


@dataclass(frozen=True)
class Episode:
    source: str  # bag path
    storage: str  # "mcap" | "sqlite3"
    start_ns: int
    end_ns: int
    cameras: dict[str, CameraStream]  # camera name -> frames; a camera the bag lacks is absent
    joint_states: JointSeries | None
    instructions: tuple[tuple[int, str], ...]  # (stamp, text), increasing
    commands: JointSeries | None  # recorded commands as targets over time
    command_topic: str  # "" when the bag has no recorded commands
    notes: tuple[str, ...] = ()  # what was skipped or is missing: the result is partial when non-empty

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def instruction_at(self, stamp: int) -> str:
        """The newest instruction at or before `stamp` (the first one when none is that old)."""
        text = self.instructions[0][1] if self.instructions else ""
        for when, value in self.instructions:
            if when > stamp:
                break
            text = value
        return text
