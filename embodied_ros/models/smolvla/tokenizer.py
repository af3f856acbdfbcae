"""Task-text tokenization with the Hugging Face tokenizer.json carried in the bundle.

Matches LeRobot's TokenizerProcessorStep for SmolVLA (a transformers fast tokenizer called with
max_length, truncation and right padding): ids = the tokenizer's encoding with its own special
tokens, truncated to max_length, right-padded; the mask marks the leading valid ids. Padding ids are
never read (masked), so the pad id is the tokenizer's own or 0.
"""

from __future__ import annotations

import numpy as np

from embodied_ros.sequence.tokenizer import tokenizer_from_json


class SmolVLATokenizer:
    add_special_tokens = True  # the tokenizer's own (its post-processor's) around the text
    def __init__(self, tokenizer_json: bytes, max_length: int) -> None:
        if max_length < 1:
            raise ValueError(f"tokenizer max_length must be positive, got {max_length}")
        self.tokenizer = tokenizer_from_json(tokenizer_json)
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.max_length = max_length
        padding = self.tokenizer.padding
        self.pad_id = int(padding["pad_id"]) if padding else 0

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """text -> (ids [max_length] int64, mask [max_length] bool)."""
        ids = self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens).ids[: self.max_length]
        tokens = np.full(self.max_length, self.pad_id, dtype=np.int64)
        tokens[: len(ids)] = ids
        mask = np.zeros(self.max_length, dtype=bool)
        mask[: len(ids)] = True
        return tokens, mask
