#!/usr/bin/env python
"""pi0.5 real-time chunking (RTC) records (test/data/pi05_rtc_tiny, test/data/extra/pi05_rtc_aside):
LeRobot 0.6.1's `RTCProcessor` around pi0.5's Euler steps, on a tiny `PI05Policy` built and drawn
as gen_pi05.py builds and draws it (equal model keys and seeds give byte-identical weights).

    python gen_pi05_rtc.py [SPEC.json] OUT_DIR      (reference environment; specs in specs/)

Spec: the model keys of gen_pi05.py (float32 only), `observations` [{valid_tokens,
missing_cameras}] (drawn like gen_pi05.py's cases: images, prompt ids, noise), `cases` and `chain`
as gen_rtc_records.py's. The cases run through gen_rtc_records.RtcRun with its extended output:
per case the guidance weights and the first step's through-the-expert product, and `checks` (the
guided steps replayed in numpy). 1 torch thread.
"""

from __future__ import annotations

import common
import lerobot_tiny as tiny
from gen_rtc_records import RtcRun

import numpy as np
import torch
from lerobot.configs import RTCAttentionSchedule


def case(name, obs, schedule, delay, horizon, prev=None, beta=10.0, **more):
    return {"name": name, "obs": obs, "schedule": schedule, "inference_delay": delay, "execution_horizon": horizon,
            "max_guidance_weight": beta, "prev": prev, **more}


DEFAULTS = {
    "name": "pi05_rtc_tiny",
    "n_cameras": 2, "image_size": 56, "patch_size": 14,
    "vision": {"width": 48, "depth": 2, "mlp_dim": 96, "num_heads": 4},
    "lm": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "expert": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "vocab_size": 1024, "tokenizer_max_length": 24, "chunk_size": 10, "state_dim": 8, "action_dim": 7,
    "max_state_dim": 32, "max_action_dim": 32, "num_inference_steps": 10,
    "torch_threads": 1,
    "seeds": {"torch_manual_seed": 0, "weights": 1, "data": 2},
    "observations": [{"valid_tokens": 17, "missing_cameras": []}, {"valid_tokens": 24, "missing_cameras": []},
                     {"valid_tokens": 9, "missing_cameras": [1]}, {"valid_tokens": 12, "missing_cameras": []}],
    "cases": [
        case("d0_linear_h5", 0, "LINEAR", 0, 5, {"obs": 1, "offset": 3}),
        case("d2_linear_h5", 0, "LINEAR", 2, 5, {"obs": 1, "offset": 3}),
        case("d4_linear_h5", 0, "LINEAR", 4, 5, {"obs": 1, "offset": 3}),
        case("d2_linear_h8", 0, "LINEAR", 2, 8, {"obs": 1, "offset": 2}),
        case("d2_linear_h10_clamped", 0, "LINEAR", 2, 10, {"obs": 1, "offset": 3}),
        case("d2_zeros_h5", 0, "ZEROS", 2, 5, {"obs": 1, "offset": 3}),
        case("d2_ones_h5", 0, "ONES", 2, 5, {"obs": 1, "offset": 3}),
        case("d2_exp_h5", 0, "EXP", 2, 5, {"obs": 1, "offset": 3}),
        case("d4_exp_h8", 3, "EXP", 4, 8, {"obs": 2, "offset": 2}),
        case("d2_linear_h5_beta3", 0, "LINEAR", 2, 5, {"obs": 1, "offset": 3}, beta=3.0),
        case("d3_exp_h7_beta5_cam1_missing", 2, "EXP", 3, 7, {"obs": 0, "offset": 3}, beta=5.0),
        case("d2_linear_h6_engine_padded", 0, "LINEAR", 2, 6, {"obs": 1, "offset": 6, "normalize_to": 6}),
        case("d6_linear_h4", 3, "LINEAR", 6, 4, {"obs": 1, "offset": 2}),
        case("noop_zeros_d0", 0, "ZEROS", 0, 5, {"obs": 1, "offset": 3}, expect="plain"),
        case("noop_prev_none", 0, "LINEAR", 2, 5, None, expect="plain"),
        case("noop_rtc_disabled", 0, "LINEAR", 2, 5, {"obs": 1, "offset": 3}, enabled=False, expect="plain")],
    "chain": {"name": "chain", "obs": [0, 1, 2, 3], "schedule": "LINEAR", "max_guidance_weight": 10.0,
              "execution_horizon": 6, "inference_delays": [2, 2, 3, 2], "executed_before_inference": [0, 2, 1, 1]},
}


