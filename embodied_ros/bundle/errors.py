"""Why a bundle was refused. Every message starts with the file's path and says what is wrong."""

from __future__ import annotations


class BundleError(ValueError):
    """A file that cannot be used as a bundle."""


class BundleFormatError(BundleError):
    """Not a bundle, an unsupported version, or a header that contradicts itself (forged/corrupt)."""


class BundleTruncatedError(BundleFormatError):
    """The file ends before the data its header describes."""


class BundleIntegrityError(BundleError):
    """The content does not match the digest stored at writing: changed or damaged since."""


class BundleArchitectureError(BundleError):
    """The bundle holds another model family than the one asked for."""


# A bundle without a tokenizer passes every check of its own (parity records hold their tokens), but a
# graph cannot run it: every observation's instruction becomes tokens.
NO_TOKENIZER = ("the bundle has no tokenizer, so the graph cannot turn an instruction into tokens; convert the "
                "checkpoint again with its SentencePiece tokenizer.model beside the weights or given as "
                "--tokenizer FILE")
