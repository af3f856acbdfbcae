"""Latency gate on a ROS 2 install: the graph started by launch/graph.launch.py, measured from outside.

    launch_test test/launch/test_latency_launch.py                     # budget config/budgets/ci.yaml
    EMBODIED_ROS_BUDGET=workstation-cpu EMBODIED_ROS_LAYOUT=separate launch_test test/launch/test_latency_launch.py

The probe publishes stamped observations, collects the action chunks answering them and the
controller's commands, and checks p50/p99 end-to-end latency, the command period error (as sent
and as received) and each stage's compute time against the same call timed alone (before the graph
starts: this module times them when it is imported) against the budget, printing the measured numbers
either way. EMBODIED_ROS_CONFIG picks the config (default config/pi05.yaml). test/test_latency_graph.py runs the very same
check on a graph started by `embodied-ros up` (for machines without `launch`).
"""

import os
import unittest

import launch
import launch_testing
import launch_testing.actions
import launch_testing.asserts
import pytest
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource

from embodied_ros.node_infra.config import load_config
from embodied_ros.node_infra.paths import default_config
from embodied_ros.nodes.runtime_cache import acquire_runtime
from embodied_ros.pipeline.timing import stage_times_ms
from embodied_ros.share import package_root
from embodied_ros.replay.latency import load_budget
from embodied_ros.replay.latency_probe import measure_latency

BUDGET = load_budget(os.environ.get("EMBODIED_ROS_BUDGET", "ci"))
LAYOUT = os.environ.get("EMBODIED_ROS_LAYOUT", "composed")
CONFIG = os.environ.get("EMBODIED_ROS_CONFIG", str(default_config()))
STAGE_ALONE_MS = stage_times_ms(acquire_runtime(load_config(CONFIG)), repeats=3)  # before launch starts the graph


@pytest.mark.launch_test
def generate_test_description():
    graph = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(package_root() / "launch" / "graph.launch.py")),
        launch_arguments={"config": CONFIG, "layout": LAYOUT}.items(),
    )
    return launch.LaunchDescription([graph, launch_testing.actions.ReadyToTest()]), {}


class TestLatencyWithinBudget(unittest.TestCase):
    def test_end_to_end_latency_and_command_period(self):
        result = measure_latency(BUDGET, load_config(CONFIG), stage_alone_ms=STAGE_ALONE_MS)
        self.assertTrue(result.passed, result.report())


@launch_testing.post_shutdown_test()
class TestGraphShutsDownCleanly(unittest.TestCase):
    def test_exit_codes(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info)
