"""config/lingbot_va.yaml and launch/lingbot_va.launch.py (the launch API is not installable here:
its names are stood in by recorders)."""

import importlib.util
import sys
import types
from pathlib import Path

import yaml

from embodied_ros.node_infra.config import flatten, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_config_sets_every_graph_setting_and_predicts_every_third_step():
    config = load_config(ROOT / "config" / "lingbot_va.yaml")
    assert config.bundle == str((ROOT / "bundles" / "lingbot_va_small.gguf").resolve())
    assert (config.schedule.world, config.schedule.action, config.schedule.prefix) == (3, 1, 3)
    ours = flatten(yaml.safe_load((ROOT / "config" / "lingbot_va.yaml").read_text()))
    theirs = flatten(yaml.safe_load((ROOT / "config" / "pi05.yaml").read_text()))
    assert set(ours) == set(theirs)


class _Recorded:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def test_launch_file_includes_the_graph_launch_with_the_lingbot_config(monkeypatch):
    names = {"launch": ["LaunchDescription"], "launch.actions": ["DeclareLaunchArgument", "IncludeLaunchDescription"],
             "launch.launch_description_sources": ["PythonLaunchDescriptionSource"],
             "launch.substitutions": ["LaunchConfiguration"]}
    for module_name, classes in names.items():
        module = types.ModuleType(module_name)
        for cls in classes:
            setattr(module, cls, type(cls, (_Recorded,), {}))
        monkeypatch.setitem(sys.modules, module_name, module)
    spec = importlib.util.spec_from_file_location("lingbot_va_launch", ROOT / "launch" / "lingbot_va.launch.py")
    launch_file = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch_file)
    [declare, include] = launch_file.generate_launch_description().args[0]
    assert declare.args[0] == "config"
    assert declare.kwargs["default_value"] == str(ROOT / "config" / "lingbot_va.yaml")
    source = include.args[0]
    assert source.args[0] == str(ROOT / "launch" / "pi05.launch.py")
    assert dict(include.kwargs["launch_arguments"])["config"].args == ("config",)
