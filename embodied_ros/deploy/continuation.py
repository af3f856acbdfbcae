"""Asynchronous execution with real-time chunking: the action head solves the next chunk while the
controller executes the current one, and the new chunk continues the current one.

On the time axis of deploy/chunk.py (row i of a chunk is the target at its observation stamp +
(i + 1) * period), for a new chunk solved on the observation stamped T:

  leftover  the executing chunk's targets at T + (i + 1) * period, i = 0, 1, ... while it lasts:
            what the controller will still execute from T on, row i lining up with row i of the
            new chunk. Solving from it starts while the current chunk keeps streaming.
  delay d   rows executed before the new chunk lands: ceil((landing - T) / period). The head
            guides with the largest d of its recent chunks, measured online from when each was
            published (or a fixed d); its first d rows are pulled hardest toward the leftover.
  merge     when the chunk lands the controller drops the rows whose instants passed before the
            landing, and runs the rest at their instants: for d = ceil((landing - T) / period)
            measured at landing, the first d - 1 rows go, and row d - 1 (frozen to the old chunk
            by the guidance) is due at or just after the landing, so the switch is where both
            chunks agree. The rows before the landing belong to the old chunk, which ran them.

The controller node calls `merge`; the action node keeps a `ChunkContinuer`.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

import numpy as np

from embodied_ros.deploy.chunk import TimedChunk
from embodied_ros.heads.rtc import RtcSettings
from embodied_ros.pipeline.types import ActionChunkResult, ChunkContinuation


def delay_rows(latency_ns: int, period_ns: int) -> int:
    """Rows of a chunk whose instants are over after `latency_ns` from its observation (>= 0)."""
    return max(0, math.ceil(latency_ns / period_ns))


def leftover(executing: ActionChunkResult, stamp_ns: int) -> np.ndarray | None:
    """[rows, action_dim] targets of `executing` at stamp_ns + (i + 1) * period, linear between its
    rows; None once it has run out by the first of those instants."""
    period_ns = round(executing.action_period_s * 1e9)
    timed = TimedChunk(executing.stamp_ns, period_ns, np.asarray(executing.actions, dtype=np.float64))
    rows = []
    for row in range(executing.actions.shape[0]):
        target = timed.sample(stamp_ns + (row + 1) * period_ns)
        if target is None:
            break
        rows.append(target)
    return np.array(rows, dtype=np.float32) if rows else None


def merge(chunk: TimedChunk, landed_ns: int) -> TimedChunk:
    """The chunk as the controller runs it when it lands at `landed_ns`: the rows whose instants
    are before the landing dropped (d - 1 of them for d = delay_rows(landed - stamp))."""
    passed = max(0, delay_rows(landed_ns - chunk.stamp_ns, chunk.period_ns) - 1)
    return dataclasses.replace(chunk, first_row=max(chunk.first_row, min(passed, chunk.positions.shape[0] - 1)))


class DelayEstimate:
    """The inference delay in rows the next chunk is guided with: fixed, or the largest measured
    over the last `window` chunks (0 before the first)."""

    def __init__(self, fixed_rows: int | None = None, window: int = 10) -> None:
        if fixed_rows is not None and fixed_rows < 0:
            raise ValueError(f"a fixed inference delay must be >= 0 rows, got {fixed_rows}")
        if window < 1:
            raise ValueError(f"the delay window must hold at least one chunk, got {window}")
        self.fixed_rows = fixed_rows
        self.measured: deque[int] = deque(maxlen=window)

    def observe(self, latency_ns: int, period_ns: int) -> None:
        self.measured.append(delay_rows(latency_ns, period_ns))

    @property
    def rows(self) -> int:
        if self.fixed_rows is not None:
            return self.fixed_rows
        return max(self.measured, default=0)


class ChunkContinuer:
    """The action head's side: what each new chunk continues (its last published chunk) and the delay."""

    def __init__(self, settings: RtcSettings, delay: DelayEstimate) -> None:
        self.settings = settings
        self.delay = delay
        self.executing: ActionChunkResult | None = None

    def continuation(self, stamp_ns: int) -> ChunkContinuation:
        """The act stage's input for a chunk solved on the observation stamped `stamp_ns`."""
        rows = None if self.executing is None else leftover(self.executing, stamp_ns)
        return ChunkContinuation(rows, self.delay.rows, self.settings)

    def published(self, chunk: ActionChunkResult, published_ns: int) -> None:
        self.delay.observe(published_ns - chunk.stamp_ns, round(chunk.action_period_s * 1e9))
        self.executing = chunk
