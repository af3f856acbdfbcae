"""The package's interfaces: generated, importable, and intact through serialization and real rclpy nodes."""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Duration, Time
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message, serialize_message

from embodied_ros.msg import ActionChunk, StageOutput, StageTiming, Tensor

QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)


def make_chunk(seed: int = 0) -> ActionChunk:
    rng = np.random.default_rng(seed)
    actions = rng.standard_normal((50, 7)).astype(np.float32)
    msg = ActionChunk()
    msg.header.stamp = Time(sec=1_700_000_000, nanosec=123_456_789)
    msg.header.frame_id = "base_link"
    msg.observation_stamp = Time(sec=1_700_000_000, nanosec=23_456_789)
    msg.action_period = Duration(sec=0, nanosec=20_000_000)
    msg.horizon, msg.action_dim = actions.shape
    msg.joint_names = [f"joint_{i}" for i in range(7)]
    msg.actions = actions.ravel()
    return msg


def make_tensor(array: np.ndarray, name: str = "prefix_keys") -> Tensor:
    msg = Tensor(name=name, dtype=str(array.dtype), shape=list(array.shape))
    msg.data = np.ascontiguousarray(array).tobytes()
    return msg


def tensor_array(msg: Tensor) -> np.ndarray:
    return np.frombuffer(bytes(msg.data), dtype=np.dtype(msg.dtype)).reshape(tuple(msg.shape))


def assert_chunks_equal(got: ActionChunk, expected: ActionChunk) -> None:
    assert got.header.stamp == expected.header.stamp
    assert got.header.frame_id == expected.header.frame_id
    assert got.observation_stamp == expected.observation_stamp
    assert got.action_period == expected.action_period
    assert (got.horizon, got.action_dim) == (expected.horizon, expected.action_dim)
    assert list(got.joint_names) == list(expected.joint_names)
    np.testing.assert_array_equal(
        np.asarray(got.actions, dtype=np.float32).reshape(got.horizon, got.action_dim),
        np.asarray(expected.actions, dtype=np.float32).reshape(expected.horizon, expected.action_dim),
    )


ARRAYS = [
    np.random.default_rng(1).standard_normal((4, 1, 37, 16)).astype(np.float32),
    np.random.default_rng(2).standard_normal((3, 5)).astype(np.float16),
    np.arange(-5, 6, dtype=np.int64),
    np.array([True, False, True]),
    np.array(2.5, dtype=np.float32),  # a scalar: empty shape
]


def test_action_chunk_round_trips_through_serialization():
    chunk = make_chunk()
    assert_chunks_equal(deserialize_message(serialize_message(chunk), ActionChunk), chunk)


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_tensor_round_trips_through_serialization(array):
    got = deserialize_message(serialize_message(make_tensor(array)), Tensor)
    assert got.name == "prefix_keys"
    result = tensor_array(got)
    assert result.dtype == array.dtype and result.shape == array.shape
    np.testing.assert_array_equal(result, array)


def test_stage_output_and_timing_round_trip():
    output = StageOutput(stage="prefix", sequence=7, step=12, handle="")
    output.observation_stamp = Time(sec=5, nanosec=6)
    output.tensors = [make_tensor(a, f"t{i}") for i, a in enumerate(ARRAYS)]
    got = deserialize_message(serialize_message(output), StageOutput)
    assert (got.stage, got.sequence, got.step, got.observation_stamp) == ("prefix", 7, 12, Time(sec=5, nanosec=6))
    for msg, array in zip(got.tensors, ARRAYS):
        np.testing.assert_array_equal(tensor_array(msg), array)

    timing = StageTiming(stage="action", sequence=3, step=4, compute_ms=12.5, staleness_ms=40.25)
    got = deserialize_message(serialize_message(timing), StageTiming)
    assert (got.stage, got.sequence, got.step, got.compute_ms, got.staleness_ms) == ("action", 3, 4, 12.5, 40.25)


def test_messages_reject_wrong_field_types():
    with pytest.raises(TypeError):
        Tensor(shape=[1.5])
    with pytest.raises(TypeError):
        ActionChunk(actions=["not a number"])


def _spin_until(executor, predicate, timeout_s: float, on_wait=None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        if on_wait is not None:
            on_wait()
        executor.spin_once(timeout_sec=0.05)
    return predicate()


def test_chunk_and_tensor_travel_between_two_nodes_in_one_process(ros_domain_id):
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=ros_domain_id)
    try:
        talker = rclpy.create_node("talker", context=context)
        listener = rclpy.create_node("listener", context=context)
        received = {"chunk": [], "tensor": []}
        listener.create_subscription(ActionChunk, "chunk", received["chunk"].append, QOS)
        listener.create_subscription(Tensor, "tensor", received["tensor"].append, QOS)
        chunk_publisher = talker.create_publisher(ActionChunk, "chunk", QOS)
        tensor_publisher = talker.create_publisher(Tensor, "tensor", QOS)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(talker)
        executor.add_node(listener)
        assert _spin_until(executor, lambda: chunk_publisher.get_subscription_count() > 0
                           and tensor_publisher.get_subscription_count() > 0, 10.0)
        chunk, tensor = make_chunk(3), make_tensor(ARRAYS[0])
        chunk_publisher.publish(chunk)
        tensor_publisher.publish(tensor)
        assert _spin_until(executor, lambda: received["chunk"] and received["tensor"], 10.0)
        assert_chunks_equal(received["chunk"][0], chunk)
        np.testing.assert_array_equal(tensor_array(received["tensor"][0]), ARRAYS[0])
        executor.shutdown()
    finally:
        rclpy.shutdown(context=context)


def test_chunk_and_tensor_travel_to_another_process_and_back(ros_domain_id):
    echo = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("ros_echo.py"))],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ),
    )
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=ros_domain_id)
    try:
        assert echo.stdout.readline().strip() == "ready"
        node = rclpy.create_node("sender", context=context)
        received = {"chunk": [], "tensor": []}
        node.create_subscription(ActionChunk, "echo/chunk/out", received["chunk"].append, QOS)
        node.create_subscription(Tensor, "echo/tensor/out", received["tensor"].append, QOS)
        chunk_publisher = node.create_publisher(ActionChunk, "echo/chunk/in", QOS)
        tensor_publisher = node.create_publisher(Tensor, "echo/tensor/in", QOS)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        big = np.random.default_rng(5).standard_normal((18, 1, 300, 64)).astype(np.float32)  # 1.3 MB
        chunk, tensor = make_chunk(4), make_tensor(big)

        last_sent = [0.0]

        def resend():  # until the other process has discovered us, publications can be lost
            if time.monotonic() - last_sent[0] > 0.5:
                chunk_publisher.publish(chunk)
                tensor_publisher.publish(tensor)
                last_sent[0] = time.monotonic()

        assert _spin_until(executor, lambda: received["chunk"] and received["tensor"], 30.0, resend), \
            "nothing came back from the echo process within 30 s"
        assert_chunks_equal(received["chunk"][0], chunk)
        np.testing.assert_array_equal(tensor_array(received["tensor"][0]), big)
        executor.shutdown()
    finally:
        rclpy.shutdown(context=context)
        echo.terminate()
        echo.wait(timeout=10)
