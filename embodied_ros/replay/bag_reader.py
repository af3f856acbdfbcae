"""Read a rosbag2 episode (MCAP or sqlite3, any writer) into an `Episode`, through `rosbags`.

The bag is opened read-only and never written. What cannot be used is either an error that names the
topic, the message and what to do (`BagError`), or, where replay can still run, a note in
`Episode.notes` (a malformed frame skipped, a camera absent when `allow_missing_cameras`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from embodied_ros.inputs import InputError, image_to_rgb8
from embodied_ros.replay import messages as m
from embodied_ros.replay.episode import CameraStream, Episode, JointSeries
from embodied_ros.replay.topics import TopicMap


class BagError(ValueError):
    """The bag cannot be replayed as asked; the message says why and what to change."""


@dataclass(frozen=True)
class TopicInfo:
    msgtype: str
    count: int


def _open(path: Path):
    from rosbags.rosbag2 import Reader

    if not path.exists():
        raise BagError(f"{path}: no such bag (expected a rosbag2 directory, or a .mcap / .db3 file)")
    if path.is_dir() and not (path / "metadata.yaml").exists():
        files = sorted(p for p in path.iterdir() if p.suffix in (".mcap", ".db3"))
        raise BagError(f"{path}: no metadata.yaml (a recording that did not finish?); "
                       + (f"replay the storage file itself ({files[0]}) or run `ros2 bag reindex {path}`"
                          if files else "no .mcap or .db3 file inside either"))
    try:
        reader = Reader(path)
        reader.open()
    except Exception as error:  # rosbags raises many kinds on damaged files: wrap them all
        reason = " ".join(str(error).split())  # one line (a YAML parser's message spans several)
        raise BagError(f"{path}: cannot open as a rosbag2 bag ({type(error).__name__}: {reason}); "
                       "it is damaged, truncated or still being recorded (an MCAP file without its "
                       "summary can be repaired with `ros2 bag reindex`)") from error
    return reader


def _storage_of(path: Path) -> str:
    files = [path] if path.is_file() else list(path.iterdir())
    return "mcap" if any(f.suffix == ".mcap" for f in files) else "sqlite3"


def bag_topics(path: str | Path) -> dict[str, TopicInfo]:
    """Topic -> type and message count, from the bag's index (reads no messages)."""
    reader = _open(Path(path))
    try:
        counts: dict[str, int] = defaultdict(int)
        types: dict[str, str] = {}
        for connection in reader.connections:
            counts[connection.topic] += connection.msgcount
            types[connection.topic] = connection.msgtype
        return {topic: TopicInfo(types[topic], counts[topic]) for topic in sorted(types)}
    finally:
        reader.close()


class _Collector:
    """Accumulates decoded messages per stream during the one pass over the bag."""

    def __init__(self, topic_map: TopicMap) -> None:
        self.topic_map = topic_map
        self.camera_of = topic_map.camera_of_topic()
        self.frames: dict[str, list[tuple[int, np.ndarray]]] = defaultdict(list)
        self.bad_frames: dict[str, list[str]] = defaultdict(list)
        self.undecodable: dict[str, list[str]] = defaultdict(list)  # topic -> problems
        self.joint_msgs: list[tuple[int, tuple[str, ...], np.ndarray]] = []
        self.instructions: list[tuple[int, str]] = []
        # one entry per command message: (receive stamp, joint names, [(target time, positions), ...])
        self.command_msgs: list[tuple[int, tuple[str, ...], list[tuple[int, np.ndarray]]]] = []

    def add(self, topic: str, stamp: int, msg) -> None:
        if topic in self.camera_of:
            self._add_frame(self.camera_of[topic], stamp, msg)
        elif topic == self.topic_map.joint_states:
            self.joint_msgs.append((stamp, tuple(msg.name), np.asarray(msg.position, dtype=np.float64)))
        elif topic == self.topic_map.instruction:
            self.instructions.append((stamp, str(msg.data)))
        elif topic == self.topic_map.trajectory:
            # each point is a target for (receive time + time_from_start)
            points = [(stamp + m.stamp_ns(p.time_from_start), np.asarray(p.positions, dtype=np.float64))
                      for p in msg.points]
            self.command_msgs.append((stamp, tuple(msg.joint_names), points))
        elif topic == self.topic_map.array:
            self.command_msgs.append((stamp, (), [(stamp, np.asarray(msg.data, dtype=np.float64))]))

    def _add_frame(self, camera: str, stamp: int, msg) -> None:
        try:
            rgb = image_to_rgb8(msg, self.topic_map.cameras[camera])
        except InputError as error:
            self.bad_frames[camera].append(f"t={stamp} ns: {error}")
            return
        frames = self.frames[camera]
        if frames and frames[0][1].shape != rgb.shape:
            first = frames[0][1].shape
            raise BagError(
                f"camera {camera!r} ({self.topic_map.cameras[camera]}): frame {len(frames)} is "
                f"{rgb.shape[0]}x{rgb.shape[1]} but earlier frames are {first[0]}x{first[1]}; "
                "a camera must keep one size (are two cameras recorded on one topic?)"
            )
        frames.append((stamp, rgb))


