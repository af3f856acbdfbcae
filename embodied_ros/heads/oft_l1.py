"""OpenVLA-OFT's parallel-decoding action head with L1 regression, and its proprio projector.

OFT decodes a whole action chunk in one forward pass of the LM: chunk x action_dim placeholder
tokens (zero embeddings) follow the prompt, every token reads every other (bidirectional), and the
LM's final hidden states *one position before* each placeholder feed the head. Action step c reads
the action_dim consecutive hidden states of its placeholders, concatenated:

    h  [chunk, action_dim * D]
    x = relu(fc_in(LN_in(h)))                          LN: LayerNorm, eps 1e-5, with bias
    x = x + relu(fc_i(LN_i(x)))    for each block i    (OFT's MLPResNet: 2 blocks, pre-LN)
    actions = fc_out(LN_out(x))    [chunk, action_dim] normalized actions (in about [-1, 1])

The proprio projector maps the normalized robot state into one LM token:
    token = fc2(gelu(fc1(state)))                      gelu: the exact (erf) form

Runtime tensor names (`head.`, `proprio.` prefixes) and OFT's (`model.` inside the head's state dict):

    head.ln_in.{weight,bias}        model.layer_norm1.*
    head.fc_in.{weight,bias}        model.fc1.*                          [D, action_dim * D]
    head.blk.{i}.ln.{weight,bias}   model.mlp_resnet_blocks.{i}.ffn.0.*
    head.blk.{i}.fc.{weight,bias}   model.mlp_resnet_blocks.{i}.ffn.1.*  [D, D]
    head.ln_out.{weight,bias}       model.layer_norm2.*
    head.fc_out.{weight,bias}       model.fc2.*                          [action_dim, D]
    proprio.fc1.{weight,bias}       fc1.*                                [D, proprio_dim]
    proprio.fc2.{weight,bias}       fc2.*                                [D, D]
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

LN_EPS = 1e-5  # torch.nn.LayerNorm's default, which OFT's head keeps

_HEAD_RULES = ((r"model\.layer_norm1\.(weight|bias)", r"head.ln_in.\1"), (r"model\.fc1\.(weight|bias)", r"head.fc_in.\1"),
               (r"model\.mlp_resnet_blocks\.(\d+)\.ffn\.0\.(weight|bias)", r"head.blk.\1.ln.\2"),
               (r"model\.mlp_resnet_blocks\.(\d+)\.ffn\.1\.(weight|bias)", r"head.blk.\1.fc.\2"),
               (r"model\.layer_norm2\.(weight|bias)", r"head.ln_out.\1"), (r"model\.fc2\.(weight|bias)", r"head.fc_out.\1"))
_PROPRIO_RULES = ((r"fc([12])\.(weight|bias)", r"proprio.fc\1.\2"),)


def _renamed(state_dict: Mapping[str, Any], rules, what: str) -> dict[str, np.ndarray]:
    renamed = {}
    for name, value in state_dict.items():
        name = name[len("module."):] if name.startswith("module.") else name  # saved from a DDP wrapper
        for pattern, replacement in rules:
            if re.fullmatch(pattern, name):
                renamed[re.sub(pattern, replacement, name)] = np.asarray(value)
                break
        else:
            raise ValueError(f"{what}: unexpected tensor {name!r}")
    return renamed


def head_weights(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """OFT's L1RegressionActionHead state dict -> runtime names."""
    return _renamed(state_dict, _HEAD_RULES, "action head")


def proprio_weights(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """OFT's ProprioProjector state dict -> runtime names."""
    return _renamed(state_dict, _PROPRIO_RULES, "proprio projector")


def head_blocks(weights: Mapping[str, Any]) -> int:
    return len({name.split(".")[2] for name in weights if name.startswith("head.blk.")})


def head_shapes(width: int, action_dim: int, blocks: int) -> dict[str, tuple[int, ...]]:
    shapes = {"head.ln_in.weight": (action_dim * width,), "head.ln_in.bias": (action_dim * width,),
              "head.fc_in.weight": (width, action_dim * width), "head.fc_in.bias": (width,),
              "head.ln_out.weight": (width,), "head.ln_out.bias": (width,),
              "head.fc_out.weight": (action_dim, width), "head.fc_out.bias": (action_dim,)}
    for i in range(blocks):
        shapes.update({f"head.blk.{i}.ln.weight": (width,), f"head.blk.{i}.ln.bias": (width,),
                       f"head.blk.{i}.fc.weight": (width, width), f"head.blk.{i}.fc.bias": (width,)})
    return shapes


def proprio_shapes(width: int, proprio_dim: int) -> dict[str, tuple[int, ...]]:
    return {"proprio.fc1.weight": (width, proprio_dim), "proprio.fc1.bias": (width,),
            "proprio.fc2.weight": (width, width), "proprio.fc2.bias": (width,)}


def slot_rows(prompt_length: int, chunk: int, action_dim: int) -> np.ndarray:
    """Positions of the hidden states the head reads: one before each placeholder, the placeholders
    starting right after a prompt of `prompt_length` tokens."""
    return np.arange(prompt_length - 1, prompt_length - 1 + chunk * action_dim)


def actions(ks, weights: Mapping[str, Any], hidden: np.ndarray, chunk: int, action_dim: int) -> np.ndarray:
    """hidden [chunk * action_dim, D] (the slot rows, in order) -> normalized actions [chunk, action_dim]."""
    x = np.ascontiguousarray(hidden, dtype=np.float32).reshape(chunk, -1)
    x = ks.layer_norm(x, weights["head.ln_in.weight"], weights["head.ln_in.bias"], LN_EPS)
    x = np.maximum(ks.linear(x, weights["head.fc_in.weight"], weights["head.fc_in.bias"]), np.float32(0.0))
    for i in range(head_blocks(weights)):
        h = ks.layer_norm(x, weights[f"head.blk.{i}.ln.weight"], weights[f"head.blk.{i}.ln.bias"], LN_EPS)
        x = x + np.maximum(ks.linear(h, weights[f"head.blk.{i}.fc.weight"], weights[f"head.blk.{i}.fc.bias"]),
                           np.float32(0.0))
    x = ks.layer_norm(x, weights["head.ln_out.weight"], weights["head.ln_out.bias"], LN_EPS)
    return ks.linear(x, weights["head.fc_out.weight"], weights["head.fc_out.bias"]).reshape(chunk, action_dim)


def proprio_token(ks, weights: Mapping[str, Any], state: np.ndarray) -> np.ndarray:
    """Normalized state [proprio_dim] -> its LM token [D]."""
    h = ks.linear(np.asarray(state, dtype=np.float32).reshape(1, -1), weights["proprio.fc1.weight"],
                  weights["proprio.fc1.bias"])
    return ks.linear(ks.gelu_erf(h), weights["proprio.fc2.weight"], weights["proprio.fc2.bias"])[0]
