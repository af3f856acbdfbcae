"""The runtime's tensor names for pi0-FAST, and how LeRobot's `PI0FastPolicy` parameter names map onto them.

SigLIP, projector and the Gemma LM are named as in pi0.5 (the shared naming is models/paligemma_save.py);
pi0-FAST adds what turns the LM's last hidden state into the next token:

    lm.final_norm.weight    [width]           the LM's final RMSNorm
    lm.output.weight        [vocab, width]    LeRobot's `paligemma.lm_head`; absent when it equals the
                                              token embeddings, which then serve as the output (tied)
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import gemma, siglip
from embodied_ros.models import paligemma_save as paligemma
from embodied_ros.models.pi0_fast.config import Pi0FastConfig

FAMILY = "pi0_fast"
TOKEN_EMBEDDING, OUTPUT, FINAL_NORM = "lm.token_embd", "lm.output.weight", "lm.final_norm.weight"

_PALIGEMMA = r"model\.paligemma_with_expert\.paligemma\."
_RULES = [(re.compile(pattern + "$"), name) for pattern, name in (
    (_PALIGEMMA + r"model\.language_model\.norm\.weight", FINAL_NORM),
    (_PALIGEMMA + r"lm_head\.weight", OUTPUT),
)] + paligemma.paligemma_rules([])  # pi0-FAST's own names first: the shared rules drop these two


def rename_lerobot(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """LeRobot `PI0FastPolicy.state_dict()` -> runtime names, projections not yet stacked; an output
    equal to the token embeddings is dropped (tied)."""
    renamed = paligemma.rename_lerobot(state_dict, _RULES, FAMILY)
    output, embedding = renamed.get(OUTPUT), renamed.get(TOKEN_EMBEDDING)
    if output is not None and embedding is not None and output.shape == embedding.shape \
            and np.array_equal(output, embedding):
        del renamed[OUTPUT]
    return renamed


def expected_shapes(config: Pi0FastConfig) -> dict[str, tuple[int, ...]]:
    v, lm = config.vision, config.lm
    shapes: dict[str, tuple[int, ...]] = {
        **siglip.tensor_shapes(v, "vision"),
        "projector.weight": (lm.width, v.width), "projector.bias": (lm.width,),
        TOKEN_EMBEDDING: (config.vocab_size, lm.width), FINAL_NORM: (lm.width,),
    }
    for i in range(lm.depth):
        shapes.update({f"lm.blk.{i}.{part}.weight": shape for part, shape in gemma.linear_shapes(lm).items()})
        for norm in ("attn_norm", "ffn_norm"):
            shapes[f"lm.blk.{i}.{norm}.weight"] = (lm.width,)
    return shapes


def check_weights(weights: Mapping[str, Any], config: Pi0FastConfig) -> None:
    """Every tensor present with its shape; the output, when stored, shaped as the token embeddings."""
    expected = expected_shapes(config)
    if OUTPUT in weights:
        expected[OUTPUT] = expected[TOKEN_EMBEDDING]
    paligemma.check_weights(weights, expected, FAMILY)


def is_linear_weight(name: str) -> bool:
    """Weights a matrix product reads (`ks.linear`), so they may be stored quantized and packed."""
    return name == OUTPUT or paligemma.is_linear_weight(name)


def tensor_group(name: str) -> str:
    """Groups as pi0.5's (vision, lm, embedding, heads); the output sits with the token embeddings."""
    return "embedding" if name == OUTPUT else paligemma.tensor_group(name)
