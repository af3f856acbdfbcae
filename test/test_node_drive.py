"""The two drives, free-running and lock-step: what each decides for a node (node_infra/drive.py)."""

from dataclasses import replace

import pytest
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy
from rosgraph_msgs.msg import Clock

from embodied_ros.inputs.stamps import ns_to_time
from embodied_ros.node_infra.config import GraphConfig
from embodied_ros.node_infra.drive import FreeRunning, LockStep, drive_for
from embodied_ros.node_infra.topics import CLOCK
from embodied_ros.nodes.params import node_parameters


class RecordingNode:
    """What a drive uses of a node, recording the calls."""

    def __init__(self):
        self.active = True
        self.timers, self.subscriptions, self.steps, self.markers = [], [], [], []

    def ros_timer(self, period_s, callback):
        self.timers.append(period_s)
        return ("timer", period_s)

    def subscribe(self, msg_type, topic, callback, qos):
        self.subscriptions.append((msg_type, topic, callback))

    def on_step(self, step):
        self.steps.append(step)

    def publish_skip_marker(self, step, now_ns):
        self.markers.append((step, now_ns))


def schedule(mode: str):
    config = GraphConfig()
    return replace(config.schedule, mode=mode, step_period_s=0.1, lockstep_start_s=1.0)


def clock_at(ns: int) -> Clock:
    return Clock(clock=ns_to_time(ns))


def test_the_mode_chooses_the_drive_and_whether_nodes_follow_sim_time():
    assert type(drive_for(schedule("realtime"))) is FreeRunning
    assert type(drive_for(schedule("lockstep"))) is LockStep
    config = GraphConfig()
    assert "use_sim_time" not in node_parameters(config)
    assert node_parameters(replace(config, schedule=schedule("lockstep")))["use_sim_time"] is True


def test_free_running_runs_on_timers_and_the_newest_input_stamped_now():
    drive, node = drive_for(schedule("realtime")), RecordingNode()
    drive.follow_clock(node)
    assert node.subscriptions == []
    assert drive.timer(node, 0.05, lambda: None) == ("timer", 0.05) and node.timers == [0.05]
    assert drive.reader(by_step="by step", newest="newest") == "newest"
    assert drive.output_stamp(1_000, lambda: 2_345) == 2_345
    assert drive.noise_index(step=7, sequence=3) == 4
    assert drive.too_old(age_ns=201, limit_ns=200) and not drive.too_old(age_ns=200, limit_ns=200)
    drive.skipped(node, 5, 1_000)
    assert node.markers == []
    assert drive.stage_qos().depth == 1 and drive.stage_qos().durability == DurabilityPolicy.VOLATILE
    assert drive.sensor_qos("best_effort").reliability == ReliabilityPolicy.BEST_EFFORT
    assert drive.input_reliability_configurable


def test_lock_step_runs_on_clock_steps_reads_by_step_and_acknowledges_skips():
    drive, node = drive_for(schedule("lockstep")), RecordingNode()
    assert drive.timer(node, 0.05, lambda: None) is None and node.timers == []
    drive.follow_clock(node)
    [(msg_type, topic, on_clock)] = node.subscriptions
    assert (msg_type, topic) == (Clock, CLOCK)
    on_clock(clock_at(1_300_000_000))  # step 3 = 1.0 s + 3 * 0.1 s
    on_clock(clock_at(1_350_000_000))  # between steps: ignored
    node.active = False
    on_clock(clock_at(1_400_000_000))  # an inactive node follows no steps
    assert node.steps == [3]
    assert drive.reader(by_step="by step", newest="newest") == "by step"
    assert drive.output_stamp(1_000, lambda: pytest.fail("lock-step does not read the node's clock")) == 1_000
    assert drive.noise_index(step=7, sequence=3) == 7
    assert not drive.too_old(age_ns=10**12, limit_ns=200)
    drive.skipped(node, 5, 1_500)
    assert node.markers == [(5, 1_500)]
    for qos in (drive.stage_qos(), drive.command_qos(), drive.status_qos(), drive.sensor_qos("best_effort")):
        assert qos.reliability == ReliabilityPolicy.RELIABLE and qos.durability == DurabilityPolicy.TRANSIENT_LOCAL
    assert not drive.input_reliability_configurable
