"""A Meta-World task as the robot: the deployment adapter between the graph and the simulator.

Publishes the "corner" camera as sensor_msgs/Image, the policy's state vector (`sim.metaworld.
STATE_NAMES`) as a JointState and the task's instruction (latched); applies the controller's commands
(Float64MultiArray on the forward controller's topic, or a JointTrajectory's first point, in
`sim.metaworld.ACTION_NAMES` order) as the env's actions. Episodes end at success or after `max_steps`
steps and the next starts with the next seed; each start and end is a JSON line on `sim/episode` and
the current episode is on /diagnostics.

Live (default): the env steps at `rate_hz` with the newest command (zero before the first).
Lock-step (`lockstep:=true`): the env steps once per command received, then publishes what it sees,
so the same commands give the same episode run after run.
"""

from __future__ import annotations

import json

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from embodied_ros.deploy.messages import command_positions
from embodied_ros.node_infra.topics import (
    COMMAND_TOPICS, DIAGNOSTICS, DIAGNOSTICS_QOS, INSTRUCTION, INSTRUCTION_QOS, JOINT_STATES, camera_topic,
    lockstep_qos,
)
from embodied_ros.inputs.image import array_to_image
from embodied_ros.inputs.stamps import ns_to_time
from embodied_ros.sim.metaworld import ACTION_NAMES, CAMERA, DEFAULT_MAX_STEPS, STATE_NAMES, MetaWorldTask, StepResult

EPISODE_EVENTS = "sim/episode"