def read_episode(
    path: str | Path,
    topic_map: TopicMap,
    *,
    allow_missing_cameras: bool = False,
    max_gap_s: float = 10.0,
    timeout_s: float = 600.0,
    on_message: Callable[[int], None] | None = None,
) -> Episode:
    """Decode the streams `topic_map` names. `on_message(n_read)` reports progress. Where the inputs
    (camera frames, joint states) fall silent for more than `max_gap_s`, only the longest stretch
    without such a gap is kept (see `_keep_main_stretch`)."""
    path = Path(path)
    reader = _open(path)
    try:
        topics = {c.topic: c.msgtype for c in reader.connections}
        notes = _check_topics(path, topics, topic_map, allow_missing_cameras)
        wanted = [c for c in reader.connections if c.topic in _wanted_topics(topic_map)]
        collector = _Collector(topic_map)
        deadline = time.monotonic() + timeout_s
        store = m.typestore()
        try:
            for index, (connection, stamp, raw) in enumerate(reader.messages(connections=wanted)):
                try:
                    msg = store.deserialize_cdr(raw, connection.msgtype)
                except Exception as error:  # one damaged message: skip it, say so
                    collector.undecodable[connection.topic].append(f"t={stamp} ns: {error}")
                    continue
                collector.add(connection.topic, stamp, msg)
                if on_message:
                    on_message(index + 1)
                if time.monotonic() > deadline:
                    raise BagError(f"{path}: reading took longer than {timeout_s:.0f} s; stopped")
        except BagError:
            raise
        except Exception as error:
            raise BagError(f"{path}: bag is damaged or truncated ({type(error).__name__}: {error})") from error
        return _keep_main_stretch(_episode(path, reader, collector, topic_map, notes), round(max_gap_s * 1e9))
    finally:
        reader.close()


def _wanted_topics(topic_map: TopicMap) -> set[str]:
    return {*topic_map.cameras.values(), topic_map.joint_states, topic_map.instruction,
            topic_map.trajectory, topic_map.array}


def _check_topics(path: Path, topics: dict[str, str], topic_map: TopicMap, allow_missing: bool) -> list[str]:
    expected = {topic_map.joint_states: m.JOINT_STATE, topic_map.instruction: m.STRING,
                topic_map.trajectory: m.JOINT_TRAJECTORY, topic_map.array: m.FLOAT64_ARRAY}
    expected.update({topic: m.IMAGE for topic in topic_map.cameras.values()})
    for topic, msgtype in expected.items():
        if topic in topics and topics[topic] != msgtype:
            raise BagError(f"{path}: topic {topic} holds {topics[topic]}, expected {msgtype}; "
                           "map another topic with --topic-map")
    image_topics = sorted(t for t, ty in topics.items() if ty == m.IMAGE)
    notes = []
    for camera, topic in topic_map.cameras.items():
        if topic in topics:
            continue
        hint = f"image topics in the bag: {', '.join(image_topics) or 'none'}"
        if not allow_missing:
            raise BagError(f"{path}: camera {camera!r} expects images on {topic}, which the bag does not "
                           f"have ({hint}); map it with --topic-map camera:{camera}=TOPIC, or pass "
                           "--allow-missing-cameras to replay without it")
        notes.append(f"camera {camera!r}: no topic {topic} in the bag; replayed without it ({hint})")
    return notes


