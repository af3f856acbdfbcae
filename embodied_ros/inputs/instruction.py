"""std_msgs/String -> the task instruction text."""

from __future__ import annotations

from std_msgs.msg import String

from embodied_ros.inputs.errors import InstructionError

MAX_INSTRUCTION_CHARS = 2000


def instruction_from_msg(msg: String, source: str = "instruction") -> str:
    """The instruction with surrounding whitespace removed; empty or oversized text is an error."""
    text = msg.data.strip()
    if not text:
        raise InstructionError(f"{source}: instruction is empty")
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise InstructionError(f"{source}: instruction has {len(text)} characters, limit {MAX_INSTRUCTION_CHARS}")
    return text


class NewestPerPublisher:
    """Takes each message once, in order: a latched publisher reaches the instruction input through two
    subscriptions (one also replaying what it published earlier), so the same message can arrive twice, and
    an older one after a newer. A message is new when its sequence number is above the last one taken from
    its publisher; a middleware that numbers nothing (None or 0) has every message taken."""

    def __init__(self) -> None:
        self._last: dict[bytes, int] = {}

    def is_new(self, publisher: bytes, sequence: int | None) -> bool:
        if not sequence:
            return True
        if sequence <= self._last.get(publisher, 0):
            return False
        self._last[publisher] = sequence
        return True
