"""BitVLA assembled from its layers, in model space (pixel values, token ids, normalized proprio ->
normalized actions), as pure functions over the prepared weights:

    image_features(images)                  SigLIP (BitLinear) up to the feature layer + GELU connector
    action_hidden(features, ids, proprio)   the LM input (image features and the proprio token in their
                                            pad slots, chunk x action_dim zero placeholders, the stop
                                            token), one bidirectional BitNet pass, the hidden states the
                                            head reads
    actions(hidden)                         OFT's L1 head -> normalized actions [chunk, action_dim]

Products: `products="integer"` runs every BitLinear that has ternary weights and int8 activations
on the integer units (TernaryWeight); `products="float"` runs the reference's float arithmetic
(FakeQuant: the same quantized operands, float32 sums). Other linears (patch embedding, connector,
head, projector) are float32 products as stored.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import bitnet
from embodied_ros.backbone.bitnet import FakeQuant, bit_linear
from embodied_ros.backbone.siglip import patchify
from embodied_ros.heads import oft_l1
from embodied_ros.kernels.linear import pack_for_products
from embodied_ros.kernels.quant import QuantTensor
from embodied_ros.kernels.registry import KernelSet
from embodied_ros.models.bitvla import weights as names
from embodied_ros.models.bitvla.config import BitVLAConfig

PRODUCTS = ("integer", "float")
PLACEHOLDER_ID = 1  # the id OFT gives its action placeholders (their embeddings are zeroed)


def _float(tensor) -> np.ndarray:
    return tensor.dequantize() if isinstance(tensor, QuantTensor) else np.asarray(tensor, dtype=np.float32)


class BitVLAModel:
    def __init__(self, config: BitVLAConfig, stored: Mapping[str, Any], backend: str = "numba",
                 products: str = "integer") -> None:
        if products not in PRODUCTS:
            raise ValueError(f"products must be one of {PRODUCTS}, got {products!r}")
        names.check_shapes(stored, names.stored_shapes(config), "bitvla weights")
        self.config, self.backend, self.products = config, backend, products
        self.ks = KernelSet(backend)
        v, lm = config.vision, config.lm
        self.vision_layers = [self._vision_layer(stored, i) for i in range(v.depth)]
        self.lm_layers = [bitnet.prepare_layer(self._lm_layer(stored, i), backend) for i in range(lm.depth)]
        # the full-precision tensors outside the layers: matrices packed for products, the rest float32
        self.weights = {name: self._matrix(value) if len(value.shape) == 2 else _float(value)
                        for name, value in stored.items()
                        if name.startswith(("vision.patch.", "connector.", "head.", "proprio."))}
        self.weights["vision.position"] = _float(stored["vision.position"])
        self.weights["lm.final_norm.weight"] = _float(stored["lm.final_norm.weight"])
        self.token_embd = stored["lm.token_embd"]

    # ---- weights as the products read them ---------------------------------------------------------

    def _matrix(self, tensor):
        weight = tensor if isinstance(tensor, QuantTensor) else np.asarray(tensor, dtype=np.float32)
        return pack_for_products(weight) if self.backend == "numba" else weight

    def _bit_linear(self, stored: Mapping[str, Any], name: str, n_in: int, ternary: bool, act_bits: int):
        """A BitLinear weight in this model's arithmetic (backbone/bitnet.py's three kinds)."""
        if not ternary:  # full-precision weights (a 32-bit vision tower)
            matrix = self._matrix(stored[name])
            return FakeQuant(matrix, quantize_acts=True) if act_bits == 8 else matrix
        if self.products == "integer" and act_bits == 8:
            return names.packed_ternary(stored, name, n_in)
        q, scale = names.ternary_of(stored, name, n_in)
        return FakeQuant(self._matrix((q.astype(np.float32) / scale).astype(np.float32)), act_bits == 8)

    def _vision_layer(self, stored: Mapping[str, Any], index: int) -> dict[str, Any]:
        cfg = self.config
        prefix = f"vision.blk.{index}."
        layer = {name: _float(stored[prefix + name]) for name in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias")}
        widths = {"attn_q": cfg.vision.width, "attn_k": cfg.vision.width, "attn_v": cfg.vision.width,
                  "attn_out": cfg.vision.width, "fc1": cfg.vision.width, "fc2": cfg.vision.mlp_dim}
        parts = {part: self._bit_linear(stored, f"{prefix}{part}.weight", n_in, cfg.ternary_vision, cfg.vision_act_bits)
                 for part, n_in in widths.items()}
        layer["attn_qkv.weight"] = bitnet.stack_bit_linears([parts["attn_q"], parts["attn_k"], parts["attn_v"]],
                                                            self.backend)
        layer["attn_qkv.bias"] = np.concatenate([_float(stored[f"{prefix}attn_{p}.bias"]) for p in "qkv"])
        for part in ("attn_out", "fc1", "fc2"):
            layer[f"{part}.weight"] = parts[part]
            layer[f"{part}.bias"] = _float(stored[f"{prefix}{part}.bias"])
        return layer

    def _lm_layer(self, stored: Mapping[str, Any], index: int) -> dict[str, Any]:
        lm = self.config.lm
        prefix = f"lm.blk.{index}."
        layer = {name: _float(stored[prefix + name]) for name in ("attn_norm.weight", "attn_sub_norm.weight",
                                                                  "ffn_norm.weight", "ffn_sub_norm.weight")}
        for part in bitnet.BIT_LINEARS:
            n_in = lm.mlp_dim if part == "ffn_down" else lm.width
            layer[f"{part}.weight"] = self._bit_linear(stored, f"{prefix}{part}.weight", n_in, True, 8)
        return layer

    # ---- the model ---------------------------------------------------------------------------------

    def image_features(self, images: np.ndarray) -> np.ndarray:
        """[N, 3, S, S] pixel values -> [N, T, LM width]: the connector's output for each camera."""
        ks, v, w = self.ks, self.config.vision, self.weights
        expected = (3, v.image_size, v.image_size)
        if images.ndim != 4 or images.shape[1:] != expected:
            raise ValueError(f"bitvla's vision tower expects images [N, {', '.join(map(str, expected))}], "
                             f"got {images.shape}")
        n = images.shape[0]
        patches = patchify(np.ascontiguousarray(images, dtype=np.float32), v.patch_size)
        x = ks.linear(patches.reshape(n * v.tokens_per_camera, v.patch_features), w["vision.patch.weight"],
                      w["vision.patch.bias"])
        x = (x.reshape(n, v.tokens_per_camera, v.width) + w["vision.position"]).reshape(-1, v.width)
        for layer in self.vision_layers:
            x = self._vision_block(layer, x, n)
        h = ks.gelu_erf(ks.linear(x, w["connector.fc1.weight"], w["connector.fc1.bias"]))
        return ks.linear(h, w["connector.fc2.weight"], w["connector.fc2.bias"]).reshape(n, v.tokens_per_camera, -1)

    def _vision_block(self, w: Mapping[str, Any], x: np.ndarray, n_cameras: int) -> np.ndarray:
        ks, v = self.ks, self.config.vision
        tokens = x.shape[0] // n_cameras
        h = ks.layer_norm(x, w["ln1.weight"], w["ln1.bias"], v.eps)
        qkv = bit_linear(ks, h, w["attn_qkv.weight"], w["attn_qkv.bias"]).reshape(n_cameras, tokens, 3, v.num_heads,
                                                                                  v.head_dim)
        attended = np.concatenate([ks.attention(qkv[c, :, 0], qkv[c, :, 1], qkv[c, :, 2]) for c in range(n_cameras)])
        x = x + bit_linear(ks, attended.reshape(x.shape), w["attn_out.weight"], w["attn_out.bias"])
        h = ks.layer_norm(x, w["ln2.weight"], w["ln2.bias"], v.eps)
        h = ks.gelu_tanh(bit_linear(ks, h, w["fc1.weight"], w["fc1.bias"]))
        return x + bit_linear(ks, h, w["fc2.weight"], w["fc2.bias"])

    def lm_input(self, features: np.ndarray, input_ids: np.ndarray, proprio: np.ndarray | None) -> np.ndarray:
        """The LM's input embeddings [L + slots + 1, D] (prompt, placeholders, stop token)."""
        cfg = self.config
        ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= cfg.lm.vocab_size):
            raise ValueError(f"token ids must lie in [0, {cfg.lm.vocab_size}), got {ids.min()}..{ids.max()}")
        full = np.concatenate([ids, np.full(cfg.action_slots, PLACEHOLDER_ID), [cfg.tokens.stop]])
        x = self._embed(full)
        image_rows = np.flatnonzero(full == cfg.tokens.image)
        features = np.asarray(features, dtype=np.float32).reshape(-1, cfg.lm.width)
        if image_rows.size != features.shape[0]:
            raise ValueError(f"the prompt has {image_rows.size} image tokens for {features.shape[0]} image features")
        x[image_rows] = features
        if cfg.use_proprio:
            proprio_rows = np.flatnonzero(full == cfg.tokens.proprio)
            if proprio_rows.size != 1 or proprio is None:
                raise ValueError(f"bitvla reads one proprio token: {proprio_rows.size} pad tokens, "
                                 f"{'no' if proprio is None else 'a'} state")
            x[proprio_rows[0]] = oft_l1.proprio_token(self.ks, self.weights, self._proprio(proprio))
        x[ids.size:ids.size + cfg.action_slots] = 0.0
        return x

    def _proprio(self, proprio: np.ndarray) -> np.ndarray:
        proprio = np.asarray(proprio, dtype=np.float32).reshape(-1)
        if proprio.size != self.config.proprio_dim or not np.all(np.isfinite(proprio)):
            raise ValueError(f"proprio must be {self.config.proprio_dim} finite values, got {proprio.tolist()}")
        return proprio

    def _embed(self, ids: np.ndarray) -> np.ndarray:
        table = self.token_embd
        if isinstance(table, QuantTensor):
            return table.take_rows(ids).astype(np.float32)
        return np.asarray(table[ids], dtype=np.float32)

    def action_hidden(self, features: np.ndarray, input_ids: np.ndarray, proprio: np.ndarray | None) -> np.ndarray:
        """The final-normed LM hidden states the head reads [chunk * action_dim, D]."""
        cfg = self.config
        x = self.lm_input(features, input_ids, proprio)
        rows = oft_l1.slot_rows(np.asarray(input_ids).size, cfg.chunk_size, cfg.action_dim)
        return bitnet.forward(self.ks, cfg.lm, self.lm_layers, self.weights["lm.final_norm.weight"], x, None, rows)

    def actions(self, hidden: np.ndarray) -> np.ndarray:
        """-> normalized actions [chunk, action_dim]."""
        return oft_l1.actions(self.ks, self.weights, hidden, self.config.chunk_size, self.config.action_dim)

    def sample(self, images: np.ndarray, input_ids: np.ndarray, proprio: np.ndarray | None) -> np.ndarray:
        """Everything in model space: pixel values, ids, normalized proprio -> normalized actions."""
        return self.actions(self.action_hidden(self.image_features(images), input_ids, proprio))

    def warm_up(self) -> None:
        """Compile every kernel the stages run (KernelSet.compile covers every op on its examples)."""
        self.ks.compile()
