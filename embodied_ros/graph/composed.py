"""All nodes of a graph in one process (stage outputs handed over by reference).

The control nodes of the node table (observation and controller: light, on time) share one
executor thread; each stage has its own (heavy; the kernels release the GIL), so inference never
delays a command and the stages of different steps overlap.
"""

from __future__ import annotations

from typing import Sequence

from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn

from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.node_infra.node_table import graph_nodes, node_class, node_spec
from embodied_ros.node_infra.spinning import SpinThread
from embodied_ros.node_infra.transport import ResultStore
from embodied_ros.nodes.params import node_parameters
from embodied_ros.nodes.run import bring_up
from embodied_ros.nodes.runtime_cache import acquire_runtime
from embodied_ros.pipeline.stages import Runtime


class ComposedGraph:
    def __init__(self, config: GraphConfig, *, context: Context, runtime: Runtime | None = None,
                 namespace: str = "", cli_args: Sequence[str] = ()):
        self.config = config
        self.context = context
        self.runtime = runtime
        self.namespace = namespace
        self.cli_args = list(cli_args)
        self.nodes: dict[str, object] = {}
        self._spinners: list[SpinThread] = []

    def start(self) -> None:
        """Create, configure and activate every node; RuntimeError names the nodes that failed."""
        runtime = self.runtime or acquire_runtime(self.config)
        store = ResultStore(self.config.transport.keep_last)
        parameters = node_parameters(self.config)
        for name in graph_nodes(runtime.spec.has_world_model):
            self.nodes[name] = node_class(name)(
                runtime=runtime, store=store, parameters=parameters, context=self.context,
                namespace=self.namespace, cli_args=self.cli_args or None)
        control = SingleThreadedExecutor(context=self.context)
        self._spinners = [SpinThread(control, "graph-control")]
        for name, node in self.nodes.items():
            if node_spec(name).control:
                control.add_node(node)
            else:  # one thread per stage: stages compute in parallel
                executor = SingleThreadedExecutor(context=self.context)
                executor.add_node(node)
                self._spinners.append(SpinThread(executor, f"graph-{name}"))
        for spinner in self._spinners:
            spinner.start()
        failed = bring_up(self.nodes.values())
        if failed:
            self.stop()
            raise RuntimeError(f"graph nodes failed to start: {failed} (their log says why)")

    def stop(self) -> list[str]:
        """Deactivate the active nodes, controller first (it leaves the arm holding), then destroy
        every node; the names of the nodes whose deactivation failed."""
        failed = []
        for name, node in reversed(self.nodes.items()):
            if not node.active:
                continue
            # a context already shut down has no transitions left: the node stays active
            if not self.context.ok() or node.trigger_deactivate() != TransitionCallbackReturn.SUCCESS:
                failed.append(name)
        for spinner in self._spinners:
            spinner.stop()
        for node in self.nodes.values():
            node.destroy_node()
        self.nodes.clear()
        self._spinners.clear()
        return failed
