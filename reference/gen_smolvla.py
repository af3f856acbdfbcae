#!/usr/bin/env python
"""SmolVLA model-level records (test/data/smolvla_tiny, test/data/extra/smolvla_three_cam_gqa):
LeRobot's `SmolVLAPolicy` (a SmolVLM2-style VLM truncated to num_vlm_layers plus its action expert)
at the spec's sizes on random weights, inputs -> model-space actions, with the case-0 taps.

    python gen_smolvla.py [SPEC.json] OUT_DIR      (reference environment; specs in specs/)

The VLM's two hub look-ups are answered offline (lerobot_tiny.smolvla_offline); everything else is
LeRobot and transformers code. Weights: `common.fan_in_rule` from seeds.weights. Per case, from one
generator seeded with seeds.data: images, prompt ids below the three image-marker ids, a state, the
noise. LeRobot adds at most `empty_cameras` padding images after the present cameras; the record
stores the images in that order. Each case runs twice (bit-identical); case 0 records the vision
tower output, the connector output, the prefix embeddings and the LM's last hidden state, the prefix
cache of the first and last kept layer, the suffix embeddings, the expert's last hidden state and
the velocity of the first Euler step. 1 torch thread.
"""

from __future__ import annotations

import common
import lerobot_tiny as tiny

import numpy as np
import torch

DEFAULTS = {
    "name": "smolvla_tiny",
    "n_cameras": 2, "empty_cameras": 1, "image_size": 64, "scale_factor": 2,
    "vision": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 2, "patch_size": 8},
    "text": {"width": 64, "depth": 5, "mlp_dim": 128, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
             "rms_norm_eps": 1e-5, "rope_theta": 100000.0},
    "vocab_size": 512, "num_vlm_layers": 4, "num_expert_layers": 0, "self_attn_every_n_layers": 2,
    "expert_width_multiplier": 0.75,
    "tokenizer_max_length": 24, "chunk_size": 10, "state_dim": 6, "action_dim": 6,
    "max_state_dim": 32, "max_action_dim": 32, "num_steps": 10,
    "torch_threads": 1,
    "seeds": {"torch_manual_seed": 0, "weights": 201, "data": 202},
    "cases": [{"valid_tokens": 17, "missing_cameras": []},
              {"valid_tokens": 24, "missing_cameras": [], "state_scale": 2.0},
              {"valid_tokens": 9, "missing_cameras": [0]}],
}
LLAMA_NORM = "Llama RMSNorm, w * (x*rsqrt(mean(x^2)+eps))"


