"""SmolVLA assembled from its layers, in model space (no tokenizer, no normalization).

    image_tokens(images, image_mask)                    SmolVLM vision + connector, valid slots only
    build_prefix(image_tokens, image_mask, tokens, token_mask, state)  -> PrefixCache (one VLM pass)
    sample_actions(cache, noise)                        Euler solve, every step reads the cache

Prefix = [image tokens * sqrt(D) per slot, language embeddings * sqrt(D), state_in(state)]; its
valid rows read each other, except that only the state token reads the state token; positions are
cumsum(valid) - 1. The compacted form (default) drops every invalid row (padding image slots,
padding tokens) before the VLM runs; the masked form runs every row as the reference does and is
the test oracle (`compact=False`). A masked score gets a large negative bias added (the reference
replaces it by the float32 minimum: the same softmax, since every row keeps a valid key).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import llama, smolvlm
from embodied_ros.backbone.paligemma import stack_layers
from embodied_ros.backbone.prefix_cache import PrefixCache, PrefixCacheBuilder
from embodied_ros.heads import flow, interleaved_expert, rtc
from embodied_ros.heads.flow import time_embedding
from embodied_ros.heads.interleaved_expert import ExpertLayer
from embodied_ros.kernels import KernelSet, release_pages, reuse_freed_memory
from embodied_ros.kernels.attention import MASKED
from embodied_ros.kernels.linear import pack_for_products
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.models.smolvla.config import SmolVLAConfig
from embodied_ros.models.smolvla.weights import check_weights, is_linear_weight


def prepare_weights(weights: Mapping[str, Any], pack: bool = False) -> dict[str, Any]:
    """float32 C-contiguous arrays (memory-mapped float32 kept as is); quantized matrices stay
    QuantTensors, other quantized tensors are expanded; with `pack`, the products' matrices are
    copied once into the layout the CPU product reads (`pack_for_products`: float32 panels, bf16 pair
    panels, int8 panels) and the stored form's mapped pages are handed back."""
    prepared = {}
    for name, weight in weights.items():
        if isinstance(weight, QuantTensor):
            stored = weight if is_linear_weight(name) else weight.dequantize()
        else:
            stored = np.ascontiguousarray(weight, dtype=np.float32)
        if pack and is_linear_weight(name) and name != "lm.token_embd":
            packed = pack_for_products(stored)
            if packed is not stored:
                release_pages(stored.data if isinstance(stored, QuantTensor) else stored)
            stored = packed
        prepared[name] = stored
    return prepared


def prefix_attention_bias(valid: np.ndarray) -> np.ndarray:
    """[n] validity of a prefix whose last row is the state token -> [n, n] additive bias: query i
    reads key j iff both are valid and (j is not the state token or i is)."""
    allowed = valid[:, None] & valid[None, :]
    allowed[:-1, -1] = False
    return np.where(allowed, np.float32(0.0), MASKED).astype(np.float32)


