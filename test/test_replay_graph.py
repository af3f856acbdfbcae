"""Replay of bags through the real node graph (rclpy), lock-step and realtime, with the test runtime.

Checks: outputs equal direct `pipeline.stages.infer` calls on the same observations and noise; two
replays are identical; the input bag is untouched; the output bag, metrics.json and report.html hold
what they should; missing cameras and foreign topic names work as documented.
"""

import hashlib
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from embodied_ros.node_infra.config import load_config
from embodied_ros.pipeline.noise import stage_noise
from embodied_ros.pipeline.stages import infer
from embodied_ros.replay import messages as m
from embodied_ros.replay.bag_reader import BagError, read_episode
from embodied_ros.replay.runner import ReplayOptions, replay, summary_lines
from embodied_ros.replay.steps import StateSelector, observation_at, plan_steps
from embodied_ros.replay.synthetic import SyntheticConfig, write_episode
from embodied_ros.replay.topics import TopicMap
from fake_runtime import FakeRuntime

_domains = itertools.count(170)  # DDS domains of this file's graphs, apart from other tests' ranges
JOINTS = ("j0", "j1", "j2")
EPISODE = SyntheticConfig(duration_s=1.0, cameras={"front": (24, 32), "wrist": (16, 16)}, joint_names=JOINTS,
                          command_joint_names=JOINTS)
CONFIG = load_config(None, {"schedule.step_period_s": 0.1, "schedule.perception": 1, "controller.rate_hz": 50.0})


@pytest.fixture(autouse=True)
def _local_discovery(monkeypatch):
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


def _tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _replay(bag, out, options=ReplayOptions(progress=False), config=CONFIG, runtime=None):
    return replay(bag, out, config, options, runtime=runtime or FakeRuntime(), domain_id=next(_domains))


@pytest.fixture(scope="module")
def episode_bag(tmp_path_factory):
    return write_episode(tmp_path_factory.mktemp("episode") / "bag", EPISODE, "mcap")


def test_lockstep_actions_equal_direct_runtime_calls_and_the_input_bag_is_untouched(episode_bag, tmp_path):
    before = _tree_digest(episode_bag)
    runtime = FakeRuntime()
    result = _replay(episode_bag, tmp_path / "out", runtime=runtime)
    assert _tree_digest(episode_bag) == before

    episode = read_episode(episode_bag, TopicMap.for_cameras(runtime.spec.camera_names))
    steps = plan_steps(episode, CONFIG.schedule.step_period_s)
    selector = StateSelector(episode, runtime.spec.state_names)
    start_ns, period_ns = int(CONFIG.schedule.lockstep_start_s * 1e9), int(CONFIG.schedule.step_period_s * 1e9)
    assert len(result.record.chunks) == len(steps) == 10
    for k, (step, (produced_ns, chunk)) in enumerate(zip(steps, result.record.chunks)):
        observation = observation_at(episode, step, selector, start_ns + k * period_ns)
        noise = stage_noise(runtime.spec.noise_seed, "action", k, runtime.spec.noise_shape)  # the bundle's seed
        direct = infer(runtime, observation, noise)
        np.testing.assert_array_equal(chunk.actions, direct.actions)
        assert produced_ns == chunk.stamp_ns == step.bag_ns


def test_two_replays_give_identical_outputs(episode_bag, tmp_path):
    first = _replay(episode_bag, tmp_path / "a")
    second = _replay(episode_bag, tmp_path / "b")
    for (t1, c1), (t2, c2) in zip(first.record.chunks, second.record.chunks, strict=True):
        assert t1 == t2
        np.testing.assert_array_equal(c1.actions, c2.actions)
    for (t1, p1), (t2, p2) in zip(first.record.commands, second.record.commands, strict=True):
        assert t1 == t2
        np.testing.assert_array_equal(p1, p2)
    assert first.metrics["actions"] == second.metrics["actions"]


