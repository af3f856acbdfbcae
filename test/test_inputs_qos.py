"""Every input of the graph takes what common publishers offer: `ros2 topic pub` and most user code
(reliable, volatile), camera and robot drivers (best effort "sensor data", or reliable), latched
publishers (transient local). A latched instruction published before the graph starts still arrives.
A publisher that can never match is named, with its topic and policy, in the reason the graph holds,
on /diagnostics and in `up`'s live line."""

import time

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.context import Context
from rclpy.event_handler import PublisherEventCallbacks
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import (
    DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data, qos_profile_system_default,
)
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String

from embodied_ros.graph.composed import ComposedGraph
from embodied_ros.node_infra.config import load_config
from embodied_ros.graph.monitor import GraphMonitor
from embodied_ros.node_infra.spinning import SpinThread
from embodied_ros.node_infra.topics import INSTRUCTION, JOINT_STATES, camera_topic
from embodied_ros.graph.up import live_line
from embodied_ros.inputs.image import array_to_image
from embodied_ros.inputs.stamps import ns_to_time
from embodied_ros.nodes.synthetic import SyntheticRobot
from domains import next_domain
from fake_runtime import FakeRuntime
from graph_harness import Outside, wait_for

PROFILES = {
    "default": QoSProfile(depth=10),  # create_publisher(..., 10): reliable, volatile
    "system_default": qos_profile_system_default,  # `ros2 topic pub`; Fast DDS makes it transient local
    "sensor_data": qos_profile_sensor_data,  # best effort, volatile, depth 5: camera drivers
    "latched": QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL),
}
SENSOR_INPUTS = ("camera front", "camera wrist", JOINT_STATES)


class RobotWithoutTask(SyntheticRobot):
    """Cameras and joint states only: the instruction comes from the test."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.destroy_publisher(self.instruction_publisher)  # before the graph exists: its message reached no one


class Graph:
    """A composed graph on the fake runtime, and a node outside it whose publishers stand for users' ones."""

    def __init__(self, overrides=None, robot=False, before_start=None):
        self.runtime = FakeRuntime()
        self.config = load_config(None, {"schedule.step_period_s": 0.1, "diagnostics.period_s": 0.2,
                                         **(overrides or {})})
        self.domain = next_domain()
        self.context = Context()
        rclpy.init(context=self.context, domain_id=self.domain)
        self.outside = Outside(self.config, self.runtime.spec, self.domain, RobotWithoutTask) if robot else None
        self.user_context = Context()
        rclpy.init(context=self.user_context, domain_id=self.domain)
        self.user = Node("user", context=self.user_context)
        self.monitor = GraphMonitor(self.config.controller.rate_hz, self.config.controller.output,
                                    context=self.user_context)
        self.incompatible_subscriptions: dict[str, int] = {}  # topic -> events the users' publishers were told of
        executor = SingleThreadedExecutor(context=self.user_context)
        executor.add_node(self.user)
        executor.add_node(self.monitor)
        self.spinner = SpinThread(executor, "user")
        self.spinner.start()
        if before_start is not None:
            before_start(self)
        self.graph = ComposedGraph(self.config, context=self.context, runtime=self.runtime)
        self.graph.start()
        self.observation = self.graph.nodes["observation"]

    def publisher(self, msg_type, topic, profile):
        """A user's publisher; an incompatible subscription it is told of is counted for `topic`."""
        self.incompatible_subscriptions[topic] = 0

        def count(event):
            self.incompatible_subscriptions[topic] += 1

        events = PublisherEventCallbacks(incompatible_qos=count)
        return self.user.create_publisher(msg_type, topic, profile, event_callbacks=events)

    def input_problem(self) -> str:
        status = self.observation.diagnostic_status()
        return status.message if status.level == DiagnosticStatus.ERROR else ""

    def close(self):
        self.graph.stop()
        if self.outside is not None:
            self.outside.close()
        self.spinner.stop()
        self.user.destroy_node()
        self.monitor.destroy_node()
        rclpy.try_shutdown(context=self.user_context)
        rclpy.try_shutdown(context=self.context)


@pytest.fixture(scope="module")
def graph():
    graph = Graph()
    yield graph
    graph.close()


def _sensor_message(name: str, runtime: FakeRuntime, stamp_ns: int):
    if name == JOINT_STATES:
        msg = JointState(name=list(runtime.spec.state_names), position=[0.1, 0.2, 0.3])
        msg.header.stamp = ns_to_time(stamp_ns)
        return msg
    height, width = runtime.spec.image_size
    return array_to_image(np.zeros((height, width, 3), np.uint8), "rgb8", stamp_ns, name)


