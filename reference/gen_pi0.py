#!/usr/bin/env python
"""pi0 model-level records (test/data/pi0_tiny, test/data/extra/pi0_three_cam_gqa): LeRobot's
`PI0Policy` at the spec's sizes on random weights, inputs (with a model-space state) -> model-space
actions, with the case-0 taps of the same call.

    python gen_pi0.py [SPEC.json] OUT_DIR      (reference environment; specs in specs/)

As gen_pi05.py (same shrinking, weight rule and draws) with pi0's differences: each case also draws
a state (randn * state_scale, after the prompt ids), passed as `observation.state`; pi0's suffix is a
state token followed by the action tokens, so case 0 also records the suffix embeddings and the
expert's last hidden state of the first Euler step. 1 torch thread.
"""

from __future__ import annotations

import common
import lerobot_tiny as tiny

import torch

DEFAULTS = {
    "name": "pi0_tiny",
    "n_cameras": 2, "image_size": 56, "patch_size": 14,
    "vision": {"width": 48, "depth": 2, "mlp_dim": 96, "num_heads": 4},
    "lm": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "expert": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "vocab_size": 1024, "tokenizer_max_length": 24, "chunk_size": 10, "state_dim": 8, "action_dim": 7,
    "max_state_dim": 32, "max_action_dim": 32, "num_inference_steps": 10,
    "torch_threads": 1,
    "seeds": {"torch_manual_seed": 0, "weights": 101, "data": 102},
    "cases": [{"valid_tokens": 17, "missing_cameras": []},
              {"valid_tokens": 24, "missing_cameras": [], "state_scale": 2.0},
              {"valid_tokens": 9, "missing_cameras": [1]}],
}
GEMMA_NORM = "Gemma RMSNorm, x*rsqrt(mean(x^2)+eps)*(1+w)"


