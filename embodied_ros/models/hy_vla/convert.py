"""HY-VLA checkpoint (the released layout) -> bundle.

The layout `HyVLA.save_pretrained` writes: `config.json` (a HyVLAConfig, "type": "hy", with the VLM's
config embedded as `vlm_config_dict`), `model.safetensors` (the policy's state dict; the LM's tied
embedding saved as `lm_head.weight`), `tokenizer.json` beside them; the normalization statistics in
`norm_stats.pkl` (the evaluation's: qpos_mean / qpos_std [state] for the state, action_mean / action_std
[chunk, 20] one row per chunk step, and for checkpoints that emit relative then absolute halves
action_mean_abs / action_std_abs, which become the table's second half). The pickle is read by an
unpickler that builds numpy arrays and nothing else.

Dimensions come from the configs and tensor shapes; the vision tower's head count from the embedded
vision config (its code fixes 16; the config says so). The special tokens' ids come from tokenizer.json.
Settings a checkpoint does not carry: `--set state_names=[...]`, `action_period_s`, `memory_frames`
(memory checkpoints; default 6 as the reference's quick start), `memory_interval`.
"""

from __future__ import annotations

import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone import hunyuan_mot, hyvit
from embodied_ros.backbone.hunyuan_mot import MoTConfig
from embodied_ros.backbone.hyvit import HyViTConfig
from embodied_ros.bundle.source import Stacked, map_safetensors
from embodied_ros.models.hy_vla.config import DEFAULT_ACTION_PERIOD_S, SPECIAL_TOKENS, HyVLAConfig
from embodied_ros.models.kit import lerobot_save

CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, STATS_FILE = "config.json", "model.safetensors", "tokenizer.json", \
    "norm_stats.pkl"
CAMERA_PREFIX = "observation.images."
ACTION_DIM = 20  # HyVLAConfig.action_feature: a class constant of the reference, not in config.json
DEFAULT_MEMORY_FRAMES = 6
OVERRIDE_KEYS = frozenset({"state_names", "action_period_s", "memory_frames", "memory_interval", "tokenizer"})

_POLICY = r"model\."
_VISUAL = _POLICY + r"dual_tower\.vlm\.model\.visual\."
_LM = _POLICY + r"dual_tower\.vlm\.model\.language_model\."
_EXPERT = _POLICY + r"dual_tower\.expert\."
_LM_HEAD = "model.dual_tower.vlm.model.language_model.lm_head.weight"
_HEADS = {"state_proj": "state_in", "action_in_proj": "action_in", "action_time_mlp_in": "action_time_in",
          "action_time_mlp_out": "action_time_out", "action_out_proj": "action_out"}


@dataclass(frozen=True)
class Checkpoint:
    config: HyVLAConfig
    weights: dict[str, np.ndarray]
    stats: dict[str, dict[str, np.ndarray]]
    tokenizer: bytes | None
    source: str


