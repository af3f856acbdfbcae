"""The nodes of a graph in one process (stage outputs handed over by reference).

Each stage has an executor thread of its own (the kernels release the GIL), so the stages of
different steps overlap; the control nodes of the node table (observation, controller) share one.
On the realtime schedule the controller (`controller.own_process`, the default) runs in a child
process started and stopped with the graph: there no stage's Python can hold the interpreter while
a command is due, and the action chunk it reads is a plain message either way. Otherwise
(lock-step, or own_process false) it shares the observation node's thread.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node

from embodied_ros.graph.processes import SeparateGraph
from embodied_ros.graph.readiness import wait_for_state
from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.node_infra.node_table import graph_nodes, node_class, node_spec
from embodied_ros.node_infra.spinning import SpinThread
from embodied_ros.node_infra.transport import ResultStore
from embodied_ros.nodes.params import node_parameters
from embodied_ros.nodes.run import bring_up
from embodied_ros.nodes.runtime_cache import acquire_runtime
from embodied_ros.pipeline.stages import Runtime

CONTROLLER = "controller"
CONTROLLER_START_TIMEOUT_S = 60.0  # a fresh interpreter imports rclpy and numpy; no bundle to load


def controller_apart(config: GraphConfig) -> bool:
    """Whether a composed graph runs its controller in a process of its own."""
    return config.controller.own_process and config.schedule.mode == "realtime"


def ros_remaps(cli_args: Sequence[str]) -> tuple[str, list[str]]:
    """(namespace, other remaps) given by `-r`/`--remap` in ROS command-line arguments."""
    namespace, remaps = "", []
    for flag, value in zip(cli_args, cli_args[1:]):
        if flag in ("-r", "--remap"):
            if value.startswith("__ns:="):
                namespace = value[len("__ns:="):]
            else:
                remaps.append(value)
    return namespace, remaps


def _pump(executor: SingleThreadedExecutor, process: SeparateGraph) -> None:
    executor.spin_once(timeout_sec=0.05)
    if process.exited():
        raise ChildProcessError(f"it ended with exit code {process.exited()[CONTROLLER]}")


class ComposedGraph:
    def __init__(self, config: GraphConfig, *, context: Context, runtime: Runtime | None = None,
                 namespace: str = "", cli_args: Sequence[str] = ()):
        self.config = config
        self.context = context
        self.runtime = runtime
        self.namespace = namespace
        self.cli_args = list(cli_args)
        self.nodes: dict[str, object] = {}
        self.controller_process: SeparateGraph | None = None
        self._spinners: list[SpinThread] = []

    def start(self) -> None:
        """Create, configure and activate every node; RuntimeError names the nodes that failed. A
        start cut short (Ctrl-C while the controller's process comes up) stops what it started:
        no spinning thread is left for the interpreter's exit, which aborts on one."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        runtime = acquire_runtime(self.config, self.runtime)
        store = ResultStore(self.config.transport.keep_last)
        parameters = node_parameters(self.config)
        names = graph_nodes(runtime.spec.has_world_model)
        if controller_apart(self.config):
            names = tuple(name for name in names if name != CONTROLLER)
            self._start_controller_process()
        for name in names:
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
        # the controller's process is waited for before the stages make a chunk: its answers to the
        # waiter's state requests can hold its interpreter for up to 100 ms (the middleware waits
        # for the asker's reply reader), which held the first commands back in 3 of 20 starts
        failed = bring_up(self.nodes.values(),
                          self._wait_for_controller if self.controller_process is not None else lambda: None)
        if failed:
            raise RuntimeError(f"graph nodes failed to start: {failed} (their log says why)")

    @property
    def apart_nodes(self) -> tuple[str, ...]:
        """Nodes of this graph running in a child process."""
        return self.controller_process.node_names if self.controller_process is not None else ()

    def exited(self) -> dict[str, int]:
        """Nodes in a child process that ended, with exit codes."""
        return self.controller_process.exited() if self.controller_process is not None else {}

    def failure(self) -> str:
        """Why the graph no longer serves every node ("" while it does): a thread spinning its nodes
        failed, or the controller's process ended."""
        failed = [spinner.failure for spinner in self._spinners if spinner.failure]
        if failed:
            return failed[0]
        if self.exited():
            process = self.controller_process
            process.keep_logs = True
            return (f"the controller's process ended with exit code {self.exited()[CONTROLLER]} (its log: "
                    f"{process.log_dir / (CONTROLLER + '.log')})")
        return ""

    def _start_controller_process(self) -> None:
        namespace, remaps = ros_remaps(self.cli_args)
        transport = replace(self.config.transport, mode="auto")  # the controller reads only plain messages
        self.controller_process = SeparateGraph(
            replace(self.config, transport=transport), (CONTROLLER,), namespace=namespace or self.namespace,
            remaps=remaps, domain_id=self.context.get_domain_id())
        self.controller_process.start()

    def _wait_for_controller(self) -> None:
        """Return once the controller's process reports `active` (start() returns a whole graph);
        RuntimeError naming its log when it ends or times out first."""
        process = self.controller_process
        waiter = Node("graph_start_waiter", context=self.context, namespace=process.namespace)
        executor = SingleThreadedExecutor(context=self.context)
        executor.add_node(waiter)
        try:
            wait_for_state(waiter, process.node_names, process.namespace, CONTROLLER_START_TIMEOUT_S,
                           lambda: _pump(executor, process))
        except (TimeoutError, ChildProcessError) as error:
            process.keep_logs = True
            raise RuntimeError(f"the controller's process did not start: {error} (its log: "
                               f"{process.log_dir / (CONTROLLER + '.log')})") from None
        finally:
            executor.remove_node(waiter)
            waiter.destroy_node()
            executor.shutdown(timeout_sec=1.0)

    def stop(self) -> list[str]:
        """Deactivate the active nodes, controller first (it leaves the arm holding; in its own
        process it deactivates on the interrupt it is sent), then destroy every node; the names of
        the nodes whose deactivation failed."""
        failed = []
        if self.controller_process is not None:
            self.controller_process.stop()
            self.controller_process = None
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
