"""What a launch file starts for a graph config: importable and tested without `launch`.

launch/graph.launch.py turns this plan into launch_ros actions; `embodied-ros up` starts the same
nodes itself. Composed: one container process hosting every node. Separate: one lifecycle node
process per stage (the world node idles for models without a world model). With
`robot="synthetic"`, one more process: the simulated arm and cameras of `embodied-ros up`
(nodes/synthetic.py), so the graph runs end to end without hardware.

Two hosts: `host="robot"` plans the nodes of the config's `split.robot_nodes` (the observation
node and the controller by default), `host="inference"` the others, each one node per process (the
separate layout: stage outputs serialized, as they must be to cross hosts), from the same config.
With `respawn`, launch restarts a node process that ends (killed, crashed); such a node configures
and activates itself (`autostart`), since launch's configure and activate requests go out once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied_ros.node_infra.config import HOSTS, load_config
from embodied_ros.node_infra.paths import config_file
from embodied_ros.node_infra.node_table import node_spec
from embodied_ros.nodes.params import node_parameters

CONTAINER = "embodied-ros-container"
SYNTHETIC_ROBOT = "embodied-ros-synthetic-robot"
ROBOTS = ("none", "synthetic")  # none: the robot's own drivers publish the inputs and take the commands


@dataclass(frozen=True)
class PlannedProcess:
    executable: str
    name: str | None  # node name; None for the container (it names its own nodes)
    lifecycle: bool  # a managed node that launch must configure and activate
    parameters: dict[str, Any] = field(default_factory=dict)
    arguments: tuple[str, ...] = ()
    respawn: bool = False  # launch restarts the process when it ends


def launch_plan(config_path: str | Path, bundle: str = "", layout: str = "", robot: str = "none",
                host: str = "all", respawn: bool = False) -> list[PlannedProcess]:
    if robot not in ROBOTS:
        raise ValueError(f"robot {robot!r} is not one of: {', '.join(ROBOTS)}")
    if host not in HOSTS:
        raise ValueError(f"host {host!r} is not one of: {', '.join(HOSTS)}")
    if robot != "none" and host == "inference":
        raise ValueError("robot:=synthetic belongs to the robot's host (host:=robot or all), not host:=inference")
    overrides: dict[str, Any] = {}
    if bundle:
        overrides["bundle"] = str(Path(bundle).resolve())
    if layout:
        overrides["layout"] = layout
    if host != "all":
        overrides["layout"] = "separate"  # a host runs its share of the graph one node per process
    config_path = config_file(config_path)
    config = load_config(config_path, overrides)
    config_arguments = ("--config", str(config_path.resolve()))
    if bundle:
        config_arguments += ("--bundle", overrides["bundle"])
    if config.layout == "composed":
        plan = [PlannedProcess(CONTAINER, None, lifecycle=False, arguments=config_arguments, respawn=respawn)]
    else:
        parameters = node_parameters(config)
        if respawn:
            parameters["autostart"] = True
        plan = [PlannedProcess(node_spec(name).executable, name, lifecycle=not respawn, parameters=parameters,
                               respawn=respawn)
                for name in config.split.nodes_of(host)]
    if robot == "synthetic":
        plan.append(PlannedProcess(SYNTHETIC_ROBOT, "synthetic_robot", lifecycle=False, arguments=config_arguments))
    return plan


def parse_remaps(text: str) -> list[tuple[str, str]]:
    """"from:=to,from2:=to2" -> [(from, to), ...]; ValueError names a malformed entry."""
    remaps = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        source, sep, target = item.partition(":=")
        if not sep or not source or not target:
            raise ValueError(f"remap {item!r} must look like FROM:=TO")
        remaps.append((source, target))
    return remaps
