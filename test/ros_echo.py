"""A separate process for message tests: republishes every ActionChunk and Tensor it receives.

    python ros_echo.py   (ROS_DOMAIN_ID from the environment; exits after 60 s or on SIGTERM)
"""

import signal
import sys
import time

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.qos import QoSProfile, ReliabilityPolicy

from embodied_ros.msg import ActionChunk, Tensor


def main() -> int:
    rclpy.init()
    signal.signal(signal.SIGTERM, lambda *_: rclpy.shutdown())
    node = rclpy.create_node("ros_echo")
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    for msg_type, name in ((ActionChunk, "chunk"), (Tensor, "tensor")):
        publisher = node.create_publisher(msg_type, f"echo/{name}/out", qos)
        node.create_subscription(msg_type, f"echo/{name}/in", publisher.publish, qos)
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    try:
        while rclpy.ok() and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
