"""Per-joint limits: a chunk that breaks one is refused whole; every command is bounded by them too.

A chunk is checked once, when it arrives (`chunk_violation`): its rows must be finite, inside the
position limits, no faster row to row than the velocity limits, and no further than the jump limit
from each other and, for the first row, from the measured joint state. Each command the controller
sends is then rate-limited from the previous one and clamped to the position limits (`apply`), which
bounds what no single chunk decides: the switch between chunks, blending and the start-up ramp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

NON_FINITE_CHUNK = "action chunk has non-finite values"
OUTSIDE_POSITION_LIMITS = "action chunk leaves the position limits"
NO_JOINT_STATE_TO_CHECK = "action chunk not checked: no joint state yet to check its first row against (max_jump)"


@dataclass(frozen=True)
class JointLimits:
    lower: np.ndarray  # (n_joints,) position lower bounds
    upper: np.ndarray  # (n_joints,) position upper bounds
    max_velocity: np.ndarray  # (n_joints,) units per second; inf = no rate limit
    max_jump: np.ndarray  # (n_joints,) largest step between chunk rows, and from the joint state; inf = none
    joint_names: tuple[str, ...]  # names for messages

    @classmethod
    def from_lists(cls, n_joints: int, lower: Sequence[float] = (), upper: Sequence[float] = (),
                   max_velocity: Sequence[float] = (), joint_names: Sequence[str] = (),
                   max_jump: Sequence[float] = ()) -> "JointLimits":
        """Limits from config lists; an empty list means unlimited for every joint."""
        names = tuple(joint_names) or tuple(f"joint {i}" for i in range(n_joints))

        def column(values: Sequence[float], default: float, what: str) -> np.ndarray:
            if len(values) == 0:
                return np.full(n_joints, default)
            if len(values) != n_joints:
                raise ValueError(f"{what} has {len(values)} values for {n_joints} joints {list(names)}")
            return np.asarray(values, dtype=np.float64)

        limits = cls(column(lower, -np.inf, "position_lower"), column(upper, np.inf, "position_upper"),
                     column(max_velocity, np.inf, "max_velocity"), column(max_jump, np.inf, "max_jump"), names)
        bad = [names[i] for i in np.flatnonzero(~(limits.lower <= limits.upper))]
        if bad:
            raise ValueError(f"position_lower > position_upper for {bad}")
        for what, values in (("max_velocity", limits.max_velocity), ("max_jump", limits.max_jump)):
            slow = [names[i] for i in np.flatnonzero(~(values > 0))]
            if slow:
                raise ValueError(f"{what} must be positive, not for {slow}")
        return limits

    def unset(self) -> list[str]:
        """The settings that limit no joint at all (for a warning: nothing checks those)."""
        unset = [name for name, values in (("position_lower", self.lower), ("position_upper", self.upper))
                 if np.all(np.isinf(values))]
        return unset + [name for name, values in (("max_velocity", self.max_velocity), ("max_jump", self.max_jump))
                        if np.all(np.isinf(values))]

    def apply(self, target: np.ndarray, previous: np.ndarray | None, dt_s: float) -> tuple[np.ndarray, bool]:
        """(command, whether any limit changed it). Rate limit first, position limits last (they are hard)."""
        command = target
        if previous is not None:
            step = self.max_velocity * dt_s
            command = previous + np.clip(target - previous, -step, step)
        command = np.clip(command, self.lower, self.upper)
        return command, bool(np.any(command != target))


def chunk_violation(limits: JointLimits, positions: np.ndarray, period_s: float,
                    measured: np.ndarray | None) -> str:
    """Why a chunk must not be streamed, naming the row, the joint and the limit; "" when it may.

    positions: (horizon, n_joints) rows in commanded-joint order, `period_s` apart; measured: (n_joints,)
    the current joint state, or None when none has arrived (then a jump limit refuses the chunk).
    """
    names = limits.joint_names
    bad = ~np.isfinite(positions)
    if bad.any():
        row, joint = np.argwhere(bad)[0]
        return f"{NON_FINITE_CHUNK} (row {row}, {names[joint]} = {positions[row, joint]})"
    for what, bound, outside in (("position_lower", limits.lower, positions < limits.lower),
                                 ("position_upper", limits.upper, positions > limits.upper)):
        if outside.any():
            row, joint = np.argwhere(outside)[0]
            return (f"{OUTSIDE_POSITION_LIMITS}: {names[joint]} at {positions[row, joint]:.4g} "
                    f"in row {row} ({what} {bound[joint]:.4g})")
    if np.isfinite(limits.max_jump).any():
        if measured is None:
            return NO_JOINT_STATE_TO_CHECK
        start = np.abs(positions[0] - measured)
        if (start > limits.max_jump).any():
            joint = np.flatnonzero(start > limits.max_jump)[0]
            return (f"action chunk starts {start[joint]:.4g} away from the joint state on {names[joint]} "
                    f"(max_jump {limits.max_jump[joint]:.4g})")
    steps = np.abs(np.diff(positions, axis=0))  # (horizon - 1, n_joints)
    jumps = steps > limits.max_jump
    if jumps.any():
        row, joint = np.argwhere(jumps)[0]
        return (f"action chunk jumps {steps[row, joint]:.4g} on {names[joint]} between rows {row} and {row + 1} "
                f"(max_jump {limits.max_jump[joint]:.4g})")
    fast = steps > limits.max_velocity * period_s
    if fast.any():
        row, joint = np.argwhere(fast)[0]
        return (f"action chunk moves {names[joint]} at {steps[row, joint] / period_s:.4g}/s between rows {row} "
                f"and {row + 1} (max_velocity {limits.max_velocity[joint]:.4g})")
    return ""
