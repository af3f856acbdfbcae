"""Which action column drives which robot joint."""

from __future__ import annotations

from typing import Sequence

import numpy as np


class ActionMapping:
    """Commanded joints and, for each, the action column (by name) that drives it.

    `joints` empty: command every action column under its own name. `action_columns` empty: each
    joint is driven by the column of the same name.
    """

    def __init__(self, joints: Sequence[str] = (), action_columns: Sequence[str] = ()):
        if action_columns and len(action_columns) != len(joints):
            raise ValueError(
                f"action_columns has {len(action_columns)} names for {len(joints)} joints {list(joints)}"
            )
        self.joints = tuple(joints)
        self.action_columns = tuple(action_columns) or self.joints
        self._cache: tuple[tuple[str, ...], np.ndarray] | None = None

    def joint_names(self, action_names: Sequence[str]) -> tuple[str, ...]:
        return self.joints or tuple(action_names)

    def column_index(self, action_names: Sequence[str]) -> np.ndarray:
        """Indices into a chunk's columns, one per commanded joint; ValueError names unknown columns."""
        names = tuple(action_names)
        if self._cache is None or self._cache[0] != names:
            wanted = self.action_columns or names
            where = {name: i for i, name in enumerate(names)}
            unknown = [c for c in wanted if c not in where]
            if unknown:
                raise ValueError(f"action column(s) {unknown} are not in the chunk's columns {list(names)}")
            self._cache = (names, np.array([where[c] for c in wanted], dtype=np.intp))
        return self._cache[1]


def chunk_column_names(chunk) -> tuple[str, ...]:
    """The names of an action chunk's columns; `action_<i>` when the chunk names none."""
    return tuple(chunk.joint_names) or tuple(f"action_{i}" for i in range(chunk.actions.shape[1]))
