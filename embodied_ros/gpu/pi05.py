"""pi0.5 on the GPU, whole chunk on the device: the model-space calls of models/pi05/model.py.

    image_tokens(images, camera_mask)                   SigLIP + projector     -> device [N, T, D] float32
    build_prefix(image_tokens, camera_mask, tokens, token_mask, stamp_ns)
                                                        one Gemma pass         -> DevicePrefixCache (bf16)
    sample_actions(cache, noise, guidance)              the Euler solve        -> host [C, A] float32

Weights are uploaded once (products' matrices as bf16), the token embedding stays on the host (the
prompt's rows are gathered there). Perception and the prefix pass run op by op (their shapes follow
the cameras present and the prompt's length). The action expert's solve is one CUDA graph, captured
at warm-up over static buffers sized for the longest prefix: a solve copies the cache into them,
writes the noise, the action tokens' RoPE tables and the key mask, replays the graph and reads the
actions back. A guided solve (real-time chunking) replays one captured velocity step per Euler step
and applies the guidance on the host in between.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.paligemma import TOKEN_EMBEDDING, take_rows
from embodied_ros.gpu import layers
from embodied_ros.gpu.device_vla import DeviceVLA
from embodied_ros.gpu.flow_solve import ExpertBuffers, FlowSolve
from embodied_ros.gpu.layers import F32, DecoderDims, DevicePrefixCache, VisionDims
from embodied_ros.heads import adarms_expert, flow, rtc
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels.rope import rope_tables
from embodied_ros.models.pi05.config import Pi05Config
from embodied_ros.models.pi05.weights import check_weights, is_linear_weight
from embodied_ros.sequence import prefix as layout


FLOAT32_PRODUCTS = ("action_in.weight", "action_out.weight")


def vision_dims(config: Pi05Config) -> VisionDims:
    v = config.vision
    return VisionDims(v.tokens_per_camera, v.width, v.num_heads, v.eps)


def decoder_dims(cfg) -> DecoderDims:
    return DecoderDims(cfg.width, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.eps, "gelu_tanh")


def half_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [T, head_dim / 2] (the first halves of rope_tables')."""
    cos, sin = rope_tables(positions, head_dim, theta)
    half = head_dim // 2
    return np.ascontiguousarray(cos[:, :half]), np.ascontiguousarray(sin[:, :half])


