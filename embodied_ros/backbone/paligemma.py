"""The PaliGemma observation prefix shared by pi0 and pi0.5: SigLIP image tokens and language
tokens through the Gemma LM once, into the prefix K/V cache the action expert reads.

    image_tokens(images, camera_mask)                   SigLIP + projector, present cameras only
    build_prefix(image_tokens, camera_mask, tokens, token_mask)  -> PrefixCache (one LM pass)

Two prefix forms give the same actions: the compacted one (default) drops every padding row
(missing cameras, padding tokens) before the LM runs, so no work is spent on rows nobody reads;
the masked one runs every row with the bidirectional pad mask, exactly as the reference does, and
serves as the test oracle (`compact=False`).

A family's model derives from `PaliGemmaPrefix`; its config has `vision`, `lm`, `expert` (only
the expert's depth is read here: the LM layers past it are skipped), `vocab_size`,
`camera_names` and `embed_scale`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from embodied_ros.backbone import gemma, siglip
from embodied_ros.backbone.prefix_cache import PrefixCache, PrefixCacheBuilder
from embodied_ros.kernels import KernelSet, release_pages, reuse_freed_memory
from embodied_ros.kernels.linear import pack_for_products
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.kernels.rope import rope_tables
from embodied_ros.sequence import prefix as layout

TOKEN_EMBEDDING = "lm.token_embd"


def prepare_weights(weights: Mapping[str, Any], is_linear_weight: Callable[[str], bool],
                    pack: bool = False) -> dict[str, Any]:
    """Weights as the math reads them, each resident once: matrices a product reads (and the token
    embeddings) in their stored type (F32/F16 arrays, memory-mapped arrays kept as they are, or
    QuantTensors); other tensors as float32 (1-D norms, biases and small tables; a quantized one
    is expanded). With `pack`, the product's matrices are copied once into the layout the CPU
    product reads (`pack_for_products`: float32 panels, or bf16 pair panels for F16/BF16 weights
    where the CPU multiplies bf16), and the stored form's mapped pages are handed back, so that
    a weight is never resident twice."""
    prepared = {}
    for name, weight in weights.items():
        product = is_linear_weight(name)
        if not isinstance(weight, QuantTensor):
            weight = np.asarray(weight)  # a Stacked checkpoint tensor is concatenated here
        if isinstance(weight, QuantTensor):
            stored = weight if product or name == TOKEN_EMBEDDING else weight.dequantize()
        elif weight.dtype == np.float16 and (product or name == TOKEN_EMBEDDING):
            stored = weight
        else:
            stored = np.ascontiguousarray(weight, dtype=np.float32)
        if pack and product:
            packed = pack_for_products(stored)
            if packed is not stored:
                release_pages(stored.data if isinstance(stored, QuantTensor) else stored)
            stored = packed
        prepared[name] = stored
    return prepared


def take_rows(table: Any, ids: np.ndarray) -> np.ndarray:
    """Embedding lookup on a float array or a quantized table: [vocab, D], [n] -> [n, D] float32."""
    if isinstance(table, QuantTensor):
        return table.take_rows(ids)
    return np.asarray(table[ids], dtype=np.float32)


def stack_layers(weights: Mapping[str, Any], stack: str, depth: int) -> list[dict[str, Any]]:
    """Per layer i of `stack`, its tensors named without the `{stack}.blk.{i}.` prefix."""
    return [{name[len(f"{stack}.blk.{i}."):]: weight for name, weight in weights.items()
             if name.startswith(f"{stack}.blk.{i}.")} for i in range(depth)]


class PaliGemmaPrefix:
    def __init__(self, config: Any, weights: Mapping[str, Any], backend: str,
                 is_linear_weight: Callable[[str], bool]) -> None:
        self.config = config
        self.ks = KernelSet(backend)
        reuse_freed_memory()  # each step reuses the previous step's array memory (kernels/cpu/allocator.py)
        self.weights = prepare_weights(weights, is_linear_weight, pack=backend == "numba")
        self.vision_layers = stack_layers(self.weights, "vision", config.vision.depth)
        self.lm_layers = [gemma.with_kv_rows(config.lm, w)
                          for w in stack_layers(self.weights, "lm", config.lm.depth)]
        self.expert_layers = stack_layers(self.weights, "expert", config.expert.depth)

    def warm_up_prefix(self) -> PrefixCache:
        """A one-camera, one-token prefix: compiles (or loads) every prefix kernel for the argument
        types the model really passes, before the first observation arrives."""
        cfg = self.config
        images = np.zeros((len(cfg.camera_names), 3, cfg.vision.image_size, cfg.vision.image_size), np.float32)
        camera_mask = np.arange(len(cfg.camera_names)) == 0
        return self.prefix_pass(self.image_tokens(images, camera_mask), camera_mask, np.zeros(2, np.int64),
                                np.array([True, False]))[0]

    # ---- perception ------------------------------------------------------------------------

    def image_tokens(self, images: np.ndarray, camera_mask: np.ndarray | None = None) -> np.ndarray:
        """[N, 3, S, S] in [-1, 1] -> [N, T, LM width]; cameras masked False are skipped (zeros)."""
        cfg = self.config.vision
        camera_mask = np.ones(images.shape[0], bool) if camera_mask is None else np.asarray(camera_mask, bool)
        out = np.zeros((images.shape[0], cfg.tokens_per_camera, self.config.lm.width), np.float32)
        if camera_mask.any():
            out[camera_mask] = siglip.image_tokens(self.ks, cfg, self.weights, self.vision_layers, images[camera_mask])
        return out

    # ---- prefix ----------------------------------------------------------------------------

    def prefix_embeddings(self, image_tokens: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """[N, T, D] image tokens, [L] token ids -> [N*T + L, D] prefix (language scaled by sqrt(D))."""
        ids = np.asarray(tokens, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"token ids must lie in 0..{self.config.vocab_size - 1}, got {ids.min()}..{ids.max()}")
        language = take_rows(self.weights[TOKEN_EMBEDDING], ids) * np.float32(self.config.embed_scale)
        return np.concatenate([image_tokens.reshape(-1, image_tokens.shape[-1]), language])

    def build_prefix(self, image_tokens: np.ndarray, camera_mask: np.ndarray, tokens: np.ndarray,
                     token_mask: np.ndarray, stamp_ns: int = 0, compact: bool = True) -> PrefixCache:
        return self.prefix_pass(image_tokens, camera_mask, tokens, token_mask, stamp_ns, compact)[0]

    def prefix_pass(self, image_tokens: np.ndarray, camera_mask: np.ndarray, tokens: np.ndarray,
                    token_mask: np.ndarray, stamp_ns: int = 0, compact: bool = True,
                    full_lm: bool = False) -> tuple[PrefixCache, np.ndarray]:
        """The one LM pass of an observation -> (sealed cache, LM hidden states).

        With `full_lm` every LM layer runs to its end, the cache holds every layer and the hidden
        states are the last layer's output (the reference's pre-final-norm tap); otherwise only
        the layers the expert reads run, the last of them only up to its K/V.
        """
        lm = self.config.lm
        x = self.prefix_embeddings(image_tokens, tokens)
        pad = layout.prefix_pad_mask(camera_mask, self.config.vision.tokens_per_camera, token_mask)
        if pad.shape[0] != x.shape[0]:
            raise ValueError(f"prefix has {x.shape[0]} rows but its masks describe {pad.shape[0]}")
        if compact:
            x, pad = x[pad], pad[pad]
        positions = layout.position_ids(pad)
        layers = self.lm_layers if full_lm else self.lm_layers[: self.config.expert.depth]
        builder = PrefixCacheBuilder.allocate(len(layers), x.shape[0], lm.num_kv_heads, lm.head_dim)
        hidden = gemma.prefix_pass(self.ks, lm, layers, x, rope_tables(positions, lm.head_dim, lm.rope_theta),
                                   layout.attention_bias(pad), builder, full_last_layer=full_lm)
        return builder.seal(pad, stamp_ns), hidden

    cache_from_tensors = staticmethod(PrefixCache.from_tensors)

    def checked_noise(self, noise: np.ndarray, cache: PrefixCache) -> np.ndarray:
        expected = (self.config.chunk_size, self.config.max_action_dim)
        noise = np.asarray(noise, dtype=np.float32)
        if noise.shape != expected:
            raise ValueError(f"noise must have shape {expected} (chunk, max_action_dim), got {noise.shape}")
        if cache.num_layers < self.config.expert.depth:
            raise ValueError(f"prefix cache has {cache.num_layers} layers, the expert reads {self.config.expert.depth}")
        return noise
