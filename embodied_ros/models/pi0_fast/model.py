"""pi0-FAST assembled from its layers, in model space (token ids in, normalized actions out).

    image_tokens(images, camera_mask)               SigLIP + projector, present cameras only
    build_prefix(image_tokens, camera_mask, tokens, token_mask)
                                                    -> FastPrefix: the LM's one pass over [images,
                                                       prompt, bos] into the prefix cache (every layer),
                                                       and bos's last hidden state
    decode(prefix)                                  greedy tokens, then LeRobot's detokenization

Decoding never writes the prefix cache: each call keeps the keys and values of the tokens it
generates in buffers of its own (`DecodeBuffers`), and every step attends to [cache layer i ; its own
rows of layer i]. Token t sits at position n_valid + t - 1 (the cache holds n_valid real rows, bos
last) and attends to every real prefix row and every token before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import gemma
from embodied_ros.backbone.paligemma import PaliGemmaPrefix, take_rows
from embodied_ros.backbone.prefix_cache import PrefixCache
from embodied_ros.heads.fast_tokens import greedy_tokens
from embodied_ros.kernels.rope import rope_tables
from embodied_ros.models.pi0_fast.config import Pi0FastConfig
from embodied_ros.models.pi0_fast.tokens import DecodedChunk, detokenize
from embodied_ros.models.pi0_fast.weights import FINAL_NORM, OUTPUT, TOKEN_EMBEDDING, check_weights, is_linear_weight


@dataclass(frozen=True, eq=False)
class FastPrefix:
    cache: PrefixCache  # every LM layer's keys and values of the real prefix rows
    last_hidden: np.ndarray  # [D] the last layer's output at bos (before the final norm)


class DecodeBuffers:
    """The keys and values of one decoding's own tokens, [layers, max_steps, kv_heads, head_dim]."""

    def __init__(self, layers: int, steps: int, kv_heads: int, head_dim: int) -> None:
        self.keys = np.empty((layers, steps, kv_heads, head_dim), np.float32)
        self.values = np.empty_like(self.keys)


class Pi0FastModel(PaliGemmaPrefix):
    def __init__(self, config: Pi0FastConfig, weights: Mapping[str, Any], backend: str = "numba") -> None:
        check_weights(weights, config)
        super().__init__(config, weights, backend, is_linear_weight)
        self.output = self.weights.get(OUTPUT, self.weights[TOKEN_EMBEDDING])

    def warm_up(self) -> None:
        """A one-camera prefix and two decoding steps: compiles every kernel the stages run."""
        cfg = self.config
        images = np.zeros((len(cfg.camera_names), 3, cfg.vision.image_size, cfg.vision.image_size), np.float32)
        camera_mask = np.arange(len(cfg.camera_names)) == 0
        prefix = self.build_prefix(self.image_tokens(images, camera_mask), camera_mask, np.zeros(1, np.int64),
                                   np.ones(1, bool))
        self.generate(prefix, max_steps=2)

    # ---- prefix ----------------------------------------------------------------------------

    def build_prefix(self, image_tokens: np.ndarray, camera_mask: np.ndarray, tokens: np.ndarray,
                     token_mask: np.ndarray, stamp_ns: int = 0, compact: bool = True) -> FastPrefix:
        """Prompt ids [L] (bos first, padded) + mask -> the prefix with bos appended after the padding."""
        tokens = np.append(np.asarray(tokens, np.int64), self.config.token_ids.bos)
        token_mask = np.append(np.asarray(token_mask, bool), True)
        cache, hidden = self.prefix_pass(image_tokens, camera_mask, tokens, token_mask, stamp_ns, compact,
                                         full_lm=True)
        return FastPrefix(cache, hidden[-1].copy())

    @staticmethod
    def prefix_from_tensors(tensors: Mapping[str, np.ndarray], stamp_ns: int = 0) -> FastPrefix:
        if "last_hidden" not in tensors:
            raise ValueError(f"pi0_fast prefix tensors lack 'last_hidden'; got {sorted(tensors)}")
        return FastPrefix(PrefixCache.from_tensors(tensors, stamp_ns), np.asarray(tensors["last_hidden"]))

    # ---- decoding --------------------------------------------------------------------------

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """LM output rows [n, D] (before the final norm) -> logits [n, vocab]."""
        return self.ks.linear(self.ks.rms_norm(hidden, self.weights[FINAL_NORM], self.config.lm.eps), self.output)

    def token_step(self, prefix: FastPrefix, buffers: DecodeBuffers, token: int, index: int) -> np.ndarray:
        """Generated token `index` through every layer, its keys and values into row `index` of the
        buffers -> its output [1, D]."""
        lm, cache = self.config.lm, prefix.cache
        x = take_rows(self.weights[TOKEN_EMBEDDING], np.array([token])) * np.float32(self.config.embed_scale)
        cos, sin = rope_tables(np.array([cache.n_valid + index]), lm.head_dim, lm.rope_theta)
        for layer, w in enumerate(self.lm_layers):
            queries, keys, values = gemma.project_qkv(self.ks, lm, w, self.ks.rms_norm(x, w["attn_norm.weight"],
                                                                                       lm.eps), cos, sin)
            buffers.keys[layer, index], buffers.values[layer, index] = keys[0], values[0]
            attended = self.ks.cached_attention(queries, cache.keys[layer], cache.values[layer], cache.key_bias,
                                                buffers.keys[layer, : index + 1], buffers.values[layer, : index + 1])
            x = x + gemma.attention_output(self.ks, w, attended)
            x = x + gemma.feed_forward(self.ks, w, self.ks.rms_norm(x, w["ffn_norm.weight"], lm.eps))
        return x

    def generate(self, prefix: FastPrefix, max_steps: int | None = None) -> np.ndarray:
        """Greedy ids after the prefix, up to and including the end-of-action id (at most max_steps)."""
        cfg = self.config
        max_steps = cfg.max_decoding_steps if max_steps is None else max_steps
        if prefix.cache.num_layers != cfg.lm.depth:
            raise ValueError(f"prefix cache has {prefix.cache.num_layers} layers, the LM has {cfg.lm.depth}")
        buffers = DecodeBuffers(cfg.lm.depth, max_steps, cfg.lm.num_kv_heads, cfg.lm.head_dim)
        first = self.logits(prefix.last_hidden[None, :])[0]
        return greedy_tokens(first, lambda token, index: self.logits(self.token_step(prefix, buffers, token, index))[0],
                             cfg.token_ids.end_of_action, max_steps)

    def decode(self, prefix: FastPrefix) -> DecodedChunk:
        """Greedy decoding over the prefix, then the tokens read as an action chunk (model space)."""
        return detokenize(self.generate(prefix), self.config)
