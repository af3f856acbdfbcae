"""GraphExecutor (node_infra/spinning.py): a subscription the wait set finds ready again and again with
nothing to take is handed to its node, which subscribes anew; the new subscription delivers."""

import time

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from std_msgs.msg import String

from embodied_ros.node_infra import spinning
from embodied_ros.nodes.observation import ObservationNode
from graph_harness import next_domain


def test_a_subscription_ready_with_nothing_to_take_is_made_anew_and_then_delivers(monkeypatch):
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    node = ObservationNode(context=context)
    heard = []
    try:
        stuck = node.subscribe(String, "probe_topic", heard.append, 10)
        executor = spinning.GraphExecutor(context=context)
        executor.add_node(node)
        clock = [100.0]
        with monkeypatch.context() as patch:  # the middleware's part: a take that finds nothing, every time
            patch.setattr(SingleThreadedExecutor, "_take_subscription", lambda self, sub: None)
            patch.setattr(spinning.time, "monotonic", lambda: clock[0])
            for _ in range(spinning.STUCK_EMPTY_TAKES + 50):  # many empty takes, but within a moment
                executor._take_subscription(stuck)
            clock[0] += spinning.STUCK_FOR_S - 0.1
            executor._take_subscription(stuck)
            assert node.renewed_subscriptions == 0 and stuck in node.subscriptions
            clock[0] += 0.1
            executor._take_subscription(stuck)
        assert node.renewed_subscriptions == 1 and stuck not in node.subscriptions
        [fresh] = [s for s in node.subscriptions if s.topic_name == "/probe_topic"]
        assert fresh.callback == heard.append and fresh.qos_profile.depth == 10
        publisher = node.create_publisher(String, "probe_topic", 10)
        deadline = time.monotonic() + 5
        while not heard and time.monotonic() < deadline:
            publisher.publish(String(data="after"))
            executor.spin_once(timeout_sec=0.1)
        assert [m.data for m in heard][:1] == ["after"]
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)
