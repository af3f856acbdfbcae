"""`embodied-ros up`: start the graph (composed or one process per node) with a synthetic robot,
print a live summary, and return a final report with rates, latencies and the command stream."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor

from embodied_ros.graph.composed import ComposedGraph
from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.graph.monitor import GraphMonitor
from embodied_ros.node_infra.node_table import graph_nodes
from embodied_ros.node_infra.paths import using_dds_environment
from embodied_ros.graph.processes import SeparateGraph
from embodied_ros.graph.readiness import wait_for_state
from embodied_ros.node_infra.spinning import SpinThread, interrupts_ignored
from embodied_ros.nodes.controller import WAITING_FOR_FIRST_CHUNK
from embodied_ros.nodes.runtime_cache import acquire_runtime
from embodied_ros.nodes.synthetic import robot_command
from embodied_ros.pipeline.stages import ModelSpec, Runtime, read_spec


SYNTHETIC_ROBOT = "synthetic_robot"
START_TIMEOUT_S = 120.0  # node processes import, load the bundle and compile kernels before they are active


@dataclass
class UpReport:
    layout: str
    bundle: str
    duration_s: float
    first_chunk_s: float | None  # from starting the graph (loading included) to the first action chunk
    stages: dict[str, dict[str, float]]
    commands: dict[str, float]
    hold_reasons: dict[str, int]  # kind of hold (numbers as N) -> how often the controller entered it
    exited: dict[str, int] = field(default_factory=dict)  # nodes in processes of their own that ended early
    logs: list[str] = field(default_factory=list)  # the log folders of those processes, kept
    input_problem: str = ""  # the observation node's last complaint about the inputs, if any
    # stage -> why it could not run (reason kind, numbers as N) -> diagnostics reports saying so
    stage_problems: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def run_up(config: GraphConfig, *, duration_s: float, namespace: str = "", remaps: Sequence[str] = (),
           synthetic: bool = True, summary_period_s: float = 1.0, domain_id: int | None = None,
           print_fn: Callable[[str], None] = print, runtime: Runtime | None = None, host: str = "all") -> UpReport:
    """Run the graph for `duration_s` seconds (after start-up) and report; Ctrl-C ends it early.
    `runtime`: an already loaded runtime for a composed graph (default: load the config's bundle).
    `host`: robot or inference runs that host's nodes of `split.robot_nodes`, one process each, the
    other host's coming from another machine (the synthetic robot goes with the robot's host).
    The synthetic robot's process starts first: it imports rclpy while the bundle loads."""
    if host != "all":
        config = replace(config, layout="separate")
    robot = None
    if synthetic and host != "inference":
        robot = _start_robot(config, runtime.spec if runtime is not None else read_spec(config.bundle), namespace,
                             domain_id)
    try:
        return _run_up(config, robot, duration_s, namespace, remaps, summary_period_s, domain_id, print_fn, runtime,
                       host)
    finally:
        if robot is not None:
            with interrupts_ignored():
                robot.stop()


