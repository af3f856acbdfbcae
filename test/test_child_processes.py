"""The package's child processes (the composed graph's controller, `up`'s node and robot processes,
`eval`'s task runners) import the package the way the installed one is found, whatever folder
they start from: from one holding another `embodied_ros` (a colcon workspace's source folder, whose
package lacks the messages the build generates) they still run, where `python -m` would import
that one."""

import os
import signal
import subprocess
import time

import pytest

from embodied_ros.graph.processes import SeparateGraph
from embodied_ros.node_infra.config import load_config
from embodied_ros.share import child_environment, module_command, start_child
from domains import next_domain
from graph_bundles import pi05_bundle
from graph_harness import wait_for


@pytest.fixture
def beside_another_package(tmp_path, monkeypatch):
    """The working folder holds an `embodied_ros` package that cannot serve. (A colcon source
    folder's lacks the generated messages; here its import fails outright, since the editable
    install's finder would supply a submodule missing from it.)"""
    (tmp_path / "embodied_ros").mkdir()
    (tmp_path / "embodied_ros" / "__init__.py").write_text(
        'raise ImportError("the working folder\'s embodied_ros was imported")\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_controller_process_starts_beside_another_package(beside_another_package, tmp_path_factory):
    config = load_config(None, {"bundle": str(pi05_bundle(tmp_path_factory)), "layout": "separate"})
    graph = SeparateGraph(config, ("controller",), domain_id=next_domain())
    graph.start()
    try:
        wait_for(lambda: "waiting for the first action chunk" in graph.log("controller") or graph.exited(), 60,
                 "the controller's process to start")
        assert graph.exited() == {}, graph.log("controller")[-2000:]
    finally:
        codes = graph.stop()
    assert codes == {"controller": 0}


@pytest.mark.parametrize("module", ["embodied_ros.nodes.synthetic", "embodied_ros.sim.metaworld_eval"])
def test_a_module_run_as_a_child_beside_another_package_is_the_packages_own(beside_another_package, module):
    result = subprocess.run(module_command(module, "--help"), env=child_environment(os.environ),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ")


@pytest.mark.parametrize("phase", ["importing", "running"])
def test_a_child_stopped_while_it_imports_ends_quietly(tmp_path, phase):
    """SIGINT while the child's module is still importing ends it at once with status 0 and no traceback
    (a graph stopped before it finished starting); once the module runs, SIGINT is KeyboardInterrupt."""
    (tmp_path / "slow_dependency.py").write_text(
        "import sys, time\nprint('importing', flush=True)\ntime.sleep(0 if 'fast' in sys.argv else 30)\n")
    (tmp_path / "child_module.py").write_text(
        "import time\nimport slow_dependency\nprint('running', flush=True)\ntime.sleep(30)\n")
    environment = {**child_environment(os.environ), "PYTHONPATH": str(tmp_path)}
    child = subprocess.Popen(module_command("child_module", *(["fast"] if phase == "running" else [])),
                             env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while (line := child.stdout.readline().strip()) != phase:
            assert line, child.stderr.read()
        child.send_signal(signal.SIGINT)
        _, errors = child.communicate(timeout=20)
    finally:
        child.kill()
    if phase == "importing":
        assert child.returncode == 0 and errors == ""
    else:
        assert child.returncode == -signal.SIGINT and errors.rstrip().endswith("KeyboardInterrupt")


def test_a_child_stopped_as_it_starts_ends_quietly(tmp_path):
    """SIGINT at once after `start_child` and in the next 80 ms: while the interpreter itself starts
    (before any of the child's code could take it, held until its first line does), before its module
    runs or while it imports: status 0, nothing on stderr, every time."""
    (tmp_path / "slow_dependency.py").write_text("import time\ntime.sleep(30)\n")
    (tmp_path / "child_module.py").write_text("import slow_dependency\n")
    environment = {**child_environment(os.environ), "PYTHONPATH": str(tmp_path)}
    for delay_s in (0.0, 0.0, 0.005, 0.01, 0.02, 0.04, 0.08):
        child = start_child(module_command("child_module"), env=environment, stderr=subprocess.PIPE, text=True)
        time.sleep(delay_s)
        child.send_signal(signal.SIGINT)
        try:
            _, errors = child.communicate(timeout=20)
        finally:
            child.kill()
        assert (child.returncode, errors) == (0, ""), delay_s
