"""Reference records of HY-VLA, made by its own PyTorch code (github.com/Tencent-Hunyuan/Hy-Embodied-0.5-VLA).

Run in the reference environment of install.sh, never inside embodied_ros:

    VENV/bin/python gen_records.py [SPEC.json] OUT --source HY_VLA_CHECKOUT

OUT gets a model-level record: the checkpoint in the released layout at the top (config.json with the
embedded VLM config, tokenizer.json and its companions, model.safetensors, as `HyVLA.save_pretrained`
writes them, plus norm_stats.pkl), cases.json (tasks, settings, versions) and cases.npz.

Each case calls `HyVLA.forward_evaluate(batch)` on a random-weight model built from the spec, with the
batch the evaluation's wrapper makes from raw inputs: uint8 camera images at their own size ([H, W, 3],
or [K, H, W, 3] with the memory encoder on) / 255, the raw state normalized with norm_stats (qpos), the
task. The flow noise is the case's own (the model's `sample_noise` is replaced by one returning it).
`HyVLAFlowMatching.sample_actions` is wrapped to record what it consumed: the prepared images ([-1, 1],
resized with padding), image masks, token ids and mask, the padded state, the noise; and what it
produced, normalized and as the wrapper de-normalizes it (relative actions, before its robot-specific
pose decoding). The raw inputs are kept too; the vision tower's output of case 0 is kept as a tap.

What is changed around the code, and why:
- The vision tower's dimensions are constants in its code (HYViT2: 1152 wide, 27 layers, positions for
  2048 px; the merger 1152 -> 2048; the expert's MLP 2048): the spec's small values replace them by
  patching those constants, not the code that uses them.
- Its bf16 casts (weights, image tokens, suffix embeddings, attention outputs) run as float32: the modules'
  `torch.bfloat16` is float32 here, so the record is the same math in float32. The one cast left is
  the positional embedding's `.bfloat16()` of the single-frame vision path (a rounding of a table the
  runtime repeats).
- flash-attn is this folder's SDPA stand-in; the tokenizer is a byte-level BPE trained on the tasks
  with HY's special tokens (the real tokenizer.json is on the hub).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import common  # noqa: E402

CAMERA_PREFIX = "observation.images."
CAMERAS = ["observation.images.top_head", "observation.images.hand_left", "observation.images.hand_right"]
SPECIAL = {"bos": "<｜hy_begin▁of▁sentence｜>", "user": "<｜hy_User｜>", "assistant": "<｜hy_Assistant｜>",
           "vision_start": "<｜hy_place▁holder▁no▁666｜>", "vision_end": "<｜hy_place▁holder▁no▁667｜>",
           "vision_split": "<｜hy_place▁holder▁no▁671｜>", "pad": "<｜hy_pad｜>", "eos": "<｜hy_end▁of▁sentence｜>"}

DEFAULTS = {
    "name": "hy_vla_tiny",
    "vision": {"width": 32, "layers": 2, "heads": 2, "mlp_ratio": 2.5, "patch_size": 16, "position_grid": 8},
    "text": {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "attention_head_dim": 16, "vocab_size": 640,
             "org_vocab_size": 640, "rope_theta": 10000.0, "rope_scaling": {"type": "dynamic", "alpha": 1000.0},
             "rms_norm_eps": 1e-5, "max_position_embeddings": 4096},
    "expert": {"width": 48, "mlp": 80},
    "policy": {"chunk_size": 8, "n_action_steps": 8, "max_state_dim": 24, "max_action_dim": 24, "num_steps": 10,
               "tokenizer_max_length": 12, "resize_imgs_with_padding": [96, 96], "empty_cameras": 1,
               "visual_segment_isolation": True, "use_video_encoder": False, "spacetime_layer_stride": 4},
    "cameras": CAMERAS,
    "state_dim": 20,
    "tokenizer": {"bpe_vocab": 600},
    "seeds": {"torch_manual_seed": 11, "weights": 811, "data": 812},
    "cases": [
        {"task": "place the empty cup on the coaster", "image_hw": [48, 64]},
        {"task": "stack_the_green block\non the red block and then push the blue one", "image_hw": [96, 80],
         "missing": ["observation.images.hand_right"]},
        {"task": "open the drawer", "image_hw": [64, 64], "state_scale": 3.0},
    ],
}


# ---- loading HY-VLA's code with the spec's constants -------------------------------------------------

def load_hy_vla(source: Path, spec: dict, precision: str):
    """Imports HY-VLA from a checkout with the spec's small constants; with precision "float32" its bf16
    casts run as float32."""
    sys.path.insert(0, str(source))
    import hy_vla.modeling_dual_tower as dual_tower
    import hy_vla.modeling_hy_vla as modeling
    import hy_vla.hunyuan_vl_mot.modeling_hunyuan_vl_mot as mot

    float32_torch = types.ModuleType("torch_with_bf16_as_f32")
    float32_torch.__dict__.update({k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")},
                                  __version__=torch.__version__)
    float32_torch.bfloat16 = torch.float32
    for module in (modeling, dual_tower, mot) if precision == "float32" else ():
        module.torch = float32_torch

    vision = spec["vision"]
    cfg = mot._HYViT2VisionCfg
    for field, value in (("width", vision["width"]), ("layers", vision["layers"]), ("heads", vision["heads"]),
                         ("mlp_ratio", vision["mlp_ratio"]), ("patch_size", vision["patch_size"])):
        setattr(cfg, field, value)
        cfg.__dataclass_fields__[field].default = value
    cfg.__init__.__defaults__ = tuple(getattr(cfg, f.name) for f in dataclasses.fields(cfg))
    tower_init = mot._HYViT2VisionTransformer.__init__

    def small_tower(self, *args, **kwargs):
        kwargs["img_size"] = vision["position_grid"] * vision["patch_size"]
        tower_init(self, *args, **kwargs)
    mot._HYViT2VisionTransformer.__init__ = small_tower

    merger_init = mot._HYViT2MLPProjector.__init__

    def small_merger(self, in_channels, out_channels, twoview=False):
        merger_init(self, vision["width"], spec["text"]["hidden_size"], twoview)
    mot._HYViT2MLPProjector.__init__ = small_merger

    dual_init = dual_tower.HyDualTowerConfig.__init__

    def small_expert(self, vlm_config=None, expert_config=None, *args, **kwargs):
        if expert_config is not None:
            expert_config.intermediate_size = spec["expert"]["mlp"]
        dual_init(self, vlm_config, expert_config, *args, **kwargs)
    dual_tower.HyDualTowerConfig.__init__ = small_expert
    return modeling


def make_tokenizer(spec: dict):
    """A byte-level BPE tokenizer with a tiny vocabulary and HY's special tokens (appended after the BPE
    vocabulary, so their ids are the last ones)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [case["task"].replace("_", " ").replace("\n", " ") for case in spec["cases"]]
    corpus += ["pick up the bottle", "move the mug to the left of the plate", "hand over the block"]
    trainer = trainers.BpeTrainer(vocab_size=spec["tokenizer"]["bpe_vocab"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tokenizer.train_from_iterator(corpus * 4, trainer)
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL.values()])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=SPECIAL["bos"], eos_token=SPECIAL["eos"],
                                   pad_token=SPECIAL["pad"], model_max_length=4096)


