"""sensor_msgs/JointState -> positions of chosen joints, in a chosen order."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sensor_msgs.msg import JointState

from embodied_ros.inputs.errors import JointStateError


class JointStateSelector:
    """Picks `joint_names` out of JointState messages (any order, extra joints ignored)."""

    def __init__(self, joint_names: Sequence[str]):
        names = tuple(joint_names)
        if not names:
            raise ValueError("a joint state selector needs at least one joint name")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"joint names must be unique, repeated: {duplicates}")
        self.joint_names = names
        self._cached_names: tuple[str, ...] | None = None
        self._cached_index: np.ndarray | None = None

    def select(self, msg: JointState, source: str = "joint_states") -> np.ndarray:
        """(len(joint_names),) float32 positions; raises JointStateError for missing, repeated,
        non-finite or out-of-range (beyond float32) ones."""
        names = tuple(msg.name)
        if len(msg.position) != len(names):
            raise JointStateError(
                f"{source}: {len(names)} joint names but {len(msg.position)} positions"
            )
        index = self._index_of(names, source)
        positions = np.asarray(msg.position, dtype=np.float64)[index]
        for bad, what in ((~np.isfinite(positions), "non-finite position"),
                          (np.abs(positions) > np.finfo(np.float32).max, "position out of range")):
            if bad.any():
                listed = ", ".join(f"{self.joint_names[i]}={positions[i]}" for i in np.flatnonzero(bad))
                raise JointStateError(f"{source}: {what}: {listed}")
        return positions.astype(np.float32)

    def _index_of(self, names: tuple[str, ...], source: str) -> np.ndarray:
        if names != self._cached_names:
            repeated = sorted({n for n in names if names.count(n) > 1} & set(self.joint_names))
            if repeated:
                raise JointStateError(f"{source}: joint(s) {repeated} named more than once; which position holds?")
            where = {name: i for i, name in enumerate(names)}
            missing = [n for n in self.joint_names if n not in where]
            if missing:
                raise JointStateError(f"{source}: missing joint(s) {missing}; message has {list(names)}")
            self._cached_index = np.array([where[n] for n in self.joint_names], dtype=np.intp)
            self._cached_names = names
        return self._cached_index
