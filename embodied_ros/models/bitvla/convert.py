"""BitVLA checkpoint -> bundle.

The source is a fine-tuned BitVLA checkpoint folder as BitVLA's OFT fine-tuning writes it (the
released `hongyuw/ft-bitvla-*` layout):

    config.json                 `Bitvla_Config` ("model_type": "bitvla"): text_config (BitNet), vision_config
                                (SigLIP with vit_weight_bits / vit_act_bits), image_token_index,
                                vision_feature_layer, norm_stats
    model.safetensors           (or model.safetensors.index.json + shards) the LLaVA-layout weights,
                                BitLinear weights in full precision (BitVLA quantizes them online)
    action_head--*_checkpoint.pt, proprio_projector--*_checkpoint.pt
                                OFT's head and projector (torch.save of DDP state dicts; read without torch)
    dataset_statistics.json     per dataset: action / proprio q01, q99, mask (read as OFT's evaluation
                                reads it, in place of config.json's norm_stats)
    tokenizer.json, tokenizer_config.json (or chat_template.json), preprocessor_config.json

Every BitLinear weight is ternarized here exactly as the reference does it online, and stored as
TQ2_0 with its exact scale (weights.py); the plan (`--quant`) chooses the types of the other tensors.

What the checkpoint does not carry comes from `--set KEY=VALUE` or the "settings" of a cases.json
beside the checkpoint (the reference folder's, the checkpoint's, or its parent's):

    chunk_size        OFT's NUM_ACTIONS_CHUNK (default 8, LIBERO's)
    camera_names      default ["full_image", "wrist_image"][:num_images_in_input] (default 2 images)
    center_crop       whether the evaluation center-crops (default true: models fine-tuned with image
                      augmentation, as the released ones)
    unnorm_key        the dataset whose statistics un-normalize (default: the only one)
    use_proprio       default: whether a proprio projector file is present
    state_names, action_names, action_period_s    (defaults: proprio_<i>; x y z roll pitch yaw gripper
                      for 7 actions, else action_<i>; 0.05 s, LIBERO's 20 Hz)
    prompt_before, prompt_after                   the chat framing, when the checkpoint's template is
                                                  not BitVLA's
    tokenizer         a tokenizer.json to use instead of the checkpoint's (`--tokenizer`)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from embodied_ros.backbone.bitnet import BitNetConfig
from embodied_ros.backbone.siglip import VisionConfig
from embodied_ros.bundle.source import map_safetensors
from embodied_ros.heads import oft_l1
from embodied_ros.models.bitvla import prompt as prompts
from embodied_ros.models.bitvla import weights as names
from embodied_ros.models.bitvla.config import ARCHITECTURE, LIBERO_ACTIONS, BitVLAConfig, TokenIds

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
STATS_FILE = "dataset_statistics.json"
TOKENIZER_FILE = "tokenizer.json"
SETTINGS = frozenset({"chunk_size", "camera_names", "num_images_in_input", "center_crop", "unnorm_key", "use_proprio",
                      "state_names", "action_names", "action_period_s", "prompt_before", "prompt_after", "tokenizer"})


def _config(source: Path) -> dict | None:
    try:
        config = json.loads((Path(source) / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def detect(source: Path) -> bool:
    """True for a folder holding a fine-tuned BitVLA checkpoint (config.json of model_type "bitvla"
    beside its safetensors weights); file names and config only."""
    source = Path(source)
    if not source.is_dir() or not ((source / WEIGHTS_FILE).is_file() or (source / INDEX_FILE).is_file()):
        return False
    config = _config(source)
    return config is not None and config.get("model_type") == "bitvla"


# ---- reading the folder --------------------------------------------------------------------------

def _safetensors(source: Path) -> dict[str, np.ndarray]:
    if (source / WEIGHTS_FILE).is_file():
        return map_safetensors(source / WEIGHTS_FILE)
    shards = sorted(set(json.loads((source / INDEX_FILE).read_text())["weight_map"].values()))
    tensors: dict[str, np.ndarray] = {}
    for shard in shards:
        tensors.update(map_safetensors(source / shard))
    return tensors


def _component(source: Path, kind: str) -> dict[str, np.ndarray] | None:
    """The state dict of OFT's `kind` file (action_head, proprio_projector); None when absent."""
    files = sorted(path for path in source.iterdir() if kind in path.name and "checkpoint" in path.name)
    if len(files) > 1:
        raise ValueError(f"{source}: several {kind} checkpoints ({', '.join(p.name for p in files)}); keep one")
    return names.load_torch_state_dict(files[0]) if files else None


