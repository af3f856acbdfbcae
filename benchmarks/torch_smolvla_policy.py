"""LeRobot's SmolVLAPolicy at the dimensions of a SmolVLA reference record, timed per stage.

Runs in the PyTorch reference environment (docs/reference.md); bench_smolvla.py runs it as a
subprocess:

    python benchmarks/torch_smolvla_policy.py RECORD [--repeats R] [--warmup W] [--threads T]
                                             [--dtype f32|deployed|bf16]

SmolVLA builds its VLM from the hub name's config even with load_vlm_weights=False; offline, the
two lookups in lerobot's smolvlm_with_expert module (AutoConfig, AutoProcessor) are answered with a
SmolVLMConfig of the record's dimensions, the record's model.safetensors is loaded, and case 0 runs
through `predict_action_chunk(batch, noise=...)`, eager float32. Stage times come from wrappers:
vision + embeddings = `embed_prefix`, each Euler step = `denoise_step`, prefix pass = the rest of
`sample_actions`. --dtype: f32 (the default), deployed (the VLM in bfloat16 and the expert in float32,
as SmolVLA runs a pretrained save: it loads the VLM with torch_dtype="bfloat16") or bf16 (the whole
policy and its inputs in bfloat16). Prints one JSON object: runs (per run: stage -> ms), peak_rss_mb,
max_abs_err (case 0).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, SmolVLMConfig
from transformers.models.smolvlm.configuration_smolvlm import SmolVLMVisionConfig

import lerobot.policies.smolvla.modeling_smolvla as modeling
import lerobot.policies.smolvla.smolvlm_with_expert as with_expert
from lerobot.configs import FeatureType, PolicyFeature
from lerobot.policies.smolvla import SmolVLAConfig


def build_policy(record: dict) -> modeling.SmolVLAPolicy:
    vision, text = record["vision"], record["text_model"]
    markers = record["image_marker_token_ids_unused"]
    vlm_config = SmolVLMConfig(
        vision_config=SmolVLMVisionConfig(hidden_size=vision["width"], intermediate_size=vision["mlp_dim"],
                                          num_hidden_layers=vision["depth"], num_attention_heads=vision["num_heads"],
                                          image_size=vision["image_size"], patch_size=vision["patch_size"],
                                          hidden_act="gelu_pytorch_tanh", layer_norm_eps=vision["layer_norm_eps"]),
        text_config=LlamaConfig(vocab_size=text["vocab_size"], hidden_size=text["width"],
                                intermediate_size=text["mlp_dim"], num_hidden_layers=text["depth"],
                                num_attention_heads=text["num_heads"], num_key_value_heads=text["num_kv_heads"],
                                head_dim=text["head_dim"], hidden_act="silu", rms_norm_eps=text["rms_norm_eps"],
                                attention_bias=False, mlp_bias=False, max_position_embeddings=8192, pad_token_id=0,
                                rope_parameters={"rope_type": "default",
                                                 "rope_theta": text["rope_theta_in_config_unused"]},
                                tie_word_embeddings=False),
        scale_factor=record["connector"]["scale_factor"], image_token_id=markers["image_token_id"], pad_token_id=0,
        tie_word_embeddings=False)
    with_expert.AutoConfig = types.SimpleNamespace(from_pretrained=lambda *a, **k: vlm_config)
    with_expert.AutoProcessor = types.SimpleNamespace(
        from_pretrained=lambda *a, **k: types.SimpleNamespace(tokenizer=types.SimpleNamespace(**markers)))
    size = vision["image_size"]
    config = SmolVLAConfig(
        device="cpu", chunk_size=record["chunk_size"], n_action_steps=record["chunk_size"],
        max_state_dim=record["max_state_dim"], max_action_dim=record["max_action_dim"],
        resize_imgs_with_padding=(size, size), empty_cameras=record["empty_cameras"],
        tokenizer_max_length=record["tokenizer_max_length"], num_steps=record["num_steps"],
        load_vlm_weights=False, add_image_special_tokens=False, attention_mode=record["attention_mode"],
        num_expert_layers=0, num_vlm_layers=record["num_vlm_layers"],
        self_attn_every_n_layers=record["self_attn_every_n_layers"],
        expert_width_multiplier=record["expert"]["width_multiplier"],
        input_features={**{c: PolicyFeature(FeatureType.VISUAL, (3, size, size)) for c in record["camera_names"]},
                        "observation.state": PolicyFeature(FeatureType.STATE, (record["state_dim"],))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (record["action_dim"],))})
    return modeling.SmolVLAPolicy(config).eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("record")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=("f32", "deployed", "bf16"), default="f32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    record = json.load(open(os.path.join(args.record, "config.json")))
    cases = np.load(os.path.join(args.record, "cases.npz"))
    policy = build_policy(record)
    missing, unexpected = policy.load_state_dict(load_file(os.path.join(args.record, "model.safetensors")),
                                                 strict=False)
    if missing or unexpected:
        print(f"state dict does not fit: missing {missing[:3]}, unexpected {unexpected[:3]}", file=sys.stderr)
        return 2
    if args.dtype == "deployed":
        policy.model.vlm_with_expert.vlm.to(torch.bfloat16)
    elif args.dtype == "bf16":
        policy.to(torch.bfloat16)
    inputs_dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    order = record["cases"][0]["model_image_slots"]
    images = torch.from_numpy(cases["case0_images"]).to(inputs_dtype)
    batch = {name: images[i:i + 1] for i, name in enumerate(order) if name != "padding"}
    batch["observation.language.tokens"] = torch.from_numpy(cases["case0_tokens"])[None]
    batch["observation.language.attention_mask"] = torch.from_numpy(cases["case0_token_mask"])[None]
    batch["observation.state"] = torch.from_numpy(cases["case0_state"])[None].to(inputs_dtype)
    noise = torch.from_numpy(cases["case0_noise"])[None].to(inputs_dtype)

    model, spent = policy.model, {}

    def timed(name, fn):
        def wrapper(*a, **k):
            start = time.perf_counter()
            result = fn(*a, **k)
            spent.setdefault(name, []).append((time.perf_counter() - start) * 1e3)
            return result
        return wrapper

    model.embed_prefix = timed("vision", model.embed_prefix)
    model.denoise_step = timed("step", model.denoise_step)
    model.sample_actions = timed("sample", model.sample_actions)
    runs, actions = [], None
    for index in range(args.warmup + args.repeats):
        spent.clear()
        policy.reset()
        start = time.perf_counter()
        with torch.inference_mode():
            actions = policy.predict_action_chunk({k: v.clone() for k, v in batch.items()}, noise=noise.clone())
        total = (time.perf_counter() - start) * 1e3
        if index >= args.warmup:
            steps = spent["step"]
            runs.append({"vision": spent["vision"][0], "prefix": spent["sample"][0] - spent["vision"][0] - sum(steps),
                         "solver": sum(steps), "total chunk": total})
    error = float(np.abs(actions[0].float().numpy() - cases["case0_actions"]).max())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"runs": runs, "peak_rss_mb": round(peak, 1), "max_abs_err": error,
                      "threads": args.threads, "dtype": args.dtype, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
