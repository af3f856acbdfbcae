"""config/<family>.yaml, launch/<family>.launch.py and the shipped bundle of the families that share
pi0.5's graph settings: `embodied-ros up` publishes their action chunks at the configured rate."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from embodied_ros.bundle import open_bundle
from embodied_ros.bundle import families
from embodied_ros.node_infra.config import flatten, load_config
from graph_bundles import ROOT
from graph_harness import next_domain
from launch_stand_in import launch_actions

FAMILIES = {"smolvla": "smolvla_tiny.gguf", "groot": "groot_tiny.gguf"}  # config and launch name -> bundle


@pytest.mark.parametrize("family", FAMILIES)
def test_config_names_the_shipped_bundle_and_every_graph_setting(family):
    path = ROOT / "config" / f"{family}.yaml"
    assert load_config(path).bundle == str((ROOT / "bundles" / FAMILIES[family]).resolve())
    assert set(flatten(yaml.safe_load(path.read_text()))) == set(
        flatten(yaml.safe_load((ROOT / "config" / "pi05.yaml").read_text())))


@pytest.mark.parametrize("family", FAMILIES)
def test_shipped_bundle_reproduces_its_reference_record(family):
    bundle = open_bundle(ROOT / "bundles" / FAMILIES[family], architecture=family)
    error, tolerance = families.family(family).verify_reference(bundle)
    assert error < tolerance == 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_launch_file_includes_the_graph_launch_with_the_family_config(monkeypatch, family):
    [declare, include] = launch_actions(monkeypatch, family)
    assert declare.kwargs["default_value"] == str(ROOT / "config" / f"{family}.yaml")
    assert include.args[0].args[0] == str(ROOT / "launch" / "pi05.launch.py")


@pytest.mark.parametrize("family", FAMILIES)
def test_up_publishes_action_chunks_at_the_configured_rate(tmp_path, family):
    report_path = tmp_path / "report.json"
    command = [sys.executable, "-m", "embodied_ros.cli.main", "up", str(ROOT / "config" / f"{family}.yaml"),
               "--duration", "4", "--composed", "--domain-id", str(next_domain()), "--report-json", str(report_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["exited"] == {}
    action = report["stages"]["action"]
    assert action["runs"] >= 20 and 5 < action["rate_hz"] <= 11, result.stdout[-3000:]  # step period 0.1 s
    assert report["commands"]["commands"] > 50 and 25 < report["commands"]["rate_hz"] < 75, result.stdout[-3000:]
