"""LeRobot's GrootPolicy (GR00T N1.7) at the dimensions of a GR00T model-level record, timed per stage.

Runs in the PyTorch reference environment (docs/reference.md); bench_groot.py runs it as a subprocess:

    python benchmarks/torch_groot_policy.py RECORD [--repeats R] [--warmup W] [--threads T] [--bf16]

LeRobot builds N1.7 from the hub; offline, its two lookups (the hard-coded Cosmos-Reason2 backbone
config and GR00TN17.from_pretrained) are answered with the record's dimensions, the record's
model.safetensors is loaded, and case 0 runs through `predict_action_chunk(batch)` with the
record's noise (torch's global generator seeded as the record was), eager float32 (or LeRobot's
bfloat16 autocast with --bf16). Stage times come from forward hooks: vision = the Qwen3-VL vision
tower, backbone = the rest of the backbone (the LM layers), head = everything after the backbone
(vl_self_attention and the DiT solve). Prints one JSON object: runs (per run: stage -> ms),
peak_rss_mb, max_abs_err.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import torch
from safetensors.torch import load_file
from transformers import Qwen3VLConfig

import lerobot.policies.groot.groot_n1_7 as groot_n1_7
import lerobot.policies.groot.modeling_groot as modeling
from lerobot.configs import FeatureType, PolicyFeature
from lerobot.policies.groot import GrootConfig


def qwen_config(record: dict) -> Qwen3VLConfig:
    vision, text, ids = record["vision"], record["text_model"], record["special_token_ids"]
    return Qwen3VLConfig(
        image_token_id=ids["image_token_id"], video_token_id=ids["video_token_id"],
        vision_start_token_id=ids["vision_start_token_id"], vision_end_token_id=ids["vision_end_token_id"],
        tie_word_embeddings=True,
        text_config={"attention_bias": False, "attention_dropout": 0.0, "head_dim": text["head_dim"],
                     "hidden_act": "silu", "hidden_size": text["width"], "intermediate_size": text["mlp_dim"],
                     "max_position_embeddings": 4096, "model_type": "qwen3_vl_text",
                     "num_attention_heads": text["num_heads"], "num_hidden_layers": text["depth_in_config"],
                     "num_key_value_heads": text["num_kv_heads"], "rms_norm_eps": text["rms_norm_eps"],
                     "rope_scaling": {"mrope_interleaved": True, "mrope_section": text["mrope_section"],
                                      "rope_type": "default"},
                     "rope_theta": text["rope_theta"], "tie_word_embeddings": True, "vocab_size": text["vocab_size"]},
        vision_config={"deepstack_visual_indexes": vision["deepstack_visual_indexes"], "depth": vision["depth"],
                       "hidden_act": "gelu_pytorch_tanh", "hidden_size": vision["width"], "in_channels": 3,
                       "intermediate_size": vision["mlp_dim"], "model_type": "qwen3_vl",
                       "num_heads": vision["num_heads"], "num_position_embeddings": vision["num_position_embeddings"],
                       "out_hidden_size": vision["out_dim"], "patch_size": vision["patch_size"],
                       "spatial_merge_size": vision["spatial_merge_size"],
                       "temporal_patch_size": vision["temporal_patch_size"]})


def head_config(record: dict) -> dict:
    head, dit, vl = record["action_head"], record["action_head"]["dit"], record["action_head"]["vl_self_attention"]
    return dict(
        backbone_embedding_dim=head["backbone_embedding_dim"], select_layer=record["select_layer"],
        max_state_dim=head["max_state_dim"], max_action_dim=head["max_action_dim"],
        action_horizon=head["action_horizon"], hidden_size=head["hidden_size"],
        input_embedding_dim=head["input_embedding_dim"], max_seq_len=head["max_seq_len"],
        max_num_embodiments=head["max_num_embodiments"], num_inference_timesteps=head["num_inference_timesteps"],
        attend_text_every_n_blocks=head["attend_text_every_n_blocks"],
        diffusion_model_cfg={"positional_embeddings": None, "num_layers": dit["num_layers"],
                             "num_attention_heads": dit["num_heads"], "attention_head_dim": dit["head_dim"],
                             "norm_type": "ada_norm", "dropout": 0.2, "final_dropout": True,
                             "output_dim": head["hidden_size"], "interleave_self_attention": True},
        vl_self_attention_cfg={"positional_embeddings": None, "num_layers": vl["num_layers"],
                               "num_attention_heads": vl["num_heads"], "attention_head_dim": vl["head_dim"],
                               "dropout": 0.2, "final_dropout": True})


def build_policy(record: dict, bf16: bool) -> modeling.GrootPolicy:
    dims = head_config(record)

    def from_record(cls, pretrained_model_name_or_path, **kwargs):
        model = cls(groot_n1_7.GR00TN17Config(**dims), load_backbone_weights=False)
        model.backbone.set_trainable_parameters(tune_visual=False, tune_llm=False, tune_top_llm_layers=0)
        return model

    groot_n1_7._cosmos_reason2_qwen3_vl_config = lambda: qwen_config(record)
    groot_n1_7.GR00TN17.from_pretrained = classmethod(from_record)
    height, width = record["image_hw"]
    head = record["action_head"]
    config = GrootConfig(
        device="cpu", chunk_size=head["action_horizon"], n_action_steps=head["action_horizon"],
        max_state_dim=head["max_state_dim"], max_action_dim=head["max_action_dim"], use_bf16=bf16,
        model_params_fp32=True, image_size=(height, width),
        input_features={**{c: PolicyFeature(FeatureType.VISUAL, (3, height, width)) for c in record["camera_names"]},
                        "observation.state": PolicyFeature(FeatureType.STATE, (record["state_dim"],))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (record["action_dim"],))})
    return modeling.GrootPolicy(config).eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("record")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", action="store_true", help="LeRobot's default bfloat16 autocast")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    record = json.load(open(os.path.join(args.record, "config.json")))
    cases = np.load(os.path.join(args.record, "cases.npz"))
    policy = build_policy(record, args.bf16)
    missing, unexpected = policy.load_state_dict(load_file(os.path.join(args.record, "model.safetensors")),
                                                 strict=False)
    missing = [name for name in missing if not name.endswith("lm_head.weight")]  # tied to embed_tokens
    if missing or unexpected:
        print(f"state dict does not fit: missing {missing[:3]}, unexpected {unexpected[:3]}", file=sys.stderr)
        return 2
    ids = torch.from_numpy(cases["case0_input_ids"])[None]
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "pixel_values": torch.from_numpy(cases["case0_pixel_values"]),
             "image_grid_thw": torch.from_numpy(cases["case0_image_grid_thw"]),
             "state": torch.from_numpy(cases["case0_state"]).view(1, 1, -1),
             "embodiment_id": torch.tensor([int(cases["case0_embodiment_id"])])}
    noise_seed = record["cases"][0]["noise_seed"]

    model, marks = policy._groot_model, {}

    def mark(name):
        def hook(*_):
            marks[name] = time.perf_counter()
        return hook

    visual = model.backbone.model.model.visual
    visual.register_forward_pre_hook(mark("vision_start"))
    visual.register_forward_hook(mark("vision_end"))
    model.backbone.register_forward_hook(mark("backbone_end"))
    runs, actions = [], None
    for index in range(args.warmup + args.repeats):
        marks.clear()
        policy.reset()
        torch.manual_seed(noise_seed)
        start = time.perf_counter()
        with torch.inference_mode():
            actions = policy.predict_action_chunk({k: v.clone() for k, v in batch.items()})
        end = time.perf_counter()
        if index >= args.warmup:
            runs.append({"vision": (marks["vision_end"] - marks["vision_start"]) * 1e3,
                         "backbone": (marks["backbone_end"] - start) * 1e3
                         - (marks["vision_end"] - marks["vision_start"]) * 1e3,
                         "head": (end - marks["backbone_end"]) * 1e3, "total chunk": (end - start) * 1e3})
    error = float(np.abs(actions[0].float().numpy() - cases["case0_actions"]).max())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"runs": runs, "peak_rss_mb": round(peak, 1), "max_abs_err": error,
                      "threads": args.threads, "torch": torch.__version__, "bf16": args.bf16}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
