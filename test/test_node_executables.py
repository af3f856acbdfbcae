"""Each node executable (what `ros2 run embodied_ros embodied-ros-<node>` and the separate layout's
launch files start) as a process of its own, without autostart: a lifecycle client brings it
through configure and activate over its services, as launch and `ros2 lifecycle set` do, while
the process already spins its executor. Every node reaches `active` and does its work: the stages
publish their timings, the idle world node (pi0.5 has no world model) reports so, and the
controller ticks and publishes commands at its rate."""

import sys
import time
from pathlib import Path

import pytest

from embodied_ros.graph.processes import SeparateGraph
from embodied_ros.node_infra.config import load_config
from embodied_ros.node_infra.node_table import NODES, node_spec
from embodied_ros.node_infra.paths import dds_environment
from embodied_ros.pipeline.stages import load_runtime
from domains import next_domain
from graph_bundles import pi05_bundle
from graph_harness import Outside, configure_and_activate, wait_for

STEP_S = 0.1
START_TIMEOUT_S = 120.0  # six interpreters importing numpy, numba and rclpy at once on two cores


def executable(name: str) -> Path:
    """The node's console script, installed beside this interpreter (setup.sh's editable install)."""
    path = Path(sys.executable).parent / node_spec(name).executable
    assert path.is_file(), f"{path} is missing: run ./setup.sh"
    return path


@pytest.fixture
def node_processes(tmp_path_factory, tmp_path, monkeypatch):
    bundle = pi05_bundle(tmp_path_factory)
    spec = load_runtime(bundle).spec
    config = load_config(None, {"bundle": str(bundle), "layout": "separate", "schedule.step_period_s": STEP_S,
                                "diagnostics.period_s": 0.5})
    domain = next_domain()
    for name, value in dds_environment().items():  # this test talks to the nodes over their transports
        monkeypatch.setenv(name, value)
    processes = SeparateGraph(config, (), domain_id=domain, log_dir=tmp_path)
    processes.start()  # writes the parameters file; the nodes are started below, as `ros2 run` would
    for node in NODES:
        processes.spawn(node.name, [str(executable(node.name)), "--ros-args", "--params-file",
                                    str(processes.params_file)])
    outside = Outside(config, spec, domain)
    try:
        yield processes, outside
    finally:
        codes = processes.stop()
        outside.close()
        print({name: processes.log(name)[-2000:] for name, code in codes.items() if code != 0})
    assert codes == {node.name: 0 for node in NODES}


def test_every_node_executable_started_by_a_lifecycle_client_becomes_active_and_works(node_processes):
    processes, outside = node_processes
    names = [node.name for node in NODES]

    def wait_while_every_process_runs() -> None:
        time.sleep(0.05)
        if processes.exited():
            raise AssertionError(f"node processes ended: {processes.exited()}; their logs: "
                                 f"{ {name: processes.log(name)[-2000:] for name in processes.exited()} }")

    configure_and_activate(outside.probe, names, START_TIMEOUT_S, wait_while_every_process_runs)

    probe = outside.probe
    wait_for(lambda: len(probe.command_times) >= 10, 60, "the controller's commands")
    counted_from, count_before = time.monotonic(), len(probe.command_times)
    time.sleep(2.0)
    rate_hz = (len(probe.command_times) - count_before) / (time.monotonic() - counted_from)
    print(f"commands at {rate_hz:.1f} Hz")
    assert rate_hz > 0.8 * load_config(None, {}).controller.rate_hz, f"the controller ticked at {rate_hz:.1f} Hz"

    stages = {timing.stage for timing in probe.timings if timing.sequence > 0}
    assert {"observation", "perception", "prefix", "action"} <= stages, stages
    wait_for(lambda: getattr(probe.status_of(": world"), "message", "").startswith("idle"), 10,
             "the world node to report itself idle")
    assert processes.exited() == {}