def main() -> None:
    spec, out, _ = common.command_line(DEFAULTS, __doc__)
    common.threads(spec["torch_threads"])
    assert spec["num_vlm_layers"] <= spec["text"]["depth"]
    policy = tiny.build_smolvla(spec)
    model = policy.model
    joint = model.vlm_with_expert
    vlm, expert = joint.get_vlm_model(), joint.lm_expert
    assert len(vlm.text_model.layers) == spec["num_vlm_layers"]
    feature_order = list(policy.config.image_features)  # the cameras, then LeRobot's empty_camera_i slots
    common.redraw(policy, spec["seeds"]["weights"], common.fan_in_rule(common.norm_weight_names(policy)))
    weights = common.state_dict_of(policy)
    assert set(weights) == {n for n, _ in policy.named_parameters()}
    cameras = tiny.camera_names(spec["n_cameras"])
    data = common.rng(spec["seeds"]["data"])
    markers = tiny.smolvla_marker_ids(spec["vocab_size"])
    observations = []
    for case in spec["cases"]:
        obs = tiny.draw_pi_case(data, spec, case, cameras, state=True,
                                token_high=spec["vocab_size"] - len(markers))
        padding = min(sum(1 for key in feature_order if key not in obs["batch"]), spec["empty_cameras"])
        obs["slots"] = [cameras[i] for i in obs["present"]] + ["padding"] * padding
        size = spec["image_size"]
        obs["model_images"] = torch.stack([obs["images"][i] for i in obs["present"]]
                                          + [torch.zeros(3, size, size)] * padding)
        obs["masks"] = np.array([True] * len(obs["present"]) + [False] * padding)
        observations.append(obs)

    def run(obs):
        policy.reset()
        batch = {k: v.clone() for k, v in obs["batch"].items()}
        return policy.predict_action_chunk(batch, noise=obs["noise"].clone())[0].detach().clone()

    taps, tower_out, connector_out, positions, handed = {}, [], [], [], {}
    hooks = [
        vlm.vision_model.register_forward_hook(lambda m, a, o: tower_out.append(common.keep(o.last_hidden_state))),
        vlm.connector.register_forward_hook(lambda m, a, o: connector_out.append(common.keep(o))),
        vlm.vision_model.embeddings.position_embedding.register_forward_pre_hook(
            lambda m, a: positions.append(common.keep(a[0]))),
        vlm.text_model.norm.register_forward_pre_hook(
            common.first_only(taps, "prefix_hidden", lambda m, a: common.keep(a[0]))),
        expert.norm.register_forward_pre_hook(common.first_only(taps, "suffix_hidden", lambda m, a: common.keep(a[0]))),
    ]
    originals = {name: getattr(model, name) for name in ("denoise_step", "embed_suffix", "embed_prefix",
                                                          "sample_actions")}

    def sample_actions(images, img_masks, lang_tokens, lang_masks, state, noise=None, **kwargs):
        handed.update(images=common.keep(list(images)), masks=common.keep(list(img_masks)), state=common.keep(state))
        return originals["sample_actions"](images, img_masks, lang_tokens, lang_masks, state, noise=noise, **kwargs)

    def embed_prefix(*args, **kwargs):
        result = originals["embed_prefix"](*args, **kwargs)
        taps.setdefault("prefix_embeds", common.keep(result[0]))
        taps.setdefault("prefix_ar", common.keep(result[2]))
        return result

    def embed_suffix(noisy_actions, timestep):
        result = originals["embed_suffix"](noisy_actions, timestep)
        taps.setdefault("suffix", common.keep(result[0]))
        return result

    def denoise_step(prefix_pad_masks, past_key_values, x_t, timestep):
        if "velocity" not in taps:  # the step appends to the cache and crops it back: read it first
            taps["cache"] = [(common.keep(layer.keys), common.keep(layer.values)) for layer in past_key_values.layers]
        velocity = originals["denoise_step"](prefix_pad_masks=prefix_pad_masks, past_key_values=past_key_values,
                                             x_t=x_t, timestep=timestep)
        if "velocity" not in taps:
            taps.update(velocity=common.keep(velocity), pad_mask=common.keep(prefix_pad_masks),
                        t=float(timestep[0]), x=common.keep(x_t))
        return velocity

    model.denoise_step, model.embed_suffix, model.embed_prefix, model.sample_actions = (
        denoise_step, embed_suffix, embed_prefix, sample_actions)
    tapped_actions = run(observations[0])
    for name in originals:
        delattr(model, name)
    for hook in hooks:
        hook.remove()

    first, length = observations[0], spec["tokenizer_max_length"]
    slots0 = len(first["slots"])
    patches_per_side = spec["image_size"] // spec["vision"]["patch_size"]
    tokens_per_image = patches_per_side ** 2 // spec["scale_factor"] ** 2
    prefix_len0 = slots0 * tokens_per_image + length + 1
    assert taps["t"] == 1.0 and torch.equal(taps["x"], first["noise"])
    assert len(tower_out) == slots0 == len(connector_out) and len(taps["cache"]) == spec["num_vlm_layers"]
    assert all(torch.equal(handed["images"][j][0], first["model_images"][j] * 2 - 1) for j in range(slots0))
    assert [bool(m[0]) for m in handed["masks"]] == first["masks"].tolist()
    assert torch.equal(handed["state"][0, :spec["state_dim"]], first["state"][0])
    assert not handed["state"][0, spec["state_dim"]:].any()
    assert connector_out[0].shape[1] == tokens_per_image and taps["prefix_embeds"].shape[1] == prefix_len0
    assert taps["prefix_ar"][0].tolist() == [False] * (prefix_len0 - 1) + [True]
    row_major = all(torch.equal(p[0], torch.arange(patches_per_side ** 2)) for p in positions)
    embeddings = torch.cat(connector_out, 1)[0]
    with torch.no_grad():
        direct = torch.cat([joint.embed_image(first["model_images"][j:j + 1] * 2 - 1) for j in range(slots0)], 1)
    assert torch.equal(direct[0], embeddings)

    actions = []
    for k, obs in enumerate(observations):
        a, b = run(obs), run(obs)
        assert torch.equal(a, b) and (k or torch.equal(a, tapped_actions)), f"case {k} not repeatable"
        actions.append(a)
        print(f"case{k}: slots {obs['slots']} max|a| {float(a.abs().max()):.4f}", flush=True)

    arrays = {}
    for k, obs in enumerate(observations):
        arrays[f"case{k}_images"] = obs["model_images"].numpy()
        arrays[f"case{k}_image_masks"] = obs["masks"]
        arrays[f"case{k}_tokens"] = obs["tokens"][0].numpy().astype(np.int64)
        arrays[f"case{k}_token_mask"] = obs["token_mask"][0].numpy()
        arrays[f"case{k}_state"] = obs["state"][0].numpy()
        arrays[f"case{k}_noise"] = obs["noise"][0].numpy()
        arrays[f"case{k}_actions"] = actions[k].numpy()
    arrays["case0_vision_hidden"] = torch.cat(tower_out, 0).numpy()
    arrays["case0_image_embeddings"] = embeddings.numpy()
    arrays["case0_prefix_embeds"] = taps["prefix_embeds"][0].numpy()
    arrays["case0_prefix_hidden"] = taps["prefix_hidden"][0].numpy()
    arrays["case0_prefix_pad_mask"] = taps["pad_mask"][0].numpy()
    for label, layer in (("layer0", 0), ("layerLAST", spec["num_vlm_layers"] - 1)):
        arrays[f"case0_prefix_k_{label}"] = taps["cache"][layer][0].numpy()
        arrays[f"case0_prefix_v_{label}"] = taps["cache"][layer][1].numpy()
    arrays["case0_suffix_embeds_step0"] = taps["suffix"][0].numpy()
    arrays["case0_suffix_hidden_step0"] = taps["suffix_hidden"][0].numpy()
    arrays["case0_velocity_step0"] = taps["velocity"][0].numpy()

    common.write_record(out, weights=weights, config=record_config(spec, policy, cameras, feature_order, observations,
                                                                   actions, weights, row_major, markers),
                        arrays=arrays)
    print(f"wrote {out}: {common.count(weights)} parameters, max |a| {max(float(a.abs().max()) for a in actions):.4f}")


