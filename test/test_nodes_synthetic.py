"""The synthetic robot of `up` and the episodes of `record-synthetic` are one simulated arm with
one set of cameras (`sim.robot`): the node's joint states and images are those functions' output."""

import sys

import numpy as np
import pytest
import rclpy
from rclpy.context import Context
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from embodied_ros.node_infra.config import load_config
from embodied_ros.node_infra.paths import default_config
from embodied_ros.nodes import synthetic
from embodied_ros.nodes.synthetic import SyntheticRobot, robot_for_model
from embodied_ros.pipeline.stages import load_runtime, read_spec
from embodied_ros.share import module_command, share_path
from embodied_ros.replay.synthetic import SyntheticConfig, measured_at, targets_at
from embodied_ros.sim import robot
from embodied_ros.sim.robot import ARM_JOINTS
from domains import next_domain
from fake_runtime import FakeRuntime

CAMERAS = {"front": (24, 32), "wrist": (16, 16)}


def test_the_node_moves_and_renders_the_simulated_arm():
    config = load_config(None, {"synthetic.joint_state_rate_hz": 100.0, "synthetic.arm_time_constant_s": 0.05})
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        node = SyntheticRobot(config, CAMERAS, ARM_JOINTS, ARM_JOINTS, context=context)
        np.testing.assert_array_equal(node.positions, robot.rest_positions(ARM_JOINTS))
        target = np.linspace(-0.5, 0.5, len(ARM_JOINTS))
        node._on_command(JointTrajectory(joint_names=list(ARM_JOINTS),
                                         points=[JointTrajectoryPoint(positions=target.tolist())]))
        for _ in range(10):
            node._step_arm()
        targets = np.vstack([robot.rest_positions(ARM_JOINTS)] + [target] * 10)
        np.testing.assert_allclose(node.positions, robot.follow(targets, 0.01, 0.05)[-1], rtol=0, atol=1e-12)
        image = node.make_image("wrist", 0)
        expected = robot.render_view(1, node.positions, CAMERAS["wrist"])
        np.testing.assert_array_equal(np.frombuffer(bytes(image.data), np.uint8).reshape(16, 16, 3), expected)
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


def test_a_view_is_the_same_picture_whatever_was_rendered_before_and_the_arm_shows_on_it():
    pose = np.array([0.2, -0.4, 0.9, 0.3, 0.0, 0.0, 1.0])
    first = robot.render_view(2, pose, (48, 64))
    robot.render_view(2, np.zeros(7), (48, 64))
    robot.render_view(2, np.full(7, np.nan), (48, 64))  # no arm drawn, no error
    robot.render_view(2, np.array([0.0, 1e6, -1e6, 3.0]), (48, 64))  # links far outside the frame
    np.testing.assert_array_equal(robot.render_view(2, pose, (48, 64)), first)
    empty = robot.render_view(2, np.full(7, np.nan), (48, 64))
    drawn = np.any(first != empty, axis=-1)
    assert 30 < drawn.sum() < drawn.size // 4  # the links and the gripper's disc, over the background
    assert np.all(first[drawn] != empty[drawn])


def test_episodes_are_the_same_arm_following_the_scripted_targets():
    config = SyntheticConfig(duration_s=1.0, seed=4)
    times = config.start_ns + np.arange(0, 1000, 20) * 1_000_000
    script = robot.minimum_jerk_targets(config.joint_names, 4, config.move_duration_s, 1.0, (times - config.start_ns) / 1e9)
    np.testing.assert_array_equal(targets_at(config, times), script)
    fine = robot.follow(targets_at(config, config.start_ns + np.arange(0, 1001) * 1_000_000), 1e-3, config.lag_s)
    np.testing.assert_allclose(measured_at(config, times), fine[::20][:len(times)], atol=5e-3)  # encoder noise 1e-3


@pytest.mark.parametrize("config_name", ["pi05.yaml", "lingbot_va.yaml"])
def test_the_robot_executable_reads_the_inputs_of_the_graph_from_the_bundle_metadata(config_name):
    config = load_config(share_path("config", config_name), {"inputs.state_joints": ["base", "lift"]})
    spec = read_spec(config.bundle)
    assert spec == load_runtime(config.bundle, "numpy").spec
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        node = robot_for_model(config, spec, context=context)
        assert node.cameras == {name: spec.image_size for name in spec.camera_names}
        assert node.joint_names[:2] == ("base", "lift") and set(spec.action_names) <= set(node.joint_names)
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


def test_the_robot_executable_refuses_a_missing_bundle_in_one_line_and_prints_help(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        synthetic.main(["embodied-ros-synthetic-robot", "--config", str(default_config()),
                        "--bundle", str(tmp_path / "missing.gguf")])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("embodied-ros-synthetic-robot: error: ") and "missing.gguf" in error
    assert error.count("\n") == 1
    with pytest.raises(SystemExit) as exited:
        synthetic.main(["embodied-ros-synthetic-robot", "--help"])
    assert exited.value.code == 0 and "--bundle" in capsys.readouterr().out


def test_a_model_family_without_spec_of_is_a_one_line_error(monkeypatch):
    import embodied_ros.models.pi05 as family

    monkeypatch.delattr(family, "spec_of")
    with pytest.raises(ValueError, match="model family 'pi05' cannot describe its inputs"):
        read_spec(load_config(share_path("config", "pi05.yaml")).bundle)


def test_the_robot_command_of_up_makes_the_robot_of_the_model_without_reading_a_bundle(tmp_path):
    spec = FakeRuntime(cameras=("front", "wrist"), image_size=(6, 8)).spec
    config = load_config(None, {"inputs.state_joints": ["base", "lift"], "synthetic.camera_rate_hz": 7.0})
    command = synthetic.robot_command(config, spec, tmp_path)
    assert command[:4] == module_command("embodied_ros.nodes.synthetic")
    make_robot = synthetic.robot_from_arguments(["embodied-ros-synthetic-robot", *command[4:],
                                                 "--ros-args", "-r", "__ns:=/arm"])
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        made, expected = make_robot(context=context), robot_for_model(config, spec, context=context)
        assert made.cameras == expected.cameras == {"front": (6, 8), "wrist": (6, 8)}
        assert made.joint_names == expected.joint_names and made.command_joints == expected.command_joints
        assert made.joint_period_s == expected.joint_period_s
        made.destroy_node()
        expected.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


@pytest.mark.parametrize("camera", ["front", "front=0x8", "=6x8", "front=6by8"])
def test_the_robot_executable_refuses_a_malformed_camera_in_one_line(camera, capsys):
    with pytest.raises(SystemExit) as exited:
        synthetic.main(["embodied-ros-synthetic-robot", "--camera", camera])
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "NAME=HEIGHTxWIDTH" in error and camera in error


def test_a_program_of_a_separate_graph_gets_the_graphs_namespace_and_remaps(tmp_path):
    from embodied_ros.graph.processes import SeparateGraph

    graph = SeparateGraph(load_config(None), (), namespace="arm", remaps=["joint_states:=/arm/joint_states"],
                          log_dir=tmp_path)
    graph.start()
    graph.spawn("echo", [sys.executable, "-c", "import sys; print(sys.argv[1:])"])
    graph.processes["echo"].wait(timeout=30)
    assert graph.stop() == {"echo": 0}
    assert graph.log("echo").strip() == str(["--ros-args", "-r", "__ns:=/arm", "-r", "joint_states:=/arm/joint_states"])
