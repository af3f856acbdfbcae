"""StallWatch (node_infra/spinning.py): a process whose interpreter is held past the limit by a C call
that never returns writes its threads' stacks and exits with status 1; one that computes in Python
for longer than the limit, the interpreter passing between threads, is left alone."""

import subprocess
import sys
import time

from graph_bundles import ROOT

HELD = """
import ctypes
from embodied_ros.node_infra.spinning import StallWatch
StallWatch(1.0).start()
ctypes.PyDLL(None).sleep(20)  # a C call that keeps the interpreter, as the stuck take did
print("returned")
"""

BUSY = """
import time
from embodied_ros.node_infra.spinning import StallWatch
watch = StallWatch(1.0)
watch.start()
end = time.monotonic() + 3.0
while time.monotonic() < end:
    sum(range(10_000))
watch.stop()
print("done")
"""


def _run(code: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    return result, time.monotonic() - started


def test_a_held_interpreter_ends_the_process_with_its_stacks():
    result, took_s = _run(HELD)
    assert result.returncode == 1 and "returned" not in result.stdout
    assert "Timeout (0:00:01)!" in result.stderr and 'File "<string>", line 5' in result.stderr, result.stderr
    assert took_s < 15


def test_python_work_longer_than_the_limit_is_not_a_stall():
    result, _ = _run(BUSY)
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr


STUCK_TEARDOWN_NODE = """
import ctypes, os, signal, threading
from rclpy.node import Node
from embodied_ros.nodes.run import run_node

class StuckOnDestroy(Node):
    stage = "stuck"

    def __init__(self):
        super().__init__("stuck")
        self.declare_parameter("autostart", False)
        self.declare_parameter("compute.stall_exit_s", 1.0)

    def destroy_node(self):
        ctypes.PyDLL(None).sleep(20)  # the middleware never returns while the process ends

threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
run_node(StuckOnDestroy, ["stuck"])
print("returned")
"""

STUCK_TEARDOWN_ROBOT = """
import ctypes, os, signal, sys, threading
from embodied_ros.nodes import synthetic

synthetic.SyntheticRobot.destroy_node = lambda self: ctypes.PyDLL(None).sleep(20)
threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
synthetic.main(["robot", "--config", sys.argv[1]])
print("returned")
"""


def test_a_node_process_whose_teardown_hangs_ends_after_the_limit():
    result, took_s = _run(STUCK_TEARDOWN_NODE)
    assert result.returncode == 1 and "returned" not in result.stdout, result.stderr
    assert "destroy_node" in result.stderr and took_s < 15


def test_the_synthetic_robot_process_is_watched_too(tmp_path):
    config = tmp_path / "graph.yaml"
    config.write_text(f"bundle: {ROOT / 'bundles' / 'pi05_tiny.gguf'}\ncompute:\n  stall_exit_s: 1.0\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", STUCK_TEARDOWN_ROBOT, str(config)], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == 1 and "returned" not in result.stdout, result.stderr
    assert "<lambda>" in result.stderr and time.monotonic() - started < 20