def text_dims(c) -> dict:
    return {"width": c.hidden_size, "depth": c.num_hidden_layers, "mlp_dim": c.intermediate_size,
            "num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads, "head_dim": c.head_dim,
            "vocab_size": c.vocab_size, "rms_norm_eps": c.rms_norm_eps, "hidden_act": c.hidden_act,
            "attention_bias": c.attention_bias, "mlp_bias": c.mlp_bias, "norm": LLAMA_NORM}


def record_config(spec, policy, cameras, feature_order, observations, actions, weights, row_major, markers) -> dict:
    joint = policy.model.vlm_with_expert
    vlm, expert = joint.get_vlm_model(), joint.lm_expert
    tower, text, expert_config = vlm.vision_model.config, joint.config.text_config, expert.config
    every, layers = spec["self_attn_every_n_layers"], spec["num_vlm_layers"]
    pairs = joint.get_model_layers([vlm.text_model, expert])[1]
    patches_per_side = spec["image_size"] // spec["vision"]["patch_size"]
    tokens_per_image = patches_per_side ** 2 // spec["scale_factor"] ** 2
    length, scale = spec["tokenizer_max_length"], spec["scale_factor"]
    return {
        "set": spec["name"],
        "model": "SmolVLA (lerobot SmolVLAPolicy, SmolVLM2-style VLM + action expert), tiny random-weight config",
        "camera_names": cameras, "n_cameras": len(cameras), "empty_cameras": spec["empty_cameras"],
        "image_feature_order": feature_order,
        "vision": {"image_size": tower.image_size, "patch_size": tower.patch_size,
                   "patches_per_side": patches_per_side, "width": tower.hidden_size, "depth": tower.num_hidden_layers,
                   "mlp_dim": tower.intermediate_size, "num_heads": tower.num_attention_heads,
                   "head_dim": tower.hidden_size // tower.num_attention_heads, "layer_norm_eps": tower.layer_norm_eps,
                   "hidden_act": tower.hidden_act, "position_ids_are_row_major_arange": row_major,
                   "input_range": "[-1, 1] = image*2-1 of the stored [0, 1] image"},
        "connector": {"scale_factor": scale, "in_dim": tower.hidden_size * scale ** 2, "out_dim": text.hidden_size,
                      "bias": False, "tokens_per_image": tokens_per_image,
                      "pixel_shuffle": "output token (i, j), i, j < patches_per_side/scale, row-major; its channel "
                                       "(a*scale + b)*width + c is channel c of vision patch (i*scale + a, "
                                       "j*scale + b)"},
        "image_embedding_scale": f"sqrt(text width) = sqrt({text.hidden_size}), applied to the connector output",
        "text_model": {**text_dims(text), "layers_kept": layers, "layers_in_config": spec["text"]["depth"],
                       "rope_theta_in_config_unused": text.rope_parameters["rope_theta"],
                       "embed_scale": "sqrt(width), applied by SmolVLA to the token embedding lookup"},
        "expert": {**text_dims(expert_config), "width_multiplier": spec["expert_width_multiplier"],
                   "note": "q/k/v/o have the text model's heads and head_dim; in a cross-attention layer k_proj and "
                           "v_proj map the cached VLM keys and values (kv_heads*head_dim wide), not the expert's "
                           "hidden state; no embed_tokens, no lm_head",
                   "mlp_dim_rule": "get_intermediate_size(width): 256 * ceil(4 * int(2*width/3) / 256)"},
        "attention_mode": policy.config.attention_mode, "self_attn_every_n_layers": every,
        "num_vlm_layers": layers, "num_expert_layers": len(expert.layers),
        "layer_kinds": ["self_attn" if every > 0 and i % every == 0 else "cross_attn" for i in range(layers)],
        "expert_layer_for_vlm_layer": [None if layer is None else list(expert.layers).index(layer) for layer in pairs],
        "rope": {"theta": 10000.0, "style": "rotate-half (first half / second half), float32",
                 "note": "SmolVLA's apply_rope uses max_wavelength 10000 whatever the text config's rope_theta"},
        "prefix": {"layout": "[image slot tokens..., language tokens, state token]",
                   "att_mask_ar": "0 for image and language tokens, 1 for the state token",
                   "state_token": "state_proj(state zero-padded to max_state_dim), width = text width"},
        "suffix": {"tokens": spec["chunk_size"], "att_mask_ar": "1 for every action token (causal among them)",
                   "action_tokens": "action_time_mlp_out(silu(action_time_mlp_in(concat(action_in_proj(x_t), "
                                    "time_emb))))"},
        "chunk_size": spec["chunk_size"], "max_action_dim": spec["max_action_dim"],
        "max_state_dim": spec["max_state_dim"], "action_dim": spec["action_dim"], "state_dim": spec["state_dim"],
        "num_steps": spec["num_steps"], "solver": "Euler from t = 1 to t = 0, dt = -1/num_steps",
        "tokenizer_max_length": length,
        "time_embedding": {"dim": expert_config.hidden_size, "min_period": policy.config.min_period,
                           "max_period": policy.config.max_period},
        "attention_mask_value": float(torch.finfo(torch.float32).min),
        "attention_mask_semantics": "masked logits are replaced by the value (torch.where), not added to",
        "add_image_special_tokens": False,
        "image_marker_token_ids_unused": markers,
        "weights_dtype": "float32",
        "n_params_state_dict": common.count(weights),
        "weight_init": "one torch.Generator seeded with seed.weights, policy.named_parameters() order: randn * "
                       "fan_in**-0.5 for ndim > 1 (fan_in = p[0].numel()), 1 + 0.1*randn for LayerNorm / RMSNorm "
                       "weights, 0.1*randn for other vectors",
        "data_draws": "one torch.Generator seeded with seed.data, per case in this order: images "
                      "rand(n_cameras,3,H,W), prompt ids randint(0,vocab-3,(1,L)) zeroed after valid_tokens, state "
                      "randn(1,state_dim)*state_scale, noise randn(1,chunk,max_action_dim)",
        "actions_source": "SmolVLAPolicy.predict_action_chunk(batch, noise=noise), no pre- or post-processor: "
                          "model-space actions, sample_actions(...)[:, :, :action_dim]",
        "offline_stand_ins": {"AutoConfig.from_pretrained": "a tiny SmolVLMConfig made from the spec",
                              "AutoProcessor.from_pretrained": "an object whose tokenizer carries "
                                                               "image_marker_token_ids_unused"},
        "cases": [{"index": k, "valid_tokens": obs["case"]["valid_tokens"],
                   "missing_cameras": [cameras[i] for i in obs["missing"]], "model_image_slots": obs["slots"],
                   "prefix_len": len(obs["slots"]) * tokens_per_image + length + 1,
                   "state_scale": obs["case"].get("state_scale", 1.0),
                   "max_abs_action": float(actions[k].abs().max())} for k, obs in enumerate(observations)],
        "max_abs_actions": float(max(a.abs().max() for a in actions)),
        "determinism": {"two_runs_bit_identical_all_cases": True},
        "generated_by": common.generated_by("reference/gen_smolvla.py", "lerobot", "torch", "transformers", "numpy",
                                            torch_num_threads=torch.get_num_threads()),
        "seed": spec["seeds"],
    }


if __name__ == "__main__":
    main()
