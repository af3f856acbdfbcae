"""`up` on a composed graph with the test runtime: it runs, summarizes and reports the command stream."""

import os
import sys
from pathlib import Path

import pytest

from embodied_ros.node_infra.config import load_config
from embodied_ros.graph.up import format_report, run_up
from domains import next_domain
from fake_runtime import FakeRuntime


def test_up_reports_stage_rates_latencies_and_command_period_error():
    config = load_config(None, {"schedule.step_period_s": 0.1, "schedule.perception": 2, "schedule.prefix": 2})
    lines = []
    report = run_up(config, duration_s=2.5, summary_period_s=1.0, domain_id=next_domain(),
                    print_fn=lines.append, runtime=FakeRuntime())
    text = format_report(report)
    print("\n".join(lines + [text]))
    assert any("cmd" in line and "controller:" in line for line in lines[1:])
    assert {"observation", "perception", "prefix", "action"} <= set(report.stages)
    # perception runs every 2 steps of 0.1 s, the action head every step: rates reflect the schedule
    assert report.stages["perception"]["runs"] < report.stages["action"]["runs"]
    assert report.commands["commands"] > 0
    assert report.commands["tick_period_error_ms_p99"] >= report.commands["tick_period_error_ms_p50"] >= 0
    assert "period error p50/p99" in text and "perception" in text
    assert report.exited == {} and not _children_running("embodied_ros.nodes.synthetic")


def _children_running(module: str) -> list[int]:
    """Processes of this one's children whose command line names `module`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and module in command:
            found.append(int(entry.name))
    return found


def test_up_says_in_one_error_when_the_synthetic_robot_cannot_start(monkeypatch):
    from embodied_ros.graph import up

    import re
    import shutil

    monkeypatch.setattr(up, "robot_command", lambda *args: [sys.executable, "-c", "raise SystemExit(3)"])
    expected = r"synthetic robot's process ended with exit code 3 \(its log: .*\.log\)"
    with pytest.raises(RuntimeError, match=expected) as raised:
        run_up(load_config(None), duration_s=2.0, domain_id=next_domain(), print_fn=lambda line: None,
               runtime=FakeRuntime())
    assert not _children_running("-c raise SystemExit")
    log = Path(re.search(r"its log: (.*\.log)\)", str(raised.value)).group(1))
    assert log.is_file()  # kept for the user; the test removes it
    shutil.rmtree(log.parent)


def test_up_on_two_hosts_each_runs_its_share_and_commands_stream(tmp_path):
    """`up --host inference` and `up --host robot` (here two processes on one machine and domain, as two
    hosts would run them): the robot's side has the observation node, the controller and the synthetic
    robot, the other the model's nodes; the robot's report sees chunks and commands."""
    import json
    import signal
    import subprocess

    from graph_bundles import ROOT

    domain = str(next_domain())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def up(host: str, duration: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "embodied_ros.cli.main", "up", "pi05", "--host", host,
                                 "--duration", duration, "--domain-id", domain,
                                 "--report-json", str(tmp_path / f"{host}.json")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=env)

    inference = up("inference", "30")
    robot = up("robot", "6")
    robot_out, _ = robot.communicate(timeout=240)
    inference.send_signal(signal.SIGINT)  # Ctrl-C: the inference side stops and reports
    inference_out, _ = inference.communicate(timeout=120)
    assert robot.returncode == 0, robot_out[-3000:]
    assert "on the robot host: observation, controller" in robot_out, robot_out[-3000:]
    assert "on the inference host: perception, prefix, action" in inference_out, inference_out[-3000:]  # no world
    assert inference.returncode == 0, inference_out[-3000:]
    report = json.loads((tmp_path / "robot.json").read_text())
    assert report["exited"] == {} and report["first_chunk_s"] is not None
    assert report["commands"]["commands"] > 50 and report["stages"]["action"]["runs"] >= 10, robot_out[-3000:]


def test_up_names_the_kept_logs_of_a_node_process_that_ended_early():
    """The controller's process killed mid-run: the report names it, its exit code and the log folder,
    which stays (a clean run's folders go)."""
    import shutil
    import signal
    import threading

    def kill_the_controller():
        for pid in _children_running("embodied_ros.nodes.controller"):
            os.kill(pid, signal.SIGKILL)

    killer = threading.Timer(2.0, kill_the_controller)
    config = load_config(None, {"schedule.step_period_s": 0.1})
    run_up_started = threading.Event()

    def printed(line):
        if line.startswith("graph up") and not run_up_started.is_set():
            run_up_started.set()
            killer.start()

    report = run_up(config, duration_s=4.0, summary_period_s=1.0, domain_id=next_domain(), print_fn=printed,
                    runtime=FakeRuntime())
    killer.join()
    assert report.exited == {"controller": -signal.SIGKILL}
    [folder] = report.logs
    assert (Path(folder) / "controller.log").is_file()
    assert f"node processes that ended early: {{'controller': -9}} (their logs: {folder})" in format_report(report)
    shutil.rmtree(folder)
