"""Integer nanoseconds <-> builtin_interfaces Time / Duration (the pipeline keeps stamps as int ns)."""

from __future__ import annotations

import time

from builtin_interfaces.msg import Duration, Time

_NS = 1_000_000_000


def time_to_ns(stamp: Time | Duration) -> int:
    return int(stamp.sec) * _NS + int(stamp.nanosec)


def ns_to_time(ns: int) -> Time:
    sec, nanosec = divmod(int(ns), _NS)
    return Time(sec=sec, nanosec=nanosec)


def ns_to_duration(ns: int) -> Duration:
    sec, nanosec = divmod(int(ns), _NS)
    return Duration(sec=sec, nanosec=nanosec)


def seconds_to_ns(seconds: float) -> int:
    return int(round(seconds * _NS))


def reception_ns(info) -> int:
    """When a message reached this process (wall ns), from a subscription's MessageInfo: the middleware
    stamps it as the sample comes in, so a busy interpreter delays the callback but not this time."""
    return info["received_timestamp"] or time.time_ns()  # 0: the middleware does not stamp receptions
