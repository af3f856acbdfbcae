#!/usr/bin/env python
"""GR00T N1.7 model-level records (test/data/groot_tiny, test/data/extra/groot_aside): LeRobot's
`GrootPolicy` (Qwen3-VL-style backbone + flow-matching DiT action head) at the spec's sizes on random
weights, token-level prompt + patch rows + normalized state -> model-space actions, with case-0 taps.

    python gen_groot.py [SPEC.json] OUT_DIR      (reference environment with dm-tree; specs in specs/)

LeRobot builds N1.7 with `GR00TN17.from_pretrained("nvidia/GR00T-N1.7-3B")` and a backbone config
hard-coded in `groot_n1_7._cosmos_reason2_qwen3_vl_config`; both are replaced by tiny offline
stand-ins (a `Qwen3VLConfig` of the same layout and a `GR00TN17` built from a small `GR00TN17Config`
without backbone weights). `GrootPolicy` runs with use_bf16=False. There is no tokenizer: the prompt
is the Qwen chat template at token level with stand-in ids for its special tokens (the top six ids
of the vocabulary); the patch rows come from transformers' `Qwen2VLImageProcessorPil` without
resizing. LeRobot draws the initial noise itself from the global RNG, so the global RNG is seeded
with seeds.noise + case index right before each call and the noise is read back with a hook.
Weights: `common.fan_in_rule`. 1 torch thread.
"""

from __future__ import annotations

import common
import lerobot_tiny as tiny

import numpy as np
import torch

DEFAULTS = {
    "name": "groot_tiny",
    "n_views": 2, "image_hw": [64, 96], "vocab_size": 512,
    "vision": {"width": 32, "depth": 3, "mlp_dim": 64, "num_heads": 2, "patch_size": 16, "temporal_patch_size": 2,
               "spatial_merge_size": 2, "num_position_embeddings": 16, "deepstack_visual_indexes": [0, 2]},
    "text": {"width": 64, "depth": 4, "mlp_dim": 128, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
             "rms_norm_eps": 1e-6, "rope_theta": 5000000, "mrope_section": [4, 2, 2]},
    "select_layer": 3,
    "action_head": {"hidden_size": 48, "max_seq_len": 32, "max_num_embodiments": 4, "action_horizon": 8,
                    "max_state_dim": 16, "max_action_dim": 16, "num_inference_timesteps": 4,
                    "attend_text_every_n_blocks": 2,
                    "dit": {"num_layers": 4, "num_heads": 2, "head_dim": 16},
                    "vl_self_attention": {"num_layers": 2, "num_heads": 2}},
    "state_dim": 6, "action_dim": 5,
    "torch_threads": 1,
    "seeds": {"torch_manual_seed": 0, "weights": 501, "data": 502, "noise": 510},
    "cases": [{"views": [0, 1], "text_tokens": 9, "embodiment_id": 1},
              {"views": [0, 1], "text_tokens": 20, "embodiment_id": 3, "state_scale": 0.5},
              {"views": [0], "text_tokens": 5, "embodiment_id": 1}],
}
TIED = "_groot_model.backbone.model.lm_head.weight"
EMBED = "_groot_model.backbone.model.model.language_model.embed_tokens.weight"


def special_ids(vocab: int) -> dict:
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id", "im_start_id",
             "im_end_id")
    return {name: vocab - len(names) + i for i, name in enumerate(names)}


def head_settings(spec: dict) -> dict:
    head, dit, vl = spec["action_head"], spec["action_head"]["dit"], spec["action_head"]["vl_self_attention"]
    width = spec["text"]["width"]
    return dict(backbone_embedding_dim=width, select_layer=spec["select_layer"], max_state_dim=head["max_state_dim"],
                max_action_dim=head["max_action_dim"], action_horizon=head["action_horizon"],
                hidden_size=head["hidden_size"], input_embedding_dim=dit["num_heads"] * dit["head_dim"],
                max_seq_len=head["max_seq_len"], max_num_embodiments=head["max_num_embodiments"],
                num_inference_timesteps=head["num_inference_timesteps"],
                attend_text_every_n_blocks=head["attend_text_every_n_blocks"],
                diffusion_model_cfg={"positional_embeddings": None, "num_layers": dit["num_layers"],
                                     "num_attention_heads": dit["num_heads"], "attention_head_dim": dit["head_dim"],
                                     "norm_type": "ada_norm", "dropout": 0.2, "final_dropout": True,
                                     "output_dim": head["hidden_size"], "interleave_self_attention": True},
                vl_self_attention_cfg={"positional_embeddings": None, "num_layers": vl["num_layers"],
                                       "num_attention_heads": vl["num_heads"],
                                       "attention_head_dim": width // vl["num_heads"], "dropout": 0.2,
                                       "final_dropout": True})


