"""`embodied-ros up [CONFIG]`: start the node graph, with a synthetic robot unless told otherwise."""

from __future__ import annotations

import argparse
import json

HELP = "start the node graph (synthetic robot by default) and report rates, latencies and the command stream"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="graph config YAML (default: config/pi05.yaml); a model bundle "
                                                  "here runs on its family's config (config/<family>.yaml)")
    parser.add_argument("--bundle", help="model bundle file (overrides the config's `bundle`)")
    parser.add_argument("--duration", type=float, default=10.0, metavar="S",
                        help="seconds to run after start-up; 0 runs until Ctrl-C (default 10)")
    layout = parser.add_mutually_exclusive_group()
    layout.add_argument("--composed", dest="layout", action="store_const", const="composed",
                        help="all nodes in this process (stage outputs by reference)")
    layout.add_argument("--separate", dest="layout", action="store_const", const="separate",
                        help="one process per node (stage outputs as Tensor messages)")
    parser.add_argument("--host", choices=("all", "robot", "inference"), default="all",
                        help="all: the whole graph; robot / inference: that host's nodes of the config's "
                             "split.robot_nodes, one process each, the other host's from another machine on the "
                             "same ROS domain (the synthetic robot goes with the robot's host)")
    parser.add_argument("--namespace", default="", help="ROS namespace of every node and topic")
    parser.add_argument("--remap", action="append", default=[], metavar="FROM:=TO", help="topic remap (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config setting, e.g. --set schedule.prefix=2 (repeatable)")
    parser.add_argument("--no-synthetic", dest="synthetic", action="store_false",
                        help="do not start the synthetic robot (use real cameras, joint states and instruction)")
    parser.add_argument("--summary-period", type=float, default=1.0, metavar="S", help="live summary period")
    parser.add_argument("--domain-id", type=int, help="ROS_DOMAIN_ID for the graph (default: the environment's)")
    parser.add_argument("--report-json", metavar="PATH", help="also write the final report as JSON")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from embodied_ros.bundle.errors import BundleError
    from embodied_ros.cli.graph_config import load_graph_config
    from embodied_ros.graph.up import format_report, run_up

    try:
        config = load_graph_config(args.config, args.bundle, args.set, {"layout": args.layout} if args.layout else {})
    except (ValueError, OSError) as error:
        raise SystemExit(f"embodied-ros up: {error}")
    try:
        report = run_up(config, duration_s=args.duration, namespace=args.namespace, remaps=args.remap,
                        synthetic=args.synthetic, summary_period_s=args.summary_period, domain_id=args.domain_id,
                        host=args.host)
    except BundleError as error:  # loaded before any node starts
        raise SystemExit(f"embodied-ros up: {error}")
    except RuntimeError as error:  # a node or the controller's process did not start
        raise SystemExit(f"embodied-ros up: {error}")
    print(format_report(report))
    if args.report_json:
        Path(args.report_json).write_text(json.dumps(report.to_dict(), indent=2))
    return 1 if report.exited or "action" not in report.stages else 0
