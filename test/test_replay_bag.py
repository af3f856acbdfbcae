"""Bag IO for replay: synthetic episodes, bags from other writers, topic mapping, damaged input."""

import concurrent.futures
import os

import numpy as np
import pytest
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

from embodied_ros.replay import messages as m
from embodied_ros.replay.bag_reader import BagError, bag_topics, read_episode
from embodied_ros.replay.bag_writer import BagWriter
from embodied_ros.replay.synthetic import SyntheticConfig, episode_messages, write_episode
from embodied_ros.replay.topics import TopicMap

CAMERAS = {"front": (24, 32), "wrist": (16, 16)}
CONFIG = SyntheticConfig(duration_s=1.0, cameras=CAMERAS)


def _read(path, topic_map=None, **kwargs):
    """read_episode with a hard deadline: a damaged bag must fail fast, never hang."""
    topic_map = topic_map or TopicMap.for_cameras(CAMERAS)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(read_episode, path, topic_map, **kwargs).result(timeout=30)


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_synthetic_episode_reads_back(tmp_path, storage):
    bag = write_episode(tmp_path / "bag", CONFIG, storage)
    episode = _read(bag)
    assert episode.storage == storage
    assert set(episode.cameras) == set(CAMERAS)
    for name, stream in episode.cameras.items():
        assert stream.size == CAMERAS[name]
        assert len(stream.frames) == 30  # 1 s at 30 Hz
    assert episode.joint_states.names == CONFIG.joint_names
    assert episode.joint_states.positions.shape == (50, len(CONFIG.joint_names))
    assert episode.instructions[0][1] == CONFIG.instruction
    assert episode.commands.names == CONFIG.command_joint_names
    assert episode.command_topic == TopicMap().trajectory
    assert episode.notes == ()
    assert bag_topics(bag)["/joint_states"].count == 50


def test_synthetic_episode_is_deterministic_and_images_follow_the_arm():
    first = list(episode_messages(CONFIG))
    second = list(episode_messages(CONFIG))
    assert [(s, t) for s, t, _, _ in first] == [(s, t) for s, t, _, _ in second]
    images = [msg.data for _, _, ty, msg in first if ty == m.IMAGE]
    assert all(np.array_equal(a, b) for a, b in zip(images, [msg.data for _, _, ty, msg in second if ty == m.IMAGE]))
    assert not np.array_equal(images[0], images[-2])  # the arm moved, the picture changed


def test_recorded_commands_lead_the_measured_joint_states(tmp_path):
    episode = _read(write_episode(tmp_path / "bag", CONFIG, "mcap"))
    columns = [episode.joint_states.names.index(n) for n in episode.commands.names]
    times = episode.joint_states.stamps_ns[10:40]
    measured = episode.joint_states.at(times)[:, columns]
    commanded = episode.commands.at(times)
    assert np.nanmax(np.abs(measured - commanded)) < 0.5  # same motion ...
    assert np.nanmax(np.abs(measured - commanded)) > 1e-3  # ... with a lag


def _foreign_bag(path, storage_plugin, version, compression=None, image_encoding="bgr8", pad=4):
    """A bag as another tool might write it: other topic names, bgr8 with padded rows, joints in another
    order split across two publishers, Float64MultiArray commands."""
    store = m.typestore()
    writer = Writer(path, version=version, storage_plugin=storage_plugin)
    if compression:
        writer.set_compression(compression, CompressionFormat.ZSTD)
    writer.open()
    cam = writer.add_connection("/robot/front_cam/color", m.IMAGE, typestore=store)
    js = writer.add_connection("/robot/joints", m.JOINT_STATE, typestore=store)
    task = writer.add_connection("/robot/task", m.STRING, typestore=store)
    cmd = writer.add_connection("/robot/cmd", m.FLOAT64_ARRAY, typestore=store)
    image_cls, joint_cls = store.types[m.IMAGE], store.types[m.JOINT_STATE]
    t0 = 1_700_000_000_000_000_000
    writer.write(task, t0, store.serialize_cdr(store.types[m.STRING](data="stack the cups"), m.STRING))
    for i in range(10):
        stamp = t0 + i * 33_000_000
        rgb = np.full((8, 6, 3), (10 * i, 100, 200), np.uint8)
        channels = 3 if image_encoding == "bgr8" else 1
        row = rgb[:, :, ::-1] if channels == 3 else rgb[:, :, :1]
        padded = np.zeros((8, 6 * channels + pad), np.uint8)
        padded[:, : 6 * channels] = row.reshape(8, -1)
        image = image_cls(header=m.header_msg(stamp), height=8, width=6, encoding=image_encoding,
                          is_bigendian=0, step=6 * channels + pad, data=padded.reshape(-1))
        writer.write(cam, stamp, store.serialize_cdr(image, m.IMAGE))
        for names, values in ((["b", "a"], [2.0 + i, 1.0 + i]), (["c"], [3.0 + i])):
            msg = joint_cls(header=m.header_msg(stamp), name=names, position=np.array(values),
                            velocity=np.zeros(0), effort=np.zeros(0))
            writer.write(js, stamp + 1000, store.serialize_cdr(msg, m.JOINT_STATE))
        writer.write(cmd, stamp + 2000, store.serialize_cdr(m.float64_array_msg(np.array([i, i, i])), m.FLOAT64_ARRAY))
    writer.close()
    return path


