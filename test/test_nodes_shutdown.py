"""Processes of the graph end as a ROS user expects: the composed container and a node process
deactivate their nodes (the controller leaves the arm holding) however many SIGINTs and SIGTERMs
arrive; a node process whose callback meets a closed context exits 0 without a traceback; one whose
spinning thread failed, and a container whose controller process ended, exit 1 with the reason (launch
reports them); a missing bundle ends the container with one line and exit status 1; every console
script answers --help."""

import configparser
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
TRANSITION_ERRORS = ("Failed to complete transition", "Unable to start transition", "Traceback")


def _environment(ros_domain_id: int) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
            "ROS_DOMAIN_ID": str(ros_domain_id), "PYTHONUNBUFFERED": "1"}


class _Output:
    """Collects a process's output as it comes, so a test can wait for a line."""

    def __init__(self, process: subprocess.Popen):
        self.text = ""
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process):
        for line in process.stdout:
            self.text += line

    def wait_for(self, needle: str, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        while needle not in self.text and time.monotonic() < end:
            time.sleep(0.05)
        return needle in self.text

    def finish(self, timeout_s: float = 5.0) -> str:
        self._thread.join(timeout_s)
        return self.text


COMPOSED_WITH_FAKE_RUNTIME = """
import sys
from embodied_ros.node_infra.config import load_config
from embodied_ros.graph.container import serve
from fake_runtime import FakeRuntime

config = load_config(None, {"layout": "composed", "diagnostics.period_s": 0.2, "controller.joints": ["j0", "j1", "j2"]})
serve(config, sys.argv, runtime=FakeRuntime())
"""


def _stop_with_a_burst(command: list[str], ready: str, burst, ros_domain_id: int) -> tuple[int, str]:
    """Start `command`, wait for the line `ready`, send the signals of `burst` 10 ms apart; (exit status, output)."""
    process = subprocess.Popen(command, env=_environment(ros_domain_id), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    output = _Output(process)
    try:
        assert output.wait_for(ready, 60), output.text
        for number in burst:
            process.send_signal(number)
            time.sleep(0.01)
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    return code, output.finish()


def test_container_deactivates_every_node_through_a_burst_of_interrupts(ros_domain_id):
    burst = (signal.SIGINT, signal.SIGINT, signal.SIGTERM, signal.SIGINT)  # the terminal's Ctrl-C, launch's, ...
    code, text = _stop_with_a_burst([sys.executable, "-c", COMPOSED_WITH_FAKE_RUNTIME], "graph active", burst,
                                    ros_domain_id)
    assert code == 0 and "every node deactivated" in text, text
    assert not [error for error in TRANSITION_ERRORS if error in text], text


def test_node_process_deactivates_through_a_burst_of_interrupts(ros_domain_id):
    command = [sys.executable, "-m", "embodied_ros.nodes.controller", "--ros-args", "-p", "autostart:=true"]
    code, text = _stop_with_a_burst(command, "waiting for the first action chunk",
                                    (signal.SIGINT, signal.SIGTERM, signal.SIGINT), ros_domain_id)
    assert code == 0 and "[controller]: deactivated" in text, text
    assert not [error for error in TRANSITION_ERRORS if error in text], text


SLOW_TO_ACTIVATE = """
import time
from embodied_ros.nodes.controller import ControllerNode
from embodied_ros.nodes.run import run_node


class SlowToActivate(ControllerNode):
    def start(self):
        super().start()
        print("activating", flush=True)
        time.sleep(1.0)


run_node(SlowToActivate, ["embodied-ros-controller", "--ros-args", "-p", "autostart:=true"])
"""


def test_node_process_stopped_while_it_activates_still_deactivates(ros_domain_id):
    code, text = _stop_with_a_burst([sys.executable, "-c", SLOW_TO_ACTIVATE], "activating", (signal.SIGINT,),
                                    ros_domain_id)
    assert code == 0 and "[controller]: deactivated" in text, text
    assert not [error for error in TRANSITION_ERRORS if error in text], text


CLOSES_THEN_PUBLISHES = """
from rclpy.node import Node
from std_msgs.msg import Empty
from embodied_ros.nodes.run import run_node


class ClosesThenPublishes(Node):
    stage = "closes_then_publishes"

    def __init__(self):
        super().__init__(self.stage)
        self.declare_parameter("autostart", False)
        self.publisher = self.create_publisher(Empty, "ping", 1)
        self.create_timer(0.01, self.tick)

    def tick(self):
        self.context.try_shutdown()  # what Ctrl-C does while a callback runs
        self.publisher.publish(Empty())  # RCLError: the publisher's context is invalid


run_node(ClosesThenPublishes, ["closes_then_publishes"])
print("ended")
"""


def test_node_process_exits_0_when_a_callback_meets_the_context_closed_by_ctrl_c(ros_domain_id):
    result = subprocess.run([sys.executable, "-c", CLOSES_THEN_PUBLISHES], env=_environment(ros_domain_id),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "ended" in result.stdout and "Traceback" not in result.stderr and "RCLError" not in result.stderr


FAILS_TO_PREPARE_ITS_THREAD = """
from embodied_ros.nodes.controller import ControllerNode
from embodied_ros.nodes.run import run_node


class FailsToPrepare(ControllerNode):
    def prepare_spin_thread(self):
        raise RuntimeError("no executor thread today")


run_node(FailsToPrepare, ["embodied-ros-controller"])
"""


def test_a_node_process_whose_spinning_thread_fails_exits_1_with_the_error(ros_domain_id):
    result = subprocess.run([sys.executable, "-c", FAILS_TO_PREPARE_ITS_THREAD], env=_environment(ros_domain_id),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "no executor thread today" in result.stderr  # the traceback, logged
    assert result.stderr.strip().splitlines()[-1] == \
        "controller: spin failed: RuntimeError: no executor thread today", result.stderr


def test_container_whose_controller_process_ends_stops_with_exit_status_1(ros_domain_id):
    process = subprocess.Popen([sys.executable, "-c", COMPOSED_WITH_FAKE_RUNTIME], env=_environment(ros_domain_id),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = _Output(process)
    try:
        assert output.wait_for("graph active", 60), output.text
        [controller] = _children(process.pid)
        os.kill(controller, signal.SIGKILL)
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    text = output.finish()
    assert code == 1, text
    assert "embodied-ros-container: the controller's process ended with exit code -9 (its log: " in text, text
    log = Path(re.search(r"\(its log: (.*controller\.log)\)", text).group(1))
    assert "holding" in log.read_text()  # kept, with what the controller said before it was killed
    shutil.rmtree(log.parent)


def _children(pid: int) -> list[int]:
    return [int(child) for task in os.listdir(f"/proc/{pid}/task")
            for child in open(f"/proc/{pid}/task/{task}/children").read().split()]


def test_container_with_a_missing_bundle_fails_with_one_line(tmp_path, ros_domain_id):
    missing = tmp_path / "missing.gguf"
    result = subprocess.run([sys.executable, "-m", "embodied_ros.graph.container", "--bundle", str(missing)],
                            env=_environment(ros_domain_id), capture_output=True, text=True, timeout=60)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1
    assert len(lines) == 1 and lines[0].startswith("embodied-ros-container: ") and str(missing) in lines[0], lines


def _console_scripts() -> dict[str, str]:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    entries = setup["options.entry_points"]["console_scripts"]
    return {name.strip(): target.strip() for name, _, target in
            (line.partition("=") for line in entries.strip().splitlines())}


HELP_OF_EACH = """
import importlib, sys
for name, target in (item.split("=") for item in sys.argv[1:]):
    module, function = target.split(":")
    sys.argv = [name, "--help"]  # as the installed script calls its entry point
    try:
        getattr(importlib.import_module(module), function)()
        print(name, "returned")
    except SystemExit as end:
        print(name, "exit", end.code)
"""


def test_every_console_script_prints_help_and_exits():
    scripts = _console_scripts()
    result = subprocess.run([sys.executable, "-c", HELP_OF_EACH, *[f"{n}={t}" for n, t in scripts.items()]],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for name in scripts:
        assert f"{name} exit 0" in result.stdout, result.stdout
    assert result.stdout.count("usage: ") == len(scripts)
