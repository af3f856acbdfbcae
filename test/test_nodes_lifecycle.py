"""Lifecycle of the graph's nodes: a bad bundle leaves a node unconfigured without crashing it;
deactivating the action head makes the controller hold; deactivating the controller sends one
hold command and stops the stream; activating again resumes. A composed stage keeps reporting
while it computes."""

import threading
import time

import rclpy
from rclpy.context import Context
from rclpy.lifecycle import TransitionCallbackReturn

from embodied_ros.graph.composed import ComposedGraph
from embodied_ros.node_infra.config import load_config
from embodied_ros.nodes.perception import PerceptionNode
from domains import next_domain
from fake_runtime import FakeRuntime
from graph_harness import Outside, streaming_since, wait_for


def test_configure_with_a_missing_bundle_fails_cleanly(tmp_path, capfd):
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        node = PerceptionNode(parameters={"bundle": str(tmp_path / "missing.gguf")}, context=context)
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.trigger_activate() == TransitionCallbackReturn.ERROR  # still unconfigured
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)
    assert "configure failed" in capfd.readouterr().err


def test_deactivate_and_activate_again():
    runtime = FakeRuntime()
    config = load_config(None, {"schedule.step_period_s": 0.1, "diagnostics.period_s": 0.5,
                                "controller.own_process": False})  # this test drives the controller node itself
    domain = next_domain()
    context = Context()
    rclpy.init(context=context, domain_id=domain)
    graph = ComposedGraph(config, context=context, runtime=runtime)
    outside = Outside(config, runtime.spec, domain)
    graph.start()
    probe = outside.probe
    try:
        wait_for(lambda: streaming_since(probe, 0), 20, "the controller to stream")
        action = graph.nodes["action"]
        stopped_ns = outside.now_ns()
        assert action.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
        wait_for(lambda: probe.first_controller_state(lambda m: "ran out" in m, stopped_ns) is not None, 10,
                 "the controller to hold once the action head stops")
        resumed_ns = outside.now_ns()
        assert action.trigger_activate() == TransitionCallbackReturn.SUCCESS
        wait_for(lambda: streaming_since(probe, resumed_ns), 15, "streaming again")

        controller = graph.nodes["controller"]
        sent_before = len(probe.command_times)
        assert controller.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
        wait_for(lambda: len(probe.command_times) > sent_before, 5, "the hold command sent on deactivate")
        wait_for(lambda: "inactive" in getattr(probe.status_of(": controller"), "message", ""), 5,
                 "the controller to report inactive")
        time.sleep(0.2)  # commands sent before the deactivation may still be on their way
        quiet = len(probe.command_times)
        time.sleep(0.3)
        assert len(probe.command_times) == quiet  # an inactive controller sends nothing
        assert controller.trigger_activate() == TransitionCallbackReturn.SUCCESS
        wait_for(lambda: len(probe.command_times) > quiet + 10, 5, "commands to flow again")
    finally:
        graph.stop()
        outside.close()
        rclpy.try_shutdown(context=context)


def test_a_failing_callback_is_logged_and_the_thread_keeps_spinning(capfd):
    from rclpy.executors import SingleThreadedExecutor

    from embodied_ros.node_infra.spinning import SpinThread

    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    node = rclpy.create_node("flaky", context=context)
    calls = []

    def tick():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first tick fails")

    node.create_timer(0.01, tick)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = SpinThread(executor, "flaky-thread")
    spinner.start()
    try:
        wait_for(lambda: len(calls) > 5, 5, "the timer to keep firing after its failure")
    finally:
        spinner.stop()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert "first tick fails" in capfd.readouterr().err


def test_a_shutdown_signal_mid_wait_ends_the_thread_without_an_error(capfd):
    """rclpy's SIGINT/SIGTERM handler shuts the context down from another thread; an executor then
    waiting fails building its wait set ("the given context is not valid"): the end, not a failure."""
    from rclpy.executors import SingleThreadedExecutor

    from embodied_ros.node_infra.spinning import SpinThread

    context = Context()
    rclpy.init(context=context, domain_id=next_domain())

    class ShutDownMidWait(SingleThreadedExecutor):
        def spin_until_future_complete(self, future, timeout_sec=None):
            rclpy.shutdown(context=context)
            raise RuntimeError("failed to initialize wait set: the given context is not valid")

    spinner = SpinThread(ShutDownMidWait(context=context), "signalled-thread")
    spinner.start()
    spinner._thread.join(timeout=5)
    assert not spinner._thread.is_alive()
    spinner.stop()
    assert "callback failed" not in capfd.readouterr().err


class _SlowPerception(FakeRuntime):
    """Perception that blocks until released, as a long vision-tower run would."""

    def __init__(self):
        super().__init__()
        self.computing = threading.Event()
        self.release = threading.Event()

    def encode(self, observation):
        self.computing.set()
        self.release.wait(timeout=10)
        return super().encode(observation)


def test_a_composed_stage_publishes_diagnostics_while_it_computes():
    runtime = _SlowPerception()
    config = load_config(None, {"schedule.step_period_s": 0.1, "diagnostics.period_s": 0.1})
    domain = next_domain()
    context = Context()
    rclpy.init(context=context, domain_id=domain)
    graph = ComposedGraph(config, context=context, runtime=runtime)
    outside = Outside(config, runtime.spec, domain)
    graph.start()
    try:
        wait_for(runtime.computing.is_set, 20, "the perception stage to start computing")
        reported = outside.probe.status_count(": perception")
        wait_for(lambda: outside.probe.status_count(": perception") >= reported + 3, 5,
                 "diagnostics of the perception stage while it computes")
        assert not runtime.release.is_set()
    finally:
        runtime.release.set()
        graph.stop()
        outside.close()
        rclpy.try_shutdown(context=context)