def test_output_bag_metrics_and_report(episode_bag, tmp_path):
    result = _replay(episode_bag, tmp_path / "out", ReplayOptions(progress=False, storage="sqlite3"))
    store = m.typestore()
    from rosbags.rosbag2 import Reader

    with Reader(result.output_bag) as reader:
        topics = {c.topic: c.msgtype for c in reader.connections}
        chunks = [store.deserialize_cdr(raw, c.msgtype) for c, _, raw in reader.messages()
                  if c.topic == "/embodied/action_chunk"]
    assert topics["/embodied/action_chunk"] == m.ACTION_CHUNK
    assert topics["/joint_trajectory_controller/joint_trajectory"] == m.JOINT_TRAJECTORY
    assert topics["/embodied/timing"] == m.STAGE_TIMING
    assert any(p.suffix == ".db3" for p in result.output_bag.iterdir())
    np.testing.assert_array_equal(m.chunk_actions(chunks[3]), result.record.chunks[3][1].actions)

    metrics = json.loads(result.metrics_path.read_text())
    assert metrics["schema"] == "embodied_ros.replay/1"
    assert metrics["run"]["steps"] == 10 and metrics["run"]["chunks"] == 10
    actions = metrics["actions"]
    assert actions["available"] and set(actions["per_joint"]) == set(JOINTS)
    assert len(actions["per_offset"]["mse"]) == 10 and len(actions["per_offset"]["max_abs"]) == 10
    for key in ("p50", "p95", "p99"):
        assert metrics["latency"]["step_wall_ms"][key] > 0
        assert metrics["latency"]["stages_ms"]["action"][key] >= 0
    assert metrics["commands"]["count"] == 50 and metrics["commands"]["jitter_ms"] == 0.0
    smoothness = metrics["smoothness"]
    assert smoothness["count"] == 50 and smoothness["switches"] == 9  # each later step's chunk takes over
    assert smoothness["max_abs_step"] == max(smoothness["max_abs_step_at_switch"],
                                             smoothness["max_abs_step_within_chunk"])
    assert smoothness["jerk"]["max_abs"] > 0
    assert metrics["staleness"]["count"] == 10 and metrics["staleness"]["stale"] == 0
    assert metrics["frames"]["front"]["recorded"] == 30 and metrics["frames"]["front"]["used"] == 10
    assert metrics["partial"] is False

    page = result.report_path.read_text()
    assert page.startswith("<!DOCTYPE html>")
    for title in ("Predicted vs recorded actions", "Error by chunk offset", "Latency per stage", "Staleness over time"):
        assert f'alt="{title}"' in page
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) >= 4 and all(len(i) > 1000 for i in images)
    summary = page[:page.index("<h2>metrics.json")]
    assert "<td>whole step (wall)</td><td>10</td>" in summary  # lock-step: no empty end-to-end row
    assert "end to end" not in summary


def test_replay_with_a_missing_camera_is_an_error_or_a_partial_result(tmp_path):
    one_camera = SyntheticConfig(duration_s=0.6, cameras={"front": (24, 32)}, joint_names=JOINTS,
                                 command_joint_names=JOINTS)
    bag = write_episode(tmp_path / "bag", one_camera, "sqlite3")
    with pytest.raises(BagError, match=r"camera 'wrist'.*--allow-missing-cameras"):
        _replay(bag, tmp_path / "refused")
    result = _replay(bag, tmp_path / "out", ReplayOptions(progress=False, allow_missing_cameras=True))
    assert result.metrics["partial"] is True
    assert any("wrist" in note for note in result.metrics["bag"]["notes"])
    assert result.metrics["run"]["chunks"] == 6
    assert "Partial result" in result.report_path.read_text()


def test_replay_of_foreign_topic_names_and_array_commands(tmp_path):
    topic_map = ["camera:front=/robot/front/color", "camera:wrist=/robot/wrist/color", "joint_states=/robot/joints",
                 "instruction=/robot/task", "array=/robot/position_commands"]
    episode = SyntheticConfig(duration_s=0.6, cameras={"front": (24, 32), "wrist": (16, 16)}, joint_names=JOINTS,
                              command_joint_names=JOINTS, command_kind="array")
    bag = write_episode(tmp_path / "bag", episode, "mcap",
                        TopicMap.for_cameras(["front", "wrist"]).with_overrides(topic_map))
    with pytest.raises(BagError, match="does not have"):
        _replay(bag, tmp_path / "unmapped")
    result = _replay(bag, tmp_path / "out", ReplayOptions(progress=False, topic_map=tuple(topic_map)))
    assert result.metrics["bag"]["recorded_commands"] == "/robot/position_commands"
    assert result.metrics["actions"]["available"]
    assert result.metrics["run"]["output_topics"]["/embodied/action_chunk"] == 6


def test_replay_of_a_robot_with_its_own_joint_names_compares_through_the_joint_mapping(tmp_path):
    robot = ("shoulder", "elbow", "wrist_joint")
    episode = SyntheticConfig(duration_s=0.6, cameras={"front": (24, 32), "wrist": (16, 16)}, joint_names=robot,
                              command_joint_names=robot)
    bag = write_episode(tmp_path / "bag", episode, "mcap")
    config = load_config(None, {"schedule.step_period_s": 0.1, "controller.rate_hz": 50.0,
                                "inputs.state_joints": list(robot), "controller.joints": list(robot),
                                "controller.action_columns": list(JOINTS)})
    actions = _replay(bag, tmp_path / "out", config=config).metrics["actions"]
    assert actions["available"], actions.get("reason")
    assert actions["joint_names"] == list(robot) and actions["compared_rows"] > 0


def test_out_dir_is_never_overwritten_nor_inside_the_bag(episode_bag, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="never overwrites"):
        _replay(episode_bag, tmp_path / "busy")
    with pytest.raises(ValueError, match="inside the input bag"):
        _replay(episode_bag, episode_bag / "report")


