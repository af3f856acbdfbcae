"""The start-up ramp: from where the arm is to the chunk, instead of one step to the first command.

Over the ramp the command is origin + w * (chunk target - origin), w rising linearly from 0 to 1, so
the arm leaves its measured position smoothly and joins the chunk as it streams (a moving target).
The ramp lasts at least `min_duration_s`, and long enough that the distance to the first target,
covered in that time, stays under `max_velocity`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StartRamp:
    start_ns: int
    duration_ns: int
    origin: np.ndarray  # (n_joints,) the measured position it starts from

    @classmethod
    def towards(cls, origin: np.ndarray, first_target: np.ndarray, start_ns: int, min_duration_s: float,
                max_velocity: float) -> "StartRamp":
        """A ramp from `origin` that moves to `first_target` no faster than `max_velocity` (0: no speed bound)."""
        duration_s = min_duration_s
        if max_velocity > 0:
            duration_s = max(duration_s, float(np.max(np.abs(first_target - origin))) / max_velocity)
        return cls(start_ns, round(duration_s * 1e9), np.array(origin, dtype=np.float64))

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns

    def target(self, t_ns: int, chunk_target: np.ndarray) -> np.ndarray:
        """The command at `t_ns`: the origin at the start, the chunk's own target from the end on."""
        if t_ns >= self.end_ns:
            return chunk_target
        weight = max(t_ns - self.start_ns, 0) / self.duration_ns
        return self.origin + weight * (chunk_target - self.origin)