class MetaWorldSim(Node):
    def __init__(self, node_name: str = "metaworld_sim", **node_kwargs):
        super().__init__(node_name, **node_kwargs)
        self.task_name = self.declare_parameter("task", "reach-v3").value
        self.seed = int(self.declare_parameter("seed", 0).value)
        self.max_steps = int(self.declare_parameter("max_steps", DEFAULT_MAX_STEPS).value)
        self.lockstep = bool(self.declare_parameter("lockstep", False).value)
        rate_hz = float(self.declare_parameter("rate_hz", 10.0).value)
        if self.max_steps < 1 or rate_hz <= 0:
            raise ValueError(f"max_steps must be >= 1 and rate_hz > 0 (got {self.max_steps}, {rate_hz})")
        self.sim = MetaWorldTask(self.task_name)
        qos = lockstep_qos()
        self.camera_publisher = self.create_publisher(Image, camera_topic(CAMERA), qos)
        self.joint_publisher = self.create_publisher(JointState, JOINT_STATES, qos)
        self.instruction_publisher = self.create_publisher(String, INSTRUCTION, INSTRUCTION_QOS)
        self.event_publisher = self.create_publisher(String, EPISODE_EVENTS, qos)
        self.diagnostics_publisher = self.create_publisher(DiagnosticArray, DIAGNOSTICS, DIAGNOSTICS_QOS)
        self.create_subscription(Float64MultiArray, COMMAND_TOPICS["float64_multi_array"], self._on_command, qos)
        self.create_subscription(JointTrajectory, COMMAND_TOPICS["joint_trajectory"], self._on_command, qos)
        self.action = np.zeros(len(ACTION_NAMES))
        self.episode = -1
        self.successes = 0
        self.bad_commands = 0
        self.instruction_publisher.publish(String(data=self.sim.text))
        self._start_episode()
        if not self.lockstep:
            self.create_timer(1.0 / rate_hz, self.step)
        self.create_timer(1.0, self._publish_diagnostics)

    def step(self) -> StepResult | None:
        """Advance the env one step with the current action and publish what it sees."""
        if not self.context.ok():  # shutting down: a timer may still fire once
            return None
        result = self.sim.step(self.action)
        self.steps += 1
        self.episode_return += result.reward
        self._publish(result)
        if result.success or self.steps >= self.max_steps:
            self.successes += int(result.success)
            self._event("success" if result.success else "timeout")
            self._start_episode()
        return result

    def _start_episode(self) -> None:
        self.episode += 1
        self.steps, self.episode_return = 0, 0.0
        self._publish(self.sim.reset(self.seed + self.episode))
        self._event("start")

    def _on_command(self, msg: Float64MultiArray | JointTrajectory) -> None:
        positions = command_positions(msg)
        if isinstance(msg, JointTrajectory) and list(msg.joint_names) != list(ACTION_NAMES):
            positions = np.array([dict(zip(msg.joint_names, positions)).get(n, np.nan) for n in ACTION_NAMES])
        if positions.shape != (len(ACTION_NAMES),) or not np.all(np.isfinite(positions)):
            self.bad_commands += 1
            self.get_logger().warning(f"ignored a command: need {len(ACTION_NAMES)} finite values "
                                      f"{list(ACTION_NAMES)}, got {positions.tolist()}", throttle_duration_sec=5.0)
            return
        self.action = positions
        if self.lockstep:
            self.step()

    def _publish(self, result: StepResult) -> None:
        stamp = ns_to_time(self.get_clock().now().nanoseconds)
        image = array_to_image(result.image, "rgb8", frame_id=CAMERA)
        image.header.stamp = stamp
        joints = JointState(name=list(STATE_NAMES), position=result.state.astype(np.float64).tolist())
        joints.header.stamp = stamp
        self.camera_publisher.publish(image)
        self.joint_publisher.publish(joints)

    def _event(self, kind: str) -> None:
        event = {"event": kind, "task": self.task_name, "episode": self.episode, "seed": self.seed + self.episode,
                 "step": self.steps, "return": round(self.episode_return, 4)}
        self.event_publisher.publish(String(data=json.dumps(event)))
        if kind != "start":
            self.get_logger().info(f"episode {self.episode} (seed {event['seed']}): {kind} after {self.steps} steps")

    def diagnostic_status(self) -> DiagnosticStatus:
        values = {"task": self.task_name, "episode": self.episode, "step": self.steps, "successes": self.successes,
                  "ignored_commands": self.bad_commands, "mode": "lockstep" if self.lockstep else "live"}
        return DiagnosticStatus(level=DiagnosticStatus.OK, name=f"{self.get_name()}: Meta-World {self.task_name}",
                                message=f"episode {self.episode}, {self.successes} succeeded so far",
                                hardware_id="metaworld", values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])

    def _publish_diagnostics(self) -> None:
        if not self.context.ok():
            return
        msg = DiagnosticArray(status=[self.diagnostic_status()])
        msg.header.stamp = ns_to_time(self.get_clock().now().nanoseconds)
        self.diagnostics_publisher.publish(msg)

    def destroy_node(self) -> None:
        if getattr(self, "sim", None) is not None:  # None when the constructor failed
            self.sim.close()
            self.sim = None
        super().destroy_node()


def main(args=None) -> None:
    import argparse
    import sys

    import rclpy
    from rclpy._rclpy_pybind11 import RCLError
    from rclpy.executors import ExternalShutdownException
    from rclpy.utilities import remove_ros_args

    argv = sys.argv if args is None else args
    parser = argparse.ArgumentParser(
        prog="embodied-ros-metaworld-sim", description=__doc__.splitlines()[0],
        epilog="Settings are ROS parameters: --ros-args -p task:=reach-v3 -p seed:=0 -p max_steps:=N "
               "-p lockstep:=true|false -p rate_hz:=10.0")
    parser.parse_args(remove_ros_args(argv)[1:])  # --help, or refuse what is not a ROS argument
    rclpy.init(args=argv)
    try:
        node = MetaWorldSim()
    except (RuntimeError, ValueError) as error:
        print(f"embodied-ros-metaworld-sim: {error}", file=sys.stderr)
        rclpy.try_shutdown()
        sys.exit(2)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RCLError:  # a step that was publishing when a signal shut the context down
        if rclpy.ok():
            raise
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