def main() -> None:
    spec, out, _ = common.command_line(DEFAULTS, __doc__)
    common.threads(spec["torch_threads"])
    assert spec["state_dim"] <= spec["max_state_dim"] and spec["action_dim"] <= spec["max_action_dim"]
    policy, modeling = tiny.build_pi("pi0", spec)
    model = policy.model
    joint = model.paligemma_with_expert
    assert not getattr(joint.gemma_expert.config, "use_adarms", False)
    common.redraw(policy, spec["seeds"]["weights"], common.last_dim_rule)
    weights = common.state_dict_of(policy)
    cameras = tiny.camera_names(spec["n_cameras"])
    data = common.rng(spec["seeds"]["data"])
    observations = [tiny.draw_pi_case(data, spec, case, cameras, state=True) for case in spec["cases"]]
    chunk = spec["chunk_size"]

    def run(obs):
        batch = {k: v.clone() for k, v in obs["batch"].items()}
        return policy.predict_action_chunk(batch, noise=obs["noise"].clone())[0].detach().clone()

    taps, projected = {}, []
    hooks = [joint.paligemma.model.multi_modal_projector.register_forward_hook(
                 lambda m, a, o: projected.append(common.keep(o))),
             joint.paligemma.model.language_model.norm.register_forward_pre_hook(
                 common.first_only(taps, "prefix_hidden", lambda m, a: common.keep(a[0]))),
             joint.gemma_expert.model.norm.register_forward_pre_hook(
                 common.first_only(taps, "suffix_hidden", lambda m, a: common.keep(a[0])))]
    denoise, suffix = model.denoise_step, model.embed_suffix

    def tapped_suffix(state, noisy_actions, timestep):
        result = suffix(state, noisy_actions, timestep)
        if "suffix" not in taps:
            taps.update(suffix=common.keep(result[0]), suffix_ar=common.keep(result[2]), state=common.keep(state))
        return result

    def tapped_denoise(state, prefix_pad_masks, past_key_values, x_t, timestep):
        velocity = denoise(state=state, prefix_pad_masks=prefix_pad_masks, past_key_values=past_key_values,
                           x_t=x_t, timestep=timestep)
        if "velocity" not in taps:
            taps.update(velocity=common.keep(velocity), pad_mask=common.keep(prefix_pad_masks),
                        cache=[(common.keep(k), common.keep(v)) for k, v, _ in past_key_values],
                        t=float(timestep[0]), x=common.keep(x_t))
        return velocity

    model.denoise_step, model.embed_suffix = tapped_denoise, tapped_suffix
    tapped_actions = run(observations[0])
    del model.denoise_step, model.embed_suffix
    for hook in hooks:
        hook.remove()
    first = observations[0]
    assert taps["t"] == 1.0 and torch.equal(taps["x"], first["noise"])
    assert len(projected) == spec["n_cameras"] and len(taps["cache"]) == spec["lm"]["depth"]
    assert taps["suffix_hidden"].shape[1] == 1 + chunk
    assert taps["suffix_ar"][0].tolist() == [1, 1] + [0] * (chunk - 1)
    assert torch.equal(taps["state"][0, :spec["state_dim"]], first["state"][0])
    assert not taps["state"][0, spec["state_dim"]:].any()
    embeddings = torch.cat(projected, 1)[0]
    _, images0, _ = tiny.pi_model_order(first)
    with torch.no_grad():
        direct = torch.cat([joint.embed_image(images0[j:j + 1] * 2 - 1) for j in range(spec["n_cameras"])], 1)
    assert torch.equal(direct[0], embeddings)

    actions = []
    for k, obs in enumerate(observations):
        a, b = run(obs), run(obs)
        assert torch.equal(a, b) and (k or torch.equal(a, tapped_actions)), f"case {k} not repeatable"
        actions.append(a)
        print(f"case{k}: actions {tuple(a.shape)} max|a| {float(a.abs().max()):.4f}", flush=True)

    slot_order, size = {}, spec["image_size"]
    for k, obs in enumerate(observations):
        order, _, _ = tiny.pi_model_order(obs)
        if obs["missing"] and order != list(range(len(cameras))):
            images = [obs["batch"][cameras[i]] * 2 - 1 if i in obs["present"] else -torch.ones(1, 3, size, size)
                      for i in range(len(cameras))]
            masks = [torch.tensor([i in obs["present"]]) for i in range(len(cameras))]
            state = modeling.pad_vector(obs["state"], spec["max_state_dim"])
            with torch.no_grad():
                slotted = model.sample_actions(images, masks, obs["tokens"], obs["token_mask"], state,
                                               noise=obs["noise"].clone())[0, :, :spec["action_dim"]]
            slot_order[k] = float((slotted - actions[k]).abs().max())

    arrays = tiny.pi_record_arrays(observations, actions, embeddings, taps, spec["lm"]["depth"], state=True)
    arrays["case0_suffix_embeds_step0"] = taps["suffix"][0].numpy()
    arrays["case0_suffix_hidden_step0"] = taps["suffix_hidden"][0].numpy()

    text, expert = joint.paligemma.config.text_config, joint.gemma_expert.config
    tokens_per_camera = (size // spec["patch_size"]) ** 2
    config = tiny.pi_config_head(spec, policy, cameras, "pi0 (lerobot PI0Policy), tiny random-weight config",
                                 vision_extra={"input_range": "[-1, 1] = image*2-1 of the stored [0, 1] image"})
    config.update({
        "language_model": tiny.gemma_dims(text, True, norm=GEMMA_NORM),
        "expert": {**tiny.gemma_dims(expert, False, norm=GEMMA_NORM), "use_adarms": False,
                   "note": "vocab_size/lm_head present but unused; no embed_tokens"},
        "suffix": {"tokens": 1 + chunk, "layout": "[state token, action token 0..chunk-1]",
                   "state_token": "state_proj(state zero-padded to max_state_dim)",
                   "action_tokens": "action_time_mlp_out(silu(action_time_mlp_in(concat(action_in_proj(x_t), "
                                    "time_emb))))",
                   "att_mask_ar": [1, 1] + [0] * (chunk - 1),
                   "positions": "n_valid_prefix + [0, 1, ..., chunk]"},
        **tiny.pi_sizes(spec),
        "solver": "Euler from t = 1 to t = 0, dt = -1/num_inference_steps",
        "tokenizer_max_length": spec["tokenizer_max_length"],
        "prefix_len": spec["n_cameras"] * tokens_per_camera + spec["tokenizer_max_length"],
        "time_embedding": {"dim": spec["expert"]["width"], "min_period": policy.config.min_period,
                           "max_period": policy.config.max_period,
                           "layout": "[sin(t*2pi/period), cos(t*2pi/period)], period = "
                                     "min*(max/min)**linspace(0,1,dim/2)"},
        "attention_mask_value": tiny.MASK_VALUE,
        "weights_dtype": "float32",
        "n_params_state_dict": common.count(weights),
        "weight_init": tiny.PI_WEIGHT_INIT,
        "data_draws": "one torch.Generator seeded with seed.data, per case in this order: images "
                      "rand(n_cameras,3,H,W), prompt ids randint(0,vocab,(1,L)) zeroed after valid_tokens, state "
                      "randn(1,state_dim)*state_scale, noise randn(1,chunk,max_action_dim)",
        "actions_source": "PI0Policy.predict_action_chunk(batch, noise=noise), no pre- or post-processor: "
                          "model-space actions, sample_actions(...)[:, :, :action_dim]; the state is model-space "
                          "(normalized) and the policy zero-pads it to max_state_dim",
        "cases": [{"index": k, "valid_tokens": obs["case"]["valid_tokens"],
                   "missing_cameras": [cameras[i] for i in obs["missing"]],
                   "model_camera_order": [cameras[i] for i in tiny.pi_model_order(obs)[0]],
                   "state_scale": obs["case"].get("state_scale", 1.0),
                   "max_abs_action": float(actions[k].abs().max())} for k, obs in enumerate(observations)],
        "max_abs_actions": float(max(a.abs().max() for a in actions)),
        "determinism": {"two_runs_bit_identical_all_cases": True,
                        "slot_order_vs_lerobot_order_max_abs_diff": slot_order},
        "generated_by": common.generated_by("reference/gen_pi0.py", "lerobot", "torch", "transformers", "numpy",
                                            torch_num_threads=torch.get_num_threads()),
        "seed": spec["seeds"],
    })
    common.write_record(out, weights=weights, config=config, arrays=arrays)
    print(f"wrote {out}: {config['n_params_state_dict']} parameters, max |a| {config['max_abs_actions']:.4f}")


if __name__ == "__main__":
    main()