def install_offline_model(spec: dict, special: dict) -> dict:
    """Replaces LeRobot's hard-coded backbone config and hub loader by tiny stand-ins."""
    from transformers import Qwen3VLConfig

    import lerobot.policies.groot.groot_n1_7 as n17
    from lerobot.policies.groot.configuration_groot import GROOT_N1_7_BASE_MODEL

    vision, text = spec["vision"], spec["text"]
    settings = head_settings(spec)

    def backbone_config():
        return Qwen3VLConfig(
            image_token_id=special["image_token_id"], video_token_id=special["video_token_id"],
            vision_start_token_id=special["vision_start_token_id"], vision_end_token_id=special["vision_end_token_id"],
            tie_word_embeddings=True,
            text_config={"attention_bias": False, "attention_dropout": 0.0, "head_dim": text["head_dim"],
                         "hidden_act": "silu", "hidden_size": text["width"], "intermediate_size": text["mlp_dim"],
                         "max_position_embeddings": 4096, "model_type": "qwen3_vl_text",
                         "num_attention_heads": text["num_heads"], "num_hidden_layers": text["depth"],
                         "num_key_value_heads": text["num_kv_heads"], "rms_norm_eps": text["rms_norm_eps"],
                         "rope_scaling": {"mrope_interleaved": True, "mrope_section": text["mrope_section"],
                                          "rope_type": "default"},
                         "rope_theta": text["rope_theta"], "tie_word_embeddings": True,
                         "vocab_size": spec["vocab_size"]},
            vision_config={"deepstack_visual_indexes": vision["deepstack_visual_indexes"], "depth": vision["depth"],
                           "hidden_act": "gelu_pytorch_tanh", "hidden_size": vision["width"], "in_channels": 3,
                           "intermediate_size": vision["mlp_dim"], "model_type": "qwen3_vl",
                           "num_heads": vision["num_heads"],
                           "num_position_embeddings": vision["num_position_embeddings"],
                           "out_hidden_size": text["width"], "patch_size": vision["patch_size"],
                           "spatial_merge_size": vision["spatial_merge_size"],
                           "temporal_patch_size": vision["temporal_patch_size"]})

    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        if pretrained_model_name_or_path != GROOT_N1_7_BASE_MODEL:
            raise OSError(f"offline reference build: nothing stands in for {pretrained_model_name_or_path}")
        config = n17.GR00TN17Config(**settings)
        for key in ("num_inference_timesteps", "rtc_ramp_rate"):
            if key in kwargs:
                setattr(config, key, kwargs[key])
        model = cls(config, load_backbone_weights=False)
        model.backbone.set_trainable_parameters(tune_visual=kwargs.get("tune_visual", False),
                                                tune_llm=kwargs.get("tune_llm", False),
                                                tune_top_llm_layers=config.tune_top_llm_layers)
        model.action_head.set_trainable_parameters(tune_projector=kwargs.get("tune_projector", True),
                                                   tune_diffusion_model=kwargs.get("tune_diffusion_model", True),
                                                   tune_vlln=kwargs.get("tune_vlln", True))
        return model

    n17._cosmos_reason2_qwen3_vl_config = backbone_config
    n17.GR00TN17.from_pretrained = classmethod(from_pretrained)
    return settings


