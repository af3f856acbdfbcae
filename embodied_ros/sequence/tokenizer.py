"""Prompt tokenization with the tokenizer carried in the bundle: a SentencePiece model
(`PromptTokenizer`), or a Hugging Face tokenizer.json read by `tokenizer_from_json`.

Matches the reference (transformers' GemmaTokenizer called with max_length, truncation and right
padding): ids = [bos] + sentencepiece(prompt), no eos, truncated to max_length, right-padded with
the pad id; the mask marks the leading valid ids.
"""

from __future__ import annotations

import numpy as np
import sentencepiece


class PromptTokenizer:
    def __init__(self, model_bytes: bytes, max_length: int) -> None:
        if max_length < 1:
            raise ValueError(f"tokenizer max_length must be positive, got {max_length}")
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.LoadFromSerializedProto(bytes(model_bytes))
        except RuntimeError as error:
            raise ValueError(f"tokenizer model is not a valid SentencePiece model: {error}") from None
        self.max_length = max_length
        self.bos_id = self._special_id(self.processor.bos_id(), "bos")
        self.pad_id = max(self.processor.pad_id(), 0)

    def _special_id(self, value: int, name: str) -> int:
        if value < 0:
            raise ValueError(f"tokenizer model defines no {name} token")
        return value

    @property
    def vocab_size(self) -> int:
        return self.processor.get_piece_size()

    def encode(self, prompt: str) -> tuple[np.ndarray, np.ndarray]:
        """prompt -> (ids [max_length] int64, mask [max_length] bool)."""
        ids = ([self.bos_id] + list(self.processor.encode(prompt)))[: self.max_length]
        tokens = np.full(self.max_length, self.pad_id, dtype=np.int64)
        tokens[: len(ids)] = ids
        mask = np.zeros(self.max_length, dtype=bool)
        mask[: len(ids)] = True
        return tokens, mask


def tokenizer_from_json(tokenizer_json: bytes):
    """A `tokenizers.Tokenizer` from a bundle's tokenizer.json; a file it cannot read is a one-line ValueError."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(bytes(tokenizer_json).decode("utf-8"))
    except Exception as error:  # tokenizers raises its own exception type, decoding a UnicodeDecodeError
        raise ValueError(f"tokenizer is not a valid tokenizer.json: {str(error).splitlines()[0]}") from None
