"""Integer nanoseconds <-> builtin_interfaces Time / Duration (the pipeline keeps stamps as int ns)."""

from __future__ import annotations

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
