"""What a replay produced, on the bag's time axis, and what becomes of it: the output bag and the metrics.

Lock-step and realtime replays both fill a `ReplayRecord`; everything after that is shared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from embodied_ros.deploy.mapping import ActionMapping, chunk_column_names
from embodied_ros.pipeline.types import ActionChunkResult
from embodied_ros.replay import messages as m
from embodied_ros.replay.bag_writer import BagWriter
from embodied_ros.replay.episode import Episode, JointSeries
from embodied_ros.replay.metrics import (PredictedChunk, action_errors, command_smoothness, distribution_ms,
                                         frame_usage, period_stats, staleness_stats)
from embodied_ros.replay.report import ReportSeries
from embodied_ros.replay.topics import DEFAULT_TIMING, TopicMap


@dataclass(frozen=True)
class StageRun:
    stage: str
    produced_ns: int  # bag time the run finished (lock-step: its step)
    observation_ns: int  # bag time of the observation behind it
    compute_ms: float  # wall-clock compute time


@dataclass
class ReplayRecord:
    mode: str  # "lockstep" | "realtime"
    chunks: list[tuple[int, ActionChunkResult]] = field(default_factory=list)  # (produced, chunk with bag stamps)
    commands: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (bag time, positions)
    command_joints: tuple[str, ...] = ()
    stage_runs: list[StageRun] = field(default_factory=list)
    end_to_end_ms: list[float] = field(default_factory=list)  # realtime: input published -> chunk received
    step_wall_ms: list[float] = field(default_factory=list)  # lock-step: wall time of each whole step
    refused: list[tuple[int, str]] = field(default_factory=list)  # (bag time, why the observation was refused)
    used_frames: dict[str, list[int]] = field(default_factory=dict)  # camera -> stamps of frames perception used
    input_age_ms: list[float] = field(default_factory=list)  # per chunk: age of its oldest input when produced
    steps: int = 0
    wall_s: float = 0.0

    def command_series(self, topic: str) -> JointSeries | None:
        if not self.commands:
            return None
        return JointSeries(topic, np.array([t for t, _ in self.commands], dtype=np.int64), self.command_joints,
                           np.array([c for _, c in self.commands], dtype=np.float64))


def write_output_bag(path: Path, record: ReplayRecord, topic_map: TopicMap, controller_output: str,
                     command_period_ns: int, storage: str) -> dict[str, int]:
    """The produced chunks, commands and stage timings as a new bag; returns messages per topic."""
    from embodied_ros.deploy.messages import float64_multi_array, joint_trajectory
    from embodied_ros.node_infra.transport import chunk_to_msg, timing_msg

    events = [(t, 0, topic_map.action_chunk, m.ACTION_CHUNK, chunk_to_msg(c, t)) for t, c in record.chunks]
    for t, positions in record.commands:
        if controller_output == "joint_trajectory":
            events.append((t, 1, topic_map.trajectory, m.JOINT_TRAJECTORY,
                           joint_trajectory(record.command_joints, positions, t, command_period_ns)))
        else:
            events.append((t, 1, topic_map.array, m.FLOAT64_ARRAY, float64_multi_array(positions)))
    sequences: dict[str, int] = {}
    for run in record.stage_runs:
        sequences[run.stage] = sequences.get(run.stage, 0) + 1
        staleness = (run.produced_ns - run.observation_ns) / 1e6
        events.append((run.produced_ns, 2, DEFAULT_TIMING, m.STAGE_TIMING,
                       timing_msg(run.stage, sequences[run.stage], 0, run.observation_ns, run.compute_ms, staleness,
                                  run.produced_ns)))
    events.sort(key=lambda e: (e[0], e[1]))
    with BagWriter(path, storage) as writer:
        for stamp, _, topic, msgtype, message in events:
            writer.write(topic, msgtype, stamp, message)
    return dict(writer.counts)


def commanded_chunks(record: ReplayRecord, mapping: ActionMapping) -> tuple[tuple[str, ...], list[PredictedChunk]]:
    """The produced chunks as the controller commands them: its joints, each from its action column
    (so they compare with commands recorded on the robot's joint names); ValueError if a column is missing."""
    if not record.chunks:
        return (), []
    names = chunk_column_names(record.chunks[0][1])
    columns = mapping.column_index(names)
    chunks = [PredictedChunk(c.stamp_ns, np.asarray(c.actions, dtype=np.float64)[:, columns], c.action_period_s)
              for _, c in record.chunks]
    return mapping.joint_names(names), chunks


def compute_metrics(episode: Episode, record: ReplayRecord, *, stale_after_ms: float, command_period_s: float,
                    mapping: ActionMapping) -> dict:
    """metrics.json content (without the `bag` and `run` sections the caller adds); `mapping`: the
    controller's, from action columns to the commanded joints."""
    try:
        joint_names, chunks = commanded_chunks(record, mapping)
        actions = action_errors(chunks, joint_names, episode.commands)
    except ValueError as error:
        actions = {"reference": episode.command_topic or None, "available": False, "reason": str(error)}
    stages: dict[str, list[float]] = {}
    for run in record.stage_runs:
        stages.setdefault(run.stage, []).append(run.compute_ms)
    commands = record.command_series(episode.command_topic or "")
    return {
        "actions": actions,
        "latency": {
            "end_to_end_ms": distribution_ms(record.end_to_end_ms),
            "step_wall_ms": distribution_ms(record.step_wall_ms),
            "stages_ms": {stage: distribution_ms(values) for stage, values in stages.items()},
        },
        "staleness": staleness_stats(record.input_age_ms, stale_after_ms),
        "commands": {**period_stats(commands.stamps_ns if commands else [], command_period_s),
                     "count": len(record.commands)},
        "smoothness": command_smoothness([t for t, _ in record.commands], [p for _, p in record.commands],
                                         [t for t, _ in record.chunks], record.command_joints),
        "frames": frame_usage({c: s.stamps_ns for c, s in episode.cameras.items()}, record.used_frames),
        "refused_observations": {"count": len(record.refused),
                                 "first": [{"t_s": (t - episode.start_ns) / 1e9, "reason": r}
                                           for t, r in record.refused[:10]]},
    }


def report_series(episode: Episode, record: ReplayRecord, stale_after_ms: float, mapping: ActionMapping
                  ) -> ReportSeries:
    stage_ms: dict[str, list[float]] = {}
    for run in record.stage_runs:
        stage_ms.setdefault(run.stage, []).append(run.compute_ms)
    try:
        joint_names, chunks = commanded_chunks(record, mapping)
    except ValueError:  # the metrics say why; no action plot
        joint_names, chunks = (), []
    produced = [t for t, _ in record.chunks]
    return ReportSeries(
        start_ns=episode.start_ns, joint_names=joint_names,
        chunks=chunks, reference=episode.commands, commands=record.command_series("streamed"),
        stage_ms=stage_ms, end_to_end_ms=record.end_to_end_ms, step_wall_ms=record.step_wall_ms,
        staleness=(produced, record.input_age_ms), stale_after_ms=stale_after_ms,
    )
