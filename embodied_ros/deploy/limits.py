"""Per-joint position limits and rate (velocity) limits applied to every command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class JointLimits:
    lower: np.ndarray  # (n_joints,) position lower bounds
    upper: np.ndarray  # (n_joints,) position upper bounds
    max_velocity: np.ndarray  # (n_joints,) units per second; inf = no rate limit

    @classmethod
    def from_lists(cls, n_joints: int, lower: Sequence[float] = (), upper: Sequence[float] = (),
                   max_velocity: Sequence[float] = (), joint_names: Sequence[str] = ()) -> "JointLimits":
        """Limits from config lists; an empty list means unlimited for every joint."""
        names = list(joint_names) or [f"joint {i}" for i in range(n_joints)]

        def column(values: Sequence[float], default: float, what: str) -> np.ndarray:
            if len(values) == 0:
                return np.full(n_joints, default)
            if len(values) != n_joints:
                raise ValueError(f"{what} has {len(values)} values for {n_joints} joints {names}")
            return np.asarray(values, dtype=np.float64)

        limits = cls(column(lower, -np.inf, "position_lower"), column(upper, np.inf, "position_upper"),
                     column(max_velocity, np.inf, "max_velocity"))
        bad = [names[i] for i in np.flatnonzero(~(limits.lower <= limits.upper))]
        if bad:
            raise ValueError(f"position_lower > position_upper for {bad}")
        slow = [names[i] for i in np.flatnonzero(~(limits.max_velocity > 0))]
        if slow:
            raise ValueError(f"max_velocity must be positive, not for {slow}")
        return limits

    def apply(self, target: np.ndarray, previous: np.ndarray | None, dt_s: float) -> tuple[np.ndarray, bool]:
        """(command, whether any limit changed it). Rate limit first, position limits last (they are hard)."""
        command = target
        if previous is not None:
            step = self.max_velocity * dt_s
            command = previous + np.clip(target - previous, -step, step)
        command = np.clip(command, self.lower, self.upper)
        return command, bool(np.any(command != target))
