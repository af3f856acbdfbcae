"""A synthetic robot for trying the graph without hardware: the simulated arm of `sim.robot`, its
cameras, a task.

The arm starts at rest, follows the controller's commands with a first-order lag
(`synthetic.arm_time_constant_s`) and publishes joint states at `synthetic.joint_state_rate_hz`;
each camera renders the arm as it is at `synthetic.camera_rate_hz`; the instruction is published
once (latched). `record-synthetic` writes episodes of the same arm and cameras. `make_image` and
`make_joint_state` are the seams tests override to inject faults.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from embodied_ros.deploy.messages import command_positions
from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.node_infra.topics import COMMAND_TOPICS, INSTRUCTION, INSTRUCTION_QOS, JOINT_STATES, camera_topic
from embodied_ros.inputs.image import array_to_image
from embodied_ros.inputs.stamps import ns_to_time
from embodied_ros.sim import robot
from rclpy.qos import qos_profile_sensor_data


class SyntheticRobot(Node):
    def __init__(self, config: GraphConfig, cameras: dict[str, tuple[int, int]], state_joints: Sequence[str],
                 command_joints: Sequence[str] = (), node_name: str = "synthetic_robot", **node_kwargs):
        super().__init__(node_name, **node_kwargs)
        settings = config.synthetic
        self.cameras = dict(cameras)
        self.command_joints = tuple(command_joints)
        self.joint_names = tuple(dict.fromkeys([*state_joints, *command_joints]))
        self.positions = robot.rest_positions(self.joint_names)
        self.targets = self.positions.copy()
        self.time_constant_s = settings.arm_time_constant_s
        self.joint_period_s = 1.0 / settings.joint_state_rate_hz
        self.paused_cameras: set[str] = set()
        self.commands_received = 0
        self.camera_publishers = {name: self.create_publisher(Image, camera_topic(name), qos_profile_sensor_data)
                                  for name in self.cameras}
        self.joint_publisher = self.create_publisher(JointState, JOINT_STATES, qos_profile_sensor_data)
        self.instruction_publisher = self.create_publisher(String, INSTRUCTION, INSTRUCTION_QOS)
        output = config.controller.output
        message_type = JointTrajectory if output == "joint_trajectory" else Float64MultiArray
        self.create_subscription(message_type, COMMAND_TOPICS[output], self._on_command, 10)
        self.create_timer(1.0 / settings.camera_rate_hz, self._publish_cameras)
        self.create_timer(self.joint_period_s, self._step_arm)
        self.instruction_publisher.publish(String(data=settings.instruction))

    # seams for tests ----------------------------------------------------------------------------

    def make_image(self, camera: str, stamp_ns: int) -> Image:
        view = list(self.cameras).index(camera)
        return array_to_image(robot.render_view(view, self.positions, self.cameras[camera]), "rgb8", stamp_ns, camera)

    def make_joint_state(self, stamp_ns: int) -> JointState:
        msg = JointState(name=list(self.joint_names), position=self.positions.tolist())
        msg.header.stamp = ns_to_time(stamp_ns)
        return msg

    # --------------------------------------------------------------------------------------------

    def _publish_cameras(self) -> None:
        stamp_ns = self.get_clock().now().nanoseconds
        for camera, publisher in self.camera_publishers.items():
            if camera not in self.paused_cameras:
                publisher.publish(self.make_image(camera, stamp_ns))

    def _step_arm(self) -> None:
        self.positions = robot.lag_step(self.positions, self.targets, self.joint_period_s, self.time_constant_s)
        self.joint_publisher.publish(self.make_joint_state(self.get_clock().now().nanoseconds))

    def _on_command(self, msg: JointTrajectory | Float64MultiArray) -> None:
        names = msg.joint_names if isinstance(msg, JointTrajectory) else self.command_joints
        positions = command_positions(msg)
        index = {name: i for i, name in enumerate(self.joint_names)}
        for name, value in zip(names, positions):
            if name in index and np.isfinite(value):
                self.targets[index[name]] = value
        self.commands_received += 1

