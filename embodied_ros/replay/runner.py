"""`replay`: a recorded episode through the node graph, into a new bag and a report.

Lock-step (default): the graph runs step by step on the step clock (`graph.lockstep.LockstepGraph`),
each step fed the newest recorded inputs at its bag time; deterministic and as fast as the stages
compute. Realtime: the recorded inputs are published at their recorded pace into a free-running
graph (`embodied_ros.replay.realtime`). The input bag is only ever read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from embodied_ros.deploy.mapping import ActionMapping
from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.replay.bag_reader import bag_topics, read_episode
from embodied_ros.replay.episode import Episode
from embodied_ros.replay.record import ReplayRecord, StageRun, compute_metrics, report_series, write_output_bag
from embodied_ros.replay.report import write_report
from embodied_ros.replay.steps import ReplayStep, StateSelector, plan_steps
from embodied_ros.replay.topics import TopicMap

MODES = ("lockstep", "realtime")


@dataclass(frozen=True)
class ReplayOptions:
    mode: str = "lockstep"
    topic_map: tuple[str, ...] = ()  # KEY=TOPIC overrides (see replay.topics)
    allow_missing_cameras: bool = False
    max_gap_s: float = 10.0  # inputs silent longer than this: only their longest stretch is replayed
    max_steps: int | None = None  # replay only the first steps
    storage: str | None = None  # output bag storage; None: as the input bag
    step_timeout_s: float = 120.0  # lock-step: longest wait for one step (the first includes warm-up)
    speed: float = 1.0  # realtime: playback speed factor
    read_timeout_s: float = 600.0
    progress: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.max_gap_s <= 0:
            raise ValueError(f"max_gap_s must be positive, got {self.max_gap_s}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if not 0.01 <= self.speed <= 100.0:
            raise ValueError(f"speed must be within 0.01..100, got {self.speed}")
        if self.storage not in (None, "mcap", "sqlite3"):
            raise ValueError(f"storage must be mcap or sqlite3, got {self.storage!r}")


@dataclass(frozen=True)
class ReplayResult:
    output_bag: Path
    metrics_path: Path
    report_path: Path
    metrics: dict
    record: ReplayRecord


def _prepare_out_dir(bag: Path, out_dir: Path) -> None:
    bag_dir = (bag if bag.is_dir() else bag.parent).resolve()
    out = out_dir.resolve()
    if bag.is_dir() and (out == bag_dir or bag_dir in out.parents):
        raise ValueError(f"--out {out_dir} lies inside the input bag {bag}; choose a folder outside it")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out_dir} exists and is not empty; replay never overwrites (choose another --out)")
    out.mkdir(parents=True, exist_ok=True)


def replay(bag: str | Path, out_dir: str | Path, config: GraphConfig, options: ReplayOptions = ReplayOptions(), *,
           runtime=None, domain_id: int | None = None) -> ReplayResult:
    """Replay `bag` through the graph `config` describes; writes out_dir/{bag, metrics.json, report.html}."""
    from embodied_ros.nodes.runtime_cache import acquire_runtime

    bag, out_dir = Path(bag), Path(out_dir)
    message_count = sum(info.count for info in bag_topics(bag).values())  # a bad bag fails before the model loads
    runtime = acquire_runtime(config, runtime)
    spec = runtime.spec
    cameras = config.inputs.cameras or spec.camera_names
    topic_map = TopicMap.for_cameras(cameras).with_overrides(options.topic_map)
    episode = _read(bag, topic_map, options, message_count)
    config = replace(config, inputs=replace(config.inputs, cameras=tuple(c for c in cameras if c in episode.cameras)))
    selector = StateSelector(episode, config.inputs.state_joints or spec.state_names)
    _prepare_out_dir(bag, out_dir)
    started = time.perf_counter()
    if options.mode == "lockstep":
        record = run_lockstep(episode, config, selector, options, runtime=runtime, domain_id=domain_id)
    else:
        from embodied_ros.replay.realtime import run_realtime

        record = run_realtime(episode, config, selector, topic_map, options, runtime=runtime, domain_id=domain_id)
    record.wall_s = time.perf_counter() - started
    if record.chunks and not record.chunks[0][1].joint_names:
        record.chunks = [(t, replace(c, joint_names=spec.action_names)) for t, c in record.chunks]
    return _finish(bag, out_dir, episode, record, config, options, topic_map)


def _read(bag: Path, topic_map: TopicMap, options: ReplayOptions, message_count: int) -> Episode:
    progress = _progress(options, "reading", total=message_count)
    try:
        return read_episode(bag, topic_map, allow_missing_cameras=options.allow_missing_cameras,
                            max_gap_s=options.max_gap_s, timeout_s=options.read_timeout_s, on_message=lambda n: progress.update(1))
    finally:
        progress.close()


def _progress(options: ReplayOptions, what: str, total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc=what, unit="msg" if what == "reading" else "step", disable=not options.progress,
                leave=False, dynamic_ncols=True)


def run_lockstep(episode: Episode, config: GraphConfig, selector: StateSelector, options: ReplayOptions, *,
                 runtime, domain_id: int | None) -> ReplayRecord:
    """Drive the lock-step graph over every control step of the episode."""
    from embodied_ros.graph.lockstep import LockstepGraph

    steps = plan_steps(episode, config.schedule.step_period_s, options.max_steps)
    record = ReplayRecord(mode="lockstep", command_joints=tuple(config.controller.joints))
    progress = _progress(options, "replaying", total=len(steps))
    with LockstepGraph(config, runtime=runtime, domain_id=domain_id, timeout_s=options.step_timeout_s) as graph:
        at_graph_stamp: dict[int, ReplayStep] = {}
        for step in steps:
            at_graph_stamp[graph.clock.stamp_of(graph.next_step)] = step
            images = {camera: episode.cameras[camera].frames[i] for camera, i in step.frames.items()}
            state = selector.state(episode, step)
            began = time.perf_counter()
            out = graph.step(images, np.zeros(0) if state is None else state, step.instruction)
            record.step_wall_ms.append((time.perf_counter() - began) * 1e3)
            _take_step(record, episode, step, out, at_graph_stamp)
            progress.update(1)
    progress.close()
    record.steps = len(steps)
    return record


def _take_step(record: ReplayRecord, episode: Episode, step: ReplayStep, out, at_graph_stamp: dict[int, ReplayStep]
               ) -> None:
    """Move one StepOutput onto the bag's time axis."""
    for stage, timing in out.timings.items():
        source = at_graph_stamp.get(int(timing.observation_stamp.sec) * 1_000_000_000 + timing.observation_stamp.nanosec)
        if timing.sequence == 0 or source is None:
            continue
        record.stage_runs.append(StageRun(stage, step.bag_ns, source.bag_ns, float(timing.compute_ms)))
        if stage == "perception":
            for camera, i in source.frames.items():
                record.used_frames.setdefault(camera, []).append(int(episode.cameras[camera].stamps_ns[i]))
    if out.input_problem:
        record.refused.append((step.bag_ns, out.input_problem))
    if out.chunk is not None:
        source = at_graph_stamp[out.chunk.stamp_ns]
        record.chunks.append((step.bag_ns, replace(out.chunk, stamp_ns=source.bag_ns)))
        record.input_age_ms.append(max(source.input_age_ms(episode).values(), default=0.0)
                                   + (step.bag_ns - source.bag_ns) / 1e6)
        if not record.command_joints:
            record.command_joints = tuple(out.chunk.joint_names)
    for command in out.commands:  # stamped with its tick on the graph's clock
        record.commands.append((step.bag_ns + command.stamp_ns - out.stamp_ns, np.asarray(command.positions)))