def weight_rule(norms: set[str]):
    base = common.fan_in_rule(norms)

    def rule(name, p, r):
        return 0.5 * r if name.endswith("pos_embed") else base(name, p, r)
    return rule


def build_policy(modeling, spec: dict, out: Path):
    from hy_vla.hunyuan_vl_mot import HunYuanVLMoTConfig

    tokenizer = make_tokenizer(spec)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out))
    text = dict(spec["text"], pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id)
    vision = spec["vision"]
    # the tower's code reads none of these; they say what it is, as the released config does
    vlm = HunYuanVLMoTConfig(text_config=text, vision_config={
        "hidden_size": vision["width"], "num_attention_heads": vision["heads"], "num_hidden_layers": vision["layers"],
        "intermediate_size": int(vision["width"] * vision["mlp_ratio"]), "patch_size": vision["patch_size"]})
    policy_spec = spec["policy"]
    features = {name: {"type": "VISUAL", "shape": [3, 480, 640]} for name in spec["cameras"]}
    config = modeling.HyVLAConfig(**{k: v for k, v in policy_spec.items() if k != "resize_imgs_with_padding"},
                                  resize_imgs_with_padding=tuple(policy_spec["resize_imgs_with_padding"]),
                                  image_features=features, proj_width=spec["expert"]["width"],
                                  vlm_config_dict=vlm.to_dict())
    config.pretrained_path = str(out)
    common.seed_global(spec["seeds"]["torch_manual_seed"])
    policy = modeling.HyVLA(config)
    common.redraw(policy, spec["seeds"]["weights"], weight_rule(common.norm_weight_names(policy)))
    return policy.eval()


