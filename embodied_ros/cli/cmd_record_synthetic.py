"""`embodied-ros record-synthetic OUT`: write a synthetic rosbag2 episode (simulated arm, cameras, commands)."""

from __future__ import annotations

import argparse
import sys

HELP = "write a synthetic robot episode (cameras, joint states, instruction, commands) as a rosbag2 bag"


def _camera(text: str) -> tuple[str, tuple[int, int]]:
    name, sep, size = text.partition(":")
    height, x, width = size.partition("x")
    if not sep or not x or not name or not height.isdigit() or not width.isdigit():
        raise argparse.ArgumentTypeError(f"camera {text!r} is not NAME:HEIGHTxWIDTH (for example wrist:64x64)")
    return name, (int(height), int(width))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", help="bag directory to create (must not exist)")
    parser.add_argument("--duration", type=float, default=5.0, help="episode length, seconds (default 5)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="rosbag2 storage (default mcap)")
    parser.add_argument("--cameras", nargs="+", type=_camera, metavar="NAME:HxW",
                        help="cameras and image sizes (default: the bundle's, else base_0_rgb:96x128 wrist_0_rgb:64x64)")
    parser.add_argument("--bundle", help="take camera names, image size, state and action joints from this bundle")
    parser.add_argument("--commands", choices=("trajectory", "array", "none"), default="trajectory",
                        help="recorded commands: JointTrajectory, Float64MultiArray, or none (default trajectory)")
    parser.add_argument("--camera-rate", type=float, default=30.0, help="camera frame rate, Hz (default 30)")
    parser.add_argument("--joint-rate", type=float, default=50.0, help="joint-state and command rate, Hz (default 50)")
    parser.add_argument("--instruction", default=None, help="task instruction published at the start")
    parser.add_argument("--seed", type=int, default=0, help="seed of the arm's waypoints (default 0)")
    parser.add_argument("--topic-map", nargs="+", default=[], metavar="KEY=TOPIC",
                        help="write to other topics, e.g. camera:wrist=/wrist/image joint_states=/arm/joint_states")


def _joint_settings(args) -> dict:
    if not args.bundle:
        return {}
    from embodied_ros.pipeline.stages import read_spec

    spec = read_spec(args.bundle)
    joints = tuple(spec.state_names) + tuple(n for n in spec.action_names if n not in spec.state_names)
    settings = {"joint_names": joints, "command_joint_names": tuple(spec.action_names),
                "cameras": {name: tuple(spec.image_size) for name in spec.camera_names}}
    return settings


def run(args: argparse.Namespace) -> int:
    from embodied_ros.replay.bag_reader import bag_topics
    from embodied_ros.replay.synthetic import SyntheticConfig, write_episode
    from embodied_ros.replay.topics import TopicMap

    try:
        settings = _joint_settings(args)
        if args.cameras:
            settings["cameras"] = dict(args.cameras)
        if args.instruction is not None:
            settings["instruction"] = args.instruction
        config = SyntheticConfig(duration_s=args.duration, command_kind=args.commands, camera_rate_hz=args.camera_rate,
                                 joint_rate_hz=args.joint_rate, command_rate_hz=args.joint_rate, seed=args.seed,
                                 **settings)
        topic_map = TopicMap.for_cameras(config.cameras).with_overrides(args.topic_map)
        bag = write_episode(args.out, config, args.storage, topic_map)
    except (ValueError, FileExistsError) as error:
        print(f"record-synthetic: error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {bag} ({args.storage}, {config.duration_s:g} s)")
    for topic, info in bag_topics(bag).items():
        print(f"  {topic:<50} {info.msgtype:<36} {info.count:>6}")
    return 0
