"""SmolVLA on the GPU, whole chunk on the device: the model-space calls of models/smolvla/model.py.

    image_tokens(images, image_mask)                    SmolVLM vision + connector -> device [S, T, D]
    build_prefix(image_tokens, image_mask, tokens, token_mask, state, stamp_ns)
                                                        one VLM pass               -> DevicePrefixCache
    sample_actions(cache, noise, guidance)              the Euler solve            -> host [C, A]

As gpu/pi05.py: weights uploaded once as bf16 (the token embedding and the state projection stay on
the host, which computes the prompt's rows and the state token), perception and the prefix op by op,
the solve one CUDA graph over static buffers. The cross-attention layers' keys and values (the
expert's projections of the VLM cache) depend on the cache alone: the graph computes them once, at
its start, from the copied cache; the time MLP's half that reads the time embedding is a constant
per step, computed at load.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import llama
from embodied_ros.backbone.paligemma import take_rows
from embodied_ros.gpu import layers
from embodied_ros.gpu.device_vla import DeviceVLA
from embodied_ros.gpu.flow_solve import ExpertBuffers, FlowSolve, key_mask
from embodied_ros.gpu.layers import F32, DecoderDims, DevicePrefixCache, VisionDims
from embodied_ros.heads import flow, rtc
from embodied_ros.heads.flow import time_embedding
from embodied_ros.heads.interleaved_expert import SELF
from embodied_ros.kernels.attention import MASKED
from embodied_ros.models.smolvla.config import SmolVLAConfig
from embodied_ros.models.smolvla.model import prefix_attention_bias
from embodied_ros.models.smolvla.weights import check_weights, is_linear_weight

HOST_TENSORS = ("lm.token_embd", "state_in.weight", "state_in.bias")
FLOAT32_PRODUCTS = ("action_in.weight", "action_time_in.weight", "action_time_out.weight", "action_out.weight")


def half_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """SmolVLA's RoPE tables (backbone/llama.py), first halves: cos, sin [T, head_dim / 2]."""
    cos, sin = llama.rope_tables(positions, head_dim, theta)
    half = head_dim // 2
    return np.ascontiguousarray(cos[:, :half]), np.ascontiguousarray(sin[:, :half])


def decoder_dims(cfg) -> DecoderDims:
    return DecoderDims(cfg.width, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.eps, "silu")