FOREIGN_MAP = TopicMap.for_cameras(["front"]).with_overrides(
    ["camera:front=/robot/front_cam/color", "joint_states=/robot/joints", "instruction=/robot/task",
     "array=/robot/cmd"])


@pytest.mark.parametrize("plugin,version,compression", [
    (StoragePlugin.SQLITE3, 8, None),
    (StoragePlugin.MCAP, 8, None),
    (StoragePlugin.SQLITE3, 9, CompressionMode.MESSAGE),
    (StoragePlugin.MCAP, 9, CompressionMode.FILE),
])
def test_bag_from_another_writer_with_mapped_topics(tmp_path, plugin, version, compression):
    bag = _foreign_bag(tmp_path / "foreign", plugin, version, compression)
    episode = _read(bag, FOREIGN_MAP)
    frames = episode.cameras["front"].frames
    assert len(frames) == 10
    assert frames[3].shape == (8, 6, 3)
    np.testing.assert_array_equal(frames[3][0, 0], [30, 100, 200])  # bgr8 with row padding -> RGB
    assert episode.joint_states.names == ("b", "a", "c")
    np.testing.assert_array_equal(episode.joint_states.positions[-1], [11.0, 10.0, 12.0])
    assert episode.instruction_at(episode.end_ns) == "stack the cups"
    assert episode.commands.names == () and episode.commands.positions.shape == (10, 3)


def test_raw_storage_file_and_mono_images(tmp_path):
    bag = _foreign_bag(tmp_path / "foreign", StoragePlugin.MCAP, 9, image_encoding="mono8", pad=2)
    (mcap_file,) = bag.glob("*.mcap")
    episode = _read(mcap_file, FOREIGN_MAP)
    np.testing.assert_array_equal(episode.cameras["front"].frames[2][4, 5], [20, 20, 20])


def test_missing_camera_is_an_error_that_names_the_fix_or_a_documented_partial_result(tmp_path):
    bag = write_episode(tmp_path / "bag", CONFIG, "mcap")
    topic_map = TopicMap.for_cameras([*CAMERAS, "side"])
    with pytest.raises(BagError, match=r"camera 'side'.*/camera/side/image_raw.*--topic-map camera:side="):
        _read(bag, topic_map)
    episode = _read(bag, topic_map, allow_missing_cameras=True)
    assert set(episode.cameras) == set(CAMERAS)
    assert any("side" in note for note in episode.notes)


def test_camera_changing_size_is_an_error(tmp_path):
    with BagWriter(tmp_path / "bag", "mcap") as writer:
        for i, size in enumerate([(16, 16), (16, 16), (12, 16)]):
            writer.write("/camera/front/image_raw", m.IMAGE, i * 10**8, m.rgb_to_image(i, np.zeros((*size, 3), np.uint8)))
    with pytest.raises(BagError, match=r"camera 'front'.*frame 2 is 12x16 but earlier frames are 16x16"):
        _read(tmp_path / "bag", TopicMap.for_cameras(["front"]))


def test_malformed_frame_is_skipped_and_reported(tmp_path):
    with BagWriter(tmp_path / "bag", "sqlite3") as writer:
        for i in range(4):
            image = m.rgb_to_image(i, np.zeros((16, 16, 3), np.uint8))
            if i == 1:
                image.data = image.data[:100]  # declared 16x16 rgb8, holds 100 bytes
            writer.write("/camera/front/image_raw", m.IMAGE, i * 10**8, image)
    episode = _read(tmp_path / "bag", TopicMap.for_cameras(["front"]))
    assert len(episode.cameras["front"].frames) == 3
    assert any("skipped 1 malformed frame" in note and "message has 100" in note for note in episode.notes)


