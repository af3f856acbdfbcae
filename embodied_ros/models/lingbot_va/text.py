"""Instruction text -> token ids: a small SentencePiece BPE model trained when a checkpoint is made.

LingBot-VA reads the instruction through umT5 (4096-wide token features). This runtime has no text
encoder: a SentencePiece model, trained on a corpus of robot instructions when the checkpoint is
generated, splits the instruction into pieces, and a learned table maps each piece to a
`text_dim`-wide feature (the umT5 stand-in) before Wan's text embedder. The model's serialized
bytes travel inside the checkpoint (`tokenizer.model`) and the bundle, so tokenization at run time
needs nothing else. Text is case-folded (NFKC + lowercase) before splitting; unknown characters map
to the unknown piece (id 0).
"""

from __future__ import annotations

import io
import itertools

import numpy as np
import sentencepiece

_VERBS = ("pick up", "put down", "push", "lift", "move", "grasp", "place", "hand over", "stack", "wipe",
          "open", "close", "pour water into", "press", "fold", "turn")
_OBJECTS = ("red block", "blue cup", "green bottle", "yellow bowl", "towel", "drawer", "plate", "hammer",
            "shoe", "phone", "kettle", "button", "box lid", "mug")
_PLACES = ("", " on the table", " into the box", " next to the plate", " with the left arm",
           " with the right arm", " and put it in the basket")


def instruction_corpus() -> list[str]:
    """Robot-manipulation instructions the tokenizer is trained on (every verb x object x place)."""
    return [f"{verb} the {obj}{place}" for verb, obj, place in itertools.product(_VERBS, _OBJECTS, _PLACES)]


def train_tokenizer(sentences: list[str], vocab_size: int) -> bytes:
    """A SentencePiece BPE model with exactly `vocab_size` pieces; same sentences -> same bytes."""
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size, model_type="bpe",
            character_coverage=1.0, normalization_rule_name="nmt_nfkc_cf", bos_id=-1, eos_id=-1,
            num_threads=1, minloglevel=2)
    except RuntimeError as error:
        raise ValueError(f"cannot train a {vocab_size}-piece tokenizer on {len(sentences)} sentences: {error}") from None
    return model.getvalue()


class Tokenizer:
    """Token ids of an instruction, at most `max_tokens` of them (longer text is cut at the end)."""

    def __init__(self, model: bytes, max_tokens: int) -> None:
        self._processor = sentencepiece.SentencePieceProcessor(model_proto=bytes(model))
        self.vocab_size = self._processor.get_piece_size()
        self.max_tokens = max_tokens

    def encode(self, instruction: str) -> np.ndarray:
        if not isinstance(instruction, str):
            raise ValueError(f"instruction must be text, got {type(instruction).__name__}")
        ids = self._processor.encode(instruction)[: self.max_tokens]
        return np.asarray(ids, dtype=np.int64)