def main() -> None:
    spec, out, _ = common.command_line(DEFAULTS, __doc__)
    common.threads(spec["torch_threads"])
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    import lerobot.policies.groot.modeling_groot as modeling
    from lerobot.policies.groot import GrootConfig
    from lerobot.policies.groot.configuration_groot import GROOT_N1_7_BASE_MODEL

    vision, text, head = spec["vision"], spec["text"], spec["action_head"]
    height, width = spec["image_hw"]
    patch, temporal, merge = vision["patch_size"], vision["temporal_patch_size"], vision["spatial_merge_size"]
    horizon, max_state, max_action = head["action_horizon"], head["max_state_dim"], head["max_action_dim"]
    assert height % (patch * merge) == 0 and width % (patch * merge) == 0
    assert spec["state_dim"] <= max_state and spec["action_dim"] <= max_action
    assert max_state != 64 and max_action != 32 and horizon != 50, "GrootConfig remaps these N1.5-era values"
    assert sum(text["mrope_section"]) == text["head_dim"] // 2
    special = special_ids(spec["vocab_size"])
    text_ids = spec["vocab_size"] - len(special)  # ordinary ids are drawn below the stand-in special ids
    settings = install_offline_model(spec, special)

    cameras = tiny.camera_names(spec["n_views"])
    policy_config = GrootConfig(device="cpu", chunk_size=horizon, n_action_steps=horizon, max_state_dim=max_state,
                                max_action_dim=max_action, use_bf16=False, model_params_fp32=True,
                                image_size=(height, width),
                                **common.policy_features({c: (height, width) for c in cameras}, spec["state_dim"],
                                                         spec["action_dim"]))
    assert policy_config.base_model_path == GROOT_N1_7_BASE_MODEL
    common.seed_global(spec["seeds"]["torch_manual_seed"])
    policy = modeling.GrootPolicy(policy_config).eval()
    groot = policy._groot_model
    backbone, action_head = groot.backbone, groot.action_head
    qwen = backbone.model.model
    assert len(backbone.language_model.layers) == spec["select_layer"]
    common.redraw(policy, spec["seeds"]["weights"], common.fan_in_rule(common.norm_weight_names(policy)))
    everything = policy.state_dict()
    assert everything[TIED].data_ptr() == everything[EMBED].data_ptr()
    weights = common.state_dict_of(policy, drop=[TIED])
    assert set(weights) == {n for n, _ in policy.named_parameters()}

    processor = Qwen2VLImageProcessorPil(patch_size=patch, temporal_patch_size=temporal, merge_size=merge,
                                         do_resize=False, do_rescale=True, do_normalize=True, image_mean=[0.5] * 3,
                                         image_std=[0.5] * 3)
    data = common.rng(spec["seeds"]["data"])
    tokens_per_view = (height // patch) * (width // patch) // merge ** 2

    def ids(n):
        return torch.randint(0, text_ids, (n,), generator=data).tolist()

    cases = []
    for k, case in enumerate(spec["cases"]):
        images = torch.randint(0, 256, (spec["n_views"], height, width, 3), generator=data, dtype=torch.uint8)
        prompt = [special["im_start_id"]] + ids(2)  # "<|im_start|>user\n"
        for _ in case["views"]:
            prompt += ([special["vision_start_token_id"]] + [special["image_token_id"]] * tokens_per_view
                       + [special["vision_end_token_id"]])
        prompt += ids(case["text_tokens"]) + [special["im_end_id"]] + ids(1)  # task, "<|im_end|>\n"
        state = torch.zeros(max_state)
        state[:spec["state_dim"]] = (torch.rand(spec["state_dim"], generator=data) * 2 - 1) * case.get("state_scale", 1.0)
        encoded = processor([images[v].numpy() for v in case["views"]], return_tensors="pt")
        rows = encoded["pixel_values"].float()
        assert np.abs(patch_rows(images, case["views"], patch, temporal, merge) - rows.numpy()).max() < 1e-6
        input_ids = torch.tensor([prompt])
        batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "pixel_values": rows,
                 "image_grid_thw": encoded["image_grid_thw"], "state": state.view(1, 1, max_state).clone(),
                 "embodiment_id": torch.tensor([case["embodiment_id"]])}
        cases.append({"case": case, "batch": batch, "images": images[case["views"]], "state": state,
                      "noise_seed": spec["seeds"]["noise"] + k})

    def noise_of(c):
        return torch.randn((1, horizon, max_action), generator=common.rng(c["noise_seed"]))

    def run(c):
        policy.reset()
        batch = {key: v.clone() for key, v in c["batch"].items()}
        common.seed_global(c["noise_seed"])  # LeRobot's torch.randn draws the initial noise from here
        return policy.predict_action_chunk(batch)[0].detach().clone()

    taps = {}
    keep = common.keep
    hooks = [
        qwen.visual.blocks[0].register_forward_pre_hook(common.first_only(taps, "embed_in", lambda m, a: keep(a[0]))),
        qwen.visual.register_forward_hook(common.first_only(
            taps, "vision", lambda m, a, o: (keep(o.pooler_output), [keep(d) for d in o.deepstack_features]))),
        qwen.language_model.register_forward_pre_hook(common.first_only(
            taps, "lm_in", lambda m, a, kw: (keep(kw["inputs_embeds"]), keep(kw["position_ids"]))), with_kwargs=True),
        backbone.register_forward_hook(common.first_only(
            taps, "backbone", lambda m, a, o: (keep(o["backbone_features"]), keep(o["image_mask"])))),
        action_head.vl_self_attention.register_forward_hook(common.first_only(taps, "vl", lambda m, a, o: keep(o))),
        action_head.state_encoder.register_forward_hook(common.first_only(taps, "state", lambda m, a, o: keep(o))),
        action_head.action_encoder.register_forward_pre_hook(common.first_only(
            taps, "noise", lambda m, a: (keep(a[0]), keep(a[1])))),
        action_head.model.register_forward_pre_hook(common.first_only(
            taps, "dit_in", lambda m, a, kw: keep(kw["hidden_states"])), with_kwargs=True),
        action_head.action_decoder.register_forward_hook(common.first_only(taps, "decoded", lambda m, a, o: keep(o))),
    ]
    tapped_actions = run(cases[0])
    for hook in hooks:
        hook.remove()
    first = cases[0]
    noise_used, timestep0 = taps["noise"]
    assert torch.equal(noise_used, noise_of(first)) and int(timestep0[0]) == 0
    length0 = first["batch"]["input_ids"].shape[1]
    assert taps["backbone"][0].shape == (1, length0, text["width"])
    assert torch.equal(taps["backbone"][1][0], first["batch"]["input_ids"][0] == special["image_token_id"])
    assert len(taps["vision"][1]) == len(vision["deepstack_visual_indexes"])

    actions = []
    for k, c in enumerate(cases):
        a, b = run(c), run(c)
        assert torch.equal(a, b) and (k or torch.equal(a, tapped_actions)), f"case {k} not repeatable"
        actions.append(a)
        print(f"case{k}: views {c['case']['views']} tokens {c['batch']['input_ids'].shape[1]} "
              f"max|a| {float(a.abs().max()):.4f}", flush=True)

    arrays = {}
    for k, c in enumerate(cases):
        batch = c["batch"]
        arrays[f"case{k}_images_uint8"] = c["images"].numpy()
        arrays[f"case{k}_pixel_values"] = batch["pixel_values"].numpy()
        arrays[f"case{k}_image_grid_thw"] = batch["image_grid_thw"].numpy().astype(np.int64)
        arrays[f"case{k}_input_ids"] = batch["input_ids"][0].numpy().astype(np.int64)
        arrays[f"case{k}_attention_mask"] = batch["attention_mask"][0].numpy().astype(bool)
        arrays[f"case{k}_state"] = c["state"].numpy()
        arrays[f"case{k}_embodiment_id"] = np.array(c["case"]["embodiment_id"], np.int64)
        arrays[f"case{k}_noise"] = noise_of(c)[0].numpy()
        arrays[f"case{k}_actions"] = actions[k].numpy()
    arrays["case0_vision_embed_in"] = taps["embed_in"].numpy()
    arrays["case0_image_embeddings"] = taps["vision"][0].numpy()
    for i, deep in enumerate(taps["vision"][1]):
        arrays[f"case0_deepstack_{i}"] = deep.numpy()
    arrays["case0_position_ids"] = taps["lm_in"][1][:, 0].numpy().astype(np.int64)
    arrays["case0_lm_inputs_embeds"] = taps["lm_in"][0][0].numpy()
    arrays["case0_backbone_features"] = taps["backbone"][0][0].numpy()
    arrays["case0_image_mask"] = taps["backbone"][1][0].numpy().astype(bool)
    arrays["case0_vl_embeds"] = taps["vl"][0].numpy()
    arrays["case0_state_features"] = taps["state"][0].numpy()
    arrays["case0_dit_input_step0"] = taps["dit_in"][0].numpy()
    arrays["case0_velocity_step0"] = taps["decoded"][0, -horizon:].numpy()

    config = record_config(spec, policy, cameras, special, settings, cases, actions, weights, tokens_per_view)
    common.write_record(out, weights=weights, config=config, arrays=arrays)
    print(f"wrote {out}: {config['n_params_state_dict']} parameters, max |a| {config['max_abs_actions']:.4f}")


