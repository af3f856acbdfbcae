"""Checks of config values, shared by every config type: one-line ValueErrors that name the setting."""

from __future__ import annotations


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def positive(owner: str, **values: int) -> None:
    for name, value in values.items():
        require(isinstance(value, int) and value > 0, f"{owner}.{name} must be a positive integer, got {value!r}")