def test_wrong_type_on_a_mapped_topic_is_an_error(tmp_path):
    bag = write_episode(tmp_path / "bag", CONFIG, "mcap")
    topic_map = TopicMap.for_cameras(["front"]).with_overrides(["joint_states=/camera/wrist/image_raw"])
    with pytest.raises(BagError, match=r"/camera/wrist/image_raw holds sensor_msgs/msg/Image, expected .*JointState"):
        _read(bag, topic_map)


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_truncated_bag_fails_fast_with_a_clear_error(tmp_path, storage):
    bag = write_episode(tmp_path / "bag", CONFIG, storage)
    (data_file,) = [p for p in bag.iterdir() if p.suffix in (".mcap", ".db3")]
    os.truncate(data_file, data_file.stat().st_size // 2)
    with pytest.raises(BagError, match="damaged, truncated or still being recorded"):
        _read(bag)


def test_garbled_metadata_is_a_one_line_error(tmp_path):
    bag = write_episode(tmp_path / "bag", CONFIG, "mcap")
    (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: [1, 2\n")
    with pytest.raises(BagError, match="cannot open as a rosbag2 bag") as raised:
        _read(bag)
    assert "\n" not in str(raised.value)


def test_bag_without_metadata_points_at_its_storage_file(tmp_path):
    bag = write_episode(tmp_path / "bag", CONFIG, "mcap")
    (bag / "metadata.yaml").unlink()
    with pytest.raises(BagError, match=r"no metadata.yaml.*bag\.mcap"):
        _read(bag)
    assert len(_read(bag / "bag.mcap").cameras["front"].frames) == 30


def test_damaged_message_is_skipped_and_reported(tmp_path):
    with BagWriter(tmp_path / "bag", "mcap") as writer:
        for i in range(3):
            raw = bytes(m.typestore().serialize_cdr(m.message_class(m.STRING)(data=f"task {i}"), m.STRING))
            writer.write("/instruction", m.STRING, i, raw if i != 1 else raw[:4] + b"\xff\xff\xff\x7f" + raw[8:])
    episode = _read(tmp_path / "bag", TopicMap())
    assert [text for _, text in episode.instructions] == ["task 0", "task 2"]
    assert any("/instruction: skipped 1 message" in note for note in episode.notes)


def test_trajectories_replace_the_future_points_of_older_ones(tmp_path):
    period = 100_000_000
    with BagWriter(tmp_path / "bag", "mcap") as writer:
        # a 5-point plan at t=0, replaced at t=0.25 s by a plan that holds 9.0
        writer.write("/joint_trajectory_controller/joint_trajectory", m.JOINT_TRAJECTORY, 0,
                     m.trajectory_msg(0, ["j"], np.arange(5.0)[:, None], period))
        writer.write("/joint_trajectory_controller/joint_trajectory", m.JOINT_TRAJECTORY, 250_000_000,
                     m.trajectory_msg(250_000_000, ["j"], np.full((2, 1), 9.0), period))
    commands = _read(tmp_path / "bag", TopicMap()).commands
    np.testing.assert_array_equal(commands.stamps_ns, [1, 2, 3.5, 4.5] * np.array(period))
    np.testing.assert_array_equal(commands.positions[:, 0], [0.0, 1.0, 9.0, 9.0])


def test_nonexistent_bag_and_bad_topic_mapping():
    with pytest.raises(BagError, match="no such bag"):
        read_episode("/nonexistent/bag", TopicMap())
    with pytest.raises(ValueError, match="not KEY=TOPIC"):
        TopicMap().with_overrides(["camera:front"])
    with pytest.raises(ValueError, match="unknown key 'joints'"):
        TopicMap().with_overrides(["joints=/j"])
    with pytest.raises(ValueError, match="must be absolute"):
        TopicMap().with_overrides(["joint_states=j"])
    with pytest.raises(ValueError, match="mapped to both camera:front and instruction"):
        TopicMap.for_cameras(["front"]).with_overrides(["instruction=/camera/front/image_raw"])


def test_written_messages_match_the_compiled_package_types(tmp_path):
    from rclpy.serialization import deserialize_message, serialize_message

    from embodied_ros.msg import ActionChunk

    actions = np.arange(12, dtype=np.float32).reshape(4, 3)
    msg = m.action_chunk_msg(5_000_000_123, 4_900_000_000, actions, 0.02, ("a", "b", "c"))
    raw = bytes(m.typestore().serialize_cdr(msg, m.ACTION_CHUNK))
    decoded = deserialize_message(raw, ActionChunk)
    np.testing.assert_array_equal(np.asarray(decoded.actions).reshape(4, 3), actions)
    assert decoded.observation_stamp.sec == 4 and decoded.action_period.nanosec == 20_000_000
    again = m.typestore().deserialize_cdr(serialize_message(decoded), m.ACTION_CHUNK)  # padding bytes may differ
    np.testing.assert_array_equal(again.actions, msg.actions)
    assert again.joint_names == ["a", "b", "c"] and again.header.stamp.nanosec == 123
    with BagWriter(tmp_path / "out", "mcap") as writer:
        writer.write("/embodied/action_chunk", m.ACTION_CHUNK, 1, decoded)  # an rclpy message
        writer.write("/embodied/action_chunk", m.ACTION_CHUNK, 2, msg)  # a rosbags message
    with pytest.raises(FileExistsError, match="only ever written new"):
        BagWriter(tmp_path / "out", "mcap")


def test_a_message_logged_a_year_away_is_left_out_not_replayed_as_a_year_of_steps(tmp_path):
    from embodied_ros.replay.steps import plan_steps

    year_ns = 365 * 86400 * 10**9
    messages = list(episode_messages(CONFIG))
    joint_state = next(msg for _, topic, _, msg in messages if topic == "/joint_states")
    with BagWriter(tmp_path / "bag", "mcap") as writer:
        for stamp, topic, msgtype, msg in messages:
            writer.write(topic, msgtype, stamp, msg)
        writer.write("/joint_states", m.JOINT_STATE, messages[-1][0] + year_ns, joint_state)
        writer.write("/instruction", m.STRING, messages[-1][0] + 2 * year_ns, m.message_class(m.STRING)(data="late"))
    episode = _read(tmp_path / "bag")
    assert episode.duration_s < 1.5  # the 1 s episode, not two years
    assert episode.joint_states.stamps_ns[-1] < messages[-1][0] + 10**9
    assert all(text != "late" for _, text in episode.instructions)
    assert any("longest stretch" in note and "1 input message(s) outside it ignored" in note for note in episode.notes)
    assert len(plan_steps(episode, 0.1)) <= 11
    whole = _read(tmp_path / "bag", max_gap_s=3 * 365 * 86400.0)  # a gap that long is allowed: nothing left out
    assert whole.duration_s > 365 * 86400 and not whole.notes


@pytest.mark.parametrize("positions", [[], [1.0, 2.0]])
def test_commands_with_too_few_positions_leave_the_actions_uncompared(tmp_path, positions):
    point_cls = m.message_class("trajectory_msgs/msg/JointTrajectoryPoint")
    messages = list(episode_messages(CONFIG))
    with BagWriter(tmp_path / "bag", "mcap") as writer:
        for stamp, topic, msgtype, msg in messages:
            if msgtype == m.JOINT_TRAJECTORY:  # e.g. a velocity-only trajectory: names but no positions
                msg.points = [point_cls(positions=np.asarray(positions, np.float64), velocities=np.zeros(3),
                                        accelerations=np.zeros(0), effort=np.zeros(0),
                                        time_from_start=p.time_from_start) for p in msg.points]
            writer.write(topic, msgtype, stamp, msg)
    episode = _read(tmp_path / "bag")
    assert episode.commands is None and episode.command_topic == ""
    assert any(note.startswith("recorded commands not compared: ") and f"has {len(positions)} positions per point"
               in note for note in episode.notes)
    assert episode.cameras and episode.joint_states is not None  # the rest replays


def test_malformed_joint_states_are_skipped_and_noted_or_refused_when_all_are(tmp_path):
    messages = list(episode_messages(CONFIG))
    joint_stamps = [stamp for stamp, topic, _, _ in messages if topic == "/joint_states"]

    def write(path, broken):
        with BagWriter(path, "mcap") as writer:
            for stamp, topic, msgtype, msg in messages:
                if topic == "/joint_states" and stamp in broken:
                    msg.name = [*msg.name, msg.name[0]]  # one joint named twice
                    msg.position = np.append(msg.position, 99.0)
                writer.write(topic, msgtype, stamp, msg)
        return path

    episode = _read(write(tmp_path / "some", set(joint_stamps[3:5])))
    assert len(episode.joint_states.stamps_ns) == len(joint_stamps) - 2
    assert not np.any(episode.joint_states.positions == 99.0)
    assert any(note.startswith("/joint_states: skipped 2 malformed message(s)") for note in episode.notes)
    with pytest.raises(BagError, match="every joint state message is malformed"):
        _read(write(tmp_path / "all", set(joint_stamps)))