def _finish(bag: Path, out_dir: Path, episode: Episode, record: ReplayRecord, config: GraphConfig,
            options: ReplayOptions, topic_map: TopicMap) -> ReplayResult:
    stale_after_ms = config.inputs.max_age_s * 1e3
    mapping = ActionMapping(config.controller.joints, config.controller.action_columns)
    command_period_ns = round(1e9 / config.controller.rate_hz)
    output_bag = out_dir / "bag"
    counts = write_output_bag(output_bag, record, topic_map, config.controller.output, command_period_ns,
                              options.storage or episode.storage)
    metrics = {
        "bag": {"path": str(bag), "storage": episode.storage, "duration_s": episode.duration_s,
                "notes": list(episode.notes), "recorded_commands": episode.command_topic or None},
        "run": {"mode": record.mode, "bundle": config.bundle, "steps": record.steps, "chunks": len(record.chunks),
                "step_period_s": config.schedule.step_period_s, "wall_s": round(record.wall_s, 3),
                "output_bag": str(output_bag), "output_topics": counts},
        **compute_metrics(episode, record, stale_after_ms=stale_after_ms,
                          command_period_s=1.0 / config.controller.rate_hz, mapping=mapping),
    }
    metrics["partial"] = bool(episode.notes) or bool(record.refused)
    metrics_path, report_path = write_report(out_dir, _json_ready(metrics),
                                             report_series(episode, record, stale_after_ms, mapping))
    return ReplayResult(output_bag, metrics_path, report_path, metrics, record)


