"""Lock-step replay: the episode cut into control steps, and the observation each step sees.

Step k happens at bag time t0 + k * period, where t0 is the first instant at which every replayed
camera and the joint states have a sample. A step sees the newest frame of each camera and the newest
joint state at or before its time (what keep-latest topics would hold), and the newest instruction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from embodied_ros.pipeline.types import Observation
from embodied_ros.replay.bag_reader import BagError
from embodied_ros.replay.episode import Episode


@dataclass(frozen=True)
class ReplayStep:
    index: int
    bag_ns: int  # bag (log) time of the step
    frames: Mapping[str, int]  # camera -> index of the frame the step sees
    joint_index: int | None  # index into episode.joint_states; None when the bag has none
    instruction: str

    def input_age_ms(self, episode: Episode) -> dict[str, float]:
        """How old each input is at the step: camera name (and "joint_states") -> ms."""
        ages = {camera: (self.bag_ns - int(episode.cameras[camera].stamps_ns[i])) / 1e6
                for camera, i in self.frames.items()}
        if self.joint_index is not None:
            ages["joint_states"] = (self.bag_ns - int(episode.joint_states.stamps_ns[self.joint_index])) / 1e6
        return ages


def plan_steps(episode: Episode, period_s: float, max_steps: int | None = None) -> list[ReplayStep]:
    """The control steps of the episode (all of them, or the first `max_steps`)."""
    if period_s <= 0:
        raise ValueError(f"step period must be positive, got {period_s} s")
    firsts = [int(stream.stamps_ns[0]) for stream in episode.cameras.values()]
    if episode.joint_states is not None:
        firsts.append(int(episode.joint_states.stamps_ns[0]))
    if not firsts:
        raise BagError(f"{episode.source}: nothing to replay (no camera frames and no joint states)")
    start = max(firsts)
    period_ns = int(round(period_s * 1e9))
    count = (episode.end_ns - start) // period_ns + 1
    if max_steps is not None:
        count = min(count, max_steps)
    steps = []
    for k in range(int(count)):
        t = start + k * period_ns
        frames = {camera: int(np.searchsorted(stream.stamps_ns, t, side="right")) - 1
                  for camera, stream in episode.cameras.items()}
        joint_index = None
        if episode.joint_states is not None:
            joint_index = int(np.searchsorted(episode.joint_states.stamps_ns, t, side="right")) - 1
        steps.append(ReplayStep(k, t, frames, joint_index, episode.instruction_at(t)))
    return steps


class StateSelector:
    """The model's state vector out of the recorded joint states, by joint name."""

    def __init__(self, episode: Episode, state_names: Sequence[str]) -> None:
        self.state_names = tuple(state_names)
        joints = episode.joint_states
        if not self.state_names:
            self.columns = None
            return
        if joints is None:
            raise BagError(f"{episode.source}: the model needs joint states {list(self.state_names)}, the bag has "
                           "none on the mapped topic (map it with --topic-map joint_states=TOPIC)")
        missing = [n for n in self.state_names if n not in joints.names]
        if missing:
            raise BagError(f"{joints.topic}: the model needs joints {missing}, which the recorded joint states "
                           f"lack (they name {list(joints.names)})")
        self.columns = [joints.names.index(n) for n in self.state_names]

    def state(self, episode: Episode, step: ReplayStep) -> np.ndarray | None:
        """(state_dim,) float64 as recorded, in model order. Non-finite or out-of-range values (recorded
        NaN, a joint whose publisher has not spoken yet) are passed on: the graph refuses that
        observation as it would live."""
        if self.columns is None:
            return None
        return episode.joint_states.positions[step.joint_index, self.columns]


def observation_at(episode: Episode, step: ReplayStep, selector: StateSelector, stamp_ns: int) -> Observation:
    """The observation of `step`, stamped `stamp_ns` (the graph's time for that step)."""
    images = {camera: episode.cameras[camera].frames[i] for camera, i in step.frames.items()}
    state = selector.state(episode, step)
    if state is not None:
        with np.errstate(over="ignore"):  # beyond float32: inf, which the runtime refuses
            state = state.astype(np.float32)
    return Observation(stamp_ns=stamp_ns, images=images, state=state,
                       instruction=step.instruction)