class SmolVLAModel:
    def __init__(self, config: SmolVLAConfig, weights: Mapping[str, Any], backend: str = "numba") -> None:
        check_weights(weights, config)
        self.config = config
        self.ks = KernelSet(backend)
        reuse_freed_memory()
        self.weights = prepare_weights(weights, pack=backend == "numba")
        self.vision_layers = stack_layers(self.weights, "vision", config.vision.depth)
        self.lm_layers = stack_layers(self.weights, "lm", config.lm.depth)
        self.expert_layers = [ExpertLayer(kind, vlm_layer, w) for (kind, vlm_layer), w in
                              zip(config.layer_plan, stack_layers(self.weights, "expert", config.expert.depth))]
        # the VLM layers the expert reads; layers after the last of them never affect the actions
        self.cache_layers = max(layer.vlm_layer for layer in self.expert_layers) + 1
        self.time_embeddings = tuple(time_embedding(t, config.expert.width, config.time_min_period,
                                                    config.time_max_period)
                                     for t in flow.euler_times(config.num_inference_steps))

    def warm_up(self) -> None:
        """One small pass through every stage so that numba compiles each kernel for the argument
        types the model really passes before the first observation arrives."""
        cfg = self.config
        images = np.zeros((1, 3, cfg.vision.image_size, cfg.vision.image_size), np.float32)
        mask = np.ones(1, bool)
        cache = self.build_prefix(self.image_tokens(images, mask), mask, np.zeros(2, np.int64),
                                  np.array([True, False]), np.zeros(cfg.state_dim, np.float32))
        self.sample_actions(cache, np.zeros((cfg.chunk_size, cfg.max_action_dim), np.float32))

    # ---- perception ------------------------------------------------------------------------

    def image_tokens(self, images: np.ndarray, image_mask: np.ndarray | None = None) -> np.ndarray:
        """[S, 3, H, W] in [-1, 1] -> [S, T, D] connector output; slots masked False are skipped (zeros)."""
        cfg = self.config.vision
        image_mask = np.ones(images.shape[0], bool) if image_mask is None else np.asarray(image_mask, bool)
        out = np.zeros((images.shape[0], cfg.tokens_per_image, self.config.lm.width), np.float32)
        if image_mask.any():
            out[image_mask] = smolvlm.image_tokens(self.ks, cfg, self.weights, self.vision_layers,
                                                   images[image_mask])
        return out

    # ---- prefix ----------------------------------------------------------------------------

    def state_token(self, state: np.ndarray) -> np.ndarray:
        cfg = self.config
        state = np.asarray(state, dtype=np.float32).reshape(-1)
        if state.size > cfg.max_state_dim:
            raise ValueError(f"state has {state.size} values, more than max_state_dim {cfg.max_state_dim}")
        padded = np.zeros((1, cfg.max_state_dim), np.float32)
        padded[0, : state.size] = state
        return self.ks.linear(padded, self.weights["state_in.weight"], self.weights["state_in.bias"])

    def prefix_embeddings(self, image_tokens: np.ndarray, tokens: np.ndarray, state: np.ndarray) -> np.ndarray:
        """[S, T, D] image tokens, [L] token ids, state -> [S*T + L + 1, D] prefix rows."""
        ids = np.asarray(tokens, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"token ids must lie in 0..{self.config.vocab_size - 1}, got {ids.min()}..{ids.max()}")
        table = self.weights["lm.token_embd"]
        language = table.take_rows(ids) if isinstance(table, QuantTensor) else np.asarray(table[ids], np.float32)
        scale = np.float32(self.config.embed_scale)
        images = image_tokens.reshape(-1, image_tokens.shape[-1]) * scale
        return np.concatenate([images, language * scale, self.state_token(state)])

    def build_prefix(self, image_tokens: np.ndarray, image_mask: np.ndarray, tokens: np.ndarray,
                     token_mask: np.ndarray, state: np.ndarray, stamp_ns: int = 0,
                     compact: bool = True) -> PrefixCache:
        return self.prefix_pass(image_tokens, image_mask, tokens, token_mask, state, stamp_ns, compact)[0]

    def prefix_pass(self, image_tokens: np.ndarray, image_mask: np.ndarray, tokens: np.ndarray,
                    token_mask: np.ndarray, state: np.ndarray, stamp_ns: int = 0, compact: bool = True,
                    full_lm: bool = False) -> tuple[PrefixCache, np.ndarray]:
        """The one VLM pass of an observation -> (sealed cache, hidden states of the last layer run).

        With `full_lm` every kept VLM layer runs to its end (the reference's last-layer tap);
        otherwise only the layers the expert reads run, the last of them up to its K/V.
        """
        lm = self.config.lm
        x = self.prefix_embeddings(image_tokens, tokens, state)
        slots = np.repeat(np.asarray(image_mask, bool), self.config.vision.tokens_per_image)
        valid = np.concatenate([slots, np.asarray(token_mask, bool), [True]])
        if valid.shape[0] != x.shape[0]:
            raise ValueError(f"prefix has {x.shape[0]} rows but its masks describe {valid.shape[0]}")
        if compact:
            x, valid = x[valid], valid[valid]
        positions = np.cumsum(valid) - 1
        layers = self.lm_layers if full_lm else self.lm_layers[: self.cache_layers]
        builder = PrefixCacheBuilder.allocate(len(layers), x.shape[0], lm.num_kv_heads, lm.head_dim)
        hidden = llama.prefix_pass(self.ks, lm, layers, x, llama.rope_tables(positions, lm.head_dim, lm.rope_theta),
                                   prefix_attention_bias(valid), builder, full_last_layer=full_lm)
        return builder.seal(valid, stamp_ns), hidden

    cache_from_tensors = staticmethod(PrefixCache.from_tensors)

    # ---- actions ---------------------------------------------------------------------------

    def suffix_context(self, cache: PrefixCache) -> interleaved_expert.SuffixContext:
        if cache.num_layers < self.cache_layers:
            raise ValueError(f"prefix cache has {cache.num_layers} layers, the expert reads {self.cache_layers}")
        return interleaved_expert.suffix_context(self.ks, self.config.expert, self.expert_layers, cache,
                                                 self.config.chunk_size)

    def velocity(self, cache: PrefixCache, x_t: np.ndarray, step: int,
                 context: interleaved_expert.SuffixContext | None = None) -> np.ndarray:
        context = self.suffix_context(cache) if context is None else context
        return interleaved_expert.velocity(self.ks, self.config.expert, self.weights, self.expert_layers, cache,
                                           context, x_t, self.time_embeddings[step])

    def sample_actions(self, cache: PrefixCache, noise: np.ndarray,
                       guidance: rtc.Guidance | None = None) -> np.ndarray:
        """noise x(t=1) [C, A] -> x(t=0) [C, A] (model space, padded action width); `guidance` steers
        each step's velocity (real-time chunking, heads/rtc.py)."""
        expected = (self.config.chunk_size, self.config.max_action_dim)
        noise = np.asarray(noise, dtype=np.float32)
        if noise.shape != expected:
            raise ValueError(f"noise must have shape {expected} (chunk, max_action_dim), got {noise.shape}")
        context = self.suffix_context(cache)
        return flow.euler_solve(lambda x, step: self.velocity(cache, x, step, context), noise,
                                self.config.num_inference_steps, guidance=guidance)