def main() -> None:
    spec, out, _ = common.command_line(DEFAULTS, __doc__)
    common.threads(spec["torch_threads"])
    policy, _ = tiny.build_pi("pi05", spec)
    common.redraw(policy, spec["seeds"]["weights"], common.last_dim_rule)
    weights = common.state_dict_of(policy)
    cameras = tiny.camera_names(spec["n_cameras"])
    data = common.rng(spec["seeds"]["data"])
    observations = [tiny.draw_pi_case(data, spec, o, cameras, state=False) for o in spec["observations"]]
    steps = spec["num_inference_steps"]

    rtc = RtcRun(policy, observations, steps, spec["chunk_size"], extended=True)
    rtc.run_spec(spec)

    def observation_arrays(o):
        obs = observations[o]
        _, images, masks = tiny.pi_model_order(obs)
        return {"images": images.numpy(), "image_masks": masks,
                "tokens": obs["tokens"][0].numpy().astype(np.int64), "token_mask": obs["token_mask"][0].numpy(),
                "noise": obs["noise"][0].numpy()}

    def observation_fields(o):
        obs = observations[o]
        return {"valid_tokens": obs["case"]["valid_tokens"], "missing_cameras": [cameras[i] for i in obs["missing"]],
                "model_camera_order": [cameras[i] for i in tiny.pi_model_order(obs)[0]]}

    joint = policy.model.paligemma_with_expert
    text, expert = joint.paligemma.config.text_config, joint.gemma_expert.config
    tokens_per_camera = (spec["image_size"] // spec["patch_size"]) ** 2
    config = tiny.pi_config_head(spec, policy, cameras, "pi0.5 (lerobot PI05Policy), tiny random-weight config, "
                                                        "with lerobot's real-time chunking (RTC)")
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
        "weights_dtype": "float32",
        "n_params_state_dict": common.count(weights),
        "weight_init": tiny.PI_WEIGHT_INIT + " (as gen_pi05.py)",
        "observations": [{"index": i, "valid_tokens": obs["case"]["valid_tokens"],
                          "missing_cameras": [cameras[m] for m in obs["missing"]],
                          "max_abs_plain_action": float(rtc.plain[i].abs().max())}
                         for i, obs in enumerate(observations)],
        "actions_source": "PI05Policy.predict_action_chunk(batch, noise=noise, inference_delay=d, "
                          "prev_chunk_left_over=leftover) after policy.config.rtc_config = RTCConfig(...) and "
                          "policy.init_rtc_processor(); no pre- or post-processor (model-space actions). "
                          "actions_plain: the same call with rtc_config None.",
        "rtc": {"time_convention": "t = 1 noise -> t = 0 data; Euler step s uses t = 1 + s*dt, "
                                   "dt = -1/num_inference_steps",
                "step_times": [1.0 + s * (-1.0 / steps) for s in range(steps)],
                "schedules": [s.value for s in RTCAttentionSchedule]},
        "cases": rtc.case_entries(observation_fields),
        "checks": {**rtc.checks, "two_runs_bit_identical_all_cases": True, "debug_tracker_run_bit_identical": True,
                   "noop_cases_equal_plain_bitwise": True,
                   "rtc_cases_differ_from_plain_min": min(r["difference"] for r in rtc.records
                                                          if r["expect"] == "rtc")},
        "generated_by": common.generated_by("reference/gen_pi05_rtc.py", "lerobot", "torch", "transformers", "numpy",
                                            torch_num_threads=torch.get_num_threads()),
        "seed": spec["seeds"],
    })
    common.write_record(out, weights=weights, config=config, arrays=rtc.arrays(observation_arrays))
    print(f"wrote {out}: {len(rtc.records)} cases, {config['n_params_state_dict']} parameters")


if __name__ == "__main__":
    main()