def _episode(path: Path, reader, collector: _Collector, topic_map: TopicMap, notes: list[str]) -> Episode:
    cameras = {}
    for camera, frames in collector.frames.items():
        stamps = np.array([s for s, _ in frames], dtype=np.int64)
        order = np.argsort(stamps, kind="stable")
        cameras[camera] = CameraStream(topic_map.cameras[camera], stamps[order],
                                       tuple(frames[i][1] for i in order))
    for camera, problems in collector.bad_frames.items():
        notes.append(f"camera {camera!r}: skipped {len(problems)} malformed frame(s), first {problems[0]}")
    for topic, problems in collector.undecodable.items():
        notes.append(f"{topic}: skipped {len(problems)} message(s) that do not deserialize (damaged bag), "
                     f"first {problems[0]}")
    for camera, topic in topic_map.cameras.items():
        if camera not in cameras and not any(camera in n for n in notes):
            notes.append(f"camera {camera!r}: no usable frame on {topic}")
    if not cameras and topic_map.cameras:
        raise BagError(f"{path}: no usable image on any camera topic; {'; '.join(notes)}")
    try:
        commands, command_topic = _commands(collector, topic_map)
    except BagError as error:  # the replay itself does not need them: it runs without the comparison
        commands, command_topic = None, ""
        notes.append(f"recorded commands not compared: {error}")
    joint_states = _joint_states(collector.joint_msgs, topic_map.joint_states, notes)
    return Episode(
        source=str(path), storage=_storage_of(path),
        start_ns=int(reader.start_time), end_ns=int(reader.end_time),
        cameras=cameras, joint_states=joint_states,
        instructions=tuple(sorted(collector.instructions, key=lambda item: item[0])),
        commands=commands, command_topic=command_topic, notes=tuple(notes),
    )


def _keep_main_stretch(episode: Episode, max_gap_ns: int) -> Episode:
    """The episode cut to its longest stretch of inputs without a silence over `max_gap_ns`; a bag that
    starts or ends more than that away from this stretch is cut at its first or last input. A message
    logged with a wrong clock (a year late) would otherwise stretch a few seconds of recording into
    millions of control steps, or hours of waiting."""
    streams = [stream.stamps_ns for stream in episode.cameras.values()]
    if episode.joint_states is not None:
        streams.append(episode.joint_states.stamps_ns)
    stamps = np.sort(np.concatenate(streams)) if streams else np.zeros(0, np.int64)
    if stamps.size == 0:
        return episode
    breaks = np.flatnonzero(np.diff(stamps) > max_gap_ns)  # a stretch ends at each break
    bounds = np.concatenate([[0], breaks + 1, [stamps.size]])
    longest = int(np.argmax(np.diff(bounds)))
    first, last = int(stamps[bounds[longest]]), int(stamps[bounds[longest + 1] - 1])
    start_ns = episode.start_ns if first - episode.start_ns <= max_gap_ns else first
    end_ns = episode.end_ns if episode.end_ns - last <= max_gap_ns else last
    if (start_ns, end_ns) == (episode.start_ns, episode.end_ns):
        return episode
    notes = list(episode.notes)
    spans = f"the bag spans {(episode.end_ns - episode.start_ns) / 1e9:.0f} s"
    if len(bounds) > 2:
        dropped = stamps.size - (bounds[longest + 1] - bounds[longest])
        notes.append(f"the inputs fall silent for more than {max_gap_ns / 1e9:g} s ({spans}): replayed only their "
                     f"longest stretch, {(last - first) / 1e9:.3f} s; {dropped} input message(s) outside it "
                     "ignored (a clock jump, or messages logged far from the rest?)")
    else:
        notes.append(f"{spans}, its inputs {(last - first) / 1e9:.3f} s: replayed only those; messages logged more "
                     f"than {max_gap_ns / 1e9:g} s away from every input ignored")

    def kept(stamps: np.ndarray) -> np.ndarray:
        return np.flatnonzero((stamps >= start_ns) & (stamps <= end_ns))

    def inside(series: JointSeries | None) -> JointSeries | None:
        if series is None:
            return None
        keep = kept(series.stamps_ns)
        return replace(series, stamps_ns=series.stamps_ns[keep], positions=series.positions[keep])

    cameras = {}
    for camera, stream in episode.cameras.items():
        keep = kept(stream.stamps_ns)
        if keep.size:
            cameras[camera] = replace(stream, stamps_ns=stream.stamps_ns[keep],
                                      frames=tuple(stream.frames[i] for i in keep))
        else:
            notes.append(f"camera {camera!r}: no frame inside the replayed stretch")
    joint_states = inside(episode.joint_states)
    commands = inside(episode.commands)
    return replace(episode, start_ns=start_ns, end_ns=end_ns, cameras=cameras,
                   joint_states=joint_states if joint_states is not None and joint_states.stamps_ns.size else None,
                   instructions=tuple(item for item in episode.instructions if item[0] <= end_ns),
                   commands=commands if commands is not None and commands.stamps_ns.size else None,
                   notes=tuple(notes))


