"""The graph's nodes, in start-up order: the one list that the configuration (`schedule.*`), the
schedule, the composed graph, the launch plan, the monitor, the noise streams and the console
scripts read.

A new node is a row here and its module `embodied_ros/nodes/<name>.py` (the node class, and a
`main` for its console script); setup.cfg lists the console scripts the table names
(test/test_node_table.py holds them to it).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class GraphNodeSpec:
    name: str  # node name, and its stage name in timings and diagnostics
    class_name: str  # the node class, in module embodied_ros.nodes.<name>
    upstream: tuple[str, ...] = ()  # nodes whose outputs it reads
    schedule_key: str | None = None  # `schedule.<key>`: it runs every N steps; None: every step
    schedule_doc: str = ""  # what `schedule.<key>` means (ROS parameter description, docs/graph.md)
    schedule_default: int = 1  # steps between two runs unless a config says otherwise
    control: bool = False  # composed: on the shared control thread (light, on time), not a thread of its own
    world_model_only: bool = False  # left out of graphs whose model has no world model

    @property
    def module(self) -> str:
        return f"embodied_ros.nodes.{self.name}"

    @property
    def executable(self) -> str:
        """Console script (installed in lib/embodied_ros for `ros2 run`)."""
        return f"embodied-ros-{self.name}"


NODES = (
    GraphNodeSpec("observation", "ObservationNode", control=True),
    GraphNodeSpec("perception", "PerceptionNode", upstream=("observation",), schedule_key="perception",
                  schedule_doc="the perception encoder runs every N steps (image embeddings reused in between)",
                  schedule_default=2),
    GraphNodeSpec("prefix", "PrefixNode", upstream=("perception", "observation"), schedule_key="prefix",
                  schedule_doc="the prefix builder runs every N steps"),
    GraphNodeSpec("world", "WorldNode", upstream=("prefix",), schedule_key="world",
                  schedule_doc="the world predictor runs every N steps (models with a world model only)",
                  schedule_default=3, world_model_only=True),
    GraphNodeSpec("action", "ActionNode", upstream=("prefix", "world"), schedule_key="action",
                  schedule_doc="the action head runs every N steps"),
    GraphNodeSpec("controller", "ControllerNode", upstream=("action",), control=True),
)
NODE_NAMES = tuple(node.name for node in NODES)
_BY_NAME = {node.name: node for node in NODES}


def node_spec(name: str) -> GraphNodeSpec:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"no graph node named {name!r}; the nodes are {list(NODE_NAMES)}") from None


def graph_nodes(has_world_model: bool) -> tuple[str, ...]:
    """The nodes a model needs, in start-up order."""
    return tuple(node.name for node in NODES if has_world_model or not node.world_model_only)


def upstream_of(name: str, has_world_model: bool) -> tuple[str, ...]:
    """The nodes whose outputs `name` reads in a graph for this kind of model."""
    present = graph_nodes(has_world_model)
    return tuple(upstream for upstream in node_spec(name).upstream if upstream in present)


def stages_fed_by(name: str, has_world_model: bool) -> tuple[str, ...]:
    """The scheduled nodes (model stages) that read `name`'s outputs in a graph for this kind of model."""
    present = graph_nodes(has_world_model)
    return tuple(node.name for node in NODES if node.schedule_key and node.name in present and name in node.upstream)


def scheduled_nodes() -> tuple[GraphNodeSpec, ...]:
    """The nodes with a `schedule.*` period, in table order."""
    return tuple(node for node in NODES if node.schedule_key)


def node_class(name: str) -> type:
    """The node's class (imported on first use: the nodes import the configuration, which reads this table)."""
    spec = node_spec(name)
    return getattr(importlib.import_module(spec.module), spec.class_name)
