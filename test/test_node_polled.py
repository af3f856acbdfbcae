"""Polled subscriptions (node_infra/polled.py): no executor wakes for their messages, a poll hands over
the newest one only, their events still reach the handlers, and a free-running graph reads its
cameras and joint states that way while lock-step still takes each message as it comes."""

import time

import pytest
import rclpy
from rclpy.context import Context
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import JointState

from embodied_ros.node_infra.config import load_config
from embodied_ros.node_infra.drive import drive_for
from embodied_ros.node_infra.polled import PolledGroup, PolledSubscription, ignore_message
from domains import next_domain
from graph_harness import wait_for

KEEP_THREE = QoSProfile(depth=3)  # reliable: nothing published here is lost on the way


@pytest.fixture
def ros():
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    publisher_node = Node("polled_test_publisher", context=context)
    node = Node("polled_test_reader", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    yield publisher_node, node, executor
    executor.shutdown()
    node.destroy_node()
    publisher_node.destroy_node()
    rclpy.try_shutdown(context=context)


def _joint_state(value: float) -> JointState:
    return JointState(name=["j"], position=[value])


def _polled(node: Node, topic: str, qos, received: list, **events) -> PolledSubscription:
    callbacks = SubscriptionEventCallbacks(**events) if events else None
    subscription = node.create_subscription(JointState, topic, ignore_message, qos, callback_group=PolledGroup(),
                                            event_callbacks=callbacks)
    return PolledSubscription(subscription, received.append)


def test_a_poll_hands_over_only_the_newest_message_and_no_executor_delivers_any(ros):
    publisher_node, node, executor = ros
    received = []
    polled = _polled(node, "joints", KEEP_THREE, received)
    publisher = publisher_node.create_publisher(JointState, "joints", KEEP_THREE)
    wait_for(lambda: publisher.get_subscription_count() == 1, 10, "the reader to match")
    for value in (1.0, 2.0, 3.0):
        publisher.publish(_joint_state(value))
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)
    assert received == []  # the executor never took them
    assert polled.poll() is True
    assert [msg.position[0] for msg in received] == [3.0]
    assert polled.poll() is False and len(received) == 1


def test_an_executor_does_not_spin_on_a_polled_subscription_holding_a_message(ros):
    """With Fast DDS a subscription's event handlers keep a wait set ready while a message waits untaken;
    an executor waiting on them would run a core flat out between polls."""
    publisher_node, node, executor = ros
    received = []
    _polled(node, "joints", KEEP_THREE, received, incompatible_qos=lambda event: None)
    publisher = publisher_node.create_publisher(JointState, "joints", KEEP_THREE)
    wait_for(lambda: publisher.get_subscription_count() == 1, 10, "the reader to match")
    publisher.publish(_joint_state(1.0))
    time.sleep(0.1)
    started_cpu, started = time.thread_time(), time.monotonic()
    while time.monotonic() - started < 1.0:
        executor.spin_once(timeout_sec=0.05)
    assert time.thread_time() - started_cpu < 0.5  # waiting, not spinning (a spinning wait costs the whole second)


def test_a_poll_reports_an_incompatible_publisher_to_the_event_handler(ros):
    publisher_node, node, _ = ros
    received, events = [], []
    reliable = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    polled = _polled(node, "joints", reliable, received, incompatible_qos=lambda event: events.append(event))
    publisher_node.create_publisher(JointState, "joints", qos_profile_sensor_data)  # best effort: cannot reach it

    def reported() -> bool:
        polled.poll()
        return bool(events)

    wait_for(reported, 10, "the incompatible publisher's event")
    assert events[0].last_policy_kind == rclpy.qos.QoSPolicyKind.RELIABILITY and received == []


@pytest.mark.parametrize("mode, polls", [("realtime", True), ("lockstep", False)])
def test_free_running_nodes_poll_their_newest_only_inputs_and_lockstep_ones_do_not(mode, polls):
    assert drive_for(load_config(None, {"schedule.mode": mode}).schedule).polls_newest is polls
