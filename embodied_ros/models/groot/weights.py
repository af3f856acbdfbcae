"""The runtime's tensor names for GR00T N1.7, and how LeRobot's parameter names map onto them.

    vision.patch.{weight,bias}          patch embedding as a linear [w, 3*T*P*P] (LeRobot: a Conv3d
                                        [w, 3, T, P, P], flattened in (channel, time, y, x) order)
    vision.position                     learned position table [n*n, w]
    vision.blk.{i}.{ln1,ln2,attn_qkv,attn_out,fc1,fc2}.{weight,bias}
    vision.merger.{ln,fc1,fc2}.{weight,bias}, vision.deepstack.{j}.{ln,fc1,fc2}.{weight,bias}
    lm.token_embd                       [vocab, d]
    lm.blk.{i}.{attn_norm,ffn_norm,q_norm,k_norm}.weight
    lm.blk.{i}.{attn_q,attn_k,attn_v,attn_out,ffn_gate,ffn_up,ffn_down}.weight
    head.vlln.{weight,bias}
    head.vl.{i}.{ln1,ln3,attn_q,attn_k,attn_v,attn_out,ff_in,ff_out}.{weight,bias}
    head.dit.{b}.{ada,attn_q,attn_k,attn_v,attn_out,ff_in,ff_out}.{weight,bias}  (ada: norm1's linear)
    head.time.{1,2}.{weight,bias}, head.out_{1,2}.{weight,bias}, head.position [max_seq_len, D]
    head.state.{1,2}, head.action_in.{1,2,3}, head.action_out.{1,2}: embodiment-specific,
                                        weight [categories, in, out], bias [categories, out]

Linear weights are [out, in], as in the checkpoint. The LM's final norm and lm_head are unused
(GR00T reads the last kept layer's output) and dropped, as are LM layers past select_layer.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from embodied_ros.models.kit import lerobot_save

_VISUAL = r"_groot_model\.backbone\.model\.model\.visual\."
_LM = r"_groot_model\.backbone\.model\.model\.language_model\."
_HEAD = r"_groot_model\.action_head\."
_LM_HEAD = "_groot_model.backbone.model.lm_head.weight"
_EMBED = "_groot_model.backbone.model.model.language_model.embed_tokens.weight"

_VISION_BLOCK = {"norm1": "ln1", "norm2": "ln2", "attn.qkv": "attn_qkv", "attn.proj": "attn_out",
                 "mlp.linear_fc1": "fc1", "mlp.linear_fc2": "fc2"}
_MERGER = {"norm": "ln", "linear_fc1": "fc1", "linear_fc2": "fc2"}
_LM_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_norm": "q_norm",
             "self_attn.k_norm": "k_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ffn_gate",
             "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
_ATTENTION_BLOCK = {"attn1.to_q": "attn_q", "attn1.to_k": "attn_k", "attn1.to_v": "attn_v",
                    "attn1.to_out.0": "attn_out", "ff.net.0.proj": "ff_in", "ff.net.2": "ff_out"}
_CATEGORY = {"state_encoder.layer1": "state.1", "state_encoder.layer2": "state.2",
             "action_encoder.W1": "action_in.1", "action_encoder.W2": "action_in.2", "action_encoder.W3": "action_in.3",
             "action_decoder.layer1": "action_out.1", "action_decoder.layer2": "action_out.2"}


def _rules() -> list[tuple[re.Pattern, str | None]]:
    rules: list[tuple[str, str | None]] = [
        (_VISUAL + r"patch_embed\.proj\.(weight|bias)", r"vision.patch.\1"),
        (_VISUAL + r"pos_embed\.weight", "vision.position"),
        (_LM + r"embed_tokens\.weight", "lm.token_embd"),
        (_LM + r"norm\.weight", None),
        (re.escape(_LM_HEAD), None),
        (_HEAD + r"vlln\.(weight|bias)", r"head.vlln.\1"),
        (_HEAD + r"position_embedding\.weight", "head.position"),
        (_HEAD + r"model\.timestep_encoder\.timestep_embedder\.linear_(1|2)\.(weight|bias)", r"head.time.\1.\2"),
        (_HEAD + r"model\.proj_out_(1|2)\.(weight|bias)", r"head.out_\1.\2"),
        (_HEAD + r"model\.transformer_blocks\.(\d+)\.norm1\.linear\.(weight|bias)", r"head.dit.\1.ada.\2"),
    ]
    for theirs, ours in _VISION_BLOCK.items():
        rules.append((_VISUAL + rf"blocks\.(\d+)\.{re.escape(theirs)}\.(weight|bias)", rf"vision.blk.\1.{ours}.\2"))
    for theirs, ours in _MERGER.items():
        rules.append((_VISUAL + rf"merger\.{theirs}\.(weight|bias)", rf"vision.merger.{ours}.\1"))
        rules.append((_VISUAL + rf"deepstack_merger_list\.(\d+)\.{theirs}\.(weight|bias)",
                      rf"vision.deepstack.\1.{ours}.\2"))
    for theirs, ours in _LM_LAYER.items():
        rules.append((_LM + rf"layers\.(\d+)\.{re.escape(theirs)}\.weight", rf"lm.blk.\1.{ours}.weight"))
    for theirs, ours in _ATTENTION_BLOCK.items():
        rules.append((_HEAD + rf"vl_self_attention\.transformer_blocks\.(\d+)\.{re.escape(theirs)}\.(weight|bias)",
                      rf"head.vl.\1.{ours}.\2"))
        rules.append((_HEAD + rf"model\.transformer_blocks\.(\d+)\.{re.escape(theirs)}\.(weight|bias)",
                      rf"head.dit.\1.{ours}.\2"))
    for norm in ("norm1", "norm3"):
        rules.append((_HEAD + rf"vl_self_attention\.transformer_blocks\.(\d+)\.{norm}\.(weight|bias)",
                      rf"head.vl.\1.ln{norm[-1]}.\2"))
    for theirs, ours in _CATEGORY.items():
        rules.append((_HEAD + re.escape(theirs) + r"\.W", f"head.{ours}.weight"))
        rules.append((_HEAD + re.escape(theirs) + r"\.b", f"head.{ours}.bias"))
    return [(re.compile(pattern + "$"), replacement) for pattern, replacement in rules]


_RULES = _rules()


_PRODUCT = re.compile(r"(vision\.patch|.*\.(attn_qkv|attn_out|fc1|fc2|attn_q|attn_k|attn_v|ffn_gate|ffn_up|ffn_down|"
                      r"ff_in|ff_out|ada)|head\.(time\.[12]|out_[12]))\.weight")


def is_linear_weight(name: str) -> bool:
    """A matrix the kernels' linear product reads ([out, in]); the tables, norms and the embodiment-
    specific layers are read otherwise."""
    return _PRODUCT.fullmatch(name) is not None


def runtime_name(lerobot_name: str) -> str | None:
    """Runtime name of a LeRobot GR00T parameter; None for tensors inference never reads.
    Raises ValueError for a name that is not part of GR00T N1.7."""
    return lerobot_save.runtime_name(lerobot_name, _RULES, "GR00T N1.7")


def from_lerobot(state_dict: Mapping[str, Any], lm_depth: int | None = None) -> dict[str, np.ndarray]:
    """LeRobot `GrootPolicy.state_dict()` -> runtime tensors (LM layers >= lm_depth dropped)."""
    unknown, renamed = [], {}
    if _LM_HEAD in state_dict and _EMBED not in state_dict:  # a tied save that kept only lm_head
        state_dict = {**state_dict, _EMBED: state_dict[_LM_HEAD]}
    for name, tensor in state_dict.items():
        try:
            ours = runtime_name(name)
        except ValueError:
            unknown.append(name)
            continue
        if ours is None:
            continue
        if lm_depth is not None and ours.startswith("lm.blk.") and int(ours.split(".")[2]) >= lm_depth:
            continue
        renamed[ours] = np.asarray(tensor)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ValueError(f"checkpoint is not a LeRobot GR00T N1.7 policy: unexpected tensors {shown}")
    patch = renamed.get("vision.patch.weight")
    if patch is not None and patch.ndim == 5:
        renamed["vision.patch.weight"] = patch.reshape(patch.shape[0], -1)
    return dict(sorted(renamed.items(), key=lambda item: _natural_key(item[0])))


def _natural_key(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in name.split("."))


def expected_shapes(config) -> dict[str, tuple[int, ...]]:
    """Every runtime tensor and its shape for `config`: the bundle's tensor table."""
    v, t, h = config.vision, config.text, config.head
    w, d, D, e = v.width, t.width, h.width, h.num_embodiments
    shapes: dict[str, tuple[int, ...]] = {
        "vision.patch.weight": (w, v.patch_features), "vision.patch.bias": (w,),
        "vision.position": (v.num_position_embeddings, w), "lm.token_embd": (t.vocab_size, d),
    }

    def linear(prefix: str, out: int, inp: int) -> None:
        shapes[f"{prefix}.weight"], shapes[f"{prefix}.bias"] = (out, inp), (out,)

    def norm(prefix: str, width: int) -> None:
        shapes[f"{prefix}.weight"], shapes[f"{prefix}.bias"] = (width,), (width,)

    def category(prefix: str, inp: int, out: int) -> None:
        shapes[f"{prefix}.weight"], shapes[f"{prefix}.bias"] = (e, inp, out), (e, out)

    for i in range(v.depth):
        norm(f"vision.blk.{i}.ln1", w), norm(f"vision.blk.{i}.ln2", w)
        linear(f"vision.blk.{i}.attn_qkv", 3 * w, w), linear(f"vision.blk.{i}.attn_out", w, w)
        linear(f"vision.blk.{i}.fc1", v.mlp_dim, w), linear(f"vision.blk.{i}.fc2", w, v.mlp_dim)
    merged = v.merge_rows * w
    for prefix, norm_width in [("vision.merger", w)] + [(f"vision.deepstack.{j}", merged)
                                                      for j in range(len(v.deepstack_indexes))]:
        norm(f"{prefix}.ln", norm_width), linear(f"{prefix}.fc1", merged, merged), linear(f"{prefix}.fc2", v.out_dim, merged)
    q_rows, kv_rows = t.num_heads * t.head_dim, t.num_kv_heads * t.head_dim
    for i in range(t.depth):
        shapes.update({f"lm.blk.{i}.attn_norm.weight": (d,), f"lm.blk.{i}.ffn_norm.weight": (d,),
                       f"lm.blk.{i}.q_norm.weight": (t.head_dim,), f"lm.blk.{i}.k_norm.weight": (t.head_dim,),
                       f"lm.blk.{i}.attn_q.weight": (q_rows, d), f"lm.blk.{i}.attn_k.weight": (kv_rows, d),
                       f"lm.blk.{i}.attn_v.weight": (kv_rows, d), f"lm.blk.{i}.attn_out.weight": (d, q_rows),
                       f"lm.blk.{i}.ffn_gate.weight": (t.mlp_dim, d), f"lm.blk.{i}.ffn_up.weight": (t.mlp_dim, d),
                       f"lm.blk.{i}.ffn_down.weight": (d, t.mlp_dim)})
    norm("head.vlln", d)
    for i in range(h.vl_depth):
        norm(f"head.vl.{i}.ln1", d), norm(f"head.vl.{i}.ln3", d)
        for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
            linear(f"head.vl.{i}.{part}", d, d)
        linear(f"head.vl.{i}.ff_in", 4 * d, d), linear(f"head.vl.{i}.ff_out", d, 4 * d)
    for b, kind in enumerate(h.block_kinds):
        context = D if kind == "self_attn" else d
        linear(f"head.dit.{b}.ada", 2 * D, D), linear(f"head.dit.{b}.attn_q", D, D)
        linear(f"head.dit.{b}.attn_k", D, context), linear(f"head.dit.{b}.attn_v", D, context)
        linear(f"head.dit.{b}.attn_out", D, D)
        linear(f"head.dit.{b}.ff_in", 4 * D, D), linear(f"head.dit.{b}.ff_out", D, 4 * D)
    linear("head.time.1", D, 256), linear("head.time.2", D, D)
    linear("head.out_1", 2 * D, D), linear("head.out_2", h.hidden_size, D)
    shapes["head.position"] = (h.max_seq_len, D)
    category("head.state.1", h.max_state_dim, h.hidden_size), category("head.state.2", h.hidden_size, D)
    category("head.action_in.1", h.max_action_dim, D), category("head.action_in.2", 2 * D, D)
    category("head.action_in.3", D, D)
    category("head.action_out.1", h.hidden_size, h.hidden_size)
    category("head.action_out.2", h.hidden_size, h.max_action_dim)
    return shapes


def check_weights(weights: Mapping[str, Any], config) -> None:
    """Every expected tensor present with its shape; else a ValueError."""
    lerobot_save.check_weight_shapes(weights, expected_shapes(config), "groot")