def _rules() -> list[tuple[re.Pattern, str | None]]:
    rules = [(_VISUAL + r"vision_tower\.patch_embed\.proj\.(weight|bias)", r"vision.patch.\1"),
             (_VISUAL + r"vision_tower\.pos_embed", "vision.position"),
             (_LM + r"model\.embed_tokens\.weight", "lm.token_embd"),
             (re.escape(_LM_HEAD), None),  # the tied table when embed_tokens is absent (rename_lerobot)
             (_LM + r"model\.norm\.weight", None),
             (_EXPERT + r"lm_head\.weight", None),
             (_EXPERT + r"model\.norm\.weight", "expert.final_norm.weight")]
    rules += [(_POLICY + rf"{theirs}\.(weight|bias)", rf"{ours}.\1") for theirs, ours in _HEADS.items()]
    for theirs, ours in hyvit.LAYER_NAMES.items():
        rules.append((_VISUAL + rf"vision_tower\.blocks\.(\d+)\.{re.escape(theirs)}\.(weight|bias)",
                      rf"vision.blk.\1.{ours}.\2"))
    for theirs, ours in hyvit.MERGER_NAMES.items():
        rules.append((_VISUAL + rf"merger\.{re.escape(theirs)}\.(weight|bias)", rf"vision.merger.{ours}.\1"))
    for theirs, ours in hunyuan_mot.LAYER_NAMES.items():
        head, _, tail = theirs.partition(".")
        vision = f"{head}_v.{tail}" if head == "mlp" else f"{theirs}_v"
        rules.append((_LM + rf"model\.layers\.(\d+)\.{re.escape(theirs)}\.weight", rf"lm.blk.\1.{ours}.weight"))
        rules.append((_LM + rf"model\.layers\.(\d+)\.{re.escape(vision)}\.weight", rf"lm.blk.\1.{ours}_v.weight"))
        # every suffix row is an image-patch row for the expert: only its `_v` set is ever read
        rules.append((_EXPERT + rf"model\.layers\.(\d+)\.{re.escape(vision)}\.weight", rf"expert.blk.\1.{ours}.weight"))
        rules.append((_EXPERT + rf"model\.layers\.(\d+)\.{re.escape(theirs)}\.weight", None))
    for theirs, ours in hunyuan_mot.HEAD_NORM_NAMES.items():
        rules.append((_LM + rf"model\.layers\.(\d+)\.{re.escape(theirs)}\.weight", rf"lm.blk.\1.{ours}.weight"))
        rules.append((_EXPERT + rf"model\.layers\.(\d+)\.{re.escape(theirs)}\.weight", None))  # it uses the LM's
    return [(re.compile(pattern + "$"), replacement) for pattern, replacement in rules]


_RULES = _rules()


def runtime_name(name: str) -> str | None:
    """Runtime name of a checkpoint tensor; None for tensors inference never reads."""
    return lerobot_save.runtime_name(name, _RULES, "HY-VLA")


def renamed(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The checkpoint's tensors under runtime names, still unread; the patch conv flattened, q/k/v and
    gate/up stacked when the bundle writer reads them."""
    out = lerobot_save.rename_lerobot(state_dict, runtime_name, "HY-VLA", _LM_HEAD)
    if "lm.token_embd" not in out:
        raise ValueError("the checkpoint has no LM embedding table (embed_tokens or its tied lm_head)")
    out["vision.position"] = out["vision.position"].reshape(-1, out["vision.position"].shape[-1])
    for name in [n for n in out if n.endswith((".attn_q.weight", ".attn_q_v.weight"))]:
        stem, suffix = name.split(".attn_q")
        parts = [out.pop(f"{stem}.attn_{p}{suffix}") for p in "qkv"]
        out[f"{stem}.attn_qkv{suffix}"] = Stacked(parts)
    for name in [n for n in out if n.endswith((".ffn_gate.weight", ".ffn_gate_v.weight"))]:
        stem, suffix = name.split(".ffn_gate")
        parts = [out.pop(f"{stem}.ffn_{p}{suffix}") for p in ("gate", "up")]
        out[f"{stem}.ffn_gate_up{suffix}"] = Stacked(parts)
    return out


def tensor_group(name: str) -> str:
    """Quantization groups: vision, lm, expert, embedding, heads."""
    if name == "lm.token_embd":
        return "embedding"
    stack = name.split(".", 1)[0]
    return stack if stack in ("vision", "lm", "expert") else "heads"


def detect(source: Path) -> bool:
    """True for a folder holding an HY-VLA checkpoint in the released layout (config only)."""
    config = lerobot_save.saved_config(source)
    return config is not None and config.get("type") == "hy" and isinstance(config.get("vlm_config_dict"), dict)


def special_ids(tokenizer_json: bytes) -> dict[str, int]:
    added = {token["content"]: int(token["id"]) for token in json.loads(tokenizer_json).get("added_tokens", [])}
    missing = [token for token in SPECIAL_TOKENS.values() if token not in added]
    if missing:
        raise ValueError(f"tokenizer.json lacks HY's special tokens {missing}")
    return {name: added[token] for name, token in SPECIAL_TOKENS.items()}


def _count(weights: Mapping[str, Any], stack: str) -> int:
    return len({name.split(".")[2] for name in weights if name.startswith(f"{stack}.blk.")})


class _ArraysOnly(pickle.Unpickler):
    """Unpickles dicts, lists, numbers and numpy arrays; any other class a file names is refused."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy", "ndarray"),
               ("numpy", "dtype")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise ValueError(f"{STATS_FILE} names {module}.{name}; only numpy arrays are read from it")
        return super().find_class(module, name)


