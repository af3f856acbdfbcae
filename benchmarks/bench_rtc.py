"""Chunk boundaries under an added inference delay: synchronous execution, asynchronous execution
without real-time chunking and asynchronous execution with it, side by side in one run.

    python benchmarks/bench_rtc.py [--bundle bundles/pi05_tiny.gguf] [--delays 3,5] [--execute 5]
                                   [--chunks 40] [--seed 0] [--no-write]

Time is simulated, so nothing here depends on this machine's speed: the controller logic
(deploy/command.py) commands an arm at the action rate from the chunks the runtime computes, and
each chunk lands d action periods after the observation it was solved on. The arm tracks its
commands exactly; each observation carries the arm's commanded position as its state, the same
camera images throughout, and chunk k's noise is the same in every mode.

  sync       observe, hold the arm while the chunk is computed (d periods), run its first
             `execute` rows from the landing on, observe again
  async      a new observation every `execute` periods while the arm keeps streaming; each chunk
             lands d periods later and the controller drops its first d rows (deploy/continuation.merge)
  async_rtc  the same, each chunk solved with real-time chunking toward the leftover of the executing
             one with delay d (deploy/continuation.ChunkContinuer, heads/rtc.py)

Reported per mode: how far the new chunk's target at the landing instant is from the target the
controller was following then (the old chunk's, or the held position), replay/metrics.command_smoothness
over the commands from the first landing on (the largest and the mean command step across chunk
switches and within chunks, jerk) and the share of periods the arm held. The bundle's weights are random: its actions are no task policy and
two chunks from different noise disagree far more than a trained policy's would, so the numbers
compare the modes on the same inputs, not the size of a real robot's jumps.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, machine_line, markdown_table, write_section  # noqa: E402

from embodied_ros.deploy import CommandLogic, JointLimits, TimedChunk  # noqa: E402
from embodied_ros.deploy.continuation import ChunkContinuer, DelayEstimate, merge  # noqa: E402
from embodied_ros.pipeline.noise import stage_noise  # noqa: E402
from embodied_ros.heads.rtc import RtcSettings  # noqa: E402
from embodied_ros.pipeline.stages import load_runtime  # noqa: E402
from embodied_ros.pipeline.types import Observation  # noqa: E402
from embodied_ros.replay.metrics import command_smoothness  # noqa: E402

MODES = ("sync", "async", "async_rtc")
INSTRUCTION = "put the cup on the plate"


def solve(runtime, images, state, stamp_ns, noise, continuation=None):
    observation = Observation(stamp_ns, images, state, INSTRUCTION)
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    if continuation is None:
        return runtime.act(prefix, None, noise)
    return runtime.act(prefix, None, noise, continuation)


def run_mode(runtime, mode: str, delay: int, execute: int, chunks: int, images, seed: int,
             settings: RtcSettings) -> dict:
    spec = runtime.spec
    period_ns = round(spec.action_period_s * 1e9)
    joints = len(spec.action_names)
    logic = CommandLogic(JointLimits.from_lists(joints), period_ns)
    logic.observe_positions(np.zeros(joints))
    continuer = ChunkContinuer(settings, DelayEstimate(fixed_rows=delay)) if mode == "async_rtc" else None
    state = np.zeros(len(spec.state_names), np.float32)
    commands, landings, disagreements, held = [], [], [], 0
    pending = None  # (landing ns, chunk result)
    next_observation_ns, solved, t_ns = 0, 0, 0
    while solved < chunks or pending is not None:
        if pending is not None and t_ns >= pending[0]:
            landed_ns, result = pending
            pending = None
            landings.append(landed_ns)
            if mode == "sync":  # run the first `execute` rows from the landing on, then observe again
                timed = TimedChunk(landed_ns, period_ns, result.actions[:execute].astype(np.float64))
                next_observation_ns = landed_ns + execute * period_ns
            else:
                timed = merge(TimedChunk(result.stamp_ns, period_ns, result.actions.astype(np.float64)), landed_ns)
            following = logic.chunk.sample(landed_ns) if logic.chunk is not None else None
            if following is None:  # holding (sync): the arm stays where it was last commanded
                last = logic.hold(landed_ns, "")
                following = None if last is None else last.positions
            if following is not None and len(landings) > 1:
                disagreements.append(float(np.abs(timed.sample(landed_ns) - following).max()))
            logic.accept_chunk(timed, landed_ns)
            if continuer:
                continuer.published(result, landed_ns)
        if pending is None and solved < chunks and t_ns >= next_observation_ns:
            position = logic.hold(t_ns, "")
            state[: min(joints, state.size)] = position.positions[: state.size] if position else 0.0
            continuation = continuer.continuation(t_ns) if continuer else None
            noise = stage_noise(seed, "action", solved, spec.noise_shape)
            pending = (t_ns + delay * period_ns, solve(runtime, images, state.copy(), t_ns, noise, continuation))
            solved += 1
            if mode != "sync":
                next_observation_ns = t_ns + execute * period_ns
        command = logic.tick(t_ns)
        if landings and command is not None:
            commands.append((t_ns, command.positions))
            held += int(command.holding)
        t_ns += period_ns
    smooth = command_smoothness([t for t, _ in commands], [p for _, p in commands], landings[1:])
    return {"mode": mode, "delay": delay, **smooth, "held_share": held / max(1, len(commands)),
            "disagreement": (max(disagreements), float(np.mean(disagreements)))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", default=str(Path(__file__).resolve().parents[1] / "bundles" / "pi05_tiny.gguf"))
    parser.add_argument("--delays", default="3,5", help="inference delays, action periods (comma-separated)")
    parser.add_argument("--execute", type=int, default=5, help="rows run between observations")
    parser.add_argument("--chunks", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--schedule", default="linear")
    parser.add_argument("--max-guidance-weight", type=float, default=10.0)
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()

    runtime = load_runtime(args.bundle)
    spec = runtime.spec
    delays = [int(d) for d in args.delays.split(",")]
    if any(args.execute + d > spec.chunk_size for d in delays):
        parser.error(f"execute + delay must fit in the chunk ({spec.chunk_size} rows)")
    settings = RtcSettings(args.schedule, args.max_guidance_weight, spec.chunk_size)
    rng = np.random.default_rng(args.seed)
    height, width = spec.image_size
    images = {name: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for name in spec.camera_names}
    rows = []
    for delay in delays:
        for mode in MODES:
            result = run_mode(runtime, mode, delay, args.execute, args.chunks, images, args.seed, settings)
            rows.append({
                "delay (periods)": delay, "delay / chunk": f"{delay / spec.chunk_size:.0%}", "mode": mode,
                "switches": result["switches"],
                "max / mean new vs followed target at landing": "{:.3g} / {:.3g}".format(*result["disagreement"]),
                "max step at switch": result["max_abs_step_at_switch"],
                "mean step at switch": result["mean_abs_step_at_switch"],
                "mean step within chunk": result["mean_abs_step_within_chunk"],
                "jerk rms (1/s^3)": result["jerk"]["rms"], "held": f"{result['held_share']:.0%}",
            })
    table = markdown_table(rows)
    body = (f"Bundle `{Path(args.bundle).name}` ({spec.architecture}, chunk {spec.chunk_size} rows of "
            f"{spec.action_period_s * 1e3:.0f} ms, random weights), {args.chunks} chunks per mode, a new observation "
            f"every {args.execute} rows; RTC: {args.schedule} schedule, max guidance weight "
            f"{args.max_guidance_weight:g}, execution horizon {spec.chunk_size}. Simulated time (see the script's "
            "docstring): the delay is added, not measured, and the numbers do not depend on the machine. "
            "Steps are the largest joint change between consecutive commands, in action units. 'new vs followed "
            "target at landing' is the jump a chunk switch adds to the motion (sync: from the held position). "
            "Random weights make consecutive rows of one chunk differ about as much as two chunks do: where "
            "'mean step within chunk' is as large as 'mean step at switch', the command steps and the jerk cannot "
            "show a boundary effect here.\n\n" + table)
    print(body)
    if not args.no_write:
        write_section(Path(__file__).resolve().parents[1] / "BENCHMARKS.md", "rtc_boundaries", body, command_line(),
                      machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