def _settings(source: Path, reference: Path | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(overrides) - SETTINGS)
    if unknown:
        raise ValueError(f"unknown bitvla conversion setting(s) {unknown}; known: {sorted(SETTINGS)}")
    settings: dict[str, Any] = {}
    for folder in ([Path(reference)] if reference else []) + [source, source.parent]:
        path = folder / "cases.json"
        if path.is_file():
            notes = json.loads(path.read_text())
            settings.update(notes.get("settings", {}))
            if "action_period_s" in notes:
                settings.setdefault("action_period_s", notes["action_period_s"])
            break
    settings.update(overrides)
    return settings


def _stats(raw: Mapping[str, Any], source: Path, key: str | None) -> tuple[str, dict]:
    stats = json.loads((source / STATS_FILE).read_text()) if (source / STATS_FILE).is_file() else raw.get("norm_stats")
    if not stats:
        raise ValueError(f"{source}: no action statistics ({STATS_FILE} or config.json norm_stats)")
    if key is None:
        if len(stats) != 1:
            raise ValueError(f"{source}: statistics of several datasets ({', '.join(stats)}); choose one with "
                             "--set unnorm_key=NAME")
        key = next(iter(stats))
    if key not in stats:
        raise ValueError(f"{source}: no statistics for {key!r}; there are {', '.join(stats)}")
    return key, stats[key]


def _masked_bounds(entry: Mapping[str, Any], what: str) -> dict[str, np.ndarray]:
    try:
        low, high = (np.asarray(entry[k], np.float64) for k in ("q01", "q99"))
    except KeyError:
        raise ValueError(f"the {what} statistics lack q01/q99 (BitVLA un-normalizes with BOUNDS_Q99)") from None
    mask = np.asarray(entry.get("mask", np.ones(low.size, bool)), bool)
    return {"q01": low, "q99": high, "mask": mask.astype(np.float32)}


def _chat_frame(source: Path, settings: Mapping[str, Any]) -> tuple[str, str]:
    if "prompt_before" in settings or "prompt_after" in settings:
        return str(settings["prompt_before"]), str(settings["prompt_after"])
    template = None
    tokenizer_config = source / "tokenizer_config.json"
    if tokenizer_config.is_file():
        template = json.loads(tokenizer_config.read_text()).get("chat_template")
    if template is None and (source / "chat_template.json").is_file():
        template = json.loads((source / "chat_template.json").read_text()).get("chat_template")
    if template is None:
        raise ValueError(f"{source}: no chat template (tokenizer_config.json or chat_template.json); give "
                         "--set prompt_before=... --set prompt_after=...")
    return prompts.split_chat_template(template)


def _token_id(tokenizer_json: bytes, token: str) -> int:
    added = {entry["content"]: entry["id"] for entry in json.loads(tokenizer_json.decode("utf-8")).get("added_tokens", [])}
    if token not in added:
        raise ValueError(f"the tokenizer has no {token!r} token (BitVLA's fine-tuning adds it)")
    return int(added[token])


