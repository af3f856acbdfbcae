"""Subscriptions read when the node needs them, not woken for by every message.

A free-running node needs only the newest joint state and image when its timer fires, yet a
subscription that an executor waits on wakes the node's interpreter for each message: at an arm's
100 Hz joint-state rate, every process that reads them runs Python a hundred times a second, and
on a 2-core machine those wakes take the cores from the model's kernels. A subscription in
`PolledGroup` is never waited on: its keep-last queue holds what arrived, and `PolledSubscription.poll`
hands the newest message to the node's callback at the moment it is needed, and the
subscription's events (an incompatible publisher) to their handlers just before, at most twice a second.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from rclpy.callback_groups import CallbackGroup
from rclpy.event_handler import EventHandler
from rclpy.exceptions import InvalidHandle
from rclpy.subscription import Subscription


EVENT_POLL_S = 0.5


class PolledGroup(CallbackGroup):
    """Executors wait on nothing of this group: its subscriptions and their event handlers are polled.

    Event handlers too: with Fast DDS a subscription's events make the wait set ready while the
    subscription holds a message nobody took, so an executor waiting on them would spin. Only
    rclpy's Python executors ask a group; its EventsExecutor takes every subscription's messages
    itself, so a node with polled subscriptions is spun by a SingleThreadedExecutor."""

    def can_execute(self, entity) -> bool:
        return False

    def beginning_execution(self, entity) -> bool:
        return False

    def ending_execution(self, entity) -> None:
        pass


def ignore_message(*_: Any) -> None:
    """The callback rclpy requires of a polled subscription; no executor ever calls it."""


_CHANGE_FIELDS: dict[type, tuple[str, ...]] = {}  # an event status type -> its counts of changes since the last take


def take_event(handler: EventHandler):
    """The handler's event status if it changed since the last take, else None (rclpy takes events only
    for a handler its executor found ready; its handle is not public in rclpy 9)."""
    event = handler._EventHandler__event  # noqa: SLF001
    try:
        with event:
            status = event.take_event()
    except InvalidHandle:
        return None
    changes = _CHANGE_FIELDS.get(type(status))
    if changes is None:  # e.g. total_count_change, current_count_change
        changes = _CHANGE_FIELDS.setdefault(type(status), tuple(n for n in dir(status) if n.endswith("_change")))
    return status if any(getattr(status, name) for name in changes) else None


def take_all(subscription: Subscription) -> list[tuple[Any, dict]]:
    """Every message waiting in `subscription`'s queue, oldest first, each with its MessageInfo."""
    taken = []
    while True:
        try:
            with subscription.handle:
                message = subscription.handle.take_message(subscription.msg_type, subscription.raw)
        except InvalidHandle:  # destroyed (the node is shutting down)
            return taken
        if message is None:
            return taken
        taken.append(message)


def take_newest(subscription: Subscription):
    """The newest message waiting in `subscription`'s queue (older ones are dropped), or None."""
    taken = take_all(subscription)
    return taken[-1][0] if taken else None


class PolledSubscription:
    """A subscription in a `PolledGroup` and the callback its newest message goes to on `poll()`."""

    def __init__(self, subscription: Subscription, on_message: Callable[[Any], None]):
        self.subscription = subscription
        self.on_message = on_message
        self._events_due_s = 0.0

    @property
    def topic_name(self) -> str:
        return self.subscription.topic_name

    @property
    def qos_profile(self):
        return self.subscription.qos_profile

    def poll(self) -> bool:
        """Hand the newest waiting message to the callback, after any event of the subscription (an
        incompatible publisher) to its handler's callback, those at most every EVENT_POLL_S (a poll at
        a controller's rate would spend more on them than on the message); False when no message came
        since the last poll."""
        now_s = time.monotonic()
        if now_s >= self._events_due_s:
            self._events_due_s = now_s + EVENT_POLL_S
            for handler in self.subscription.event_handlers:
                status = take_event(handler)
                if status is not None:
                    handler.callback(status)
        message = take_newest(self.subscription)
        if message is None:
            return False
        self.on_message(message)
        return True
