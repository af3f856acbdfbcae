"""`embodied-ros replay BAG`: a recorded episode through the node graph; new bag, metrics.json, report.html."""

from __future__ import annotations

import argparse
import sys

HELP = "replay a rosbag2 episode through the node graph and report actions vs recorded commands and latency"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="rosbag2 directory (MCAP or sqlite3), or a .mcap / .db3 file; never modified")
    parser.add_argument("--bundle", help="model bundle (overrides the config's `bundle`)")
    parser.add_argument("--config", help="graph config YAML (default: config/pi05.yaml); a model bundle here runs "
                                         "on its family's config (config/<family>.yaml)")
    parser.add_argument("--mode", choices=("lockstep", "realtime"), default="lockstep",
                        help="lockstep: deterministic, step by step, as fast as it computes (default); "
                             "realtime: inputs at their recorded pace into the free-running graph")
    parser.add_argument("--out", help="output folder, created new (default: replay_<bag name> here)")
    parser.add_argument("--topic-map", nargs="+", default=[], metavar="KEY=TOPIC",
                        help="bag topics to read, e.g. camera:base_0_rgb=/my/cam joint_states=/arm/joint_states "
                             "(keys: camera:<name>, joint_states, instruction, trajectory, array, action_chunk)")
    parser.add_argument("--allow-missing-cameras", action="store_true",
                        help="replay even if a model camera has no topic in the bag (it is absent from every "
                             "observation; the report marks the result partial)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config setting, e.g. --set schedule.step_period_s=0.05 (repeatable)")
    parser.add_argument("--max-steps", type=int, help="replay only the first N control steps")
    parser.add_argument("--max-gap", type=float, default=10.0, metavar="S",
                        help="where camera frames and joint states fall silent for longer, replay only their "
                             "longest stretch (noted in the report; default 10)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), help="output bag storage (default: as the input)")
    parser.add_argument("--step-timeout", type=float, default=120.0, metavar="S",
                        help="lock-step: longest wait for one step before giving up (default 120)")
    parser.add_argument("--speed", type=float, default=1.0, help="realtime: playback speed factor (default 1)")
    parser.add_argument("--domain-id", type=int, help="ROS_DOMAIN_ID of the replay graph (default: the environment's)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from embodied_ros.bundle.scan import starts_like_a_bundle
    from embodied_ros.cli.graph_config import load_graph_config
    from embodied_ros.replay.runner import ReplayOptions, replay, summary_lines

    if starts_like_a_bundle(args.bag):
        print(f"replay: error: {args.bag} is a model bundle, not a bag: replay BAG --bundle {args.bag}",
              file=sys.stderr)
        return 2
    out = Path(args.out or f"replay_{Path(args.bag).resolve().name}")
    try:
        config = load_graph_config(args.config, args.bundle, args.set)
        options = ReplayOptions(mode=args.mode, topic_map=tuple(args.topic_map),
                                allow_missing_cameras=args.allow_missing_cameras, max_steps=args.max_steps,
                                max_gap_s=args.max_gap,
                                storage=args.storage, step_timeout_s=args.step_timeout, speed=args.speed,
                                progress=args.progress)
        result = replay(args.bag, out, config, options, domain_id=args.domain_id)
    except (ValueError, OSError, TimeoutError, RuntimeError) as error:
        print(f"replay: error: {error}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(result)))
    return 0