def _check_image_processor(source: Path, size: int) -> None:
    path = source / "preprocessor_config.json"
    if not path.is_file():
        return
    processor = json.loads(path.read_text())
    got = processor.get("size", {})
    problems = []
    if (got.get("height"), got.get("width")) not in ((size, size), (None, None)):
        problems.append(f"size {got} for a {size} px tower")
    if processor.get("image_mean", [0.5] * 3) != [0.5] * 3 or processor.get("image_std", [0.5] * 3) != [0.5] * 3:
        problems.append("mean/std other than 0.5")
    if processor.get("resample", 3) != 3 or not processor.get("do_resize", True) or not processor.get("do_normalize", True):
        problems.append("resampling other than bicubic, or resizing / normalizing off")
    if problems:
        raise ValueError(f"{path}: an image processor this runtime does not reproduce ({'; '.join(problems)})")


def read_checkpoint(source: Path, overrides: Mapping[str, Any] | None = None, reference: Path | None = None):
    """(config, stored tensors, stats, tokenizer.json bytes) of a BitVLA checkpoint folder."""
    source = Path(source)
    if not detect(source):
        raise ValueError(f"{source}: not a BitVLA checkpoint folder (needs {CONFIG_FILE} of model_type \"bitvla\" and "
                         f"{WEIGHTS_FILE})")
    raw = _config(source)
    settings = _settings(source, reference, dict(overrides or {}))
    text, vision = raw["text_config"], raw["vision_config"]
    if raw.get("vision_feature_select_strategy", "full") != "full":
        raise ValueError("BitVLA reads every SigLIP token (vision_feature_select_strategy 'full'); this config says "
                         f"{raw['vision_feature_select_strategy']!r}")
    if (raw.get("projector_hidden_act", "gelu") != "gelu"
            or vision.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh"):
        raise ValueError("unexpected activations (connector gelu and SigLIP gelu_pytorch_tanh expected)")
    if text.get("attention_bias", False):  # (its MLP is ReLU-squared whatever hidden_act says)
        raise ValueError("BitVLA's LM has no attention biases; this config sets attention_bias")
    layers = int(vision["num_hidden_layers"])
    feature_layer = int(raw.get("vision_feature_layer", -2))
    kept = feature_layer if feature_layer >= 0 else layers + 1 + feature_layer
    if not 0 < kept <= layers:
        raise ValueError(f"vision_feature_layer {feature_layer} does not name a layer of {layers}")

    tensors = names.rename(_safetensors(source))
    head = _component(source, "action_head")
    if head is None:
        raise ValueError(f"{source}: no action_head--*_checkpoint.pt (OFT's L1 regression head)")
    tensors.update(oft_l1.head_weights(head))
    proprio = _component(source, "proprio_projector")
    use_proprio = bool(settings.get("use_proprio", proprio is not None))
    if use_proprio:
        if proprio is None:
            raise ValueError(f"{source}: use_proprio is set but there is no proprio_projector--*_checkpoint.pt")
        tensors.update(oft_l1.proprio_weights(proprio))
    tensors = {name: value for name, value in tensors.items()
               if not (name.startswith("vision.blk.") and int(name.split(".")[2]) >= kept)}

    width = int(text["hidden_size"])
    action_dim = tensors["head.fc_out.weight"].shape[0]
    proprio_dim = tensors["proprio.fc1.weight"].shape[1] if use_proprio else 0
    tokenizer_path = Path(settings.get("tokenizer") or source / TOKENIZER_FILE)
    if not tokenizer_path.is_file():
        raise ValueError(f"{tokenizer_path} does not exist (BitVLA's prompt needs its tokenizer.json)")
    tokenizer = tokenizer_path.read_bytes()
    key, dataset = _stats(raw, source, settings.get("unnorm_key"))
    stats = {"action": _masked_bounds(dataset["action"], "action")}
    if use_proprio:
        stats["state"] = _masked_bounds(dataset["proprio"], "proprio")
    n_cameras = int(settings.get("num_images_in_input", 2))
    default_cameras = ["full_image", "wrist_image", *[f"camera_{i}" for i in range(2, n_cameras)]]
    cameras = settings.get("camera_names") or default_cameras[:n_cameras]
    before, after = _chat_frame(source, settings)
    image_size = int(vision["image_size"])
    _check_image_processor(source, image_size)
    config = BitVLAConfig(
        vision=VisionConfig(image_size=image_size, patch_size=int(vision["patch_size"]), width=int(vision["hidden_size"]),
                            depth=kept, mlp_dim=int(vision["intermediate_size"]),
                            num_heads=int(vision["num_attention_heads"]), eps=float(vision.get("layer_norm_eps", 1e-6))),
        vision_weight_bits=int(vision.get("vit_weight_bits", 32)), vision_act_bits=int(vision.get("vit_act_bits", 32)),
        lm=BitNetConfig(width=width, depth=int(text["num_hidden_layers"]), mlp_dim=int(text["intermediate_size"]),
                        num_heads=int(text["num_attention_heads"]),
                        num_kv_heads=int(text.get("num_key_value_heads") or text["num_attention_heads"]),
                        vocab_size=int(text["vocab_size"]), eps=float(text.get("rms_norm_eps", 1e-5)),
                        rope_theta=float(text.get("rope_theta", 500000.0))),
        tokens=TokenIds(image=_token_id(tokenizer, prompts.IMAGE_TOKEN), proprio=_token_id(tokenizer, prompts.PROPRIO_TOKEN),
                        stop=_token_id(tokenizer, prompts.STOP_TOKEN)),
        prompt_before=before, prompt_after=after, camera_names=tuple(cameras),
        state_names=tuple(settings.get("state_names") or [f"proprio_{i}" for i in range(proprio_dim)]),
        action_names=tuple(settings.get("action_names") or (LIBERO_ACTIONS if action_dim == 7 else
                                                            [f"action_{i}" for i in range(action_dim)])),
        chunk_size=int(settings.get("chunk_size", 8)), use_proprio=use_proprio,
        center_crop=bool(settings.get("center_crop", True)), head_blocks=oft_l1.head_blocks(tensors),
        action_period_s=float(settings.get("action_period_s", 0.05)))
    if config.action_dim != action_dim or (use_proprio and config.proprio_dim != proprio_dim):
        raise ValueError(f"the head predicts {action_dim} actions and the projector reads {proprio_dim} values; the "
                         f"settings name {config.action_dim} actions and {config.proprio_dim} state values")
    if vision.get("vit_weight_bits", 32) not in (1, 32) or vision.get("vit_act_bits", 32) not in (8, 32):
        raise ValueError("SigLIP bits other than (1 or 32) weight / (8 or 32) act bits are not supported")
    names.check_shapes(tensors, names.expected_shapes(config), "BitVLA checkpoint")
    stored: dict[str, Any] = {}
    for name, value in tensors.items():
        if names.is_bit_linear(name, config):
            stored.update(names.ternary_tensors(name, value))
        else:
            stored[name] = np.asarray(value, dtype=np.float32)
    return config, stored, stats, tokenizer, key


def convert(source: Path, output: Path, quant_plan: Any = None, reference: Path | None = None,
            progress: bool = False, overrides: Mapping[str, Any] | None = None) -> None:
    """Write the bundle of the checkpoint in `source` to `output`; a `reference` record folder becomes
    the bundle's reference record, which the written bundle must reproduce (else it is removed)."""
    from embodied_ros.bundle import BundleWriter, QuantPlan, RobotMetadata
    from embodied_ros.models.bitvla import parity
    from embodied_ros.models.kit.lerobot_save import write_checked

    config, stored, stats, tokenizer, key = read_checkpoint(Path(source), overrides, reference)
    plan = quant_plan if isinstance(quant_plan, QuantPlan) else QuantPlan.parse(quant_plan)
    writer = BundleWriter(ARCHITECTURE, plan, group_of=names.tensor_group)
    model, solver, robot = config.bundle_sections()
    writer.set_config(model)
    writer.set_solver(solver)
    writer.set_robot(RobotMetadata(**robot))
    writer.set_source(f"{source} (statistics: {key})")
    writer.add_weights(stored)
    writer.set_stats(stats)
    writer.set_tokenizer(tokenizer, kind="huggingface-json")
    write_checked(writer, Path(output), reference, progress, parity.RECORDS)