def _topic(name: str) -> str:
    return JOINT_STATES if name == JOINT_STATES else camera_topic(name.split()[1])


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("name", SENSOR_INPUTS)
def test_each_sensor_input_takes_each_common_publisher_profile(graph, name, profile):
    msg_type = JointState if name == JOINT_STATES else Image
    publisher = graph.publisher(msg_type, _topic(name), PROFILES[profile])
    stamp_ns = graph.observation.now_ns()
    try:
        def arrived():
            publisher.publish(_sensor_message(name, graph.runtime, stamp_ns))
            latest = graph.observation.buffer.latest(name)
            return latest is not None and latest.stamp_ns == stamp_ns and latest.error is None
        wait_for(arrived, 10, f"{name} from a {profile} publisher")
    finally:
        graph.user.destroy_publisher(publisher)
    assert graph.incompatible_subscriptions[_topic(name)] == 0  # the publisher was told of no mismatch


@pytest.mark.parametrize("profile", ["default", "system_default", "latched"])
def test_the_instruction_input_takes_reliable_publishers_of_either_durability(graph, profile):
    publisher = graph.publisher(String, INSTRUCTION, PROFILES[profile])
    text = f"pick up the cube ({profile})"
    try:
        def arrived():
            publisher.publish(String(data=text))
            return graph.observation.instruction == text
        wait_for(arrived, 10, f"the instruction from a {profile} publisher")
    finally:
        graph.user.destroy_publisher(publisher)
    assert graph.incompatible_subscriptions[INSTRUCTION] == 0


def test_a_volatile_instruction_reaches_the_graph_and_a_chunk_follows():
    """What most user code does (create_publisher(String, "instruction", 10): reliable, volatile), against a
    running graph."""
    graph = Graph(robot=True)
    try:
        probe = graph.outside.probe
        time.sleep(0.5)
        assert not probe.chunk_ends and "instruction: no message received yet" in graph.input_problem()
        publisher = graph.publisher(String, INSTRUCTION, PROFILES["default"])
        wait_for(lambda: publisher.get_subscription_count() >= 1, 10, "the observation node to match")
        publisher.publish(String(data="pick up the cube"))
        wait_for(lambda: probe.chunk_ends, 10, "an action chunk after the instruction")
        assert graph.observation.instruction == "pick up the cube"
        assert graph.observation.latched_instruction is None  # no latched publisher: no second subscription
        assert graph.incompatible_subscriptions[INSTRUCTION] == 0
    finally:
        graph.close()


def test_a_latched_instruction_published_before_the_graph_starts_is_received():
    published = {}

    def publish_early(graph):
        published["publisher"] = graph.publisher(String, INSTRUCTION, PROFILES["latched"])
        published["publisher"].publish(String(data="stack the blocks"))

    graph = Graph(robot=True, before_start=publish_early)
    try:
        wait_for(lambda: graph.observation.instruction == "stack the blocks", 10, "the latched instruction")
        wait_for(lambda: graph.outside.probe.chunk_ends, 10, "an action chunk")
        published["publisher"].publish(String(data="unstack them"))  # the same message comes by two subscriptions
        wait_for(lambda: graph.observation.instruction == "unstack them", 10, "the next instruction")
    finally:
        graph.close()


def test_a_best_effort_instruction_publisher_is_named_in_the_hold_reason():
    graph = Graph(robot=True)
    try:
        publisher = graph.publisher(String, INSTRUCTION, PROFILES["sensor_data"])
        publisher.publish(String(data="never arrives"))
        expected = ("instruction: no message received yet (publisher /user on /instruction offers reliability "
                    "best_effort; the subscription requests reliable)")
        wait_for(lambda: graph.input_problem() == expected, 10, "the observation node to name the publisher")
        wait_for(lambda: graph.monitor.current_input_problem() == expected, 10, "the mismatch on /diagnostics")
        line = live_line(graph.monitor, 1.0, window_s=2.0)
        assert line.endswith(f"| inputs: {expected}")
        assert graph.observation.instruction == "" and not graph.outside.probe.chunk_ends
    finally:
        graph.close()


def test_a_best_effort_camera_against_reliable_inputs_is_named_with_the_setting_that_accepts_it():
    graph = Graph(overrides={"inputs.reliability": "reliable"})
    try:
        publisher = graph.publisher(Image, camera_topic("front"), PROFILES["sensor_data"])
        publisher.publish(_sensor_message("camera front", graph.runtime, graph.observation.now_ns()))
        expected = ("camera front: no message received yet (publisher /user on /camera/front/image_raw offers "
                    "reliability best_effort; the subscription requests reliable; set inputs.reliability: best_effort "
                    "to accept it)")
        wait_for(lambda: graph.input_problem() == expected, 10, "the observation node to name the camera publisher")
    finally:
        graph.close()


