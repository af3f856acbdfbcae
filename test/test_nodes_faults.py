"""Faults on a free-running composed pi0.5 graph: a camera that stops, NaN joint states, inputs
stamped in the future, a malformed image, raw or compressed. No node crashes; the controller holds within one control period of the fault
being seen, says why on /diagnostics, and streams again once the input is good."""

import pytest
import rclpy
from rclpy.context import Context

from embodied_ros.graph.composed import ComposedGraph
from embodied_ros.node_infra.config import load_config
from embodied_ros.pipeline.stages import load_runtime
from domains import next_domain
from graph_bundles import pi05_bundle
from graph_harness import Outside, streaming_since, wait_for

STEP_S = 0.1


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    return load_runtime(pi05_bundle(tmp_path_factory))


@pytest.fixture
def running_graph(runtime, request):
    config = load_config(None, {"schedule.step_period_s": STEP_S, "schedule.perception": 1,
                                "inputs.max_age_s": 0.3, "synthetic.camera_rate_hz": 20.0,
                                "synthetic.joint_state_rate_hz": 50.0, "diagnostics.period_s": 0.5,
                                "inputs.image_transport": getattr(request, "param", "raw")})
    domain = next_domain()
    context = Context()
    rclpy.init(context=context, domain_id=domain)
    graph = ComposedGraph(config, context=context, runtime=runtime)
    outside = Outside(config, runtime.spec, domain)
    try:  # a graph that fails to start still leaves no spinning thread behind (it aborts the interpreter's exit)
        graph.start()
        wait_for(lambda: streaming_since(outside.probe, 0), 30, "the controller to stream")
        yield graph, outside
    finally:
        graph.stop()
        outside.close()
        rclpy.try_shutdown(context=context)


def _hold_then_recover(graph, outside, inject, clear, reason_part):
    probe = outside.probe
    injected_ns = outside.now_ns()
    inject()
    wait_for(lambda: probe.first_input_error(injected_ns) is not None, 5, f"an input error ({reason_part})")
    error_ns, _, message = probe.first_input_error(injected_ns)
    assert reason_part in message
    wait_for(lambda: probe.first_controller_state(lambda m: reason_part in m, error_ns) is not None, 5,
             "the controller to report the hold")
    hold_ns, hold_message = probe.first_controller_state(lambda m: reason_part in m, error_ns)
    assert hold_message.startswith("holding: inputs: ")
    hold_latency_s = (hold_ns - error_ns) / 1e9
    print(f"{reason_part}: input error -> controller hold in {hold_latency_s * 1e3:.1f} ms")
    assert hold_latency_s <= STEP_S, f"hold took {hold_latency_s * 1e3:.0f} ms, more than one control period"
    cleared_ns = outside.now_ns()
    clear()
    wait_for(lambda: streaming_since(probe, cleared_ns), 15, "the controller to stream again")
    assert all(node.active for node in graph.nodes.values())  # nobody crashed or fell out of active


def test_camera_that_stops_publishing(running_graph, runtime):
    graph, outside = running_graph
    robot, camera = outside.robot, runtime.spec.camera_names[0]
    _hold_then_recover(graph, outside, lambda: robot.paused_cameras.add(camera),
                       lambda: robot.paused_cameras.clear(), f"camera {camera}: newest message is")


def test_nan_in_joint_states(running_graph, runtime):
    graph, outside = running_graph
    robot, joint = outside.robot, runtime.spec.state_names[3]
    _hold_then_recover(graph, outside, lambda: setattr(robot, "nan_joint", joint),
                       lambda: setattr(robot, "nan_joint", None), f"joint_states: non-finite position: {joint}=nan")


def test_inputs_stamped_an_hour_ahead(running_graph, runtime):
    graph, outside = running_graph
    robot = outside.robot
    _hold_then_recover(graph, outside, lambda: setattr(robot, "stamp_offset_ns", 3600 * 10**9),
                       lambda: setattr(robot, "stamp_offset_ns", 0), "ms in the future (limit 100 ms)")


def test_malformed_image(running_graph, runtime):
    graph, outside = running_graph
    robot, camera = outside.robot, runtime.spec.camera_names[-1]
    height, width = runtime.spec.image_size
    _hold_then_recover(graph, outside, lambda: setattr(robot, "truncated_camera", camera),
                       lambda: setattr(robot, "truncated_camera", None),
                       f"camera {camera}: {width}x{height} rgb8 image with step {3 * width} needs "
                       f"{3 * width * height} bytes")


@pytest.mark.parametrize("running_graph", ["compressed"], indirect=True)
def test_truncated_jpeg_from_a_compressed_camera(running_graph, runtime):
    graph, outside = running_graph
    robot, camera = outside.robot, runtime.spec.camera_names[0]
    _hold_then_recover(graph, outside, lambda: setattr(robot, "truncated_camera", camera),
                       lambda: setattr(robot, "truncated_camera", None),
                       f"camera {camera}: cannot decode the JPEG data")
