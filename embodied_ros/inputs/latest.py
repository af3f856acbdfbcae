"""The newest few samples of each input, with the checks that decide whether they can be used.

Free-running graphs take the newest sample of every input and refuse it when it is too old;
lock-step graphs take the samples stamped exactly at the step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

from embodied_ros.inputs.errors import InputError


@dataclass(frozen=True)
class InputSample:
    stamp_ns: int
    value: Any = None  # the converted value; None when the message was bad
    error: InputError | None = None


class InputBuffer:
    def __init__(self, names: Iterable[str], keep: int = 8):
        self._samples: dict[str, deque[InputSample]] = {name: deque(maxlen=keep) for name in names}
        self._silence_notes: dict[str, str] = {}  # input -> a likely cause of its silence, until it speaks again

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._samples)

    def put(self, name: str, sample: InputSample) -> None:
        self._samples[name].append(sample)
        self._silence_notes.pop(name, None)

    def note_silence(self, name: str, note: str) -> None:
        """Join `note` (e.g. a publisher that cannot be matched) to the reason this input is missing or old,
        until its next message."""
        self._silence_notes[name] = note

    @property
    def silence_notes(self) -> dict[str, str]:
        return dict(self._silence_notes)

    def latest(self, name: str) -> InputSample | None:
        samples = self._samples[name]
        return samples[-1] if samples else None

    def newest_usable(self, names: Iterable[str], now_ns: int, max_age_ns: int,
                      max_future_ns: int) -> dict[str, InputSample]:
        """The newest sample of each input; raises InputError if one is missing, bad, too old, or
        stamped ahead of `now_ns` by more than `max_future_ns`."""
        chosen = {}
        for name in names:
            sample = self.latest(name)
            note = f" ({self._silence_notes[name]})" if name in self._silence_notes else ""
            if sample is None:
                raise InputError(f"{name}: no message received yet{note}")
            if sample.error is not None:
                raise sample.error
            age_ns = now_ns - sample.stamp_ns
            if age_ns > max_age_ns:
                raise InputError(
                    f"{name}: newest message is {age_ns / 1e6:.0f} ms old (limit {max_age_ns / 1e6:.0f} ms){note}"
                )
            if -age_ns > max_future_ns:
                raise InputError(f"{name}: newest message is stamped {-age_ns / 1e6:.0f} ms in the future (limit "
                                 f"{max_future_ns / 1e6:.0f} ms): a bad stamp, or this clock and the sender's disagree")
            chosen[name] = sample
        return chosen

    def stamped_at(self, names: Iterable[str], stamp_ns: int) -> dict[str, InputSample] | None:
        """Each input's sample stamped `stamp_ns`; None while one has not arrived; InputError if one is bad."""
        chosen = {}
        for name in names:
            sample = next((s for s in reversed(self._samples[name]) if s.stamp_ns == stamp_ns), None)
            if sample is None:
                return None
            if sample.error is not None:
                raise sample.error
            chosen[name] = sample
        return chosen
