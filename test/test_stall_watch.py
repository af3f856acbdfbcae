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
