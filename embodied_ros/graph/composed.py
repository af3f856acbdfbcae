"""All nodes of a graph in one process (stage outputs handed over by reference).

Two executors on two threads: one for the controller and the observation node (light, on time),
one multi-threaded for the stages (heavy; the kernels release the GIL), so inference never
delays a command.
"""

from __future__ import annotations

import threading
from typing import Sequence

from rclpy.context import Context
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor

from embodied_ros.graph.config import GraphConfig
from embodied_ros.graph.transport import ResultStore
from embodied_ros.nodes.action import ActionNode
from embodied_ros.nodes.controller import ControllerNode
from embodied_ros.nodes.observation import ObservationNode
from embodied_ros.nodes.params import node_parameters
from embodied_ros.nodes.perception import PerceptionNode
from embodied_ros.nodes.prefix import PrefixNode
from embodied_ros.nodes.run import bring_up
from embodied_ros.nodes.runtime_cache import acquire_runtime
from embodied_ros.nodes.world import WorldNode
from embodied_ros.pipeline.stages import Runtime

NODE_CLASSES = {
    "observation": ObservationNode, "perception": PerceptionNode, "prefix": PrefixNode, "world": WorldNode,
    "action": ActionNode, "controller": ControllerNode,
}
CONTROL_NODES = ("observation", "controller")


def graph_nodes(has_world_model: bool) -> tuple[str, ...]:
    """The nodes a model needs, in start-up order."""
    names = ("observation", "perception", "prefix", "world", "action", "controller")
    return names if has_world_model else tuple(n for n in names if n != "world")


class ComposedGraph:
    def __init__(self, config: GraphConfig, *, context: Context, runtime: Runtime | None = None,
                 namespace: str = "", cli_args: Sequence[str] = ()):
        self.config = config
        self.context = context
        self.runtime = runtime
        self.namespace = namespace
        self.cli_args = list(cli_args)
        self.nodes: dict[str, object] = {}
        self._executors: list = []
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Create, configure and activate every node; RuntimeError names the nodes that failed."""
        runtime = self.runtime or acquire_runtime(self.config.bundle, self.config.backend)
        store = ResultStore(self.config.transport.keep_last)
        parameters = node_parameters(self.config)
        for name in graph_nodes(runtime.spec.has_world_model):
            self.nodes[name] = NODE_CLASSES[name](
                runtime=runtime, store=store, parameters=parameters, context=self.context,
                namespace=self.namespace, cli_args=self.cli_args or None)
        control = SingleThreadedExecutor(context=self.context)
        stages = MultiThreadedExecutor(num_threads=len(self.nodes) - len(CONTROL_NODES) + 1, context=self.context)
        for name, node in self.nodes.items():
            (control if name in CONTROL_NODES else stages).add_node(node)
        self._executors = [control, stages]
        for executor in self._executors:
            thread = threading.Thread(target=executor.spin, daemon=True, name=f"graph-{type(executor).__name__}")
            thread.start()
            self._threads.append(thread)
        failed = bring_up(self.nodes.values())
        if failed:
            self.stop()
            raise RuntimeError(f"graph nodes failed to start: {failed} (their log says why)")

    def stop(self) -> None:
        for node in reversed(list(self.nodes.values())):
            if getattr(node, "active", False):
                node.trigger_deactivate()
        for executor in self._executors:
            executor.shutdown(timeout_sec=5.0)
        for thread in self._threads:
            thread.join(timeout=5.0)
        for node in self.nodes.values():
            node.destroy_node()
        self.nodes.clear()
        self._executors.clear()
        self._threads.clear()
