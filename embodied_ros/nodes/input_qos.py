"""Publishers that can never reach an input subscription, in words a user can act on.

An incompatible-QoS event says only which policy failed; the graph's list of the topic's
publishers says who offers what. The event can come before discovery knows the publisher's node
name: such a mismatch is explained again on `name_unnamed` until the node is known.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from rclpy.event_handler import QoSRequestedIncompatibleQoSInfo, SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import QoSCompatibility, QoSPolicyKind, QoSProfile, qos_check_compatible
from rclpy.subscription import Subscription

from embodied_ros.node_infra.topics import qos_mismatch

UNKNOWN_NODE_NAME = "_NODE_NAME_UNKNOWN_"  # the middleware's name for an endpoint whose node is not known yet


class Requested(NamedTuple):
    topic: str  # resolved: namespace and remapping applied
    qos: QoSProfile


class InputMismatches:
    """Subscribes the node's inputs, and calls `on_mismatch(input, explanation)` for every publisher on an
    input's topic that cannot reach it. `subscribe(msg_type, topic, callback, qos, event_callbacks)` makes a
    subscription; `hint(input, policy)` may add what to change ("" for nothing)."""

    def __init__(self, node: Node, subscribe: Callable[..., Subscription], on_mismatch: Callable[[str, str], None],
                 hint: Callable[[str, QoSPolicyKind], str] = lambda name, policy: ""):
        self.node = node
        self._subscribe = subscribe
        self.on_mismatch = on_mismatch
        self.hint = hint
        self.requested: dict[str, Requested] = {}
        self.unnamed: dict[str, QoSPolicyKind] = {}  # input -> failed policy, while its publisher's node is unknown

    def subscribe(self, name: str, msg_type, topic: str, callback, qos, via: Callable[..., Subscription] | None = None,
                  **other_events) -> Subscription:
        """The input `name`'s subscription, made by `via` (same arguments; default: the `subscribe` given
        at construction); `other_events` are further event callbacks (e.g. matched=...)."""
        # known before the subscription exists: its events may run on another executor thread first
        self.requested[name] = Requested(self.node.resolve_topic_name(topic), qos)
        events = SubscriptionEventCallbacks(incompatible_qos=lambda event: self._on_event(name, event), **other_events)
        return (via or self._subscribe)(msg_type, topic, callback, qos, events)

    def name_unnamed(self, still_silent: Callable[[str], bool]) -> None:
        """Explain again each mismatch whose publisher was not named yet, if its input is still silent."""
        for name, policy in list(self.unnamed.items()):
            if still_silent(name):
                self.on_mismatch(name, self._explain(name, policy))
            else:
                del self.unnamed[name]

    def _on_event(self, name: str, event: QoSRequestedIncompatibleQoSInfo) -> None:
        explanation = self._explain(name, event.last_policy_kind)
        self.node.get_logger().warning(f"{name}: {explanation}")
        self.on_mismatch(name, explanation)

    def _explain(self, name: str, policy: QoSPolicyKind) -> str:
        topic, requested = self.requested[name]
        offending = [info for info in self.node.get_publishers_info_by_topic(topic)
                     if qos_check_compatible(info.qos_profile, requested)[0] == QoSCompatibility.ERROR]
        publisher = offending[-1] if offending else None
        node_name = ""
        if publisher is not None and publisher.node_name != UNKNOWN_NODE_NAME:
            node_name = f"{publisher.node_namespace.rstrip('/')}/{publisher.node_name}"
            self.unnamed.pop(name, None)
        else:
            self.unnamed[name] = policy
        explanation = qos_mismatch(topic, policy, requested,
                                   publisher.qos_profile if publisher is not None else None, node_name)
        hint = self.hint(name, policy)
        return f"{explanation}; {hint}" if hint else explanation