def test_realtime_replay_plays_the_episode_into_the_free_running_graph(tmp_path):
    episode = SyntheticConfig(duration_s=1.0, cameras={"front": (24, 32), "wrist": (16, 16)}, joint_names=JOINTS,
                              command_joint_names=JOINTS)
    bag = write_episode(tmp_path / "bag", episode, "mcap")
    before = _tree_digest(bag)
    result = _replay(bag, tmp_path / "out", ReplayOptions(progress=False, mode="realtime"))
    assert _tree_digest(bag) == before
    metrics = result.metrics
    assert metrics["run"]["mode"] == "realtime" and metrics["run"]["chunks"] >= 3
    e2e = metrics["latency"]["end_to_end_ms"]
    assert e2e["count"] == metrics["run"]["chunks"] and 0 < e2e["p50"] <= e2e["p99"]
    assert metrics["commands"]["count"] > 10 and metrics["commands"]["period_ms"]["p50"] > 0
    assert metrics["actions"]["available"]
    for produced_ns, chunk in result.record.chunks:  # chunks sit on the bag's time axis
        assert bag_start_ns(bag) <= chunk.stamp_ns <= produced_ns
    print("\n".join(summary_lines(result)))


def bag_start_ns(bag):
    return read_episode(bag, TopicMap.for_cameras(["front", "wrist"])).start_ns


def test_replay_of_a_bag_written_by_rosbags_with_its_own_settings(tmp_path):
    """Version 8, sqlite3, per-message zstd, bgr8 images with padded rows, joint states split over two
    publishers in another order, other topic names: replayed through the graph like any other bag."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

    store = m.typestore()
    writer = Writer(tmp_path / "bag", version=8, storage_plugin=StoragePlugin.SQLITE3)
    writer.set_compression(CompressionMode.MESSAGE, CompressionFormat.ZSTD)
    writer.open()
    cams = {c: writer.add_connection(f"/rig/{c}/color", m.IMAGE, typestore=store) for c in ("front", "wrist")}
    joints = writer.add_connection("/rig/joints", m.JOINT_STATE, typestore=store)
    task = writer.add_connection("/rig/task", m.STRING, typestore=store)
    t0 = 1_700_000_000_000_000_000
    writer.write(task, t0, store.serialize_cdr(store.types[m.STRING](data="wipe the table"), m.STRING))
    rng = np.random.default_rng(5)
    for i in range(20):  # 0.67 s at 30 Hz
        stamp = t0 + i * 33_333_333
        for camera, connection in cams.items():
            padded = np.zeros((12, 16 * 3 + 8), np.uint8)
            padded[:, :48] = rng.integers(0, 256, (12, 48))
            image = store.types[m.IMAGE](header=m.header_msg(stamp), height=12, width=16, encoding="bgr8",
                                         is_bigendian=0, step=56, data=padded.reshape(-1))
            writer.write(connection, stamp, store.serialize_cdr(image, m.IMAGE))
        for names in (["j2", "j0"], ["j1"]):
            msg = store.types[m.JOINT_STATE](header=m.header_msg(stamp), name=names, position=rng.normal(size=len(names)),
                                             velocity=np.zeros(0), effort=np.zeros(0))
            writer.write(joints, stamp + 1_000_000, store.serialize_cdr(msg, m.JOINT_STATE))
    writer.close()
    topic_map = ("camera:front=/rig/front/color", "camera:wrist=/rig/wrist/color", "joint_states=/rig/joints",
                 "instruction=/rig/task")
    result = _replay(tmp_path / "bag", tmp_path / "out", ReplayOptions(progress=False, topic_map=topic_map))
    assert result.metrics["run"]["chunks"] == 7  # steps at 0, 0.1, ... 0.6 s after the first joint state
    assert result.metrics["bag"]["storage"] == "sqlite3" and result.metrics["partial"] is False
    assert result.metrics["actions"] == {"reference": None, "joint_names": list(JOINTS), "available": False,
                                         "reason": "the bag has no usable recorded commands"}


def test_non_finite_joint_states_give_a_partial_result_not_a_failure(tmp_path):
    from embodied_ros.replay.bag_writer import BagWriter
    from embodied_ros.replay.synthetic import episode_messages

    with BagWriter(tmp_path / "bag", "mcap") as writer:
        for stamp, topic, msgtype, msg in episode_messages(EPISODE):
            if msgtype == m.JOINT_STATE and 0.3e9 <= stamp - EPISODE.start_ns < 0.55e9:
                msg.position = np.full_like(msg.position, np.nan)  # a sensor glitch
            writer.write(topic, msgtype, stamp, msg)
    result = _replay(tmp_path / "bag", tmp_path / "out")
    metrics = result.metrics
    assert metrics["partial"] is True
    assert metrics["refused_observations"]["count"] >= 2
    assert "non-finite position" in metrics["refused_observations"]["first"][0]["reason"]
    # the action head keeps answering from the last good observation, so those chunks grow old
    assert metrics["staleness"]["max"] >= 200.0
    assert metrics["commands"]["count"] == 5 * metrics["run"]["steps"]