# ---- cases ---------------------------------------------------------------------------------------------

def case_batch(spec: dict, case: dict, generator: torch.Generator, stats: dict) -> tuple[dict, dict]:
    """(the batch `forward_evaluate` gets, the raw inputs it came from): uint8 camera images [(K,) H, W, 3]
    made float as the evaluation's wrapper does (/ 255, channels first), a raw state [state_dim]
    normalized with the statistics (qpos), the task."""
    frames = spec["frames"] if spec["policy"]["use_video_encoder"] else None
    height, width = case["image_hw"]
    batch, raw = {}, {}
    for name in spec["cameras"]:
        shape = (frames, height, width, 3) if frames else (height, width, 3)
        pixels = torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)
        if name not in case.get("missing", []):
            raw[f"{name[len(CAMERA_PREFIX):]}_uint8"] = pixels
            batch[name] = (pixels.movedim(-1, -3).float() / 255.0)[None]
    state = torch.randn(spec["state_dim"], generator=generator) * case.get("state_scale", 1.0)
    raw["state_raw"] = state
    mean, std = (torch.from_numpy(np.asarray(stats[key], np.float32)) for key in ("qpos_mean", "qpos_std"))
    batch["observation.state"] = ((state - mean) / std)[None]
    batch["task"] = [case["task"]]
    return batch, raw


def run_case(policy, spec: dict, case: dict, generator: torch.Generator, stats: dict, taps: dict | None,
             repeats: int = 0):
    """(arrays of one case, its present cameras, the median seconds of `repeats` more calls or None)."""
    inner = policy.model
    drawn = torch.randn((1, spec["policy"]["n_action_steps"], spec["policy"]["max_action_dim"]), generator=generator)
    batch, raw = case_batch(spec, case, generator, stats)
    dtype = next(policy.parameters()).dtype  # the evaluation hands the policy its own dtype
    batch = {k: v.to(dtype) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    seen = {}
    sample = type(inner).sample_actions

    def recorded(self, images, img_masks, lang_tokens, lang_masks, state, noise=None, vis_attn=False):
        seen.update(images=[i.clone() for i in images], image_masks=torch.stack(img_masks, 1)[0].clone(),
                    tokens=lang_tokens[0].clone(), token_mask=lang_masks[0].clone(), state=state[0].clone(),
                    noise=drawn[0].clone())
        out = sample(self, images, img_masks, lang_tokens, lang_masks, state, noise=noise, vis_attn=vis_attn)
        seen["padded_actions"] = out[0].clone()
        return out

    inner.sample_actions = types.MethodType(recorded, inner)
    inner.sample_noise = lambda shape, device: drawn.clone()
    embed = inner.dual_tower.embed_image
    if taps is not None:
        def embed_recorded(image):
            output = embed(image)
            taps.setdefault("image_tokens", []).append(output[0].detach().clone())
            return output
        inner.dual_tower.embed_image = embed_recorded
    with torch.no_grad():
        pred = policy.forward_evaluate(batch)["pred"][0]
        inner.sample_actions = types.MethodType(sample, inner)
        inner.dual_tower.__dict__.pop("embed_image", None)
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            policy.forward_evaluate(batch)
            seconds.append(time.perf_counter() - start)
    del inner.sample_actions, inner.sample_noise
    inner.dual_tower.__dict__.pop("embed_image", None)
    present = [name for name in spec["cameras"] if name in batch]
    chunk = pred.shape[0]
    physical = pred.float() * torch.from_numpy(np.asarray(stats["action_std"], np.float32)[:chunk]) \
        + torch.from_numpy(np.asarray(stats["action_mean"], np.float32)[:chunk])  # the wrapper's relative actions
    arrays = {**raw, "actions": physical, "images": torch.stack([image[0] for image in seen["images"]]),
              "image_masks": seen["image_masks"], "tokens": seen["tokens"].to(torch.int32),
              "token_mask": seen["token_mask"], "state": seen["state"], "noise": seen["noise"],
              "normalized_actions": pred}
    median = float(np.median(seconds)) if seconds else None
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in arrays.items()}, present, median


