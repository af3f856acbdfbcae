"""Waiting for node processes: an answer the node dropped is asked for again, not waited out."""

import types

import pytest

from embodied_ros.graph import readiness


class _Future:
    def __init__(self, label=None):
        self.label = label

    def done(self):
        return self.label is not None

    def result(self):
        return types.SimpleNamespace(current_state=types.SimpleNamespace(label=self.label))


class _Client:
    def __init__(self, answers):
        self.answers, self.asked, self.dropped = list(answers), 0, []

    def service_is_ready(self):
        return True

    def call_async(self, request):
        self.asked += 1
        return _Future(self.answers.pop(0) if self.answers else None)

    def remove_pending_request(self, future):
        self.dropped.append(future)


class _Node:
    def __init__(self, client):
        self.client = client

    def create_client(self, kind, name):
        return self.client

    def destroy_client(self, client):
        pass


def test_an_unanswered_request_is_asked_again(monkeypatch):
    monkeypatch.setattr(readiness, "RESEND_S", 0.01)
    client = _Client([None, "active"])  # the first answer is lost
    readiness.wait_for_state(_Node(client), ["controller"], "", 5.0, lambda: __import__("time").sleep(0.02))
    assert client.asked == 2 and len(client.dropped) == 1


def test_a_node_that_never_answers_times_out_by_name(monkeypatch):
    monkeypatch.setattr(readiness, "RESEND_S", 0.01)
    with pytest.raises(TimeoutError, match="controller"):
        readiness.wait_for_state(_Node(_Client([])), ["controller"], "", 0.1, lambda: __import__("time").sleep(0.02))


_INTERRUPTED_START = """
import sys, threading
sys.path.insert(0, sys.argv[1])
import rclpy
from rclpy.context import Context
from embodied_ros.graph.composed import ComposedGraph
from embodied_ros.node_infra.config import load_config
from fake_runtime import FakeRuntime

context = Context()
rclpy.init(context=context, domain_id=int(sys.argv[2]))
graph = ComposedGraph(load_config(None, {"schedule.step_period_s": 0.1}), context=context, runtime=FakeRuntime())
def interrupted():
    raise KeyboardInterrupt  # Ctrl-C while the controller's process comes up
graph._wait_for_controller = interrupted
try:
    graph.start()
except KeyboardInterrupt:
    pass
left = [t.name for t in threading.enumerate() if t.name.startswith("graph-")]
print("threads left:", left, "controller process:", graph.controller_process, "nodes:", list(graph.nodes))
rclpy.try_shutdown(context=context)
sys.exit(1 if left or graph.controller_process or graph.nodes else 0)
"""


def test_a_start_cut_short_by_ctrl_c_leaves_no_thread_process_or_node():
    import subprocess
    import sys
    from pathlib import Path

    from domains import next_domain

    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_START, str(Path(__file__).parent), str(next_domain())],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr  # -6: aborted at exit on a thread left spinning
