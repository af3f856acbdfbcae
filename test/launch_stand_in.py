"""A family's launch file run with the launch API stood in by recorders (it is not installable here)."""

import importlib.util
import sys
import types

from graph_bundles import ROOT

_LAUNCH_NAMES = {"launch": ["LaunchDescription"],
                 "launch.actions": ["DeclareLaunchArgument", "IncludeLaunchDescription"],
                 "launch.launch_description_sources": ["PythonLaunchDescriptionSource"],
                 "launch.substitutions": ["LaunchConfiguration"]}


class Recorded:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def launch_actions(monkeypatch, family: str) -> list[Recorded]:
    """The actions launch/<family>.launch.py's description holds."""
    for module_name, classes in _LAUNCH_NAMES.items():
        module = types.ModuleType(module_name)
        for cls in classes:
            setattr(module, cls, type(cls, (Recorded,), {}))
        monkeypatch.setitem(sys.modules, module_name, module)
    spec = importlib.util.spec_from_file_location(f"{family}_launch", ROOT / "launch" / f"{family}.launch.py")
    launch_file = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch_file)
    return launch_file.generate_launch_description().args[0]