def read_stats(source: Path, chunk_size: int) -> dict[str, dict[str, np.ndarray]]:
    """The state's mean/std and the actions' per-row table [chunk_size, 20]; {} without the file."""
    path = Path(source) / STATS_FILE
    if not path.is_file():
        return {}
    try:
        with path.open("rb") as file:
            raw = _ArraysOnly(file).load()
        state = {"mean": np.asarray(raw["qpos_mean"], np.float32), "std": np.asarray(raw["qpos_std"], np.float32)}
        mean, std = (np.asarray(raw[key], np.float32).reshape(-1, ACTION_DIM) for key in ("action_mean", "action_std"))
        if raw.get("action_mean_abs") is not None and mean.shape[0] * 2 == chunk_size:
            mean = np.concatenate([mean, np.asarray(raw["action_mean_abs"], np.float32).reshape(-1, ACTION_DIM)])
            std = np.concatenate([std, np.asarray(raw["action_std_abs"], np.float32).reshape(-1, ACTION_DIM)])
    except (KeyError, TypeError, pickle.UnpicklingError, EOFError) as error:
        raise ValueError(f"{path}: not HY-VLA statistics (needs qpos_mean, qpos_std, action_mean, action_std): "
                         f"{error!r}") from None
    if mean.shape[0] not in (1, chunk_size):
        raise ValueError(f"{path}: action statistics have {mean.shape[0]} rows, the model's chunk has {chunk_size}")
    return {"state": state, "action": {"mean": mean if mean.shape[0] > 1 else mean[0],
                                       "std": std if std.shape[0] > 1 else std[0]}}


