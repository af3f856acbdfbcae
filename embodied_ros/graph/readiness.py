"""Waiting for node processes to come up: ask each node's lifecycle state until it is `active` (or
another state a lifecycle client waits for).

A request whose answer does not come within RESEND_S is asked again: a node that answers before it
has discovered the asker's reply reader drops the answer ("failed to send response"), and waiting
on that request would wait out the whole timeout."""

from __future__ import annotations

import time
from typing import Callable, Sequence

from lifecycle_msgs.srv import GetState
from rclpy.node import Node

RESEND_S = 0.25  # a dropped answer costs this much start-up; a request is a few bytes


def wait_for_state(node: Node, names: Sequence[str], namespace: str, timeout_s: float,
                   pump: Callable[[], None], state: str = "active") -> None:
    """Return once every node in `names` reports lifecycle state `state`; TimeoutError naming the
    ones that do not. `pump` lets responses arrive (spin the node once, or sleep while another
    thread spins it)."""
    prefix = "/" + namespace.strip("/") if namespace.strip("/") else ""
    clients = {name: node.create_client(GetState, f"{prefix}/{name}/get_state") for name in names}
    states = {name: "unknown" for name in names}
    pending: dict[str, tuple[object, float]] = {}  # name -> (future, when asked)
    deadline = time.monotonic() + timeout_s
    try:
        while any(current != state for current in states.values()):
            for name, client in clients.items():
                future, asked = pending.get(name, (None, 0.0))
                if future is not None and future.done():
                    states[name] = future.result().current_state.label if future.result() else states[name]
                    pending.pop(name)
                elif future is not None and time.monotonic() - asked > RESEND_S:
                    client.remove_pending_request(future)
                    pending.pop(name)
                if states[name] != state and name not in pending and client.service_is_ready():
                    pending[name] = (client.call_async(GetState.Request()), time.monotonic())
            if time.monotonic() > deadline:
                waiting = {name: current for name, current in states.items() if current != state}
                raise TimeoutError(f"nodes not {state} after {timeout_s:.0f} s: {waiting}")
            pump()
    finally:
        for client in clients.values():
            node.destroy_client(client)
