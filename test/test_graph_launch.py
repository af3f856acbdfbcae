"""The launch plan (what graph.launch.py starts), and the launch file run against stand-ins of the
launch API's names, since `launch` itself is not installable here."""

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from embodied_ros.graph.launch_plan import launch_plan, parse_remaps

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "graph.yaml"
    path.write_text("bundle: model.gguf\nschedule:\n  perception: 2\n")
    return path


def test_composed_plan_is_one_container_reading_the_config(config_file):
    [container] = launch_plan(config_file, bundle="other.gguf", layout="composed")
    assert container.executable == "embodied-ros-container" and container.name is None
    assert not container.lifecycle
    assert container.arguments[:2] == ("--config", str(config_file.resolve()))
    assert container.arguments[2:] == ("--bundle", str(Path("other.gguf").resolve()))


def test_separate_plan_is_one_lifecycle_node_per_stage_with_the_config_as_parameters(config_file):
    plan = launch_plan(config_file, layout="separate")
    assert [p.name for p in plan] == ["observation", "perception", "prefix", "world", "action", "controller"]
    assert all(p.lifecycle and p.executable == f"embodied-ros-{p.name}" for p in plan)
    assert plan[0].parameters["schedule.perception"] == 2
    assert plan[0].parameters["bundle"] == str(config_file.parent / "model.gguf")


def test_synthetic_robot_joins_either_layout_with_the_same_config(config_file):
    for layout in ("composed", "separate"):
        plan = launch_plan(config_file, bundle="other.gguf", layout=layout, robot="synthetic")
        robot = plan[-1]
        assert robot.executable == "embodied-ros-synthetic-robot" and not robot.lifecycle
        assert robot.arguments == ("--config", str(config_file.resolve()), "--bundle", str(Path("other.gguf").resolve()))
        assert "embodied-ros-synthetic-robot" not in [p.executable for p in launch_plan(config_file, layout=layout)]
    with pytest.raises(ValueError, match="robot 'ur5' is not one of: none, synthetic"):
        launch_plan(config_file, robot="ur5")


def test_each_host_plans_its_side_of_the_split_one_process_per_node_from_the_same_config(config_file):
    robot = launch_plan(config_file, layout="composed", host="robot", robot="synthetic")
    assert [p.name for p in robot] == ["observation", "controller", "synthetic_robot"]
    inference = launch_plan(config_file, layout="composed", host="inference")
    assert [p.name for p in inference] == ["perception", "prefix", "world", "action"]
    assert all(p.lifecycle and p.parameters["layout"] == "separate" for p in robot[:2] + inference)
    assert robot[0].parameters == inference[0].parameters  # one config, both hosts
    assert [p.name for p in launch_plan(config_file, layout="separate")] == [p.name for p in robot[:1] + inference
                                                                              + robot[1:2]]


def test_the_split_follows_the_configs_robot_nodes(tmp_path):
    path = tmp_path / "split.yaml"
    path.write_text("bundle: model.gguf\nsplit:\n  robot_nodes: [observation, perception, controller]\n")
    assert [p.name for p in launch_plan(path, host="robot")] == ["observation", "perception", "controller"]
    assert [p.name for p in launch_plan(path, host="inference")] == ["prefix", "world", "action"]
    path.write_text("bundle: model.gguf\nsplit:\n  robot_nodes: [observation]\n")
    with pytest.raises(ValueError, match="split.robot_nodes must include the controller"):
        launch_plan(path, host="robot")
    path.write_text("bundle: model.gguf\nsplit:\n  robot_nodes: [controller, camera]\n")
    with pytest.raises(ValueError, match=r"split.robot_nodes \['camera'\] are not graph nodes"):
        launch_plan(path)


def test_host_and_robot_arguments_are_checked(config_file):
    with pytest.raises(ValueError, match="host 'gpu' is not one of: all, robot, inference"):
        launch_plan(config_file, host="gpu")
    with pytest.raises(ValueError, match="robot:=synthetic belongs to the robot's host"):
        launch_plan(config_file, host="inference", robot="synthetic")


def test_respawned_nodes_start_themselves(config_file):
    plan = launch_plan(config_file, host="inference", respawn=True)
    assert all(p.respawn and not p.lifecycle and p.parameters["autostart"] is True for p in plan)
    [container] = launch_plan(config_file, layout="composed", respawn=True)
    assert container.respawn and container.executable == "embodied-ros-container"
    assert not any(p.respawn for p in launch_plan(config_file, layout="separate"))


def test_remaps_parse_and_reject_malformed_entries():
    assert parse_remaps("joint_states:=/arm/js, instruction:=/task") == [("joint_states", "/arm/js"),
                                                                        ("instruction", "/task")]
    assert parse_remaps("") == []
    with pytest.raises(ValueError, match="'joint_states=/x' must look like FROM:=TO"):
        parse_remaps("joint_states=/x")


