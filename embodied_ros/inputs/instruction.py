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
