"""What the controller commands at each actuator tick: follow the newest chunk, or hold and say why.

The logic is plain Python over numpy so it is tested without ROS; the controller node feeds it
chunks, measured positions and the input status, and calls `tick` at the actuator rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embodied_ros.deploy.chunk import TimedChunk
from embodied_ros.deploy.limits import JointLimits, chunk_violation
from embodied_ros.deploy.ramp import StartRamp

WAITING_FOR_CHUNK = "waiting for the first action chunk"
WAITING_FOR_JOINT_STATE = "waiting for a joint state to ramp from"
CHUNK_RAN_OUT = "action chunk ran out"
WAITING_FOR_FRESH_CHUNK = "waiting for a chunk computed after inputs recovered"
INPUT_STATUS_SILENT = "no input status"
FUTURE_CHUNK = "action chunk computed from an observation stamped in the future"


@dataclass(frozen=True)
class Command:
    target_ns: int  # the instant the positions are meant for
    positions: np.ndarray  # (n_joints,) float64
    holding: bool
    reason: str  # why it holds; "" while streaming
    limited: bool  # a position or rate limit changed the target


class CommandLogic:
    def __init__(self, limits: JointLimits, period_ns: int, blend_ns: int = 0, input_timeout_ns: int = 0,
                 max_future_ns: int = 100_000_000, ramp_s: float = 0.0, ramp_max_velocity: float = 0.0):
        self.limits = limits
        self.period_ns = period_ns
        self.blend_ns = blend_ns
        self.input_timeout_ns = input_timeout_ns  # 0: do not require an input status
        self.max_future_ns = max_future_ns  # a chunk stamped further ahead of the clock is refused
        self.chunk: TimedChunk | None = None
        self._blend_from: TimedChunk | None = None
        self._blend_start_ns = 0
        self._chunk_fault = ""
        self._input_fault = ""
        self._input_seen_ns: int | None = None
        # after an input fault or a run-out chunk, chunks from observations before this are stale
        self._fresh_after_ns: int | None = None
        self._stale_reason = ""  # the hold's reason while only stale chunks are in hand
        self.ramp_s = ramp_s  # start-up ramp: shortest duration (0 and no ramp_max_velocity: no ramp)
        self.ramp_max_velocity = ramp_max_velocity  # start-up ramp: units per second, 0: no speed bound
        self._starting = True  # the next streamed command starts the start-up ramp
        self._ramp: StartRamp | None = None
        self._measured: np.ndarray | None = None
        self._last: np.ndarray | None = None

    @property
    def ramps(self) -> bool:
        return self.ramp_s > 0 or self.ramp_max_velocity > 0

    def accept_chunk(self, chunk: TimedChunk, now_ns: int) -> None:
        """Take the chunk, or refuse it (and hold) when it breaks a limit; an older one is ignored."""
        if chunk.stamp_ns - now_ns > self.max_future_ns:  # kept, it would also shut out every later chunk
            self._chunk_fault = f"{FUTURE_CHUNK} ({(chunk.stamp_ns - now_ns) / 1e6:.0f} ms ahead)"
            return
        if self.chunk is not None and chunk.stamp_ns < self.chunk.stamp_ns:
            return  # an older observation arrived late; keep the newer chunk
        violation = chunk_violation(self.limits, chunk.positions, chunk.period_ns / 1e9, self._measured)
        if violation:  # kept out, so the next good chunk is taken at once
            self._chunk_fault = violation
            return
        self._chunk_fault = ""
        if self.blend_ns > 0 and self.chunk is not None:
            self._blend_from, self._blend_start_ns = self.chunk, now_ns
        self.chunk = chunk

    def observe_positions(self, positions: np.ndarray) -> None:
        self._measured = np.asarray(positions, dtype=np.float64)

    def set_input_status(self, ok: bool, reason: str, now_ns: int) -> None:
        self._input_seen_ns = now_ns
        if ok and self._input_fault:
            self._require_fresh(now_ns, WAITING_FOR_FRESH_CHUNK)
        self._input_fault = "" if ok else f"inputs: {reason}"

    def _require_fresh(self, after_ns: int, reason: str) -> None:
        """From now on only chunks from observations taken at or after `after_ns` are followed;
        holding with `reason` while the chunk in hand is older."""
        if self._fresh_after_ns is None or after_ns >= self._fresh_after_ns:
            self._fresh_after_ns, self._stale_reason = after_ns, reason

    def _stale(self, chunk: TimedChunk) -> bool:
        return self._fresh_after_ns is not None and chunk.stamp_ns < self._fresh_after_ns

    def hold_reason(self, t_ns: int) -> str:
        """Why the controller must hold at `t_ns`; "" when it can stream."""
        if self.input_timeout_ns > 0:
            if self._input_seen_ns is None or t_ns - self._input_seen_ns > self.input_timeout_ns:
                return INPUT_STATUS_SILENT
        if self._input_fault:
            return self._input_fault
        if self._chunk_fault:
            return self._chunk_fault
        if self.chunk is None:
            return WAITING_FOR_CHUNK
        if self._stale(self.chunk):
            return self._stale_reason
        if t_ns > self.chunk.end_ns:
            return CHUNK_RAN_OUT
        if self._starting and self.ramps and self._measured is None:
            return WAITING_FOR_JOINT_STATE
        return ""

    def tick(self, t_ns: int) -> Command | None:
        """The command for instant `t_ns`; None when holding with no known position to hold."""
        reason = self.hold_reason(t_ns)
        if reason == CHUNK_RAN_OUT and not self._stale(self.chunk):  # the arm stops: chunks planned before are stale
            self._require_fresh(self.chunk.end_ns, CHUNK_RAN_OUT)
        if reason:
            if self._ramp is not None:  # the start was cut short: start again from where the arm is then
                self._ramp, self._starting = None, True
            return self.hold(t_ns, reason)
        target = self._ramped(t_ns, self._blended_target(t_ns))
        previous = self._last if self._last is not None else self._measured
        positions, limited = self.limits.apply(target, previous, self.period_ns / 1e9)
        self._last = positions
        return Command(t_ns, positions.copy(), holding=False, reason="", limited=limited)

    def hold(self, t_ns: int, reason: str) -> Command | None:
        """Stay at the last command (or the measured position before any); None if neither is known."""
        hold = self._last if self._last is not None else self._measured
        if hold is None:
            return None
        return Command(t_ns, hold.copy(), holding=True, reason=reason, limited=False)

    def restart(self) -> None:
        """Start again as at start-up (after a deactivation): from the measured position, with a ramp."""
        self._starting, self._ramp, self._last = True, None, None

    def _ramped(self, t_ns: int, target: np.ndarray) -> np.ndarray:
        if self._starting:
            self._starting = False
            if self.ramps:
                self._ramp = StartRamp.towards(self._measured, target, t_ns, self.ramp_s, self.ramp_max_velocity)
        if self._ramp is None:
            return target
        if t_ns >= self._ramp.end_ns:
            self._ramp = None
            return target
        return self._ramp.target(t_ns, target)

    def upcoming(self, t_ns: int, count: int) -> np.ndarray:
        """[count, n_joints] targets for the `count` periods after the command for `t_ns`, limited
        as `tick` would limit them but not sent (the later points of a trajectory message); the
        command is repeated from where the controller would hold. Needs a command sent before."""
        previous = self._last
        points = []
        for index in range(1, count + 1):
            instant = t_ns + index * self.period_ns
            if not self.hold_reason(instant):
                target = self._target_at(instant)
                if self._ramp is not None and instant < self._ramp.end_ns:
                    target = self._ramp.target(instant, target)
                previous, _ = self.limits.apply(target, previous, self.period_ns / 1e9)
            points.append(previous)
        return np.array(points, dtype=np.float64).reshape(count, -1)

    def _target_at(self, t_ns: int) -> np.ndarray:
        target = self.chunk.sample(t_ns)
        if self._blend_from is None:
            return target
        weight = (t_ns - self._blend_start_ns) / self.blend_ns
        old = self._blend_from.sample(t_ns)
        if weight >= 1.0 or old is None:
            return target
        weight = max(weight, 0.0)
        return (1.0 - weight) * old + weight * target

    def _blended_target(self, t_ns: int) -> np.ndarray:
        target = self._target_at(t_ns)
        if self._blend_from is not None and ((t_ns - self._blend_start_ns) >= self.blend_ns
                                             or self._blend_from.sample(t_ns) is None):
            self._blend_from = None
        return target