class _Recorded:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _stand_in_launch_api(monkeypatch):
    """Modules named like the launch API whose classes record how they were called."""
    names = {
        "launch": ["LaunchDescription"],
        "launch.actions": ["DeclareLaunchArgument", "EmitEvent", "IncludeLaunchDescription", "OpaqueFunction",
                           "RegisterEventHandler"],
        "launch.events": [], "launch.launch_description_sources": ["PythonLaunchDescriptionSource"],
        "launch.substitutions": ["LaunchConfiguration"],
        "launch_ros": [], "launch_ros.actions": ["LifecycleNode", "Node"],
        "launch_ros.event_handlers": ["OnStateTransition"], "launch_ros.events": [],
        "launch_ros.events.lifecycle": ["ChangeState"],
    }
    for module_name, classes in names.items():
        module = types.ModuleType(module_name)
        for cls in classes:
            setattr(module, cls, type(cls, (_Recorded,), {}))
        monkeypatch.setitem(sys.modules, module_name, module)
    sys.modules["launch.events"].matches_action = lambda action: ("matches", action)
    sys.modules["launch.substitutions"].LaunchConfiguration.perform = lambda self, context: context[self.args[0]]


def _launch_file(name: str):
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), ROOT / "launch" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pi05_launch_file_is_the_graph_launch_under_its_old_name(monkeypatch):
    _stand_in_launch_api(monkeypatch)
    [include] = _launch_file("pi05.launch.py").generate_launch_description().args[0]
    assert include.args[0].args[0] == str(ROOT / "launch" / "graph.launch.py") and not include.kwargs
    assert sorted(path.name for path in (ROOT / "launch").glob("*.py")) == ["graph.launch.py", "pi05.launch.py"]


def test_launch_file_builds_lifecycle_nodes_with_configure_and_activate(monkeypatch, config_file):
    _stand_in_launch_api(monkeypatch)
    description = _launch_file("graph.launch.py").generate_launch_description()
    declared = [a.args[0] for a in description.args[0] if type(a).__name__ == "DeclareLaunchArgument"]
    assert declared == ["config", "bundle", "layout", "robot", "namespace", "remaps", "host", "respawn"]
    opaque = description.args[0][-1]
    context = {"config": str(config_file), "bundle": "", "layout": "separate", "robot": "none", "namespace": "arm",
               "remaps": "joint_states:=/arm/js", "host": "all", "respawn": "false"}
    actions = opaque.kwargs["function"](context)
    nodes = [a for a in actions if type(a).__name__ == "LifecycleNode"]
    assert [n.kwargs["name"] for n in nodes] == ["observation", "perception", "prefix", "world", "action",
                                                 "controller"]
    assert nodes[0].kwargs["namespace"] == "arm" and nodes[0].kwargs["remappings"] == [("joint_states", "/arm/js")]
    events = [a for a in actions if type(a).__name__ == "EmitEvent"]
    assert len(events) == len(nodes)  # one configure per node; activation follows each "inactive"
    activations = [a.args[0].kwargs for a in actions if type(a).__name__ == "RegisterEventHandler"]
    assert len(activations) == len(nodes)
    # only a finished configure activates: a node deactivated (by a user, or stopping) stays inactive
    assert all(h["start_state"] == "configuring" and h["goal_state"] == "inactive" for h in activations)
    context["layout"] = "composed"
    [container] = opaque.kwargs["function"](context)
    assert type(container).__name__ == "Node" and container.kwargs["executable"] == "embodied-ros-container"
    failed = types.SimpleNamespace(returncode=1, process_name="embodied-ros-container-1")
    with pytest.raises(RuntimeError, match="embodied-ros-container-1 exited with status 1"):
        container.kwargs["on_exit"](failed, None)  # launch turns the exception into its exit status 1
    assert container.kwargs["on_exit"](types.SimpleNamespace(returncode=0, process_name="c"), None) is None
    assert all(node.kwargs["on_exit"] is container.kwargs["on_exit"] for node in nodes)
    context["robot"] = "synthetic"
    container, robot = opaque.kwargs["function"](context)
    assert type(robot).__name__ == "Node" and robot.kwargs["executable"] == "embodied-ros-synthetic-robot"
    assert robot.kwargs["namespace"] == "arm" and robot.kwargs["remappings"] == [("joint_states", "/arm/js")]
    context.update(robot="none", host="inference", respawn="true")
    respawning = opaque.kwargs["function"](context)
    assert [type(a).__name__ for a in respawning] == ["Node"] * 4  # no lifecycle events: each starts itself
    assert [a.kwargs["name"] for a in respawning] == ["perception", "prefix", "world", "action"]
    assert all(a.kwargs["respawn"] is True and "on_exit" not in a.kwargs for a in respawning)
    assert respawning[0].kwargs["parameters"][0]["autostart"] is True
