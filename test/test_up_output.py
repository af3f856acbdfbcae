"""What a user reads from `up` and the nodes' logs: changes of state logged once (flapping and
growing ages throttled), hold kinds that keep camera names, a report that says why nothing came."""

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.context import Context

from embodied_ros.graph.monitor import GraphMonitor
from embodied_ros.node_infra.stats import reason_kind
from embodied_ros.graph.up import UpReport, format_report
from embodied_ros.nodes.state_log import StateLog
from domains import next_domain

STALE = "inputs: camera base_0_rgb: newest message is {} ms old (limit 500 ms)"


class _Lines:
    def __init__(self):
        self.lines = []

    def info(self, text):
        self.lines.append(("info", text))

    def warning(self, text):
        self.lines.append(("warning", text))


def test_reason_kind_replaces_measurements_not_names():
    assert reason_kind(STALE.format(612)) == "inputs: camera base_0_rgb: newest message is N ms old (limit N ms)"
    assert reason_kind("joint wrist_2 is -1.5e3") == "joint wrist_2 is N"


def test_state_log_writes_each_change_once_and_throttles_a_flapping_state():
    out = _Lines()
    log = StateLog(out, min_interval_s=5.0)
    log.update("holding: waiting for the first action chunk", "info", now_s=0.0)
    log.update("streaming", now_s=0.5)
    for k in range(3):  # flapping every 0.2 s: the first hold is logged, its repeats are held back
        log.update("holding: " + STALE.format(510 + k), "warning", now_s=1.0 + 0.4 * k)
        log.update("holding: " + STALE.format(610 + k), "warning", now_s=1.1 + 0.4 * k)  # only the age grew
        log.update("streaming", now_s=1.2 + 0.4 * k)
    assert out.lines == [("info", "holding: waiting for the first action chunk"), ("info", "streaming"),
                         ("warning", "holding: " + STALE.format(510))]
    log.update("holding: " + STALE.format(700), "warning", now_s=5.0)  # same state as logged last: nothing
    log.update("streaming", now_s=5.6)  # 5 s after the last "streaming" line: logged with its count
    assert out.lines[-1] == ("info", "streaming (7 changes of state since the last line)")
    assert len(out.lines) == 4


def test_monitor_counts_a_hold_once_however_its_age_grows():
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        monitor = GraphMonitor(50.0, "joint_trajectory", context=context)
        for message in ["streaming", "holding: " + STALE.format(510), "holding: " + STALE.format(1510), "streaming",
                        "holding: " + STALE.format(520)]:
            monitor._on_diagnostics(DiagnosticArray(status=[DiagnosticStatus(name="/controller: controller",
                                                                              message=message)]), 0, 0)
        monitor._on_diagnostics(DiagnosticArray(status=[DiagnosticStatus(
            name="/observation: observation", level=DiagnosticStatus.ERROR, message="camera wrist: no message")]), 0, 0)
        assert dict(monitor.hold_reasons) == {reason_kind(STALE.format(0)): 2}
        assert monitor.input_problem == "camera wrist: no message"
        monitor.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


def _report(**changes):
    commands = {"commands": 0.0, "rate_hz": 0.0, **{f"{s}_period_error_ms_p{q}": float("nan")
                                                     for s in ("tick", "arrival") for q in (50, 99)}}
    values = dict(layout="composed", bundle="b.gguf", duration_s=3.0, first_chunk_s=None, stages={},
                  commands=commands, hold_reasons={"waiting for the first action chunk": 1})
    return UpReport(**{**values, **changes})


def test_report_says_why_no_chunk_came_and_leaves_the_start_up_wait_out_of_the_holds():
    text = format_report(_report(input_problem="camera base_0_rgb: no message received yet"))
    assert "no action chunk in 3.0 s: the inputs were refused (camera base_0_rgb: no message received yet)" in text
    assert "nan" not in text and "holds" not in text
    stages = {"action": {"runs": 9, "rate_hz": 10.0, "compute_ms_p50": 1.0, "compute_ms_p99": 2.0,
                         "staleness_ms_p50": 5.0, "staleness_ms_p99": 9.0}}
    text = format_report(_report(first_chunk_s=0.2, stages=stages))
    assert "first action chunk 0.2 s after the graph was started" in text
    assert "holds after the first chunk: none" in text
    text = format_report(_report(first_chunk_s=0.2, stages=stages,
                                 hold_reasons={"waiting for the first action chunk": 1, "action chunk ran out": 2}))
    assert "holds after the first chunk: 2x action chunk ran out" in text


def test_a_dry_run_is_watched_on_the_preview_topic_and_refused_chunks_are_counted_by_kind():
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        monitor = GraphMonitor(50.0, "joint_trajectory", dry_run=True, context=context)
        assert [s.topic_name for s in monitor.subscriptions if s.msg_type.__name__ == "JointTrajectory"] == \
            ["/embodied/command_preview"]
        refused = "holding: action chunk starts {} away from the joint state on elbow (max_jump 0.05)"
        for message in [refused.format(0.31), refused.format(0.42), "streaming", refused.format(0.2)]:
            monitor._on_diagnostics(DiagnosticArray(status=[DiagnosticStatus(name="/controller: controller",
                                                                              message=message)]), 0, 0)
        assert dict(monitor.hold_reasons) == {
            "action chunk starts N away from the joint state on elbow (max_jump N)": 2}
        monitor.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


def test_a_stage_that_cannot_run_is_named_with_its_reason_but_not_for_the_start_up_wait():
    context = Context()
    rclpy.init(context=context, domain_id=next_domain())
    try:
        monitor = GraphMonitor(50.0, "joint_trajectory", context=context)
        warn, stale = DiagnosticStatus.WARN, "perception output is {} ms old (limit 1000 ms)"
        for level, message in [(warn, "no perception output yet"), (warn, stale.format(1512)),
                               (warn, stale.format(1620)), (DiagnosticStatus.OK, "running"), (warn, "inactive")]:
            monitor._on_diagnostics(DiagnosticArray(status=[DiagnosticStatus(name="/prefix: prefix", level=level,
                                                                              message=message)]), 0, 0)
        assert {stage: dict(kinds) for stage, kinds in monitor.stage_problems.items()} == {
            "prefix": {"perception output is N ms old (limit N ms)": 2}}
        monitor.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)
    text = format_report(_report(stage_problems={"prefix": {"perception output is N ms old (limit N ms)": 2}}))
    assert "prefix could not run: perception output is N ms old (limit N ms) (2 reports)" in text
