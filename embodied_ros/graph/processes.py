"""One process per node: each node module run with the graph's parameters, started and stopped here.

Used by `embodied-ros up --separate` and tests; a launch file does the same with launch_ros.
Stage outputs travel serialized (Tensor messages) through Fast DDS shared memory.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import yaml

from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.node_infra.node_table import node_spec
from embodied_ros.node_infra.paths import dds_environment
from embodied_ros.share import child_environment, module_command, start_child
from embodied_ros.nodes.params import node_parameters
from embodied_ros.nodes.run import PARENT_PID


def params_file_content(config: GraphConfig) -> dict:
    """A ROS 2 parameters file (`--params-file`) giving every node the graph's settings."""
    nested: dict = {}
    for name, value in node_parameters(config).items():
        owner = nested
        *sections, leaf = name.split(".")
        for section in sections:
            owner = owner.setdefault(section, {})
        owner[leaf] = value
    return {"/**": {"ros__parameters": nested}}


def node_command(node: str, params_file: Path, namespace: str = "", remaps: Sequence[str] = ()) -> list[str]:
    """The command line that runs one node of the graph, configured and activated on start."""
    return module_command(node_spec(node).module, "--ros-args", "--params-file", str(params_file),
                          "-p", "autostart:=true", *_remap_arguments(namespace, remaps))


def _remap_arguments(namespace: str, remaps: Sequence[str]) -> list[str]:
    arguments = ["-r", f"__ns:={namespace if namespace.startswith('/') else '/' + namespace}"] if namespace else []
    for remap in remaps:
        arguments += ["-r", remap]
    return arguments


class SeparateGraph:
    def __init__(self, config: GraphConfig, node_names: Sequence[str], *, namespace: str = "",
                 remaps: Sequence[str] = (), domain_id: int | None = None, log_dir: str | Path | None = None,
                 env: dict[str, str] | None = None, command_prefix: Sequence[str] = ()):
        if config.transport.mode == "reference":
            raise ValueError("transport.mode reference cannot cross processes; use auto or serialized")
        self.config = replace(config, layout="separate")
        self.node_names = tuple(node_names)
        self.namespace = namespace
        self.remaps = tuple(remaps)
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="embodied_ros_graph_"))
        # a log folder of its own goes with a clean stop; one the caller named, or one a failure
        # points to (keep_logs), stays
        self.keep_logs = log_dir is not None
        self.env = child_environment({**os.environ, **dds_environment(), PARENT_PID: str(os.getpid()), **(env or {})})
        if domain_id is not None:
            self.env["ROS_DOMAIN_ID"] = str(domain_id)
        self.command_prefix = tuple(command_prefix)  # e.g. `ip netns exec NS`: run every node there
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.params_file = self.log_dir / "params.yaml"
        self.params_file.write_text(yaml.safe_dump(params_file_content(self.config), sort_keys=False))
        for name in self.node_names:
            self.spawn(name)

    def spawn(self, name: str, program: Sequence[str] | None = None) -> None:
        """Start a node of the graph, or under `name` another program of it (`program`: its command
        line without ROS arguments; it gets the graph's namespace and remaps)."""
        log = open(self.log_dir / f"{name}.log", "ab")
        if program is None:
            command = node_command(name, self.params_file, self.namespace, self.remaps)
        else:
            remap_arguments = _remap_arguments(self.namespace, self.remaps)
            command = [*program, "--ros-args", *remap_arguments] if remap_arguments else list(program)
        self.processes[name] = start_child([*self.command_prefix, *command], env=self.env, stdout=log,
                                           stderr=subprocess.STDOUT)
        log.close()

    def kill(self, name: str) -> None:
        """Kill one node's process at once (SIGKILL), as a crash would."""
        process = self.processes[name]
        process.kill()
        process.wait(timeout=10)

    def exited(self) -> dict[str, int]:
        """Nodes whose process has ended, with exit codes."""
        return {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, timeout_s: float = 10.0) -> dict[str, int]:
        """SIGINT every node, then SIGKILL what is still running after `timeout_s`; exit codes. The
        logs are removed when every node exited 0 and nothing asked to keep them."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout_s
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        codes = {name: p.returncode for name, p in self.processes.items()}
        if not self.keep_logs and all(code == 0 for code in codes.values()):
            shutil.rmtree(self.log_dir, ignore_errors=True)
        return codes
