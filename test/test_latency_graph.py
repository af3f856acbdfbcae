"""Latency gate, pytest twin of test/launch/test_latency_launch.py: the same probe and the same checks,
with the graph started by `embodied-ros up` (the project's CLI) instead of `ros2 launch`.

The budget is config/budgets/$EMBODIED_ROS_BUDGET.yaml (default ci); the measured p50/p99 are printed
whether the check passes or not (pytest -s shows them; a failure message carries them too).
"""

import os
import signal
import subprocess
import sys

from embodied_ros.node_infra.config import load_config
from embodied_ros.node_infra.paths import default_config
from embodied_ros.share import package_root
from embodied_ros.replay.latency import load_budget
from embodied_ros.replay.latency_probe import measure_latency

BUDGET = load_budget(os.environ.get("EMBODIED_ROS_BUDGET", "ci"))


def _stop(process: subprocess.Popen) -> int:
    """Ctrl-C, as a user would; the exit code is part of the check (launch_testing's post-shutdown test)."""
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError("embodied-ros up did not stop within 60 s of Ctrl-C") from None


def test_composed_graph_within_latency_budget(ros_domain_id, tmp_path):
    config_path = default_config()
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", str(config_path), "--composed", "--no-synthetic",
               "--duration", str(BUDGET.timeout_s + 60), "--summary-period", "5", "--domain-id", str(ros_domain_id)]
    log_path = tmp_path / "up.log"
    with open(log_path, "w") as log:
        graph = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=package_root())
        try:
            result = measure_latency(BUDGET, load_config(config_path), domain_id=ros_domain_id)
        finally:
            exit_code = _stop(graph)
    output = log_path.read_text()
    print(output[-4000:])
    assert result.passed, result.report() + "\n--- embodied-ros up ---\n" + output[-2000:]
    assert exit_code == 0, f"embodied-ros up exited with {exit_code}:\n{output[-2000:]}"
