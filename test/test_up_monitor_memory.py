"""`up`'s monitor over a run of any length (`--duration 0`): what it holds stays bounded, yet the
final report covers the whole run (counts and rates exact, percentiles from a uniform sample, exact
while the run is shorter than it) and the live summary its last seconds."""

import random
import time
import tracemalloc

import numpy as np
import pytest
import rclpy
from rclpy.context import Context
from trajectory_msgs.msg import JointTrajectory

from embodied_ros.graph.monitor import RUN_SAMPLE_ROWS, GraphMonitor
from embodied_ros.inputs.stamps import ns_to_time
from embodied_ros.msg import StageTiming
from embodied_ros.node_infra.stats import percentiles
from domains import next_domain

PERIOD_NS = 20_000_000  # 50 Hz


@pytest.fixture
def monitor():
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    monitor = GraphMonitor(50.0, "joint_trajectory", context=context)
    yield monitor
    monitor.destroy_node()
    rclpy.try_shutdown(context=context)


class _Stream:
    """Commands every 20 ms, each arriving 0-1 ms late (uniform), and an action timing every 5th,
    ending now on the monotonic clock."""

    def __init__(self, monitor: GraphMonitor, total: int):
        self.monitor, self.next, self.total = monitor, 0, total
        self.end_ns = time.monotonic_ns()
        self.start_ns = self.end_ns - total * PERIOD_NS
        self._random = random.Random(1)
        self.arrival_errors_ms: list[float] = []
        self._previous_delay_ms = None

    def feed(self, count: int) -> None:
        for _ in range(count):
            tick_ns = self.start_ns + self.next * PERIOD_NS
            delay_ms = round(self._random.uniform(0.0, 1.0), 6)  # whole nanoseconds
            arrived_ns = tick_ns + round(delay_ms * 1e6)
            if self._previous_delay_ms is not None:
                self.arrival_errors_ms.append(abs(delay_ms - self._previous_delay_ms))
            self._previous_delay_ms = delay_ms
            command = JointTrajectory()
            command.header.stamp = ns_to_time(tick_ns)
            self.monitor._on_command(command, arrived_ns, arrived_ns)
            if self.next % 5 == 0:
                timing = StageTiming(stage="action", sequence=self.next // 5 + 1, compute_ms=delay_ms,
                                     staleness_ms=2 * delay_ms)
                self.monitor._on_timing(timing, arrived_ns, arrived_ns)
            self.next += 1


def test_memory_stays_bounded_however_long_the_run(monitor):
    stream = _Stream(monitor, 4 * RUN_SAMPLE_ROWS)
    stream.feed(2 * RUN_SAMPLE_ROWS)  # every structure at its full size
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        stream.feed(2 * RUN_SAMPLE_ROWS)  # 400 s more of commands
        grown = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename")
                    if stat.traceback[0].filename.endswith("monitor.py"))
    finally:
        tracemalloc.stop()
    assert grown < 100_000, f"the monitor grew by {grown} bytes over 20000 more commands"


def test_the_run_report_covers_the_whole_run_and_the_live_summary_its_last_seconds(monitor):
    total = 3 * RUN_SAMPLE_ROWS
    stream = _Stream(monitor, total)
    stream.feed(100)  # before the run: left out of its report
    monitor.start_run()
    stream.feed(total - 100)
    run = monitor.command_summary()
    assert run["commands"] == total - 100
    assert run["rate_hz"] == pytest.approx(50.0, rel=1e-3)
    exact = percentiles(stream.arrival_errors_ms[100:])  # the run's intervals
    assert run["arrival_period_error_ms_p50"] == pytest.approx(exact[0], abs=0.02)
    assert run["arrival_period_error_ms_p99"] == pytest.approx(exact[1], abs=0.02)
    assert run["tick_period_error_ms_p99"] == pytest.approx(0.0, abs=1e-6)  # the stamps keep the grid
    action = monitor.stage_summary()["action"]
    assert action["runs"] == (total - 100) // 5 and action["rate_hz"] == pytest.approx(10.0, rel=1e-3)
    assert action["staleness_ms_p50"] == pytest.approx(2 * action["compute_ms_p50"], rel=0.1)

    window_s = 2.0 + (time.monotonic_ns() - stream.end_ns) / 1e9  # the stream's last 2 s
    recent = monitor.command_summary(window_s)
    assert abs(recent["commands"] - 100) <= 2 and recent["rate_hz"] == pytest.approx(50.0, rel=0.02)
    assert abs(monitor.stage_summary(window_s)["action"]["runs"] - 20) <= 1


def test_a_short_run_is_reported_exactly(monitor):
    stream = _Stream(monitor, 500)
    monitor.start_run()
    stream.feed(500)
    exact = percentiles(stream.arrival_errors_ms)
    run = monitor.command_summary()
    assert [run["arrival_period_error_ms_p50"], run["arrival_period_error_ms_p99"]] == pytest.approx(exact, abs=1e-9)
    assert np.isfinite(run["tick_period_error_ms_p50"])