def _json_ready(value):
    """NaN and infinities are not JSON: they become null."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def summary_lines(result: ReplayResult) -> list[str]:
    """What the command line prints after a replay."""
    metrics = result.metrics
    run, latency, actions = metrics["run"], metrics["latency"], metrics["actions"]
    lines = [f"replayed {metrics['bag']['path']} ({run['mode']}): {run['steps']} steps, {run['chunks']} chunks "
             f"in {run['wall_s']:.1f} s"]
    timing = latency["end_to_end_ms"] if run["mode"] == "realtime" else latency["step_wall_ms"]
    if timing["count"]:
        label = "end-to-end" if run["mode"] == "realtime" else "step wall time"
        lines.append(f"  {label} ms: p50 {timing['p50']:.1f}  p95 {timing['p95']:.1f}  p99 {timing['p99']:.1f}")
    for stage, dist in latency["stages_ms"].items():
        if dist["count"]:
            lines.append(f"  {stage:<12} compute ms: p50 {dist['p50']:.2f}  p99 {dist['p99']:.2f}  (n={dist['count']})")
    if actions["available"]:
        worst = max(actions["per_joint"].items(), key=lambda item: item[1]["max_abs"])
        lines.append(f"  actions vs {actions['reference']}: MSE {actions['mse']:.4g}, worst joint {worst[0]} "
                     f"(max |error| {worst[1]['max_abs']:.3g}), {actions['compared_rows']} rows compared")
    else:
        lines.append(f"  actions not compared: {actions['reason']}")
    smoothness = metrics["smoothness"]
    if smoothness["max_abs_step"] is not None:
        at_switch = smoothness["max_abs_step_at_switch"]
        lines.append(f"  commands: max |step| {smoothness['max_abs_step']:.3g} (at chunk switches "
                     f"{'-' if at_switch is None else format(at_switch, '.3g')}), "
                     f"max |jerk| {smoothness['jerk']['max_abs'] or 0:.3g}/s^3")
    for note in metrics["bag"]["notes"]:
        lines.append(f"  partial: {note}")
    if metrics["refused_observations"]["count"]:
        lines.append(f"  observations refused: {metrics['refused_observations']['count']} "
                     f"(first: {metrics['refused_observations']['first'][0]['reason']})")
    lines += [f"  output bag: {result.output_bag}", f"  metrics:    {result.metrics_path}",
              f"  report:     {result.report_path}"]
    return lines