class DevicePi05Model(DeviceVLA):
    def __init__(self, config: Pi05Config, weights: Mapping[str, Any], engine) -> None:
        check_weights(weights, config)
        tokens = config.vision.tokens_per_camera
        super().__init__(config, engine, len(config.camera_names), tokens, tokens)
        cfg = config
        with engine.active():
            w = layers.device_weights(engine, weights, is_linear_weight, keep_on_host=(TOKEN_EMBEDDING,),
                                      float32_products=FLOAT32_PRODUCTS)
            w["vision.position_bias"] = w["vision.position"] + w["vision.patch.bias"]
            self.weights = w
            self.vision_layers = layers.layer_weights(w, "vision", cfg.vision.depth)
            self.lm_layers = layers.decoder_layers(engine, w, "lm", cfg.expert.depth, decoder_dims(cfg.lm), 1.0)
            self.conditioning = self._upload_conditioning(weights)
            ex = cfg.expert
            buffers = ExpertBuffers.allocate(engine, cfg.chunk_size, cfg.max_action_dim, ex.width, ex.mlp_dim,
                                             ex.num_heads, ex.num_kv_heads, ex.head_dim, ex.depth, cfg.max_prefix_len)
            self.key_mask = buffers.add_input(engine, "key_mask", (1, cfg.max_prefix_len + cfg.chunk_size))
            self.solve = FlowSolve(engine, buffers, self._velocity, cfg.num_inference_steps, w["action_out.weight"],
                                   w["action_out.bias"])

    # ---- weights ----------------------------------------------------------------------------

    def _upload_conditioning(self, weights: Mapping[str, Any]) -> list[dict[str, list]]:
        """Per Euler step, the adaptive norms' multipliers (1 + scale), shifts and gates of every expert
        layer and the final norm: they depend on the flow time alone, so they are computed once, on the
        host (as models/pi05/model.py does), and uploaded."""
        cfg = self.config
        names = ("attn_norm.weight", "attn_norm.bias", "ffn_norm.weight", "ffn_norm.bias")
        host = {name: layers.host_float(weights[name]) for name in
                ("time_in.weight", "time_in.bias", "time_out.weight", "time_out.bias", "expert.final_norm.weight",
                 "expert.final_norm.bias")}
        expert_norms = [{name: layers.host_float(weights[f"expert.blk.{i}.{name}"]) for name in names}
                        for i in range(cfg.expert.depth)]
        ks = KernelSet("numpy")
        steps = []
        for t in flow.euler_times(cfg.num_inference_steps):
            c = adarms_expert.step_conditioning(ks, host, expert_norms, t, cfg.time_min_period, cfg.time_max_period)
            up = self.engine.upload
            steps.append({
                "attn": [(up(1 + scale, F32), up(shift, F32), up(gate.reshape(-1), F32)) for scale, shift, gate in c.attn],
                "ffn": [(up(1 + scale, F32), up(shift, F32), up(gate.reshape(-1), F32)) for scale, shift, gate in c.ffn],
                "final": (up(1 + c.final[0], F32), up(c.final[1], F32)),
            })
        return steps

    # ---- perception ------------------------------------------------------------------------

    def _encode(self, patches, images: int):
        """SigLIP and the projector (captured per camera count, gpu/device_vla.py)."""
        e = self.engine
        h = layers.vision_tower(e, vision_dims(self.config), self.weights, self.vision_layers, e.bf16(patches), images)
        tokens = layers.linear(e, h, self.weights["projector.weight"])
        tokens += self.weights["projector.bias"]
        return tokens

    # ---- prefix ----------------------------------------------------------------------------

    def build_prefix(self, image_tokens, camera_mask: np.ndarray, tokens: np.ndarray, token_mask: np.ndarray,
                     stamp_ns: int = 0, compact: bool = True) -> DevicePrefixCache:
        """The compacted prefix (present cameras, valid tokens) through the LM layers the expert reads
        (the device has no masked form: `compact` False is refused)."""
        ids = self.checked_tokens(tokens, compact)
        cfg, e = self.config, self.engine
        camera_mask, token_mask = np.asarray(camera_mask, bool), np.asarray(token_mask, bool)
        pad = layout.prefix_pad_mask(camera_mask, cfg.vision.tokens_per_camera, token_mask)
        if pad.shape[0] != image_tokens.shape[0] * image_tokens.shape[1] + ids.shape[0]:
            raise ValueError(f"prefix has {image_tokens.shape[0] * image_tokens.shape[1] + ids.shape[0]} rows but "
                             f"its masks describe {pad.shape[0]}")
        language = take_rows(self.weights[TOKEN_EMBEDDING], ids[token_mask]) * np.float32(cfg.embed_scale)
        t, lm = cfg.vision.tokens_per_camera, cfg.lm
        n = int(pad.sum())
        if n == 0:
            raise ValueError("the prefix has no valid row (no camera and no token)")
        with e.active():
            x = e.empty((n, lm.width), F32)
            row = 0
            for camera in np.flatnonzero(camera_mask):
                x[row:row + t] = image_tokens[int(camera)]
                row += t
            if language.shape[0]:
                e.write(x[row:], language)
            cos, sin = half_tables(np.arange(n), lm.head_dim, lm.rope_theta)
            depth = cfg.expert.depth
            keys = e.empty((depth, n, lm.num_kv_heads * lm.head_dim), e.product_dtype)
            values = e.empty(keys.shape, e.product_dtype)
            layers.decoder_prefix(e, decoder_dims(lm), self.lm_layers, x, e.upload(cos, F32), e.upload(sin, F32),
                                  None, keys, values)
        return DevicePrefixCache(keys, values, np.ones(n, bool), stamp_ns)

    # ---- actions ---------------------------------------------------------------------------

    def _blank_prefix(self, image_tokens, image_mask: np.ndarray) -> DevicePrefixCache:
        return self.build_prefix(image_tokens, image_mask, np.zeros(2, np.int64), np.array([True, False]))

    def sample_actions(self, cache: DevicePrefixCache, noise: np.ndarray,
                       guidance: rtc.Guidance | None = None) -> np.ndarray:
        """noise x(t=1) [C, A] -> x(t=0) [C, A] (model space, padded action width), on the host."""
        cfg = self.config
        noise = self.checked_noise(noise)
        if cache.num_layers < cfg.expert.depth:
            raise ValueError(f"prefix cache has {cache.num_layers} layers, the expert reads {cfg.expert.depth}")
        cos, sin = half_tables(cache.n_valid + np.arange(cfg.chunk_size), cfg.lm.head_dim, cfg.lm.rope_theta)
        return self.solve.run(cache, noise, cos, sin, guidance)

    def _velocity(self, b: ExpertBuffers, step: int) -> None:
        """One velocity evaluation at Euler step `step`: b.x_t -> b.h_final, the final norm's output (the
        solve applies the action projection)."""
        e, cfg, w = self.engine, self.config.expert, self.weights
        c = self.conditioning[step]
        e.matmul(b.x_t, w["action_in.weight"], b.x)
        mul, add, _ = c["attn"][0]
        e.residual_norm(b.x, b.h, mul, cfg.eps, bias=w["action_in.bias"], add=add)
        for i in range(cfg.depth):
            prefix = f"expert.blk.{i}."
            e.matmul(b.h, w[prefix + "attn_qkv.weight"], b.qkv)
            b.attend(e, i, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, self.key_mask)
            e.matmul(b.attended, w[prefix + "attn_out.weight"], b.y)
            mul, add, _ = c["ffn"][i]
            e.residual_norm(b.x, b.h, mul, cfg.eps, y=b.y, gate=c["attn"][i][2], add=add)
            e.matmul(b.h, w[prefix + "ffn_gate_up.weight"], b.gate_up)
            e.glu(b.gate_up, b.hidden, "gelu_tanh")
            e.matmul(b.hidden, w[prefix + "ffn_down.weight"], b.y)
            last = i + 1 == cfg.depth
            mul, add = c["final"] if last else c["attn"][i + 1][:2]
            e.residual_norm(b.x, b.h_final if last else b.h, mul, cfg.eps, y=b.y, gate=c["ffn"][i][2], add=add)
