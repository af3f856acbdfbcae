"""The instruction as lerobot's LingBot-VA reads it: cleaned text -> T5 token ids -> UMT5 embeddings.

Cleaning: `html.unescape` twice, strip, every whitespace run -> one space. Tokens: the checkpoint's
SentencePiece unigram model (`tokenizer/spiece.model`, the model transformers' T5 tokenizer is built
from) + `</s>`, truncated to keep `</s>`, right-padded with 0 to `max_sequence_length`. The UMT5
encoder runs once per instruction; `PromptEncoder` keeps the last result.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np

from embodied_ros.backbone import umt5

EOS, PAD = 1, 0


def clean(text: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"lingbot_va: the instruction must be a string, got {type(text).__name__}")
    return re.sub(r"\s+", " ", html.unescape(html.unescape(text)).strip()).strip()


class T5Tokenizer:
    """SentencePiece pieces + `</s>`, padded/truncated to `length` tokens (ids, mask)."""

    def __init__(self, model: bytes | str | Path, length: int) -> None:
        import sentencepiece

        if length < 1:
            raise ValueError(f"lingbot_va: max_sequence_length must be positive, got {length}")
        proto = model if isinstance(model, bytes) else Path(model).read_bytes()
        self.processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        self.length = length

    @property
    def vocab_size(self) -> int:
        return self.processor.get_piece_size()

    def __call__(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        pieces = self.processor.encode(clean(text))[:self.length - 1] + [EOS]
        ids = np.full(self.length, PAD, np.int64)
        ids[:len(pieces)] = pieces
        mask = np.zeros(self.length, np.int64)
        mask[:len(pieces)] = 1
        return ids, mask


class PromptEncoder:
    """Instruction -> UMT5 embeddings [L, text_dim]; the encoder runs once per distinct instruction."""

    def __init__(self, ks, tokenizer: T5Tokenizer, cfg: umt5.UMT5Config, weights: umt5.UMT5Weights) -> None:
        self.ks, self.tokenizer, self.cfg, self.weights = ks, tokenizer, cfg, weights
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, text: str) -> np.ndarray:
        key = clean(text)
        if key not in self._cache:
            ids, mask = self.tokenizer(key)
            self._cache = {key: umt5.encode(self.ks, self.cfg, self.weights, ids, mask)}
        return self._cache[key]
