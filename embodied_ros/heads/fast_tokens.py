"""Autoregressive action tokens: greedy decoding, and the FAST action tokenizer's way back from
tokens to an action chunk (Pertsch et al. 2025, "FAST: Efficient Action Tokenization").

    greedy_tokens(first_logits, next_logits, stop_id, max_steps)   ids, argmax at every step
    FastTokenizer.coefficients(ids, horizon, action_dim)            BPE ids -> quantized DCT [H, A]
    dct_to_actions(coefficients, scale)                             inverse DCT per action column

FAST encodes a chunk [H, A] as round(scale * DCT-II_ortho(chunk, over time)), flattened row-major
(time major), each value v written as the character chr(v - min_token); byte-level BPE then merges
those characters' UTF-8 bytes into tokens. Decoding concatenates the tokens' bytes, reads them back
as UTF-8 (an invalid sequence becomes U+FFFD, as Rust's `from_utf8_lossy` has it), and takes
ord(c) + min_token per character. A token sequence of any length decodes ("relaxed"): the values are
cut or zero-padded to H * A. The tokenizer's state is a table of each id's bytes, plain data a
bundle carries (`plain()` / `FastTokenizer(**plain)`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import numpy as np


def greedy_tokens(first_logits: np.ndarray, next_logits: Callable[[int, int], np.ndarray], stop_id: int,
                  max_steps: int) -> np.ndarray:
    """Greedy decoding: token t = argmax of its logits (the first index of the largest); the first
    from `first_logits`, token t + 1 from `next_logits(token t, t)`. Stops after `stop_id` or after
    `max_steps` tokens; returns the ids generated (int64, the stop id included)."""
    tokens = [int(np.argmax(first_logits))]
    while tokens[-1] != stop_id and len(tokens) < max_steps:
        tokens.append(int(np.argmax(next_logits(tokens[-1], len(tokens) - 1))))
    return np.asarray(tokens, np.int64)


def _byte_of_char() -> dict[str, int]:
    """Byte-level BPE's alphabet: the printable bytes stand for themselves, the other 68 are
    shifted to the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(others)}}


BYTE_OF_CHAR = _byte_of_char()


def byte_level_bytes(token: str) -> bytes:
    """What the byte-level decoder makes of one token: its characters' bytes, or, when one of its
    characters is outside the alphabet, the token's own UTF-8."""
    if all(c in BYTE_OF_CHAR for c in token):
        return bytes(BYTE_OF_CHAR[c] for c in token)
    return token.encode("utf-8")


# transformers' clean_up_tokenization, applied by a tokenizer saved with clean_up_tokenization_spaces
_SPACE_CLEAN_UPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                    (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


@dataclass(frozen=True)
class FastTokenizer:
    """A FAST action tokenizer's decoding state, as plain values.

    scale         the DCT coefficients' quantization scale
    min_token     the smallest quantized coefficient (character 0)
    token_bytes   per BPE id, its bytes as hex ("" for an id the vocabulary lacks)
    clean_up_spaces  the tokenizer's clean_up_tokenization_spaces setting
    """

    scale: float
    min_token: int
    token_bytes: tuple[str, ...]
    clean_up_spaces: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_bytes", tuple(self.token_bytes))
        if not self.scale > 0:
            raise ValueError(f"FAST tokenizer scale must be positive, got {self.scale}")
        if not self.token_bytes:
            raise ValueError("FAST tokenizer has an empty vocabulary")

    @classmethod
    def from_tokenizer_json(cls, text: str, scale: float, min_token: int,
                            clean_up_spaces: bool = False) -> "FastTokenizer":
        """From a Hugging Face tokenizer.json of a byte-level BPE (what FAST's processor holds)."""
        spec = json.loads(text)
        model, decoder = spec.get("model") or {}, spec.get("decoder") or {}
        if model.get("type") != "BPE" or decoder.get("type") != "ByteLevel":
            raise ValueError(f"FAST tokenizer must be a byte-level BPE, got model {model.get('type')!r} "
                             f"and decoder {decoder.get('type')!r}")
        pieces = {int(i): token for token, i in model["vocab"].items()}
        pieces.update({int(added["id"]): added["content"] for added in spec.get("added_tokens") or ()})
        table = [""] * (max(pieces) + 1)
        for index, token in pieces.items():
            table[index] = byte_level_bytes(token).hex()
        return cls(float(scale), int(min_token), tuple(table), bool(clean_up_spaces))

    def plain(self) -> dict[str, Any]:
        return {"scale": self.scale, "min_token": self.min_token, "token_bytes": list(self.token_bytes),
                "clean_up_spaces": self.clean_up_spaces}

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes)

    @cached_property
    def _bytes(self) -> tuple[bytes, ...]:
        return tuple(bytes.fromhex(token) for token in self.token_bytes)

    def text(self, ids: np.ndarray) -> str | None:
        """The decoded string of BPE ids; ids past the vocabulary decode to nothing, and a negative id
        makes the sequence undecodable (None), as the reference's tokenizer raises on it."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if ids.size and ids.min() < 0:
            return None
        table = self._bytes
        text = b"".join(table[i] for i in ids.tolist() if i < len(table)).decode("utf-8", errors="replace")
        if self.clean_up_spaces:
            for spaced, joined in _SPACE_CLEAN_UPS:
                text = text.replace(spaced, joined)
        return text

    def coefficients(self, ids: np.ndarray, horizon: int, action_dim: int) -> tuple[np.ndarray | None, int]:
        """BPE ids -> (quantized DCT coefficients [horizon, action_dim] int64, cut or zero-padded to
        that size; None when undecodable) and the number of coefficients the ids held."""
        text = self.text(ids)
        if text is None:
            return None, 0
        values = np.fromiter((ord(c) for c in text), np.int64, len(text)) + self.min_token
        flat = np.zeros(horizon * action_dim, np.int64)
        flat[: min(values.size, flat.size)] = values[: flat.size]
        return flat.reshape(horizon, action_dim), int(values.size)


def idct_matrix(horizon: int) -> np.ndarray:
    """[H, H] float64 M with x = M @ X the orthonormal inverse DCT-II (the DCT-III) along time."""
    n, k = np.arange(horizon)[:, None], np.arange(horizon)[None, :]
    weights = np.where(k == 0, np.sqrt(1.0 / horizon), np.sqrt(2.0 / horizon))
    return weights * np.cos(np.pi * k * (2 * n + 1) / (2 * horizon))


def dct_to_actions(coefficients: np.ndarray, scale: float) -> np.ndarray:
    """Quantized coefficients [H, A] -> the action chunk [H, A] float32 (computed in float64, as the
    reference's scipy `idct(norm="ortho")`)."""
    coefficients = np.asarray(coefficients, np.float64)
    return (idct_matrix(coefficients.shape[0]) @ (coefficients / scale)).astype(np.float32)