def config_of(raw: Mapping[str, Any], weights: Mapping[str, Any], stats, ids: dict[str, int],
              overrides: Mapping[str, Any]) -> HyVLAConfig:
    vlm = raw["vlm_config_dict"]
    text, vision = vlm["text_config"], vlm.get("vision_config", {})
    width, patch_features = weights["vision.patch.weight"].shape
    size = raw.get("resize_imgs_with_padding") or [224, 224]
    if size[0] != size[1]:
        raise ValueError(f"resize_imgs_with_padding {size} is not square; this runtime reads square images")
    video = bool(raw.get("use_video_encoder"))
    scaling = text.get("rope_scaling") or {}
    if scaling and not (scaling.get("type") == "dynamic" and "alpha" in scaling):
        raise ValueError(f"rope_scaling {scaling} is not the dynamic-alpha form this runtime implements")
    lm = MoTConfig(width=text["hidden_size"], depth=_count(weights, "lm"), mlp_dim=text["intermediate_size"],
                   num_heads=text["num_attention_heads"], num_kv_heads=text["num_key_value_heads"],
                   head_dim=text.get("head_dim") or text["attention_head_dim"], eps=text.get("rms_norm_eps", 1e-5),
                   rope_theta=text.get("rope_theta", 10000.0), rope_alpha=float(scaling.get("alpha", 1.0)))
    expert_width, expert_mlp = weights["expert.blk.0.ffn_down.weight"].shape
    expert = MoTConfig(width=expert_width, depth=_count(weights, "expert"), mlp_dim=expert_mlp,
                       num_heads=lm.num_heads, num_kv_heads=lm.num_kv_heads, head_dim=lm.head_dim, eps=lm.eps,
                       rope_theta=lm.rope_theta, rope_alpha=lm.rope_alpha)
    tower = HyViTConfig(image_size=int(size[0]), patch_size=int(round((patch_features / 3) ** 0.5)), width=width,
                        depth=_count(weights, "vision"), mlp_dim=weights["vision.blk.0.fc1.weight"].shape[0],
                        num_heads=vision.get("num_attention_heads", 16),
                        position_grid=int(round(weights["vision.position"].shape[0] ** 0.5)),
                        out_width=weights["vision.merger.proj2.weight"].shape[0],
                        spacetime_stride=int(raw.get("spacetime_layer_stride", 4)) if video else 0)
    state_dim = len(stats["state"]["mean"]) if stats else raw.get("max_state_dim", 32)
    frames = int(overrides.get("memory_frames", DEFAULT_MEMORY_FRAMES if video else 1))
    return HyVLAConfig(
        vision=tower, lm=lm, expert=expert, vocab_size=weights["lm.token_embd"].shape[0], special_ids=ids,
        camera_names=tuple(key[len(CAMERA_PREFIX):] if key.startswith(CAMERA_PREFIX) else key
                           for key in raw.get("image_features") or {}),
        state_names=tuple(overrides.get("state_names") or (f"state_{i}" for i in range(state_dim))),
        action_names=tuple(f"action_{i}" for i in range(ACTION_DIM)),
        empty_cameras=int(raw.get("empty_cameras", 0)),
        visual_segment_isolation=bool(raw.get("visual_segment_isolation", False)),
        memory_frames=frames, memory_interval=int(overrides.get("memory_interval", 1)),
        chunk_size=int(raw.get("n_action_steps", 50)), max_action_dim=int(raw.get("max_action_dim", 32)),
        max_state_dim=int(raw.get("max_state_dim", 32)), num_inference_steps=int(raw.get("num_steps", 10)),
        tokenizer_max_length=int(raw.get("tokenizer_max_length", 64)),
        action_period_s=float(overrides.get("action_period_s", DEFAULT_ACTION_PERIOD_S)))


def read_checkpoint(source: Path, overrides: Mapping[str, Any] | None = None) -> Checkpoint:
    source = Path(source)
    overrides = lerobot_save.check_overrides(overrides, OVERRIDE_KEYS, "hy_vla")
    if not detect(source):
        raise ValueError(f"{source}: not an HY-VLA checkpoint folder (needs {CONFIG_FILE} of type 'hy' with "
                         f"vlm_config_dict, and {WEIGHTS_FILE})")
    raw = json.loads((source / CONFIG_FILE).read_text())
    tokenizer = lerobot_save.tokenizer_bytes(source, overrides, TOKENIZER_FILE, "tokenizer file")
    if tokenizer is None:
        raise ValueError(f"{source}: no {TOKENIZER_FILE}; HY-VLA's prefix needs its special tokens' ids")
    weights = renamed(map_safetensors(source / WEIGHTS_FILE))
    stats = read_stats(source, int(raw.get("n_action_steps", 50)))
    try:
        config = config_of(raw, weights, stats, special_ids(tokenizer), overrides)
    except KeyError as error:
        raise ValueError(f"{source / CONFIG_FILE} lacks {error}") from None
    return Checkpoint(config, weights, stats, tokenizer, str(source))


def convert(source: Path, output: Path, quant_plan: Any = None, reference: Path | None = None,
            progress: bool = False, overrides: Mapping[str, Any] | None = None) -> None:
    """Write the bundle of the checkpoint in `source` to `output` (groups: vision, lm, expert, embedding,
    heads); with `reference` (a record folder) its cases are the bundle's reference record."""
    from embodied_ros.models.hy_vla import RECORDS

    checkpoint = read_checkpoint(source, overrides)
    lerobot_save.write_policy_bundle("hy_vla", checkpoint, quant_plan, tensor_group, Path(output), reference, progress,
                                     RECORDS, tokenizer_kind="huggingface-json")
