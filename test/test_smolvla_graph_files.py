"""config/smolvla.yaml, launch/smolvla.launch.py and the shipped bundle: `embodied-ros up` publishes
SmolVLA action chunks at the configured rate."""

import json
import os
import subprocess
import sys

import yaml

from embodied_ros.bundle import open_bundle
from embodied_ros.node_infra.config import flatten, load_config
from embodied_ros.models.smolvla import verify_reference
from graph_bundles import ROOT
from graph_harness import next_domain
from launch_stand_in import launch_actions

CONFIG = ROOT / "config" / "smolvla.yaml"
BUNDLE = ROOT / "bundles" / "smolvla_tiny.gguf"


def test_config_names_the_shipped_bundle_and_every_graph_setting():
    config = load_config(CONFIG)
    assert config.bundle == str(BUNDLE.resolve())
    assert set(flatten(yaml.safe_load(CONFIG.read_text()))) == set(
        flatten(yaml.safe_load((ROOT / "config" / "pi05.yaml").read_text())))


def test_shipped_bundle_reproduces_its_reference_record():
    error, tolerance = verify_reference(open_bundle(BUNDLE, architecture="smolvla"))
    assert error < tolerance == 1e-4


def test_launch_file_includes_the_graph_launch_with_the_smolvla_config(monkeypatch):
    [declare, include] = launch_actions(monkeypatch, "smolvla")
    assert declare.kwargs["default_value"] == str(ROOT / "config" / "smolvla.yaml")
    assert include.args[0].args[0] == str(ROOT / "launch" / "pi05.launch.py")


def test_up_publishes_action_chunks_at_the_configured_rate(tmp_path):
    report_path = tmp_path / "report.json"
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", str(CONFIG), "--duration", "4", "--composed",
               "--domain-id", str(next_domain()), "--report-json", str(report_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["exited"] == {}
    action = report["stages"]["action"]
    assert action["runs"] >= 20 and 5 < action["rate_hz"] <= 11  # step period 0.1 s, action every step
    assert report["commands"]["commands"] > 50 and 25 < report["commands"]["rate_hz"] < 75