def patch_rows(images, views, patch, temporal, merge) -> np.ndarray:
    """The patch rows as documented (numpy, float64): the image in [-1, 1], repeated over the temporal
    patch, cut into merge x merge groups of patches, row-major."""
    rows = []
    for v in views:
        x = (images[v].numpy().astype(np.float64) / 255.0 - 0.5) / 0.5
        x = np.repeat(x.transpose(2, 0, 1)[None], temporal, 0)
        grid_h, grid_w = x.shape[2] // patch, x.shape[3] // patch
        x = x.reshape(temporal, 3, grid_h // merge, merge, patch, grid_w // merge, merge, patch)
        rows.append(x.transpose(2, 5, 3, 6, 1, 0, 4, 7).reshape(grid_h * grid_w, -1))
    return np.concatenate(rows)


def record_config(spec, policy, cameras, special, settings, cases, actions, weights, tokens_per_view) -> dict:
    import diffusers

    groot = policy._groot_model
    qwen_config = groot.backbone.model.config
    text_config, vision_config = qwen_config.text_config, qwen_config.vision_config
    vision, text, head = spec["vision"], spec["text"], spec["action_head"]
    dit, vl = head["dit"], head["vl_self_attention"]
    every = head["attend_text_every_n_blocks"]
    height, width = spec["image_hw"]
    patch = vision["patch_size"]
    kinds = ["self_attn" if i % 2 else ("cross_attn_text" if i % (2 * every) == 0 else "cross_attn_image")
             for i in range(dit["num_layers"])]
    return {
        "set": spec["name"],
        "model": "GR00T N1.7 (lerobot GrootPolicy: Qwen3-VL / Cosmos-Reason2-style backbone + flow-matching DiT "
                 "action head), tiny random-weight config",
        "camera_names": cameras, "n_views": spec["n_views"], "image_hw": [height, width],
        "vision": {"width": vision_config.hidden_size, "depth": vision_config.depth,
                   "mlp_dim": vision_config.intermediate_size, "num_heads": vision_config.num_heads,
                   "head_dim": vision_config.hidden_size // vision_config.num_heads, "patch_size": patch,
                   "temporal_patch_size": vision["temporal_patch_size"],
                   "spatial_merge_size": vision["spatial_merge_size"],
                   "num_position_embeddings": vision_config.num_position_embeddings,
                   "pos_grid_per_side": int(vision_config.num_position_embeddings ** 0.5),
                   "deepstack_visual_indexes": list(vision_config.deepstack_visual_indexes),
                   "out_dim": vision_config.out_hidden_size, "hidden_act": vision_config.hidden_act,
                   "layer_norm_eps": 1e-6, "rope_theta": 10000.0, "tokens_per_view": tokens_per_view,
                   "grid_thw_per_view": [1, height // patch, width // patch]},
        "text_model": {"width": text_config.hidden_size, "depth_in_config": text_config.num_hidden_layers,
                       "layers_kept": spec["select_layer"], "mlp_dim": text_config.intermediate_size,
                       "num_heads": text_config.num_attention_heads, "num_kv_heads": text_config.num_key_value_heads,
                       "head_dim": text_config.head_dim, "rms_norm_eps": text_config.rms_norm_eps,
                       "rope_theta": text_config.rope_parameters["rope_theta"],
                       "mrope_section": text["mrope_section"], "mrope_interleaved": True,
                       "hidden_act": text_config.hidden_act, "vocab_size": text_config.vocab_size,
                       "qk_norm": "RMSNorm over head_dim on q and k (weights q_norm, k_norm), before RoPE",
                       "embed_scale": None, "lm_head": "tied to embed_tokens, unused, left out of the file"},
        "special_token_ids": special,
        "select_layer": spec["select_layer"],
        "action_head": {"backbone_embedding_dim": text["width"], "hidden_size": head["hidden_size"],
                        "input_embedding_dim": settings["input_embedding_dim"],
                        "dit": {**dit, "cross_attention_dim": text["width"], "output_dim": head["hidden_size"],
                                "block_kinds": kinds,
                                "norm": "norm1 AdaLayerNorm (no affine, eps 1e-5); norm3 LayerNorm without affine "
                                        "(eps 1e-5)",
                                "ff": "GELU-tanh, inner width 4*dim", "attention_bias": True, "final_norm_eps": 1e-6},
                        "vl_self_attention": {**vl, "head_dim": text["width"] // vl["num_heads"],
                                              "norm": "LayerNorm with affine, eps 1e-5", "mask": None},
                        "vlln": "LayerNorm(backbone_embedding_dim) with affine, eps 1e-5",
                        "attend_text_every_n_blocks": every, "max_seq_len": head["max_seq_len"],
                        "max_num_embodiments": head["max_num_embodiments"], "action_horizon": head["action_horizon"],
                        "max_state_dim": head["max_state_dim"], "max_action_dim": head["max_action_dim"],
                        "num_inference_timesteps": head["num_inference_timesteps"],
                        "num_timestep_buckets": groot.action_head.num_timestep_buckets,
                        "timestep_encoder": "diffusers Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1) "
                                            "then TimestepEmbedding(256 -> DiT inner width): linear_1, SiLU, "
                                            "linear_2"},
        "state_dim": spec["state_dim"], "action_dim": spec["action_dim"],
        "solver": "Euler from t = 0 (noise) to t = 1: dt = 1/num_inference_timesteps; step s uses the integer "
                  "timestep int(s/num_inference_timesteps * num_timestep_buckets); x <- x + dt * velocity",
        "weights_dtype": "float32",
        "n_params_state_dict": common.count(weights),
        "omitted_tied_tensors": {TIED: f"same tensor as {EMBED}"},
        "weight_init": "one torch.Generator seeded with seed.weights, policy.named_parameters() order: "
                       "CategorySpecificLinear W (categories, in, out) randn * in**-0.5 and b 0.1*randn; other "
                       "ndim > 1 randn * fan_in**-0.5 (fan_in = p[0].numel()); LayerNorm / RMSNorm weights "
                       "1 + 0.1*randn; other vectors 0.1*randn",
        "data_draws": "one torch.Generator seeded with seed.data, per case in this order: images "
                      "randint(0,256,(n_views,H,W,3)) uint8, 2 ids after <|im_start|>, text_tokens ids, 1 id after "
                      "<|im_end|> (ids randint(0, vocab-6)), state (rand(state_dim)*2-1) * state_scale; noise: "
                      "torch.manual_seed(seed.noise + case index) just before predict_action_chunk, whose "
                      "torch.randn((1, action_horizon, max_action_dim)) it is",
        "prompt_layout": "[<|im_start|>, 2 text ids] + per view [<|vision_start|>, <|image_pad|> x tokens_per_view, "
                         "<|vision_end|>] + [text ids] + [<|im_end|>, 1 text id]: Qwen3-VL's chat template "
                         "'<|im_start|>user\\n{images}{task}<|im_end|>\\n' at token level, batch 1, no padding",
        "image_preprocessing": "pixel_values from transformers' Qwen2VLImageProcessorPil(patch_size, "
                               "temporal_patch_size, merge_size, do_resize=False, rescale 1/255, normalize with "
                               "mean = std = 0.5) on the uint8 views",
        "actions_source": "GrootPolicy.predict_action_chunk(batch) with use_bf16=False (no autocast), no pre- or "
                          "post-processor: model-space actions, get_action(...)['action_pred'][:, :action_horizon, "
                          ":action_dim]",
        "offline_stand_ins": {"groot_n1_7._cosmos_reason2_qwen3_vl_config": "a tiny Qwen3VLConfig made from the spec",
                              "GR00TN17.from_pretrained": "GR00TN17(GR00TN17Config(tiny sizes), "
                                                          "load_backbone_weights=False)",
                              "tokenizer / chat template": "a token-level prompt with stand-in special ids"},
        "cases": [{"index": k, "views": [cameras[v] for v in c["case"]["views"]],
                   "missing_views": [cameras[v] for v in range(spec["n_views"]) if v not in c["case"]["views"]],
                   "n_tokens": int(c["batch"]["input_ids"].shape[1]), "text_tokens": c["case"]["text_tokens"],
                   "embodiment_id": c["case"]["embodiment_id"], "state_scale": c["case"].get("state_scale", 1.0),
                   "noise_seed": c["noise_seed"], "max_abs_action": float(actions[k].abs().max())}
                  for k, c in enumerate(cases)],
        "max_abs_actions": float(max(a.abs().max() for a in actions)),
        "determinism": {"two_runs_bit_identical_all_cases": True},
        "generated_by": {**common.generated_by("reference/gen_groot.py", "lerobot", "torch", "transformers",
                                               "diffusers", "numpy", torch_num_threads=torch.get_num_threads()),
                         "attn_implementation": {"text": text_config._attn_implementation,
                                                 "vision": vision_config._attn_implementation}},
        "seed": spec["seeds"],
    }


if __name__ == "__main__":
    main()
