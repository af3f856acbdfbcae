"""The simulated arm and its cameras: pure functions of positions, targets and time.

The arm follows its position targets with a first-order lag (each joint independently);
`minimum_jerk_targets` is a scripted operator moving it between random waypoints. Each camera
sees the arm as a planar stick figure over a background of its own, so images change with the
state. Used live by `nodes/synthetic.py` (targets: the controller's commands) and offline by
`replay/synthetic.py` (targets: the scripted operator).
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow", "wrist_flex", "wrist_roll", "wrist_yaw", "gripper")


def joint_ranges(names: Sequence[str]) -> np.ndarray:
    """(J, 2) [low, high] per joint: radians for revolute joints, [0, 1] for gripper values."""
    return np.array([(0.0, 1.0) if n.startswith("gripper") else (-1.2, 1.2) for n in names]).reshape(-1, 2)


def rest_positions(names: Sequence[str]) -> np.ndarray:
    """(J,) where the arm starts: the middle of each joint's range."""
    return joint_ranges(names).mean(axis=1)


def lag_step(positions: np.ndarray, targets: np.ndarray, dt_s: float, time_constant_s: float) -> np.ndarray:
    """(J,) positions `dt_s` later, following `targets` (held over the interval) with a first-order lag."""
    blend = 1.0 - np.exp(-dt_s / time_constant_s)
    return positions + (targets - positions) * blend


def follow(targets: np.ndarray, dt_s: float, time_constant_s: float) -> np.ndarray:
    """(T, J) positions of an arm starting at targets[0] and following targets sampled every `dt_s`."""
    positions = np.empty_like(targets)
    positions[0] = targets[0]
    for i in range(1, len(targets)):
        positions[i] = lag_step(positions[i - 1], targets[i], dt_s, time_constant_s)
    return positions


def minimum_jerk_targets(names: Sequence[str], seed: int, move_duration_s: float, duration_s: float,
                         times_s: np.ndarray) -> np.ndarray:
    """(T, J) targets at `times_s` (seconds from the start): minimum-jerk moves between random
    waypoints within the joint ranges, one move every `move_duration_s`, starting at rest; the
    waypoints of a `duration_s` long script depend on the seed only."""
    ranges = joint_ranges(names)
    times_s = np.asarray(times_s, dtype=np.float64)
    n_moves = int(np.ceil(duration_s / move_duration_s)) + 1
    waypoints = np.random.default_rng(seed).uniform(ranges[:, 0], ranges[:, 1], size=(n_moves + 1, len(ranges)))
    waypoints[0] = rest_positions(names)
    phase = times_s / move_duration_s  # (T,)
    move = np.clip(np.floor(phase).astype(int), 0, n_moves - 1)
    s = np.clip(phase - move, 0.0, 1.0)[:, None]
    blend = 10 * s**3 - 15 * s**4 + 6 * s**5  # minimum-jerk profile
    return waypoints[move] + (waypoints[move + 1] - waypoints[move]) * blend


def render_view(view: int, positions: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Camera `view`'s picture of the arm -> (H, W, 3) uint8. `positions` in ARM_JOINTS order (as
    many as there are): the first four drive a planar 3-link stick figure, the seventh (gripper,
    half open when absent) opens a disc at its tip."""
    positions = np.asarray(positions, dtype=np.float64).reshape(-1)
    if positions.size == 0:
        positions = np.zeros(1)
    height, width = size
    image = _background(view, height, width).copy()
    angles = np.cumsum(positions[1:4]) + positions[0] * 0.5 * (1 if view % 2 == 0 else -1)
    link = 0.27 * min(height, width)
    joint = np.array([width * (0.5 + 0.1 * view), height * 0.85], np.float32)
    thickness = max(1.5, 0.03 * min(height, width))
    for k, angle in enumerate(angles):
        tip = joint + link * np.array([np.sin(angle), -np.cos(angle)], np.float32)
        seg = tip - joint
        rows, cols, y, x = _pixels_near(np.minimum(joint, tip), np.maximum(joint, tip), thickness, height, width)
        dx, dy = x - joint[0], y - joint[1]
        t = np.clip((dx * seg[0] + dy * seg[1]) / max(float(seg @ seg), 1e-6), 0, 1)
        image[rows, cols][(dx - t * seg[0]) ** 2 + (dy - t * seg[1]) ** 2 < thickness ** 2] = (220 - 50 * k, 200,
                                                                                              60 + 60 * k)
        joint = tip
    grip = positions[6] if positions.size > 6 else 0.5
    radius = thickness * (1.0 + 2.0 * float(np.clip(grip, 0, 1)))
    rows, cols, y, x = _pixels_near(joint, joint, radius, height, width)
    image[rows, cols][(x - joint[0]) ** 2 + (y - joint[1]) ** 2 < radius ** 2] = (230, 40, 40)
    return image


@functools.lru_cache(maxsize=32)
def _background(view: int, height: int, width: int) -> np.ndarray:
    """The view's picture without the arm (never written: `render_view` draws on a copy)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.empty((height, width, 3), np.float32)
    image[..., 0] = 40 + 60 * x / width + 20 * view
    image[..., 1] = 50 + 80 * y / height
    image[..., 2] = 90 - 30 * view
    background = np.clip(image, 0, 255).astype(np.uint8)
    background.flags.writeable = False
    return background


def _pixels_near(low: np.ndarray, high: np.ndarray, margin: float, height: int, width: int):
    """The window of pixels within `margin` of the box [low, high] (x, y): its row and column slices,
    the rows' y as a column and the columns' x as a row (they broadcast to the window). Only pixels
    there can lie within `margin` of a shape inside the box."""
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        return slice(0, 0), slice(0, 0), np.zeros((0, 1), np.float32), np.zeros((1, 0), np.float32)
    x0, y0 = (int(np.clip(np.floor(v - margin), 0, limit)) for v, limit in zip(low, (width, height)))
    x1, y1 = (int(np.clip(np.ceil(v + margin) + 1, start, limit))
              for v, start, limit in zip(high, (x0, y0), (width, height)))
    rows, cols = slice(y0, y1), slice(x0, x1)
    return rows, cols, np.arange(y0, y1, dtype=np.float32)[:, None], np.arange(x0, x1, dtype=np.float32)[None, :]
