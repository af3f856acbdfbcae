"""A graph split over the two hosts of `TwoHosts`, as `host:=robot` and `host:=inference` start it.

The robot's namespace runs the nodes of `split.robot_nodes` (the observation node and the
controller by default), the synthetic robot (cameras, joint states, the arm) and the robot-side
probe; the inference namespace runs the other nodes, each in a process of its own; all of them
with config/fastdds_two_hosts.xml, so every topic between the hosts crosses the veth pair.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from embodied_ros.graph.processes import SeparateGraph
from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.node_infra.node_table import graph_nodes
from embodied_ros.nodes.synthetic import robot_command
from embodied_ros.pipeline.stages import ModelSpec
from embodied_ros.share import child_environment, module_command, share_path
from embodied_ros.testbed.network import HOSTS, TwoHosts
from embodied_ros.testbed.recording import Recording

ROBOT_PROGRAM = "synthetic_robot"


def two_hosts_environment(domain_id: int) -> dict[str, str]:
    """What every process of the split graph runs with: the two-host DDS profile, its domain."""
    return {
        "FASTDDS_DEFAULT_PROFILES_FILE": str(share_path("config", "fastdds_two_hosts.xml")),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT",
        "ROS_DOMAIN_ID": str(domain_id),
        "MALLOC_MMAP_THRESHOLD_": "67108864",
        "MALLOC_TRIM_THRESHOLD_": "268435456",
    }


class SplitGraph:
    def __init__(self, net: TwoHosts, config: GraphConfig, spec: ModelSpec, domain_id: int, log_dir: Path,
                 respawn: bool = False):
        self.net = net
        self.respawn = respawn  # restart inference processes that end on their own, as launch's respawn:=true
        self.respawned: list[tuple[str, int]] = []  # (process, exit code) of each restart that made
        self.config = replace(config, layout="separate")
        self.spec = spec
        self.env = two_hosts_environment(domain_id)
        self.log_dir = Path(log_dir)
        present = graph_nodes(spec.has_world_model)
        self.nodes = {host: tuple(n for n in self.config.split.nodes_of(host) if n in present) for host in HOSTS}
        self.hosts = {host: SeparateGraph(self.config, self.nodes[host], domain_id=domain_id,
                                          log_dir=self.log_dir / host, env=self.env,
                                          command_prefix=net.command(host, []))
                      for host in HOSTS}
        self.recording = Recording()
        self.probe: subprocess.Popen | None = None

    def start(self) -> None:
        robot = self.hosts["robot"]
        for host in HOSTS:
            self.hosts[host].start()
        robot.spawn(ROBOT_PROGRAM, robot_command(self.config, self.spec, robot.log_dir))
        probe_env = child_environment({**os.environ, **self.env})
        self.probe = self.net.popen("robot", module_command("embodied_ros.testbed.probe"), env=probe_env,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.recording.follow(self.probe.stdout)

    def wait_streaming(self, since_ns: int, timeout_s: float) -> bool:
        """Whether the controller reported streaming after `since_ns` within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not self.recording.streaming_since(since_ns):
            if self.respawn:
                self._respawn_ended()
            if time.monotonic() > deadline or self.exited():
                return False
            time.sleep(0.02)
        return True

    def kill_inference(self) -> None:
        """kill -9 of every process of the inference host, as when the GPU box loses power."""
        for name in self.nodes["inference"]:
            self.hosts["inference"].kill(name)

    def restart_inference(self) -> None:
        for name in self.nodes["inference"]:
            self.hosts["inference"].spawn(name)

    def _respawn_ended(self) -> None:
        inference = self.hosts["inference"]
        for name, code in inference.exited().items():
            if code != -9:  # not one kill_inference killed (restart_inference brings those back)
                self.respawned.append((name, code))
                inference.spawn(name)

    def exited(self) -> dict[str, int]:
        """Processes that ended on their own (not the ones `kill_inference` killed and not yet restarted)."""
        ended = {}
        for host in HOSTS:
            ended.update({f"{host}/{name}": code for name, code in self.hosts[host].exited().items() if code != -9})
        return ended

    def logs(self, tail: int = 1500) -> str:
        return "\n".join(f"--- {host}/{name}\n{self.hosts[host].log(name)[-tail:]}"
                         for host in HOSTS for name in self.hosts[host].processes)

    def stop(self) -> dict[str, int]:
        if self.probe is not None and self.probe.poll() is None:
            self.probe.terminate()
            try:
                self.probe.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.probe.kill()
                self.probe.wait()
        codes = {}
        for host in HOSTS:
            codes.update({f"{host}/{name}": code for name, code in self.hosts[host].stop().items()})
        return codes
