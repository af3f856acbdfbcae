"""Small records a bundle carries besides its weights."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class RobotMetadata:
    state_names: tuple[str, ...]  # joint order of the state vector
    action_names: tuple[str, ...]  # column names of an action chunk
    action_period_s: float  # time between consecutive actions of a chunk

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_names", tuple(self.state_names))
        object.__setattr__(self, "action_names", tuple(self.action_names))
        if not all(isinstance(n, str) and n for n in self.state_names + self.action_names):
            raise ValueError("robot metadata: state and action names must be non-empty strings")
        if not self.action_period_s > 0:
            raise ValueError(f"robot metadata: action_period_s must be > 0, got {self.action_period_s}")


@dataclass(frozen=True)
class ReferenceRecord:
    """A recorded run `bundle verify` repeats: inputs + noise -> expected outputs within tolerance.

    The model family decides the array names (e.g. inputs "case0_images", noise "case0", expected
    "case0_actions") and what the string fields mean (e.g. "task"). Arrays may be float16/32/64,
    (u)int8..64 or bool, any shape. Read back from a bundle they are read-only memory-mapped views.
    """

    inputs: Mapping[str, np.ndarray]
    expected: Mapping[str, np.ndarray]
    tolerance: float  # largest acceptable max-abs error on the expected arrays
    noise: Mapping[str, np.ndarray] = field(default_factory=dict)
    fields: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (np.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"reference record: tolerance must be a finite number >= 0, got {self.tolerance}")
        if not self.expected:
            raise ValueError("reference record: no expected outputs to compare with")
        for name, value in self.fields.items():
            if not isinstance(value, str):
                raise ValueError(f"reference record: field {name!r} must be a string, got {type(value).__name__}")

    def arrays(self) -> dict[str, Mapping[str, np.ndarray]]:
        """kind ("input", "noise", "expected") -> its arrays."""
        return {"input": self.inputs, "noise": self.noise, "expected": self.expected}