def make_stats(spec: dict, rng: np.random.Generator) -> dict:
    """norm_stats.pkl as scripts/compute_norm_robotwin.py writes it: the state's mean / std, the actions'
    per chunk step [chunk, 20] (relative), the absolute ones likewise, no first frame."""
    chunk, action_dim = spec["policy"]["n_action_steps"], 20
    return {"qpos_mean": rng.normal(0, 0.5, spec["state_dim"]), "qpos_std": rng.uniform(0.5, 2.0, spec["state_dim"]),
            "action_mean": rng.normal(0, 0.5, (chunk, action_dim)), "action_std": rng.uniform(0.5, 2.0, (chunk, action_dim)),
            "action_mean_abs": rng.normal(0, 0.5, (chunk, action_dim)),
            "action_std_abs": rng.uniform(0.5, 2.0, (chunk, action_dim)), "first_frame": None}


def main(argv=None):
    def extra(parser: argparse.ArgumentParser):
        parser.add_argument("--source", required=True, type=Path, help="a checkout of Hy-Embodied-0.5-VLA")
        parser.add_argument("--threads", type=int, default=2)
        parser.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                            help="bfloat16: the code's own casts and the policy in bf16, as its evaluation runs it")
        parser.add_argument("--time", type=int, default=0, metavar="N",
                            help="also time N more calls of each case (median seconds in cases.json)")

    spec, out, args = common.command_line(DEFAULTS, __doc__.split("\n\n")[0], argv, extra, whole=("cases",))
    common.threads(args.threads)
    modeling = load_hy_vla(args.source.resolve(), spec, args.precision)
    policy = build_policy(modeling, spec, out)
    if args.precision == "bfloat16":
        policy = policy.to(torch.bfloat16)
    policy.save_pretrained(str(out))
    generator = common.rng(spec["seeds"]["data"])
    stats = make_stats(spec, np.random.default_rng(spec["seeds"]["data"]))
    arrays, notes, taps = {}, [], {}
    for k, case in enumerate(spec["cases"]):
        case_arrays, present, seconds = run_case(policy, spec, case, generator, stats, taps if k == 0 else None,
                                                 args.time)
        arrays.update({f"case{k}_{name}": value for name, value in case_arrays.items()})
        notes.append({"task": case["task"], "cameras": present, "image_hw": case["image_hw"],
                      **({"reference_seconds": seconds} if seconds is not None else {})})
    arrays["case0_image_tokens"] = torch.stack(taps["image_tokens"]).float().numpy()
    with open(out / "norm_stats.pkl", "wb") as file:
        pickle.dump(stats, file)
    settings = {"set": spec["name"], "spec": spec, "precision": args.precision, "cases": notes, "special_tokens": SPECIAL,
                "generated_by": common.generated_by("gen_records.py", "torch", "transformers", "timm",
                                                    threads=args.threads)}
    common.write_json(out / "cases.json", settings)
    common.write_record(out, arrays=arrays, compressed=True)
    print(f"wrote {out}: {len(notes)} cases, max |action| "
          f"{max(float(np.abs(arrays[f'case{k}_normalized_actions']).max()) for k in range(len(notes))):.3f}")


if __name__ == "__main__":
    main()
