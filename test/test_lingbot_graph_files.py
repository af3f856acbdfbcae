"""config/lingbot_va.yaml and launch/lingbot_va.launch.py (the launch API is not installable here:
its names are stood in by recorders)."""

import yaml

from embodied_ros.node_infra.config import flatten, load_config
from graph_bundles import ROOT
from launch_stand_in import launch_actions


def test_config_sets_every_graph_setting_and_predicts_every_third_step():
    config = load_config(ROOT / "config" / "lingbot_va.yaml")
    assert config.bundle == str((ROOT / "bundles" / "lingbot_va_small.gguf").resolve())
    assert (config.schedule.world, config.schedule.action, config.schedule.prefix, config.schedule.perception) == (3, 1, 1, 1)
    ours = flatten(yaml.safe_load((ROOT / "config" / "lingbot_va.yaml").read_text()))
    theirs = flatten(yaml.safe_load((ROOT / "config" / "pi05.yaml").read_text()))
    assert set(ours) == set(theirs)


def test_launch_file_includes_the_graph_launch_with_the_lingbot_config(monkeypatch):
    [declare, include] = launch_actions(monkeypatch, "lingbot_va")
    assert declare.args[0] == "config"
    assert declare.kwargs["default_value"] == str(ROOT / "config" / "lingbot_va.yaml")
    source = include.args[0]
    assert source.args[0] == str(ROOT / "launch" / "pi05.launch.py")
    assert dict(include.kwargs["launch_arguments"])["config"].args == ("config",)
