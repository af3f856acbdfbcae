"""The node table is the one list of the graph's nodes: setup.cfg's console scripts, the node
classes, the schedule settings, the launch plan and the noise streams all agree with it."""

import configparser
import dataclasses
import importlib
from pathlib import Path

import pytest

from embodied_ros.graph.config import ScheduleConfig, load_config
from embodied_ros.graph.node_table import NODE_NAMES, NODES, graph_nodes, node_class, node_spec, upstream_of
from embodied_ros.graph.noise import stage_noise

ROOT = Path(__file__).resolve().parents[1]
FIXED_SCRIPTS = {"embodied-ros": "embodied_ros.cli.main:main",
                 "embodied-ros-container": "embodied_ros.nodes.container:main"}


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
    assert keys == ["mode", "step_period_s", *scheduled, "lockstep_start_s"]
    for field in dataclasses.fields(ScheduleConfig):
        if field.name in scheduled:
            assert field.metadata["doc"] == node_spec(field.name).schedule_doc
    schedule = load_config(None, {"schedule.world": 3}).schedule
    assert schedule.period_of("world") == 3 and schedule.period_of("controller") == 1
    with pytest.raises(ValueError, match="schedule.prefix must be a whole number"):
        load_config(None, {"schedule.prefix": 0})


def test_noise_streams_are_distinct_and_only_rows_with_one_draw_noise():
    streams = [node.noise_stream for node in NODES if node.noise_stream is not None]
    assert len(streams) == len(set(streams)) == 2
    world, action = (stage_noise(0, name, 5, (3,)) for name in ("world", "action"))
    assert not (world == action).all()
    with pytest.raises(ValueError, match="the prefix node has no noise stream"):
        stage_noise(0, "prefix", 5, (3,))
