"""pi0-FAST's text around the model: the prompt it reads, the PaliGemma ids its decoding needs, and
the way from generated PaliGemma ids to an action chunk (LeRobot's `detokenize_actions`).

Prompt: "Task: {cleaned task}, State: {bin bin ...};\n" with pi0.5's cleaning and state bins
(models/pi05/prompt.py), tokenized as [bos] + pieces, right-padded; the model appends one more bos
after the padding, where decoding starts.

Generated ids -> chunk, in LeRobot's order:
  1. with validate_action_token_prefix, the sequence must start with the pieces "Action", ":"
     (LeRobot raises otherwise; here the chunk falls back to zeros)
  2. cut at the first "|" (end of action); remove every occurrence of the ids of "Action: "
  3. PaliGemma id p -> FAST token vocab_size - 1 - fast_skip_tokens - p
  4. FAST tokens -> quantized DCT coefficients [H, A] (cut or zero-padded) -> inverse DCT -> actions;
     an undecodable sequence (a token below 0) gives zeros, as LeRobot's fallback, and so does one
     with no action token (LeRobot pads no coefficient at all with zeros)
The generated ids are compared as LeRobot returns them: max_decoding_steps long, zeros after "|".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embodied_ros.heads.fast_tokens import dct_to_actions
from embodied_ros.models.pi0_fast.config import Pi0FastConfig, TokenIds
from embodied_ros.models.pi05.prompt import clean_task, discretize_state
from embodied_ros.sequence.tokenizer import PromptTokenizer

END_OF_ACTION, ACTION_PREFIX, ACTION_CHECK = "|", "Action: ", ("Action", ":")


def build_prompt(task: str, normalized_state: np.ndarray) -> str:
    bins = " ".join(str(int(b)) for b in discretize_state(normalized_state))
    return f"Task: {clean_task(task)}, State: {bins};\n"


def token_ids_of(tokenizer: PromptTokenizer) -> TokenIds:
    """The ids decoding reads, from the PaliGemma tokenizer (SentencePiece, as transformers' Gemma
    tokenizer: a piece it lacks is the unknown id)."""
    processor = tokenizer.processor

    def piece_id(piece: str) -> int:
        return processor.piece_to_id(piece) if processor.id_to_piece(processor.piece_to_id(piece)) == piece else -1

    return TokenIds(bos=tokenizer.bos_id, end_of_action=processor.piece_to_id(END_OF_ACTION),
                    action_prefix=tuple(processor.encode(ACTION_PREFIX)),
                    action_check=tuple(piece_id(piece) for piece in ACTION_CHECK), vocab_size=tokenizer.vocab_size)


@dataclass(frozen=True)
class DecodedChunk:
    """What one decoding gave: model-space actions [chunk, action_dim], the generated ids, and how they read."""

    actions: np.ndarray
    tokens: np.ndarray  # as generated, up to and including the end-of-action id
    stopped: bool  # the end-of-action id came within max_decoding_steps
    fallback: bool  # the ids were undecodable: the actions are LeRobot's zeros
    problem: str  # why the chunk is not an exact decoding ("" when it is)


def padded_tokens(tokens: np.ndarray, length: int) -> np.ndarray:
    """Generated ids as LeRobot returns them: `length` long, zeros after the last generated."""
    out = np.zeros(length, np.int64)
    out[: len(tokens)] = tokens
    return out


def _without(sequence: list[int], part: tuple[int, ...]) -> list[int]:
    if not part:
        return sequence
    kept, i = list(sequence), 0
    while i <= len(kept) - len(part):
        if tuple(kept[i:i + len(part)]) == part:
            del kept[i:i + len(part)]
        else:
            i += 1
    return kept


def detokenize(tokens: np.ndarray, config: Pi0FastConfig) -> DecodedChunk:
    """Generated PaliGemma ids -> the model-space chunk, as LeRobot's detokenize_actions."""
    ids, horizon, width = config.token_ids, config.chunk_size, config.action_dim
    sequence = padded_tokens(tokens, config.max_decoding_steps).tolist()
    stopped = ids.end_of_action in sequence[: len(tokens)]
    notes = [] if stopped else [f"no end-of-action token in {config.max_decoding_steps} steps"]

    def fallback(reason: str) -> DecodedChunk:
        return DecodedChunk(np.zeros((horizon, width), np.float32), tokens, stopped, True, "; ".join(notes + [reason]))

    if config.validate_action_token_prefix and (len(sequence) < 2 or tuple(sequence[:2]) != ids.action_check):
        return fallback("the tokens do not start with 'Action:': zero actions")
    if ids.end_of_action in sequence:
        sequence = sequence[: sequence.index(ids.end_of_action)]
    fast = ids.vocab_size - 1 - config.fast_skip_tokens - np.asarray(_without(sequence, ids.action_prefix), np.int64)
    coefficients, count = config.action_tokenizer.coefficients(fast, horizon, width)
    if coefficients is None:
        return fallback("a token lies outside the FAST vocabulary's ids: zero actions")
    if count == 0:
        return fallback("no action tokens: zero actions")
    if count != horizon * width:
        notes.append(f"{count} DCT coefficients for {horizon}x{width}: "
                     + ("zero-padded" if count < horizon * width else "cut"))
    actions = dct_to_actions(coefficients, config.action_tokenizer.scale)
    return DecodedChunk(actions, tokens, stopped, False, "; ".join(notes))
