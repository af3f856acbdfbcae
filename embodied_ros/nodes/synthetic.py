"""A synthetic robot for trying the graph without hardware: the simulated arm of `sim.robot`, its
cameras, a task.

The arm starts at rest, follows the controller's commands with a first-order lag
(`synthetic.arm_time_constant_s`) and publishes joint states at `synthetic.joint_state_rate_hz`;
each camera renders the arm as it is at `synthetic.camera_rate_hz` (JPEG CompressedImages on
image_transport's `<topic>/compressed` when `inputs.image_transport` is compressed, as a camera
whose images go to another machine sends them); the instruction is published once (latched). `record-synthetic` writes episodes of the same arm and cameras. `make_image` and
`make_joint_state` are the seams tests override to inject faults.

`embodied-ros up` runs it beside the graph, in a process of its own as a real arm's driver would be
(its rendering and 100 Hz joint states would otherwise hold the graph's interpreter); on its own,
for launch files (`robot:=synthetic`):

    embodied-ros-synthetic-robot [--config config/pi05.yaml] [--bundle B] [--camera NAME=HxW ...] [--ros-args ...]

It reads the cameras and joints the graph listens to from the config and the bundle's metadata (no
weights loaded), or from `--camera` and the config's joint names (`robot_command`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import yaml
from rclpy.experimental import EventsExecutor
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from embodied_ros.deploy.messages import command_positions
from embodied_ros.node_infra.config import GraphConfig, load_config, to_parameters
from embodied_ros.node_infra.paths import default_config
from embodied_ros.node_infra.spinning import StallWatch
from embodied_ros.nodes.run import ignore_ending_signals, spin_until_stopped, stopped_by_signals
from embodied_ros.node_infra.topics import COMMAND_TOPICS, INSTRUCTION, INSTRUCTION_QOS, JOINT_STATES, camera_topic
from embodied_ros.inputs.compressed import rgb8_to_compressed
from embodied_ros.inputs.image import array_to_image
from embodied_ros.inputs.stamps import ns_to_time
from embodied_ros.pipeline.stages import ModelSpec, read_spec
from embodied_ros.share import module_command
from embodied_ros.sim import robot
from rclpy.qos import qos_profile_sensor_data
from rclpy.utilities import remove_ros_args


class SyntheticRobot(Node):
    def __init__(self, config: GraphConfig, cameras: dict[str, tuple[int, int]], state_joints: Sequence[str],
                 command_joints: Sequence[str] = (), node_name: str = "synthetic_robot", **node_kwargs):
        super().__init__(node_name, **node_kwargs)
        settings = config.synthetic
        self.stall_exit_s = config.compute.stall_exit_s
        self.cameras = dict(cameras)
        self.command_joints = tuple(command_joints)
        self.joint_names = tuple(dict.fromkeys([*state_joints, *command_joints]))
        self.positions = robot.rest_positions(self.joint_names)
        self.targets = self.positions.copy()
        self.time_constant_s = settings.arm_time_constant_s
        self.joint_period_s = 1.0 / settings.joint_state_rate_hz
        self.paused_cameras: set[str] = set()
        self.commands_received = 0
        self.image_transport = config.inputs.image_transport
        image_type = Image if self.image_transport == "raw" else CompressedImage
        self.camera_publishers = {name: self.create_publisher(image_type, camera_topic(name, self.image_transport),
                                                              qos_profile_sensor_data)
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

    def make_image(self, camera: str, stamp_ns: int) -> Image | CompressedImage:
        view = list(self.cameras).index(camera)
        pixels = robot.render_view(view, self.positions, self.cameras[camera])
        if self.image_transport == "raw":
            return array_to_image(pixels, "rgb8", stamp_ns, camera)
        return rgb8_to_compressed(pixels, "jpeg", stamp_ns=stamp_ns, frame_id=camera)

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



def robot_for_model(config: GraphConfig, spec: ModelSpec, **node_kwargs) -> SyntheticRobot:
    """The synthetic robot a graph of this config and model listens to: the model's cameras (or the
    config's `inputs.cameras`) and the state and commanded joints, the config's names first."""
    cameras = {name: spec.image_size for name in (config.inputs.cameras or spec.camera_names)}
    return SyntheticRobot(config, cameras, config.inputs.state_joints or spec.state_names,
                          config.controller.joints or spec.action_names, **node_kwargs)


def robot_command(config: GraphConfig, spec: ModelSpec, folder: Path) -> list[str]:
    """The robot executable's command line (before any ROS arguments) for the robot
    `robot_for_model(config, spec)` makes: the config written to a file in `folder`, the model's
    inputs spelled out (no bundle is read)."""
    inputs = replace(config.inputs, state_joints=config.inputs.state_joints or spec.state_names)
    controller = replace(config.controller, joints=config.controller.joints or spec.action_names)
    values = {**to_parameters(replace(config, inputs=inputs, controller=controller)), "bundle": ""}
    config_file = folder / "synthetic_robot.yaml"
    config_file.write_text(yaml.safe_dump(values, sort_keys=False))
    height, width = spec.image_size
    command = module_command(__name__, "--config", str(config_file))
    for camera in config.inputs.cameras or spec.camera_names:
        command += ["--camera", f"{camera}={height}x{width}"]
    return command


def _camera(text: str) -> tuple[str, tuple[int, int]]:
    name, _, size = text.partition("=")
    height, _, width = size.partition("x")
    if not name or not height.isdigit() or not width.isdigit() or not int(height) or not int(width):
        raise argparse.ArgumentTypeError(f"expected NAME=HEIGHTxWIDTH, e.g. front=224x224; got {text!r}")
    return name, (int(height), int(width))


def robot_from_arguments(argv: list[str]) -> Callable[..., SyntheticRobot]:
    """The robot the executable's arguments describe, to be made once rclpy is up (`**node_kwargs`);
    exits 2 with one line on a bad config or bundle."""
    parser = argparse.ArgumentParser(prog="embodied-ros-synthetic-robot", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="graph config YAML (default: config/pi05.yaml)")
    parser.add_argument("--bundle", help="model bundle file (overrides the config's `bundle`)")
    parser.add_argument("--camera", type=_camera, action="append", default=[], metavar="NAME=HxW",
                        help="a camera to render (repeatable); with the config's inputs.state_joints and "
                             "controller.joints, no bundle is read")
    options = parser.parse_args(remove_ros_args(argv)[1:])
    try:
        config = load_config(options.config or default_config(), {"bundle": options.bundle} if options.bundle else {})
        if options.camera and config.inputs.state_joints and config.controller.joints:
            return partial(SyntheticRobot, config, dict(options.camera), config.inputs.state_joints,
                           config.controller.joints)
        if not config.bundle:
            raise ValueError("no bundle configured: pass --bundle or set `bundle` in the config")
        return partial(robot_for_model, config, read_spec(config.bundle))
    except (OSError, ValueError) as error:
        print(f"embodied-ros-synthetic-robot: error: {error}", file=sys.stderr)
        sys.exit(2)


def main(args=None) -> None:
    argv = sys.argv if args is None else args
    make_robot = robot_from_arguments(argv)
    with stopped_by_signals(argv):
        node = make_robot()
        # rclpy's C++ executor: a third less CPU than SingleThreadedExecutor's Python per timer and message
        # (14 -> 9-10% of a core for a pi05_small robot), on the cores the model computes on
        executor = EventsExecutor()
        executor.add_node(node)
        watch = StallWatch(node.stall_exit_s)  # as every node process: a middleware hang ends it
        watch.start()
        try:
            spin_until_stopped(executor)
        except KeyboardInterrupt:
            pass
        finally:
            ignore_ending_signals()
            node.destroy_node()
            watch.stop()


if __name__ == "__main__":
    main()
