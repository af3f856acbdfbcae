#!/usr/bin/env python
"""pi0.5 model-level records (test/data/pi05_tiny, pi05_small, test/data/extra/pi05_*): LeRobot's
`PI05Policy` at the spec's sizes on random weights, inputs -> model-space actions, with the case-0
intermediate values (taps) of the same call.

    python gen_pi05.py [SPEC.json] OUT_DIR      (reference environment; specs in specs/)

1. builds the policy small (lerobot_tiny.shrink_paligemma), redraws every parameter with
   `common.last_dim_rule` from seeds.weights (optionally rounded to float16: `weights_dtype`);
2. draws each case's images, prompt ids and noise from seeds.data (lerobot_tiny.draw_pi_case);
3. runs `predict_action_chunk(batch, noise=noise)` (no processors) with hooks on case 0 (projector
   output, the LM's last hidden state, the prefix cache of the first and last LM layer, the first
   expert velocity), then every case twice more: all runs must agree bit for bit;
4. for a case whose missing cameras change the camera order, also runs `sample_actions` with the
   images in camera-slot order and records how far that lands from LeRobot's order;
5. optionally times the policy (`time_runs`), and writes model.safetensors, config.json, cases.npz.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import common
import lerobot_tiny as tiny

import torch

DEFAULTS = {
    "name": "pi05_tiny",
    "n_cameras": 2, "image_size": 56, "patch_size": 14,
    "vision": {"width": 48, "depth": 2, "mlp_dim": 96, "num_heads": 4},
    "lm": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "expert": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "vocab_size": 1024, "tokenizer_max_length": 24, "chunk_size": 10, "state_dim": 8, "action_dim": 7,
    "max_state_dim": 32, "max_action_dim": 32, "num_inference_steps": 10,
    "weights_dtype": "float32",          # or "float16": weights rounded to float16, the reference runs in float32
    "omit_unused_lm_heads": False,       # leave the two unused lm_head tensors out of the file
    "time_runs": 0,                      # > 0: median of that many timed runs after 2 warm-ups
    "torch_threads": 2,
    "seeds": {"torch_manual_seed": 0, "weights": 1, "data": 2},
    "cases": [{"valid_tokens": 17, "missing_cameras": []},
              {"valid_tokens": 24, "missing_cameras": []},
              {"valid_tokens": 9, "missing_cameras": [1]}],
}


def main() -> None:
    spec, out, _ = common.command_line(DEFAULTS, __doc__)
    common.threads(spec["torch_threads"])
    half = spec["weights_dtype"] == "float16"
    policy, _ = tiny.build_pi("pi05", spec)
    model = policy.model
    joint = model.paligemma_with_expert
    rule = tiny.PI05_RULE_HALF if half else common.last_dim_rule
    common.redraw(policy, spec["seeds"]["weights"], rule)
    weights = common.state_dict_of(policy, copy=False)  # full size: 13 GB a copy, the machine has 24
    weights_before = common.fingerprint(weights)
    cameras = tiny.camera_names(spec["n_cameras"])
    data = common.rng(spec["seeds"]["data"])
    observations = [tiny.draw_pi_case(data, spec, case, cameras, state=False) for case in spec["cases"]]

    def run(obs):
        return policy.predict_action_chunk(obs["batch"], noise=obs["noise"].clone())[0].detach().clone()

    # case 0 with taps
    taps, projected = {}, []
    hooks = [joint.paligemma.model.multi_modal_projector.register_forward_hook(
                 lambda m, a, o: projected.append(common.keep(o))),
             joint.paligemma.model.language_model.norm.register_forward_pre_hook(
                 common.first_only(taps, "prefix_hidden", lambda m, a: common.keep(a[0])))]
    denoise = model.denoise_step

    def tapped(prefix_pad_masks, past_key_values, x_t, timestep):
        velocity = denoise(prefix_pad_masks=prefix_pad_masks, past_key_values=past_key_values, x_t=x_t,
                           timestep=timestep)
        if "velocity" not in taps:
            taps.update(velocity=common.keep(velocity), pad_mask=common.keep(prefix_pad_masks),
                        cache=[(common.keep(k), common.keep(v)) for k, v, _ in past_key_values],
                        t=float(timestep[0]), x=common.keep(x_t))
        return velocity

    model.denoise_step = tapped
    tapped_actions = run(observations[0])
    del model.denoise_step
    for hook in hooks:
        hook.remove()
    assert taps["t"] == 1.0 and torch.equal(taps["x"], observations[0]["noise"])
    assert len(projected) == spec["n_cameras"] and len(taps["cache"]) == spec["lm"]["depth"]
    embeddings = torch.cat(projected, 1)[0]
    _, model_images0, _ = tiny.pi_model_order(observations[0])
    with torch.no_grad():  # the hook saw what LeRobot's embed_image gives for the [-1, 1] image
        direct = torch.cat([joint.embed_image(model_images0[j:j + 1] * 2 - 1) for j in range(spec["n_cameras"])], 1)
    assert torch.equal(direct[0], embeddings)

    actions = []
    for k, obs in enumerate(observations):
        first, second = run(obs), run(obs)
        assert torch.equal(first, second) and (k or torch.equal(first, tapped_actions)), f"case {k} not repeatable"
        actions.append(first)
        print(f"case{k}: actions {tuple(first.shape)} max|a| {float(first.abs().max()):.4f}", flush=True)

    slot_order = {}
    size = spec["image_size"]
    for k, obs in enumerate(observations):
        order, _, _ = tiny.pi_model_order(obs)
        if obs["missing"] and order != list(range(len(cameras))):
            images = [obs["batch"][cameras[i]] * 2 - 1 if i in obs["present"] else -torch.ones(1, 3, size, size)
                      for i in range(len(cameras))]
            masks = [torch.tensor([i in obs["present"]]) for i in range(len(cameras))]
            with torch.no_grad():
                slotted = model.sample_actions(images, masks, obs["tokens"], obs["token_mask"],
                                               noise=obs["noise"].clone())[0, :, :spec["action_dim"]]
            slot_order[k] = float((slotted - actions[k]).abs().max())

    latency = timing(spec, lambda: run(observations[0])) if spec["time_runs"] else None

    omitted = {k: list(v.shape) for k, v in weights.items()
               if spec["omit_unused_lm_heads"] and k.endswith("lm_head.weight")}
    stored = {k: v for k, v in weights.items() if k not in omitted}  # float16 when written, one at a time
    arrays = tiny.pi_record_arrays(observations, actions, embeddings, taps, spec["lm"]["depth"], state=False)

    text, expert = joint.paligemma.config.text_config, joint.gemma_expert.config
    tokens_per_camera = (spec["image_size"] // spec["patch_size"]) ** 2
    config = tiny.pi_config_head(spec, policy, cameras, "pi0.5 (lerobot PI05Policy), tiny random-weight config")
    config.update({
        "language_model": tiny.gemma_dims(text, True),
        "expert": {**tiny.gemma_dims(expert, False), "adarms_cond_dim": expert.adarms_cond_dim,
                   "note": "vocab_size/lm_head present but unused; no embed_tokens"},
        **tiny.pi_sizes(spec),
        "tokenizer_max_length": spec["tokenizer_max_length"],
        "prefix_len": spec["n_cameras"] * tokens_per_camera + spec["tokenizer_max_length"],
        "time_embedding": {"dim": spec["expert"]["width"], "min_period": policy.config.min_period,
                           "max_period": policy.config.max_period},
        "attention_mask_value": tiny.MASK_VALUE,
        "weights_dtype": "float16, reference computed in float32 from these exact values" if half else "float32",
        "n_params_state_dict": common.count(weights),
        "omitted_unused_tensors": omitted,
        "weight_init": tiny.PI_WEIGHT_INIT + (", then rounded to float16" if half else ""),
        "actions_source": "PI05Policy.predict_action_chunk(batch, noise=noise), no pre- or post-processor: "
                          "model-space actions, sample_actions(...)[:, :, :action_dim]",
        "cases": [{"index": k, "valid_tokens": obs["case"]["valid_tokens"],
                   "missing_cameras": [cameras[i] for i in obs["missing"]],
                   "model_camera_order": [cameras[i] for i in tiny.pi_model_order(obs)[0]],
                   "max_abs_action": float(actions[k].abs().max())} for k, obs in enumerate(observations)],
        "max_abs_actions": float(max(a.abs().max() for a in actions)),
        "determinism": {"two_runs_bit_identical_all_cases": True,
                        "slot_order_vs_lerobot_order_max_abs_diff": slot_order},
        "generated_by": common.generated_by("reference/gen_pi05.py", "lerobot", "torch", "transformers", "numpy",
                                            torch_num_threads=torch.get_num_threads()),
        "seed": spec["seeds"],
    })
    if latency:
        config["reference_latency_ms"] = latency["median_ms"]
        config["reference_latency"] = latency
    assert common.fingerprint(weights) == weights_before, "the runs changed the weights in place"
    common.write_record(out, weights=stored, weights_dtype=torch.float16 if half else None, config=config,
                        arrays=arrays)
    print(f"wrote {out}: {config['n_params_state_dict']} parameters, max |a| {config['max_abs_actions']:.4f}")


def timing(spec: dict, call) -> dict:
    load_before = os.getloadavg()
    call(), call()
    runs = []
    for _ in range(spec["time_runs"]):
        start = time.perf_counter()
        call()
        runs.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": round(statistics.median(runs), 2), "runs_ms": [round(r, 2) for r in runs],
            "what": f"PI05Policy.predict_action_chunk, batch 1, case 0, {spec['num_inference_steps']} steps, fp32, "
                    "CPU, after 2 warm-up runs",
            "torch_num_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
            "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
            "cpu": platform.processor() or platform.machine()}


if __name__ == "__main__":
    main()
