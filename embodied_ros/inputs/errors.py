"""Errors raised for bad input messages. Nodes catch `InputError`, hold, and report the message."""


class InputError(ValueError):
    """An input message cannot be used; the text says which input and why."""


class ImageFormatError(InputError):
    """An image whose encoding, size or step does not describe its data."""


class JointStateError(InputError):
    """A joint state that lacks a needed joint or carries a non-finite value."""


class InstructionError(InputError):
    """An instruction that is empty or too long."""