def _joint_states(msgs, topic: str, notes: list[str]) -> JointSeries | None:
    """Messages may each carry a subset of the joints: columns = every name seen, values carried forward.
    A message whose names and positions differ in number, or that names a joint twice, is skipped (noted)."""
    well_formed, malformed = [], []
    for msg in msgs:
        _, names, values = msg
        (well_formed if len(names) == len(values) == len(set(names)) else malformed).append(msg)
    if malformed:
        stamp, names, values = malformed[0]
        what = (f"first t={stamp} ns: {len(names)} joint names, {len(values)} positions, "
                f"{len(set(names))} distinct names")
        if not well_formed:
            raise BagError(f"{topic}: every joint state message is malformed, {what}")
        notes.append(f"{topic}: skipped {len(malformed)} malformed message(s), {what}")
    msgs = well_formed
    if not msgs:
        return None
    msgs = sorted(msgs, key=lambda item: item[0])
    names: list[str] = []
    for _, msg_names, _ in msgs:
        names.extend(n for n in msg_names if n not in names)
    column = {name: j for j, name in enumerate(names)}
    positions = np.full((len(msgs), len(names)), np.nan)
    for i, (_, msg_names, values) in enumerate(msgs):
        if i:
            positions[i] = positions[i - 1]
        for name, value in zip(msg_names, values):
            positions[i, column[name]] = value
    return JointSeries(topic, np.array([s for s, _, _ in msgs], dtype=np.int64), tuple(names), positions)


def _commands(collector: _Collector, topic_map: TopicMap) -> tuple[JointSeries | None, str]:
    """Targets over time, as a controller executes them: a new message replaces the points of older
    messages that lie at or after its arrival (ros2_control JointTrajectoryController semantics)."""
    msgs = sorted(collector.command_msgs, key=lambda item: item[0])
    msgs = [msg for msg in msgs if msg[2]]
    if not msgs:
        return None, ""
    names = msgs[0][1]
    topic = topic_map.trajectory if names else topic_map.array
    width = len(names) or len(msgs[0][2][0][1])
    schedule: list[tuple[int, np.ndarray]] = []
    for stamp, msg_names, points in msgs:
        if msg_names and (len(set(msg_names)) != len(msg_names) or set(msg_names) != set(names)):
            raise BagError(f"{topic}: a command at t={stamp} ns names joints {list(msg_names)}, earlier "
                           f"ones {list(names)}; replay compares one fixed set of distinct joints")
        order = [msg_names.index(n) for n in names] if msg_names else list(range(width))
        while schedule and schedule[-1][0] >= stamp:
            schedule.pop()
        for when, values in points:
            if len(values) != width:
                hint = " (a trajectory without positions?)" if len(values) == 0 else ""
                raise BagError(f"{topic}: a command at t={stamp} ns has {len(values)} positions per point for "
                               f"{width} joints{hint}")
            if not schedule or when > schedule[-1][0]:
                schedule.append((when, values[order]))
    stamps = np.array([when for when, _ in schedule], dtype=np.int64)
    return JointSeries(topic, stamps, names, np.array([values for _, values in schedule])), topic