def _run_up(config, robot, duration_s, namespace, remaps, summary_period_s, domain_id, print_fn, runtime, host):
    loading = time.monotonic()
    if runtime is None and host == "all":
        runtime = acquire_runtime(config)
        print_fn(f"loaded {config.bundle} ({runtime.spec.architecture}, {config.backend} kernels) in "
                 f"{time.monotonic() - loading:.1f} s")
    spec = runtime.spec if runtime is not None else read_spec(config.bundle)  # a host's nodes load it themselves
    # the profile of the graph's child processes (the robot, the controller, separate nodes): the
    # same transports, and announcements every 0.5 s, not 3 s, for the controller's process that
    # joins later (without: "graph up" took 3.8 s instead of 0.7 in 1 of 8 composed starts)
    with using_dds_environment():
        context = Context()
        rclpy.init(context=context, domain_id=domain_id)
        node_kwargs = dict(context=context, namespace=namespace)
        monitor = GraphMonitor(config.controller.rate_hz, config.controller.output, config.controller.dry_run,
                               recent_s=live_window_s(summary_period_s), **node_kwargs)
    outside = SingleThreadedExecutor(context=context)
    outside.add_node(monitor)
    spinner = SpinThread(outside, "up-outside")
    spinner.start()
    launched = started = time.monotonic()
    graph, first_chunk_s, exited, logs, ran_s = None, None, {}, [], 0.0

    def processes() -> list[SeparateGraph]:
        apart = graph.controller_process if isinstance(graph, ComposedGraph) else graph
        return [process for process in (apart, robot) if process is not None]

    def ended() -> dict[str, int]:
        return {name: code for process in processes() for name, code in process.exited().items()}

    try:
        graph = _start_graph(config, spec, runtime, context, namespace, remaps, domain_id, host)
        if isinstance(graph, SeparateGraph):
            wait_for_state(monitor, graph.node_names, namespace, START_TIMEOUT_S, lambda: time.sleep(0.05))
        if robot is not None:
            _wait_for_robot(monitor, robot, namespace)
        names = graph_nodes(spec.has_world_model) if host == "all" else graph.node_names
        where = "" if host == "all" else f" on the {host} host: {', '.join(names)}"
        print_fn(f"graph up ({config.layout}, {len(names)} nodes{where}) in "
                 f"{time.monotonic() - launched:.1f} s; running for {duration_s:.0f} s")
        started = time.monotonic()
        monitor.start_run()
        try:
            _watch(monitor, ended, duration_s, summary_period_s, started, print_fn)
        except KeyboardInterrupt:  # Ctrl-C outside the watch loop's sleep: still report
            pass
        first_chunk_s = monitor.first_chunk_s(launched)
        ran_s = time.monotonic() - started
        # the tables cover the run announced by "graph up": not the start-up before it, nor the teardown after
        stages, commands = monitor.stage_summary(), monitor.command_summary()
        exited = ended()
        for process in processes():
            if process.exited():
                process.keep_logs = True
                logs.append(str(process.log_dir))
    finally:
        with interrupts_ignored():  # a second Ctrl-C here would abandon nodes mid-teardown (abort at exit)
            if graph is not None:
                graph.stop()
            nodes = outside.get_nodes()
            spinner.stop()
            for node in nodes:
                node.destroy_node()
            rclpy.try_shutdown(context=context)
    problems = {stage: dict(kinds) for stage, kinds in monitor.stage_problems.items()}
    return UpReport(config.layout, config.bundle, ran_s, first_chunk_s, stages, commands, dict(monitor.hold_reasons),
                    exited, logs, monitor.input_problem, problems)


def _start_robot(config: GraphConfig, spec: ModelSpec, namespace: str, domain_id: int | None) -> SeparateGraph:
    """The synthetic robot in a process of its own, as a real arm's driver is: its rendering and
    joint states do not hold this process's interpreter (its config is written beside its log)."""
    robot = SeparateGraph(replace(config, transport=replace(config.transport, mode="auto")), (),
                          namespace=namespace, domain_id=domain_id)
    robot.start()
    robot.spawn(SYNTHETIC_ROBOT, robot_command(config, spec, robot.log_dir))
    return robot


def _wait_for_robot(monitor: GraphMonitor, robot: SeparateGraph, namespace: str) -> None:
    """Return once the robot's node is on the graph (its publishers and timers are made with it), so
    the run that "graph up" announces has inputs; RuntimeError naming its log otherwise."""
    expected = (SYNTHETIC_ROBOT, "/" + namespace.strip("/"))
    deadline = time.monotonic() + START_TIMEOUT_S
    while expected not in monitor.get_node_names_and_namespaces():
        problem = (f"ended with exit code {robot.exited()[SYNTHETIC_ROBOT]}" if robot.exited() else
                   f"was not on the graph after {START_TIMEOUT_S:.0f} s" if time.monotonic() > deadline else "")
        if problem:
            robot.keep_logs = True
            raise RuntimeError(f"the synthetic robot's process {problem} (its log: "
                               f"{robot.log_dir / (SYNTHETIC_ROBOT + '.log')})")
        time.sleep(0.05)


def _start_graph(config, spec, runtime, context, namespace, remaps, domain_id, host):
    if config.layout == "composed":
        cli_args = ["--ros-args", *[arg for remap in remaps for arg in ("-r", remap)]] if remaps else ()
        graph = ComposedGraph(config, context=context, runtime=runtime, namespace=namespace, cli_args=cli_args)
    else:
        hosted = config.split.nodes_of(host)
        graph = SeparateGraph(config, [name for name in graph_nodes(spec.has_world_model) if name in hosted],
                              namespace=namespace, remaps=remaps, domain_id=domain_id)
    graph.start()
    return graph


