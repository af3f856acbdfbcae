"""Latency gate, pytest twin of test/launch/test_latency_launch.py: the same probe and the same checks,
with the graph started by `embodied-ros up` (the project's CLI) instead of `ros2 launch`, for every
model family's shipped config on its bundle (config/pi05.yaml also with a pi05_small bundle;
config/metaworld.yaml drives the simulator in a closed loop: `embodied-ros eval`).

The budget is config/budgets/$EMBODIED_ROS_BUDGET.yaml (default ci); the measured p50/p99 are printed
whether the check passes or not (pytest -s shows them; a failure message carries them too). Each
stage is first timed alone in this process, before the graph starts, for the budget's stage ratios.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_ros.bundle.families import known_families
from embodied_ros.node_infra.config import load_config
from embodied_ros.nodes.runtime_cache import acquire_runtime
from embodied_ros.pipeline.timing import stage_times_ms
from embodied_ros.share import package_root, share_path
from embodied_ros.replay.latency import load_budget
from embodied_ros.replay.latency_probe import measure_latency

BUDGET = load_budget(os.environ.get("EMBODIED_ROS_BUDGET", "ci"))
ROOT = Path(__file__).resolve().parents[1]
SMALL_RECORD = ROOT / "test" / "data" / "pi05_small"
TOKENIZER = ROOT / "test" / "data" / "pi05_tiny_checkpoint" / "checkpoint" / "tokenizer.model"


@pytest.fixture(scope="module")
def pi05_small_bundle(tmp_path_factory) -> Path:
    """The pi05_small record as a bundle that drives the graph (with the tiny checkpoint's tokenizer)."""
    from embodied_ros.models.pi05.convert import convert

    output = tmp_path_factory.mktemp("pi05_small") / "pi05_small.gguf"
    convert(SMALL_RECORD, output, overrides={"tokenizer": str(TOKENIZER)})
    return output


def _stop(process: subprocess.Popen) -> int:
    """Ctrl-C, as a user would; the exit code is part of the check (launch_testing's post-shutdown test)."""
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError("embodied-ros up did not stop within 60 s of Ctrl-C") from None


@pytest.mark.parametrize("config_name,bundle", [(f"{family}.yaml", None) for family in known_families()]
                         + [("pi05.yaml", "pi05_small")], ids=[*known_families(), "pi05_small"])
def test_composed_graph_within_latency_budget(config_name, bundle, ros_domain_id, tmp_path, request):
    config_path = share_path("config", config_name)
    overrides = {"bundle": str(request.getfixturevalue("pi05_small_bundle"))} if bundle else {}
    config = load_config(config_path, overrides)
    alone_ms = stage_times_ms(acquire_runtime(config), repeats=3)
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", str(config_path), "--composed", "--no-synthetic",
               "--duration", str(BUDGET.timeout_s + 60), "--summary-period", "5", "--domain-id", str(ros_domain_id)]
    if bundle:
        command += ["--bundle", overrides["bundle"]]
    log_path = tmp_path / "up.log"
    with open(log_path, "w") as log:
        graph = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=package_root())
        try:
            result = measure_latency(BUDGET, config, domain_id=ros_domain_id, stage_alone_ms=alone_ms)
        finally:
            exit_code = _stop(graph)
    output = log_path.read_text()
    print(output[-4000:])
    assert result.passed, result.report() + "\n--- embodied-ros up ---\n" + output[-2000:]
    assert exit_code == 0, f"embodied-ros up exited with {exit_code}:\n{output[-2000:]}"
