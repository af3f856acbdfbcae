"""`embodied-ros`: one entry point, one module per subcommand.

Every module `embodied_ros/cli/cmd_<name>.py` is the subcommand `<name>` (underscores become
dashes). It defines `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`, and imports
anything heavy (numpy, numba, rclpy) inside `run`, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
import threading

import embodied_ros



def subcommands() -> dict[str, str]:
    """subcommand name -> module name under embodied_ros.cli."""
    package = importlib.import_module("embodied_ros.cli")
    return {
        info.name[len("cmd_"):].replace("_", "-"): info.name
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name)
        if info.name.startswith("cmd_")
    }


def _add_subcommand(subparsers, name: str, module_name: str) -> None:
    module = importlib.import_module(f"embodied_ros.cli.{module_name}")
    parser = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
    module.add_arguments(parser)
    parser.set_defaults(_run=module.run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embodied-ros",
        description="Run embodied-AI models (pi0.5, world-action models) as ROS 2 node graphs.",
    )
    parser.add_argument("--version", action="version", version=f"embodied-ros {embodied_ros.__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name, module_name in subcommands().items():
        _add_subcommand(subparsers, name, module_name)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    if threading.current_thread() is threading.main_thread():
        # SIGINT stops a command as Ctrl-C does even when its parent started it with SIGINT ignored
        # (a shell's background job, some CI runners): `kill -INT` must still end `up` cleanly
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
