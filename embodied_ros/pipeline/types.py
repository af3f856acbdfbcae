"""Data passed between the five layers.

Arrays are numpy, float32 unless stated; stamps are integer nanoseconds (ROS time). Every result
carries the stamp of the observation it derives from, so staleness can be measured at any stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import numpy as np

if TYPE_CHECKING:
    from embodied_ros.heads.rtc import RtcSettings


@dataclass(frozen=True)
class Observation:
    """What the input adapters hand to the model: one synchronized snapshot of the robot."""

    stamp_ns: int
    images: Mapping[str, np.ndarray]  # camera name -> (H, W, 3) uint8 RGB; a missing camera is absent
    state: np.ndarray | None  # (state_dim,) float32 in physical units, in the model's joint order
    instruction: str


@dataclass(frozen=True, eq=False)
class StageResult:
    """Output of one run of a stage; immutable once made (its arrays are read-only).

    `tensors` is what travels between processes (as embodied_ros/Tensor messages); inside one
    process the object itself is handed over by reference.
    """

    stage: str  # "perception" | "prefix" | "world" | "action"
    stamp_ns: int  # observation stamp
    tensors: Mapping[str, np.ndarray]
    meta: Mapping[str, int | float | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for array in self.tensors.values():
            if isinstance(array, np.ndarray) and array.flags.writeable:
                array.flags.writeable = False


@dataclass(frozen=True)
class ActionChunkResult:
    """Actions in physical units, ready for a deployment adapter."""

    stamp_ns: int  # observation stamp
    actions: np.ndarray  # (horizon, action_dim) float32
    action_period_s: float
    joint_names: tuple[str, ...]


@dataclass(frozen=True)
class ChunkContinuation:
    """What a new chunk continues (real-time chunking, deploy/continuation.py): the act stage's input."""

    leftover: np.ndarray | None  # (rows, action_dim) physical units: the executing chunk at the new chunk's rows
    delay_rows: int  # rows executed before the new chunk lands
    settings: "RtcSettings"
