"""The node table is the one list of the graph's nodes: setup.cfg's console scripts, the node
classes, the schedule settings, the launch plan and the noise streams all agree with it, and a
new row plus its module is all a new node needs."""

import configparser
import dataclasses
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_ros.node_infra.config import ScheduleConfig, load_config
from embodied_ros.node_infra.node_table import NODE_NAMES, NODES, graph_nodes, node_class, node_spec, upstream_of
from embodied_ros.pipeline.noise import NOISE_STREAMS, stage_noise

ROOT = Path(__file__).resolve().parents[1]
FIXED_SCRIPTS = {"embodied-ros": "embodied_ros.cli.main:main",
                 "embodied-ros-container": "embodied_ros.graph.container:main",
                 "embodied-ros-synthetic-robot": "embodied_ros.nodes.synthetic:main",  # robots, not graph nodes
                 "embodied-ros-metaworld-sim": "embodied_ros.nodes.metaworld_sim:main"}


def test_setup_cfg_console_scripts_are_the_node_tables_plus_the_cli_and_container():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    lines = setup["options.entry_points"]["console_scripts"].strip().splitlines()
    scripts = {name.strip(): target.strip() for name, _, target in (line.partition("=") for line in lines)}
    assert scripts == {**FIXED_SCRIPTS, **{node.executable: f"{node.module}:main" for node in NODES}}


def test_each_row_names_its_class_whose_stage_is_the_row_and_whose_module_has_main():
    for node in NODES:
        cls = node_class(node.name)
        assert cls.__name__ == node.class_name and cls.stage == node.name
        assert callable(importlib.import_module(node.module).main)


def test_upstreams_come_earlier_in_the_table_and_world_model_only_nodes_drop_out():
    for i, node in enumerate(NODES):
        assert set(node.upstream) <= set(NODE_NAMES[:i]), node.name
    assert "world" not in graph_nodes(has_world_model=False) and "world" in graph_nodes(has_world_model=True)
    assert upstream_of("action", has_world_model=False) == ("prefix",)
    assert upstream_of("action", has_world_model=True) == ("prefix", "world")


def test_schedule_settings_are_the_scheduled_rows_in_order_with_their_documentation():
    keys = [f.name for f in dataclasses.fields(ScheduleConfig)]
    scheduled = [node.schedule_key for node in NODES if node.schedule_key]
    assert keys == ["mode", "step_period_s", *scheduled, "lockstep_start_s", "lockstep_action_delay"]
    for field in dataclasses.fields(ScheduleConfig):
        if field.name in scheduled:
            assert field.metadata["doc"] == node_spec(field.name).schedule_doc
    schedule = load_config(None, {"schedule.world": 3}).schedule
    assert schedule.period_of("world") == 3 and schedule.period_of("controller") == 1
    with pytest.raises(ValueError, match="schedule.prefix must be a whole number"):
        load_config(None, {"schedule.prefix": 0})


def test_noise_streams_are_distinct_and_belong_to_graph_nodes():
    assert len(set(NOISE_STREAMS.values())) == len(NOISE_STREAMS) == 2
    assert set(NOISE_STREAMS) <= {node.name for node in NODES}
    world, action = (stage_noise(0, name, 5, (3,)) for name in ("world", "action"))
    assert not (world == action).all()
    with pytest.raises(ValueError, match="stage 'prefix' draws no noise"):
        stage_noise(0, "prefix", 5, (3,))


NEW_ROW = '''    GraphNodeSpec("smoother", "SmootherNode", upstream=("action",), schedule_key="smoother",
                  schedule_doc="the smoother runs every N steps"),
'''
NEW_MODULE = '''"""Smoother node: a stage after the action head."""

from embodied_ros.nodes.stage import StageNode


class SmootherNode(StageNode):
    stage = "smoother"

    def compute(self, step, inputs):
        return inputs["action"]


def main(args=None):
    from embodied_ros.nodes.run import run_node

    run_node(SmootherNode, args)
'''
WITH_THE_NEW_NODE = '''
import sys

from embodied_ros.node_infra.config import load_config, parameter_fields
from embodied_ros.graph.launch_plan import launch_plan
from embodied_ros.node_infra.node_table import graph_nodes, node_class, upstream_of
from embodied_ros.graph.processes import node_command

config = load_config(None, {"schedule.smoother": 3})
assert config.schedule.period_of("smoother") == 3
assert "schedule.smoother" in [name for name, _ in parameter_fields()]
assert graph_nodes(False)[-2:] == ("smoother", "controller")
assert upstream_of("smoother", False) == ("action",)
assert node_class("smoother").__name__ == "SmootherNode"
plan = launch_plan(sys.argv[1], layout="separate")
assert [p.executable for p in plan][-2:] == ["embodied-ros-smoother", "embodied-ros-controller"]
assert "embodied_ros.nodes.smoother" in node_command("smoother", "params.yaml")
print("derived")
'''


def test_a_new_node_is_a_table_row_and_its_module(tmp_path):
    """Adding a node to a copy of the package: its row and its module, nothing else."""
    package = tmp_path / "embodied_ros"
    shutil.copytree(ROOT / "embodied_ros", package, ignore=shutil.ignore_patterns("__pycache__"))
    table = package / "node_infra" / "node_table.py"
    text = table.read_text()
    assert text.count('    GraphNodeSpec("controller",') == 1
    table.write_text(text.replace('    GraphNodeSpec("controller",', NEW_ROW + '    GraphNodeSpec("controller",'))
    (package / "nodes" / "smoother.py").write_text(NEW_MODULE)
    config = tmp_path / "graph.yaml"
    config.write_text("bundle: model.gguf\n")
    result = subprocess.run([sys.executable, "-c", WITH_THE_NEW_NODE, str(config)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "derived" in result.stdout, result.stderr
