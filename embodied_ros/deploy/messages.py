"""Commands as the two ros2_control inputs people use: JointTrajectory and Float64MultiArray."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from embodied_ros.inputs.stamps import ns_to_duration, ns_to_time

OUTPUTS = ("joint_trajectory", "float64_multi_array")


def joint_trajectory(joint_names: Sequence[str], positions: np.ndarray, stamp_ns: int, time_from_start_ns: int,
                     point_period_ns: int = 0) -> JointTrajectory:
    """A trajectory for JointTrajectoryController, stamped for execution: point j (row j of
    `positions` [points, joints], or the one point of a [joints] vector) is to be reached at
    stamp + time_from_start + j * point_period. The stamp is the tick the message was sent for,
    never 0 ("start on receipt"), so a message that arrives late still puts each point at its own
    instant when the trajectory controller replaces its running trajectory by it (one whose last
    point is already past is refused there); the later points carry the motion on until the next
    message replaces them."""
    points = np.atleast_2d(np.asarray(positions, dtype=np.float64))
    if points.shape[0] > 1 and point_period_ns <= 0:
        raise ValueError(f"{points.shape[0]} trajectory points need a positive period between them")
    msg = JointTrajectory(joint_names=list(joint_names))
    msg.header.stamp = ns_to_time(stamp_ns)
    for index, row in enumerate(points):
        point = JointTrajectoryPoint(positions=[float(p) for p in row])
        point.time_from_start = ns_to_duration(time_from_start_ns + index * point_period_ns)
        msg.points.append(point)
    return msg


def float64_multi_array(positions: np.ndarray) -> Float64MultiArray:
    """Positions in joint order for a forward command controller (its `joints` parameter sets the order)."""
    msg = Float64MultiArray(data=[float(p) for p in positions])
    msg.layout.dim = [MultiArrayDimension(label="joints", size=len(positions), stride=len(positions))]
    return msg


def commanded_joint_state(joint_names: Sequence[str], positions: np.ndarray, stamp_ns: int) -> JointState:
    """A command as a record: the joints, their commanded positions and the tick it was sent for,
    whichever output carried it (a Float64MultiArray has neither names nor a stamp)."""
    msg = JointState(name=list(joint_names), position=[float(p) for p in positions])
    msg.header.stamp = ns_to_time(stamp_ns)
    return msg


def command_positions(msg: JointTrajectory | Float64MultiArray) -> np.ndarray:
    """The commanded positions of either output (first point of a trajectory)."""
    if isinstance(msg, JointTrajectory):
        return np.asarray(msg.points[0].positions, dtype=np.float64)
    return np.asarray(msg.data, dtype=np.float64)
