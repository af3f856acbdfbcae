"""Synthetic robot episodes: the simulated arm of `sim.robot` moving between waypoints, seen by its cameras.

Pure functions of a seeded `SyntheticConfig`, so the same config always gives the same episode:
the arm follows minimum-jerk moves between random waypoints (the commanded targets, streamed like a
ros2_control controller at `command_rate_hz`); the measured joint states follow the targets through a
first-order lag with sensor noise; each camera renders the arm as a stick figure over its own
background, so images change with the state. `write_episode` stores it as a rosbag2 bag. The
synthetic robot of `embodied-ros up` (`nodes/synthetic.py`) is the same arm and cameras, live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from embodied_ros.replay import messages as m
from embodied_ros.replay.topics import TopicMap
from embodied_ros.sim import robot
from embodied_ros.sim.robot import ARM_JOINTS
DEFAULT_CAMERAS = {"base_0_rgb": (96, 128), "wrist_0_rgb": (64, 64)}
EPOCH_NS = 1_767_225_600 * 1_000_000_000  # 2026-01-01T00:00:00Z: recordings start at a realistic stamp


@dataclass(frozen=True)
class SyntheticConfig:
    duration_s: float = 3.0
    cameras: Mapping[str, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_CAMERAS))  # (H, W)
    joint_names: tuple[str, ...] = (*ARM_JOINTS, "gripper_force")  # published on /joint_states
    command_joint_names: tuple[str, ...] = ARM_JOINTS  # commanded; a subset of joint_names
    command_kind: str = "trajectory"  # "trajectory" | "array" | "none"
    camera_rate_hz: float = 30.0
    joint_rate_hz: float = 50.0
    command_rate_hz: float = 50.0
    move_duration_s: float = 1.2  # time between waypoints
    lag_s: float = 0.05  # first-order lag of the measured joints behind the targets
    instruction: str = "pick up the red cube and place it in the bin"
    seed: int = 0
    start_ns: int = EPOCH_NS

    def __post_init__(self) -> None:
        if not 0.0 < self.duration_s <= 3600.0:
            raise ValueError(f"duration_s must be in (0, 3600], got {self.duration_s}")
        for name, rate in (("camera_rate_hz", self.camera_rate_hz), ("joint_rate_hz", self.joint_rate_hz),
                           ("command_rate_hz", self.command_rate_hz)):
            if not 0.0 < rate <= 1000.0:
                raise ValueError(f"{name} must be in (0, 1000], got {rate}")
        for camera, size in self.cameras.items():
            if len(size) != 2 or min(size) < 8 or max(size) > 2048:
                raise ValueError(f"camera {camera!r}: size must be (height, width) within 8..2048, got {size}")
        missing = [n for n in self.command_joint_names if n not in self.joint_names]
        if missing:
            raise ValueError(f"commanded joints {missing} are not among joint_names {list(self.joint_names)}")
        if self.command_kind not in ("trajectory", "array", "none"):
            raise ValueError(f"command_kind must be trajectory, array or none, got {self.command_kind!r}")


def _ticks(config: SyntheticConfig, rate_hz: float, rng: np.random.Generator) -> np.ndarray:
    """Stamps of a periodic source with ~0.5 ms of scheduling jitter -> (N,) int64 ns."""
    period_ns = 1e9 / rate_hz
    n = int(config.duration_s * rate_hz)
    jitter = rng.normal(0.0, 0.5e6, n).clip(-0.4 * period_ns, 0.4 * period_ns)
    return config.start_ns + np.round(np.arange(n) * period_ns + np.abs(jitter)).astype(np.int64)


def targets_at(config: SyntheticConfig, times_ns: np.ndarray) -> np.ndarray:
    """Commanded positions -> (T, J) over config.joint_names: minimum-jerk moves between waypoints."""
    times_s = (np.asarray(times_ns) - config.start_ns) / 1e9
    return robot.minimum_jerk_targets(config.joint_names, config.seed, config.move_duration_s, config.duration_s,
                                      times_s)


def measured_at(config: SyntheticConfig, times_ns: np.ndarray) -> np.ndarray:
    """Measured positions -> (T, J): the simulated arm following the targets, plus encoder noise."""
    fine_dt = 1e-3
    fine_t = config.start_ns + np.arange(0, config.duration_s + fine_dt, fine_dt) * 1e9
    state = robot.follow(targets_at(config, fine_t), fine_dt, config.lag_s)
    index = np.clip(np.round((np.asarray(times_ns) - config.start_ns) / 1e9 / fine_dt).astype(int),
                    0, len(fine_t) - 1)
    noise = np.random.default_rng(config.seed + 1).normal(0.0, 1e-3, state[index].shape)
    return state[index] + noise


def episode_messages(config: SyntheticConfig, topic_map: TopicMap | None = None
                     ) -> Iterator[tuple[int, str, str, object]]:
    """(log stamp, topic, msgtype, rosbags message) of the whole episode, in time order."""
    topics = topic_map or TopicMap.for_cameras(config.cameras)
    rng = np.random.default_rng(config.seed + 2)
    events: list[tuple[int, int, str, str, object]] = []  # (stamp, order, topic, type, message)
    events.append((config.start_ns, 0, topics.instruction, m.STRING,
                   m.message_class(m.STRING)(data=config.instruction)))
    for view, (camera, size) in enumerate(config.cameras.items()):
        stamps = _ticks(config, config.camera_rate_hz, rng) + int(2e6 * view)
        for stamp, state in zip(stamps, measured_at(config, stamps)):
            image = m.rgb_to_image(int(stamp), robot.render_view(view, state, size), frame_id=f"{camera}_optical")
            events.append((int(stamp), 1, topics.cameras[camera], m.IMAGE, image))
    stamps = _ticks(config, config.joint_rate_hz, rng)
    joint_state = m.message_class(m.JOINT_STATE)
    for stamp, state in zip(stamps, measured_at(config, stamps)):
        events.append((int(stamp), 2, topics.joint_states, m.JOINT_STATE, joint_state(
            header=m.header_msg(int(stamp)), name=list(config.joint_names), position=np.ascontiguousarray(state, dtype=np.float64),
            velocity=np.zeros(0), effort=np.zeros(0))))
    events.extend(_command_events(config, topics, rng))
    events.sort(key=lambda event: (event[0], event[1]))
    for stamp, _, topic, msgtype, message in events:
        yield stamp, topic, msgtype, message


def _command_events(config: SyntheticConfig, topics: TopicMap, rng: np.random.Generator):
    if config.command_kind == "none":
        return
    columns = [config.joint_names.index(n) for n in config.command_joint_names]
    stamps = _ticks(config, config.command_rate_hz, rng)
    period_ns = int(1e9 / config.command_rate_hz)
    # each command asks for the target one period ahead, as a streaming controller does
    targets = targets_at(config, stamps + period_ns)[:, columns]
    for stamp, target in zip(stamps, targets):
        if config.command_kind == "array":
            yield int(stamp), 3, topics.array, m.FLOAT64_ARRAY, m.float64_array_msg(target)
        else:
            yield int(stamp), 3, topics.trajectory, m.JOINT_TRAJECTORY, m.trajectory_msg(
                int(stamp), config.command_joint_names, target[None, :], period_ns)


def write_episode(path: str | Path, config: SyntheticConfig, storage: str = "mcap",
                  topic_map: TopicMap | None = None) -> Path:
    """Write the episode as a new rosbag2 bag (`path` must not exist); returns the bag path."""
    from embodied_ros.replay.bag_writer import BagWriter

    with BagWriter(path, storage) as writer:
        for stamp, topic, msgtype, message in episode_messages(config, topic_map):
            writer.write(topic, msgtype, stamp, message)
    return Path(path)
