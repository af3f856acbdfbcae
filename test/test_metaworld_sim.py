"""The Meta-World simulator node in lock-step: it publishes what the env sees, steps once per command,
and reports the episode's end; driven by the task's scripted expert it reports success."""

import json

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String

from embodied_ros.node_infra.topics import COMMAND_TOPICS, DIAGNOSTICS, JOINT_STATES, camera_topic, lockstep_qos
from embodied_ros.nodes.metaworld_sim import EPISODE_EVENTS, MetaWorldSim
from embodied_ros.sim.metaworld import ACTION_NAMES, CAMERA, IMAGE_SIZE, STATE_NAMES, state_vector
from domains import next_domain


class Probe:
    """A node that records what the simulator publishes and sends it commands."""

    def __init__(self, context):
        self.node = Node("probe", context=context)
        self.images, self.states, self.events, self.diagnostics = [], [], [], []
        qos = lockstep_qos()
        self.node.create_subscription(Image, camera_topic(CAMERA), self.images.append, qos)
        self.node.create_subscription(JointState, JOINT_STATES, self.states.append, qos)
        self.node.create_subscription(String, EPISODE_EVENTS, lambda m: self.events.append(json.loads(m.data)), qos)
        self.node.create_subscription(DiagnosticArray, DIAGNOSTICS, self.diagnostics.append, 10)
        self.commands = self.node.create_publisher(Float64MultiArray, COMMAND_TOPICS["float64_multi_array"], qos)


def _run(parameters, drive):
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        sim = MetaWorldSim(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in parameters.items()])
        probe = Probe(context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(sim)
        executor.add_node(probe.node)

        def spin_until(done, limit=400):
            for _ in range(limit):
                if done():
                    return True
                executor.spin_once(timeout_sec=0.02)
            return done()

        try:
            return drive(sim, probe, spin_until)
        finally:
            executor.shutdown()
            probe.node.destroy_node()
            sim.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


def test_expert_commands_through_the_node_reach_the_goal_and_success_is_reported():
    def drive(sim, probe, spin_until):
        assert spin_until(lambda: probe.states and probe.images and probe.events)
        first = probe.states[-1]
        assert list(first.name) == list(STATE_NAMES)
        np.testing.assert_allclose(first.position, state_vector(sim.sim.observation), rtol=0, atol=1e-6)
        image = probe.images[-1]
        assert (image.height, image.width, image.encoding) == (IMAGE_SIZE, IMAGE_SIZE, "rgb8")
        assert probe.events[0]["event"] == "start" and probe.events[0]["seed"] == 5
        expert = sim.sim.expert()
        for step in range(1, 80):
            before = len(probe.states)
            probe.commands.publish(Float64MultiArray(data=expert().astype(float).tolist()))
            assert spin_until(lambda: len(probe.states) > before), f"no state after command {step}"
            if any(e["event"] == "success" for e in probe.events):
                break
        ends = [e for e in probe.events if e["event"] != "start"]
        assert ends and ends[0]["event"] == "success" and ends[0]["episode"] == 0, probe.events
        assert 10 < ends[0]["step"] < 80 and ends[0]["return"] > 0
        assert spin_until(lambda: probe.events[-1]["event"] == "start")
        assert (probe.events[-1]["episode"], probe.events[-1]["seed"]) == (1, 6)  # the next episode began
        status = sim.diagnostic_status()
        assert {kv.key: kv.value for kv in status.values}["successes"] == "1"
        return ends[0]["step"]

    steps = _run({"task": "reach-v3", "seed": 5, "lockstep": True, "max_steps": 100}, drive)
    assert steps == _run({"task": "reach-v3", "seed": 5, "lockstep": True, "max_steps": 100}, drive)  # lock-step


def test_a_malformed_command_is_ignored_and_counted_and_the_step_limit_ends_an_episode():
    def drive(sim, probe, spin_until):
        assert spin_until(lambda: probe.states)
        probe.commands.publish(Float64MultiArray(data=[0.1, 0.2]))
        probe.commands.publish(Float64MultiArray(data=[float("nan")] * len(ACTION_NAMES)))
        assert spin_until(lambda: sim.bad_commands == 2)
        assert sim.steps == 0  # nothing stepped the env
        for _ in range(3):
            probe.commands.publish(Float64MultiArray(data=[0.0] * len(ACTION_NAMES)))
        assert spin_until(lambda: any(e["event"] == "timeout" for e in probe.events))
        timeout = next(e for e in probe.events if e["event"] == "timeout")
        assert (timeout["episode"], timeout["step"]) == (0, 3)

    _run({"task": "reach-v3", "seed": 1, "lockstep": True, "max_steps": 3}, drive)