class DeviceSmolVLAModel(DeviceVLA):
    def __init__(self, config: SmolVLAConfig, weights: Mapping[str, Any], engine) -> None:
        check_weights(weights, config)
        super().__init__(config, engine, len(config.camera_names) + config.empty_cameras, config.vision.patches,
                         config.vision.tokens_per_image)
        cfg, ex = config, config.expert
        self.plan = cfg.layer_plan
        self.cache_layers = max(vlm_layer for _, vlm_layer in self.plan) + 1
        self.cache_rows = self.max_prefix_rows(cfg)
        self.host = {"lm.token_embd": weights["lm.token_embd"], "state_in.weight": layers.host_float(
            weights["state_in.weight"]), "state_in.bias": layers.host_float(weights["state_in.bias"])}
        with engine.active():
            w = layers.device_weights(engine, weights, is_linear_weight, keep_on_host=HOST_TENSORS,
                                      float32_products=FLOAT32_PRODUCTS)
            w["vision.position_bias"] = w["vision.position"] + w["vision.patch.bias"]
            time_in = w["action_time_in.weight"]  # [E, 2E]: the action half, then the time half
            w["action_time_in.actions"] = time_in[:, : ex.width]
            self.weights = w
            self.vision_layers = layers.layer_weights(w, "vision", cfg.vision.depth)
            self.lm_layers = layers.decoder_layers(engine, w, "lm", self.cache_layers, decoder_dims(cfg.lm), 0.0)
            self.expert_layers = layers.layer_weights(w, "expert", ex.depth)
            self.time_bias = self._time_biases(weights)
            buffers = ExpertBuffers.allocate(engine, cfg.chunk_size, cfg.max_action_dim, ex.width, ex.mlp_dim,
                                             ex.num_heads, ex.num_kv_heads, ex.head_dim, self.cache_layers,
                                             self.cache_rows)
            rows, c, kv = self.cache_rows, cfg.chunk_size, ex.num_kv_heads * ex.head_dim
            self.self_mask = buffers.add_input(engine, "self_mask", (c, rows + c))
            self.cross_mask = buffers.add_input(engine, "cross_mask", (1, rows))
            self.cross_cos = engine.upload(half_tables(np.arange(c), ex.head_dim, ex.rope_theta)[0], F32)
            self.cross_sin = engine.upload(half_tables(np.arange(c), ex.head_dim, ex.rope_theta)[1], F32)
            cross = [j for j, (kind, _) in enumerate(self.plan) if kind != SELF]
            self.cross_keys = {j: engine.zeros((rows, kv), engine.product_dtype) for j in cross}
            self.cross_values = {j: engine.zeros((rows, kv), engine.product_dtype) for j in cross}
            self.cross_projected = engine.zeros((rows, kv), F32)
            self.cross_scores = engine.zeros((ex.num_heads, c, rows), F32)
            self.cross_probabilities = engine.zeros((ex.num_heads, c, rows), engine.product_dtype)
            self.actions_in = engine.zeros((c, ex.width), F32)
            self.solve = FlowSolve(engine, buffers, self._velocity, cfg.num_inference_steps, w["action_out.weight"],
                                   w["action_out.bias"], prepare=self._cross_keys_values)

    @staticmethod
    def max_prefix_rows(cfg: SmolVLAConfig) -> int:
        """Image slots (cameras and empty slots) x tokens + the longest prompt + the state token."""
        slots = len(cfg.camera_names) + cfg.empty_cameras
        return slots * cfg.vision.tokens_per_image + cfg.tokenizer_max_length + 1

    def _time_biases(self, weights: Mapping[str, Any]) -> list:
        """Per Euler step: the time MLP's input bias plus its product with the step's time embedding."""
        cfg = self.config
        time_in = layers.host_float(weights["action_time_in.weight"])
        bias = layers.host_float(weights["action_time_in.bias"])
        width = cfg.expert.width
        return [self.engine.upload(time_in[:, width:] @ time_embedding(t, width, cfg.time_min_period,
                                                                      cfg.time_max_period) + bias, F32)
                for t in flow.euler_times(cfg.num_inference_steps)]

    # ---- perception ------------------------------------------------------------------------

    def _encode(self, patches, n: int):
        """The vision tower, pixel shuffle and connector (captured per image count, gpu/device_vla.py)."""
        e, cfg = self.engine, self.config.vision
        s, side = cfg.scale_factor, cfg.patches_per_side
        dims = VisionDims(cfg.patches, cfg.width, cfg.num_heads, cfg.eps)
        hidden = layers.vision_tower(e, dims, self.weights, self.vision_layers, e.bf16(patches), n)
        grid = hidden.reshape(n, side // s, s, side // s, s, cfg.width).transpose(0, 1, 3, 2, 4, 5)
        shuffled = e.xp.ascontiguousarray(grid).reshape(n * cfg.tokens_per_image, cfg.connector_in)
        return layers.linear(e, shuffled, self.weights["connector.weight"])

    # ---- prefix ----------------------------------------------------------------------------

    def build_prefix(self, image_tokens, image_mask: np.ndarray, tokens: np.ndarray, token_mask: np.ndarray,
                     state: np.ndarray, stamp_ns: int = 0, compact: bool = True) -> DevicePrefixCache:
        """[image slots (present ones) * sqrt(D), valid language rows * sqrt(D), state token] through the
        VLM layers the expert reads, compacted (the device has no masked form)."""
        ids = self.checked_tokens(tokens, compact)
        cfg, e = self.config, self.engine
        image_mask, token_mask = np.asarray(image_mask, bool), np.asarray(token_mask, bool)
        t, lm = cfg.vision.tokens_per_image, cfg.lm
        if image_mask.shape[0] != image_tokens.shape[0] or token_mask.shape[0] != ids.shape[0]:
            raise ValueError(f"masks of {image_mask.shape[0]} images and {token_mask.shape[0]} tokens do not fit "
                             f"{image_tokens.shape[0]} images and {ids.shape[0]} tokens")
        scale = np.float32(cfg.embed_scale)
        language = take_rows(self.host["lm.token_embd"], ids[token_mask]) * scale
        state = np.asarray(state, dtype=np.float32).reshape(-1)
        if state.size > cfg.max_state_dim:
            raise ValueError(f"state has {state.size} values, more than max_state_dim {cfg.max_state_dim}")
        padded = np.zeros(cfg.max_state_dim, np.float32)
        padded[: state.size] = state
        state_token = self.host["state_in.weight"] @ padded + self.host["state_in.bias"]
        n = int(image_mask.sum()) * t + language.shape[0] + 1
        with e.active():
            x = e.empty((n, lm.width), F32)
            row = 0
            for image in np.flatnonzero(image_mask):
                x[row:row + t] = image_tokens[int(image)] * scale
                row += t
            e.write(x[row:], np.concatenate([language, state_token[None, :].astype(np.float32)]))
            cos, sin = half_tables(np.arange(n), lm.head_dim, lm.rope_theta)
            keys = e.empty((self.cache_layers, n, lm.num_kv_heads * lm.head_dim), e.product_dtype)
            values = e.empty(keys.shape, e.product_dtype)
            layers.decoder_prefix(e, decoder_dims(lm), self.lm_layers, x, e.upload(cos, F32), e.upload(sin, F32),
                                  e.upload(prefix_attention_bias(np.ones(n, bool)), F32), keys, values)
        return DevicePrefixCache(keys, values, np.ones(n, bool), stamp_ns)

    # ---- actions ---------------------------------------------------------------------------

    def _blank_prefix(self, image_tokens, image_mask: np.ndarray) -> DevicePrefixCache:
        return self.build_prefix(image_tokens, image_mask, np.zeros(2, np.int64), np.array([True, False]),
                                 np.zeros(self.config.state_dim, np.float32))

    def sample_actions(self, cache: DevicePrefixCache, noise: np.ndarray,
                       guidance: rtc.Guidance | None = None) -> np.ndarray:
        cfg = self.config
        noise = self.checked_noise(noise)
        if cache.num_layers < self.cache_layers:
            raise ValueError(f"prefix cache has {cache.num_layers} layers, the expert reads {self.cache_layers}")
        c, rows = cfg.chunk_size, self.cache_rows
        keys = key_mask(cache, rows, c)
        causal = np.where(np.tril(np.ones((c, c), bool)), np.float32(0.0), MASKED).astype(np.float32)
        self_mask = np.concatenate([np.repeat(keys[:, :rows], c, axis=0), causal], axis=1)
        cos, sin = half_tables(cache.n_valid + np.arange(c), cfg.expert.head_dim, cfg.expert.rope_theta)
        return self.solve.run(cache, noise, cos, sin, guidance,
                              inputs={"self_mask": self_mask, "cross_mask": keys[:, :rows]})

    def _cross_keys_values(self, b: ExpertBuffers) -> None:
        """The cross-attention layers' keys and values: the expert's k/v projections of the cached rows."""
        e, ex = self.engine, self.config.expert
        kv = ex.num_kv_heads * ex.head_dim
        for j, keys in self.cross_keys.items():
            vlm_layer = self.plan[j][1]
            projection = self.expert_layers[j]["attn_kv.weight"]  # [2 K d, K d]: k_proj rows, then v_proj rows
            for source, weight, target in ((b.keys, projection[:kv], keys),
                                           (b.values, projection[kv:], self.cross_values[j])):
                e.matmul(source[vlm_layer][: self.cache_rows], weight, self.cross_projected)
                e.bias_act(self.cross_projected, target)

    def _velocity(self, b: ExpertBuffers, step: int) -> None:
        """One velocity evaluation at Euler step `step`: b.x_t -> b.h_final, the final norm's output. The
        action tokens' MLP runs in float32, as LeRobot runs it."""
        e, ex, w = self.engine, self.config.expert, self.weights
        heads, kv_heads, d = ex.num_heads, ex.num_kv_heads, ex.head_dim
        e.matmul(b.x_t, w["action_in.weight"], self.actions_in)
        e.bias_act(self.actions_in, self.actions_in, w["action_in.bias"])
        e.matmul(self.actions_in, w["action_time_in.actions"], b.y)
        e.bias_act(b.y, b.y, self.time_bias[step], "silu")
        e.matmul(b.y, w["action_time_out.weight"], b.x)
        e.residual_norm(b.x, b.h, self.expert_layers[0]["attn_norm.weight"], ex.eps, bias=w["action_time_out.bias"])
        for j, (kind, vlm_layer) in enumerate(self.plan):
            layer = self.expert_layers[j]
            if kind == SELF:
                e.matmul(b.h, layer["attn_qkv.weight"], b.qkv)
                b.attend(e, vlm_layer, heads, kv_heads, d, self.self_mask)
            else:
                queries = b.qkv[:, : heads * d]
                e.matmul(b.h, layer["attn_q.weight"], queries)
                e.rope_split(queries, b.q, None, None, (heads, 0, 0), d, self.cross_cos, self.cross_sin)
                layers.grouped_attention(e, b.q, self.cross_keys[j], self.cross_values[j], heads, kv_heads, d,
                                         d ** -0.5, self.cross_mask, self.cross_scores, self.cross_probabilities,
                                         b.attended)
            e.matmul(b.attended, layer["attn_out.weight"], b.y)
            e.residual_norm(b.x, b.h, layer["ffn_norm.weight"], ex.eps, y=b.y)
            e.matmul(b.h, layer["ffn_gate_up.weight"], b.gate_up)
            e.glu(b.gate_up, b.hidden, "silu")
            e.matmul(b.hidden, layer["ffn_down.weight"], b.y)
            last = j + 1 == len(self.plan)
            following = w["expert.final_norm.weight"] if last else self.expert_layers[j + 1]["attn_norm.weight"]
            e.residual_norm(b.x, b.h_final if last else b.h, following, ex.eps, y=b.y)
