"""The world node of a model without a world model (pi0.5, separate layout): it configures and
activates, but subscribes to nothing and runs nothing, even while prefixes arrive, and reports
idle at level OK (inactive before activation)."""

import time

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn

from embodied_ros.node_infra.topics import stage_qos, stage_topic
from embodied_ros.node_infra.transport import encode_output
from embodied_ros.msg import StageOutput
from embodied_ros.nodes.world import WorldNode
from embodied_ros.pipeline.types import StageResult
from domains import next_domain
from fake_runtime import FakeRuntime


def test_world_node_without_a_world_model_stays_idle_while_prefixes_arrive():
    runtime = FakeRuntime(has_world_model=False)
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    world = WorldNode(runtime=runtime, parameters={"transport.mode": "serialized", "diagnostics.period_s": 0.2},
                      context=context)
    sender = rclpy.create_node("prefix_sender", context=context)
    executor = SingleThreadedExecutor(context=context)
    try:
        assert world.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert world.diagnostic_status().level == DiagnosticStatus.WARN  # configured, not yet active
        assert world.trigger_activate() == TransitionCallbackReturn.SUCCESS
        assert stage_topic("prefix") not in [s.topic_name for s in world.subscriptions]
        publisher = sender.create_publisher(StageOutput, stage_topic("prefix"), stage_qos(False))
        executor.add_node(world)
        executor.add_node(sender)
        end = time.monotonic() + 1.0
        sequence = 0
        while time.monotonic() < end:
            sequence += 1
            now_ns = sender.get_clock().now().nanoseconds
            prefix = StageResult("prefix", now_ns, {"summary": np.zeros(4, np.float32)})
            publisher.publish(encode_output("prefix", sequence, 0, prefix, now_ns, None))
            executor.spin_once(timeout_sec=0.02)
        status = world.diagnostic_status()
        assert world.stats.errors == 0 and world.stats.total_runs == 0
        assert status.level == DiagnosticStatus.OK and status.message.startswith("idle")
        assert runtime.calls == []
    finally:
        executor.shutdown()
        world.destroy_node()
        sender.destroy_node()
        rclpy.try_shutdown(context=context)