def test_a_mismatch_names_topic_policy_and_both_sides():
    from rclpy.duration import Duration
    from rclpy.qos import QoSPolicyKind

    from embodied_ros.node_infra.topics import INSTRUCTION_ANY_QOS, qos_mismatch

    assert qos_mismatch("/instruction", QoSPolicyKind.RELIABILITY, INSTRUCTION_ANY_QOS, qos_profile_sensor_data,
                        "/ns/talker") == ("publisher /ns/talker on /instruction offers reliability best_effort; "
                                          "the subscription requests reliable")
    wants_deadline = QoSProfile(depth=1, deadline=Duration(seconds=0.5))
    assert qos_mismatch("/joint_states", QoSPolicyKind.DEADLINE, wants_deadline) == (
        "a publisher on /joint_states offers an incompatible deadline; the subscription requests 0.5 s")


def test_a_publisher_discovery_has_not_named_yet_is_named_once_it_is_known():
    from types import SimpleNamespace

    from rclpy.qos import QoSPolicyKind

    from embodied_ros.node_infra.topics import INSTRUCTION_ANY_QOS
    from embodied_ros.nodes.input_qos import UNKNOWN_NODE_NAME, InputMismatches

    publisher = SimpleNamespace(node_name=UNKNOWN_NODE_NAME, node_namespace="_NODE_NAMESPACE_UNKNOWN_",
                                qos_profile=qos_profile_sensor_data)
    warnings, notes, made = [], [], {}
    node = SimpleNamespace(get_publishers_info_by_topic=lambda topic: [publisher], resolve_topic_name=lambda t: f"/{t}",
                           get_logger=lambda: SimpleNamespace(warning=warnings.append))

    def subscribe(msg_type, topic, callback, qos, events):
        made["events"] = events
        return SimpleNamespace(topic_name=f"/{topic}", qos_profile=qos)

    mismatches = InputMismatches(node, subscribe, lambda name, text: notes.append((name, text)))
    mismatches.subscribe("instruction", String, "instruction", print, INSTRUCTION_ANY_QOS)
    made["events"].incompatible_qos(SimpleNamespace(last_policy_kind=QoSPolicyKind.RELIABILITY))
    unnamed = "a publisher on /instruction offers reliability best_effort; the subscription requests reliable"
    assert notes == [("instruction", unnamed)] and warnings == [f"instruction: {unnamed}"]
    mismatches.name_unnamed(lambda name: True)  # discovery still does not know the node
    assert notes[-1] == ("instruction", unnamed)
    publisher.node_name, publisher.node_namespace = "talker", "/"
    mismatches.name_unnamed(lambda name: True)
    assert notes[-1] == ("instruction", "publisher /talker on /instruction offers reliability best_effort; "
                                        "the subscription requests reliable")
    mismatches.name_unnamed(lambda name: True)  # named: nothing more to say
    assert len(notes) == 3 and len(warnings) == 1


def test_an_event_that_comes_before_its_subscription_is_made_is_explained():
    """An executor on another thread can run the subscription's events before `create_subscription` returns."""
    from types import SimpleNamespace

    from rclpy.qos import QoSPolicyKind

    from embodied_ros.node_infra.topics import INSTRUCTION_ANY_QOS
    from embodied_ros.nodes.input_qos import InputMismatches

    publisher = SimpleNamespace(node_name="talker", node_namespace="/", qos_profile=qos_profile_sensor_data)
    notes = []
    node = SimpleNamespace(get_publishers_info_by_topic=lambda topic: [publisher] if topic == "/robot/instruction" else [],
                           resolve_topic_name=lambda topic: f"/robot/{topic}",
                           get_logger=lambda: SimpleNamespace(warning=lambda text: None))

    def subscribe_and_hear_at_once(msg_type, topic, callback, qos, events):
        events.incompatible_qos(SimpleNamespace(last_policy_kind=QoSPolicyKind.RELIABILITY))
        return SimpleNamespace(topic_name=f"/robot/{topic}", qos_profile=qos)

    mismatches = InputMismatches(node, subscribe_and_hear_at_once, lambda name, text: notes.append((name, text)))
    mismatches.subscribe("instruction", String, "instruction", print, INSTRUCTION_ANY_QOS)
    assert notes == [("instruction", "publisher /talker on /robot/instruction offers reliability best_effort; "
                                     "the subscription requests reliable")]
    assert mismatches.requested["instruction"].topic == "/robot/instruction"
