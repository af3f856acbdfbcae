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
    readiness.wait_until_active(_Node(client), ["controller"], "", 5.0, lambda: __import__("time").sleep(0.02))
    assert client.asked == 2 and len(client.dropped) == 1


def test_a_node_that_never_answers_times_out_by_name(monkeypatch):
    monkeypatch.setattr(readiness, "RESEND_S", 0.01)
    with pytest.raises(TimeoutError, match="controller"):
        readiness.wait_until_active(_Node(_Client([])), ["controller"], "", 0.1, lambda: __import__("time").sleep(0.02))