def _watch(monitor: GraphMonitor, ended: Callable[[], dict[str, int]], duration_s: float, period_s: float,
           started: float, print_fn: Callable[[str], None]) -> None:
    """Print the live summary until the duration is over, Ctrl-C, or a node process ends."""
    end = time.monotonic() + duration_s if duration_s > 0 else float("inf")
    next_print = time.monotonic() + period_s
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:
            break
        if ended():
            print_fn(f"node process(es) ended: {ended()}")
            break
        if time.monotonic() >= next_print:
            next_print += period_s
            print_fn(live_line(monitor, time.monotonic() - started, window_s=live_window_s(period_s)))


def live_window_s(period_s: float) -> float:
    """The live summary printed every `period_s` covers this many seconds."""
    return max(period_s, 2.0)


def live_line(monitor: GraphMonitor, elapsed_s: float, window_s: float) -> str:
    """One line per period: each stage's rate and compute time (p50), the chunk age, the command
    stream's rate and period error (p99, on arrival), the controller's state and, while the observation node
    refuses its inputs, why; over the last `window_s`."""
    stages = monitor.stage_summary(window_s)
    parts = [f"{elapsed_s:6.1f}s"]
    for stage, row in stages.items():
        parts.append(f"{stage} {row['rate_hz']:.1f}Hz {_ms(row['compute_ms_p50'], 1)}")
    if "action" in stages:
        parts.append(f"chunk age {_ms(stages['action']['staleness_ms_p50'], 0)}")
    commands = monitor.command_summary(window_s)
    parts.append(f"cmd {commands['rate_hz']:.1f}Hz period err p99 {_ms(commands['arrival_period_error_ms_p99'], 1)}")
    parts.append(f"controller: {monitor.controller_message or '-'}")
    if problem := monitor.current_input_problem():
        parts.append(f"inputs: {problem}")
    return " | ".join(parts)


def _ms(value: float, decimals: int) -> str:
    return "-" if value != value else f"{value:.{decimals}f}ms"  # NaN: nothing measured yet


def format_report(report: UpReport) -> str:
    lines = [f"embodied-ros up: {report.layout}, {report.duration_s:.1f} s, bundle {report.bundle}"]
    if report.first_chunk_s is not None:
        lines.append(f"first action chunk {report.first_chunk_s:.1f} s after the graph was started")
    else:
        why = f": the inputs were refused ({report.input_problem})" if report.input_problem else ""
        lines.append(f"no action chunk in {report.duration_s:.1f} s{why}")
    if report.stages:
        lines.append(f"{'stage':<12}{'runs':>6}{'rate Hz':>9}{'compute p50':>13}{'p99 ms':>8}"
                     f"{'staleness p50':>15}{'p99 ms':>8}")
        for stage, row in report.stages.items():
            lines.append(f"{stage:<12}{row['runs']:>6}{row['rate_hz']:>9.2f}{row['compute_ms_p50']:>13.1f}"
                         f"{row['compute_ms_p99']:>8.1f}{row['staleness_ms_p50']:>15.1f}{row['staleness_ms_p99']:>8.1f}")
        lines.append("  (staleness: age of the observation behind each output when it was published)")
    c = report.commands
    lines.append(f"commands: {c['commands']:.0f} at {c['rate_hz']:.2f} Hz; period error p50/p99: "
                 f"{_pair(c, 'tick')} ms at the controller, {_pair(c, 'arrival')} ms on arrival")
    holds = {reason: n for reason, n in report.hold_reasons.items() if reason != WAITING_FOR_FIRST_CHUNK}
    if report.first_chunk_s is not None:
        lines.append("holds after the first chunk: " + ("; ".join(f"{n}x {reason}" for reason, n in holds.items())
                                                       if holds else "none"))
    for stage, kinds in report.stage_problems.items():
        lines.append(f"{stage} could not run: " + "; ".join(f"{reason} ({n} reports)" for reason, n in kinds.items()))
    if report.exited:
        lines.append(f"node processes that ended early: {report.exited} (their logs: {', '.join(report.logs)})")
    return "\n".join(lines)


def _pair(commands: dict[str, float], source: str) -> str:
    values = (commands[f"{source}_period_error_ms_p50"], commands[f"{source}_period_error_ms_p99"])
    return "-" if any(v != v for v in values) else f"{values[0]:.2f}/{values[1]:.2f}"
