"""ROS message types for bag files, without a ROS install: the `rosbags` typestore.

The typestore holds every standard ROS 2 Kilted type plus the project's own interfaces, parsed from the
`.msg` texts in `msg/` (the same files rosidl builds), so bags we write carry the same definitions and
type hashes as messages published by the compiled package.
"""

from __future__ import annotations

import functools

import numpy as np

from embodied_ros.share import PACKAGE, share_path

IMAGE = "sensor_msgs/msg/Image"
JOINT_STATE = "sensor_msgs/msg/JointState"
STRING = "std_msgs/msg/String"
JOINT_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
FLOAT64_ARRAY = "std_msgs/msg/Float64MultiArray"
ACTION_CHUNK = f"{PACKAGE}/msg/ActionChunk"
STAGE_TIMING = f"{PACKAGE}/msg/StageTiming"


@functools.cache
def typestore():
    """Kilted standard types + embodied_ros/msg/* (cached; treat as read-only)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_KILTED)
    own = {}
    for path in sorted(share_path("msg").glob("*.msg")):
        own.update(get_types_from_msg(path.read_text(), f"{PACKAGE}/msg/{path.stem}"))
    store.register(own)
    return store


def message_class(msgtype: str):
    return typestore().types[msgtype]


def time_msg(stamp_ns: int):
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    return message_class("builtin_interfaces/msg/Time")(sec=sec, nanosec=nanosec)


def duration_msg(duration_ns: int):
    sec, nanosec = divmod(int(duration_ns), 1_000_000_000)
    return message_class("builtin_interfaces/msg/Duration")(sec=sec, nanosec=nanosec)


def stamp_ns(time) -> int:
    """builtin_interfaces Time or Duration (any implementation) -> integer nanoseconds."""
    return int(time.sec) * 1_000_000_000 + int(time.nanosec)


def header_msg(stamp: int, frame_id: str = ""):
    return message_class("std_msgs/msg/Header")(stamp=time_msg(stamp), frame_id=frame_id)


def rgb_to_image(stamp: int, rgb: np.ndarray, frame_id: str = ""):
    """(H, W, 3) uint8 RGB -> rosbags sensor_msgs/Image (rgb8, no row padding)."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an (H, W, 3) uint8 image, got {rgb.shape} {rgb.dtype}")
    height, width, _ = rgb.shape
    return message_class(IMAGE)(
        header=header_msg(stamp, frame_id), height=height, width=width, encoding="rgb8",
        is_bigendian=0, step=width * 3, data=np.ascontiguousarray(rgb).reshape(-1),
    )


def trajectory_msg(stamp: int, joint_names, positions: np.ndarray, period_ns: int, first_offset_ns: int | None = None):
    """JointTrajectory with one point per row of `positions` (P, J); point i is due at
    first_offset + i * period after `stamp` (first_offset defaults to one period)."""
    first = period_ns if first_offset_ns is None else first_offset_ns
    point = message_class("trajectory_msgs/msg/JointTrajectoryPoint")
    empty = np.zeros(0, dtype=np.float64)
    points = [point(positions=np.ascontiguousarray(row, dtype=np.float64), velocities=empty, accelerations=empty,
                    effort=empty, time_from_start=duration_msg(first + i * period_ns))
              for i, row in enumerate(positions)]
    return message_class(JOINT_TRAJECTORY)(header=header_msg(stamp), joint_names=list(joint_names), points=points)


def float64_array_msg(values: np.ndarray):
    layout = message_class("std_msgs/msg/MultiArrayLayout")(dim=[], data_offset=0)
    return message_class(FLOAT64_ARRAY)(layout=layout, data=np.ascontiguousarray(values, dtype=np.float64))


def action_chunk_msg(produced_ns: int, observation_ns: int, actions: np.ndarray, action_period_s: float,
                     joint_names=()):
    """embodied_ros/ActionChunk from a (horizon, action_dim) array."""
    actions = np.asarray(actions, dtype=np.float32)
    if actions.ndim != 2:
        raise ValueError(f"actions must be (horizon, action_dim), got shape {actions.shape}")
    return message_class(ACTION_CHUNK)(
        header=header_msg(produced_ns), observation_stamp=time_msg(observation_ns),
        action_period=duration_msg(round(action_period_s * 1e9)),
        horizon=actions.shape[0], action_dim=actions.shape[1], joint_names=list(joint_names),
        actions=np.ascontiguousarray(actions).reshape(-1),
    )


def chunk_actions(msg) -> np.ndarray:
    """ActionChunk message (rosbags or rclpy) -> (horizon, action_dim) float32."""
    actions = np.asarray(msg.actions, dtype=np.float32)
    if actions.size != msg.horizon * msg.action_dim:
        raise ValueError(f"ActionChunk holds {actions.size} values, header says {msg.horizon}x{msg.action_dim}")
    return actions.reshape(msg.horizon, msg.action_dim)
