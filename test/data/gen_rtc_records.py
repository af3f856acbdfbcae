"""Writes LeRobot 0.6.1's real-time chunking (RTC) records for pi0 and SmolVLA on the weights and
observations of a plain model record: test/data/pi0_rtc_tiny and smolvla_rtc_tiny (on pi0_tiny and
smolvla_tiny), and the records kept aside, test/data/extra/pi0_rtc_aside and smolvla_rtc_aside (on the
other-shape records pi0_three_cam_gqa and smolvla_three_cam_gqa).

Runs in the PyTorch reference environment (lerobot 0.6.1, transformers, torch), not in the project's:

    HF_HUB_OFFLINE=1 /tmp/ref_venv/bin/python test/data/gen_rtc_records.py SPEC.json OUT_DIR
    e.g. test/data/rtc_specs/pi0_rtc_tiny.json test/data/pi0_rtc_tiny,
         test/data/extra/specs/smolvla_rtc_aside.json test/data/extra/smolvla_rtc_aside

SPEC: `family` (pi0 or smolvla), `plain_record` (the folder under test/data whose weights and
observations are used), `cases` [{name, obs, schedule, inference_delay, execution_horizon,
max_guidance_weight, prev: {obs, offset, normalize_to?} or null, enabled?, expect?}] (the leftover:
the plain actions of observation `obs` from row `offset`, padded / cut to `normalize_to` rows by
LeRobot's engine helper) and `chain` (a live loop through LeRobot's `ActionQueue`), as the pi0.5 RTC
specs; `chunk_size`, `action_dim`, `max_action_dim` and `num_inference_steps` restate the plain
record's.

The policy is rebuilt with the dimensions of the plain record's config.json (LeRobot's Gemma
variant table and PaliGemma / expert constructors replaced for pi0; the two hub look-ups of SmolVLA's
VLM answered with a tiny SmolVLM config) and loaded with the record's own model.safetensors (strict),
so the plain record's cases are reproduced first (within 1e-5: CPU kernels round differently
from the machine that made them; the difference is recorded). Every RTC case then sets
`policy.config.rtc_config = RTCConfig(...)`, calls `policy.init_rtc_processor()` and runs
`predict_action_chunk(batch, noise=..., inference_delay=d, prev_chunk_left_over=leftover)`: LeRobot's
`RTCProcessor.denoise_step` inside its `euler_integrate`. The chain drives LeRobot's `ActionQueue` as its
RTC inference engine does, the leftover padded / cut to the execution horizon by the engine's own helper.

Record layout: as test/data/pi05_rtc_tiny (docs/reference.md, "Real-time chunking records"), plus
`case{k}_state`. Per step, the plain and guided velocities and the solver states (the last one too)
are recorded (LeRobot's RTC debug tracker and wrappers around the policy's `denoise_step` and
`sample_actions`).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import sys
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import load_file

import lerobot
from lerobot.configs import FeatureType, PolicyFeature, RTCAttentionSchedule
from lerobot.policies.rtc import ActionQueue, RTCConfig

DATA = Path(__file__).resolve().parent

def engine_fit_rows():
    """LeRobot's `_normalize_prev_actions_length` (rollout/inference/rtc.py), read from the installed
    file: importing that module needs the `datasets` package."""
    path = Path(lerobot.__file__).parent / "rollout" / "inference" / "rtc.py"
    tree = ast.parse(path.read_text())
    function = next(node for node in tree.body
                    if isinstance(node, ast.FunctionDef) and node.name == "_normalize_prev_actions_length")
    namespace = {"torch": torch}
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["_normalize_prev_actions_length"]


def features(cameras, image_size, state_dim, action_dim):
    return dict(input_features={**{c: PolicyFeature(FeatureType.VISUAL, (3, image_size, image_size)) for c in cameras},
                                "observation.state": PolicyFeature(FeatureType.STATE, (state_dim,))},
                output_features={"action": PolicyFeature(FeatureType.ACTION, (action_dim,))})


def build_pi0(config: dict):
    import lerobot.policies.pi0.modeling_pi0 as modeling
    from lerobot.policies.pi0 import PI0Config

    lm, expert, vision = config["language_model"], config["expert"], config["vision"]
    keys = ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim")
    modeling.get_gemma_config = lambda variant: modeling.GemmaConfig(
        **{k: (lm if variant == "gemma_2b" else expert)[k] for k in keys})
    paligemma, gemma_expert = modeling.PaliGemmaForConditionalGenerationWithPiGemma, modeling.PiGemmaForCausalLM

    def small_paligemma(config):
        v = config.vision_config
        v.hidden_size, v.intermediate_size = vision["width"], vision["mlp_dim"]
        v.num_hidden_layers, v.num_attention_heads = vision["depth"], vision["num_heads"]
        v.patch_size, v.projection_dim = vision["patch_size"], config.text_config.hidden_size
        config.text_config.vocab_size = lm["vocab_size"]
        return paligemma(config=config)

    def small_expert(config):
        config.vocab_size = lm["vocab_size"]
        return gemma_expert(config=config)

    modeling.PaliGemmaForConditionalGenerationWithPiGemma, modeling.PiGemmaForCausalLM = small_paligemma, small_expert
    size = vision["image_size"]
    policy_config = PI0Config(device="cpu", dtype="float32", image_resolution=(size, size),
                              chunk_size=config["chunk_size"], n_action_steps=config["chunk_size"],
                              tokenizer_max_length=config["tokenizer_max_length"],
                              max_action_dim=config["max_action_dim"], max_state_dim=config["max_state_dim"],
                              num_inference_steps=config["num_inference_steps"],
                              **features(config["camera_names"], size, config["state_dim"], config["action_dim"]))
    return modeling.PI0Policy(policy_config)


def build_smolvla(config: dict):
    from transformers import LlamaConfig, SmolVLMConfig
    from transformers.models.smolvlm.configuration_smolvlm import SmolVLMVisionConfig
    import lerobot.policies.smolvla.modeling_smolvla as modeling
    import lerobot.policies.smolvla.smolvlm_with_expert as with_expert
    from lerobot.policies.smolvla import SmolVLAConfig

    vision, text, markers = config["vision"], config["text_model"], config["image_marker_token_ids_unused"]
    vlm_name = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"

    def vlm_config():
        vision_config = SmolVLMVisionConfig(hidden_size=vision["width"], intermediate_size=vision["mlp_dim"],
                                            num_hidden_layers=vision["depth"], num_attention_heads=vision["num_heads"],
                                            image_size=vision["image_size"], patch_size=vision["patch_size"],
                                            hidden_act=vision["hidden_act"], layer_norm_eps=vision["layer_norm_eps"])
        text_config = LlamaConfig(vocab_size=text["vocab_size"], hidden_size=text["width"],
                                  intermediate_size=text["mlp_dim"], num_hidden_layers=text["layers_in_config"],
                                  num_attention_heads=text["num_heads"], num_key_value_heads=text["num_kv_heads"],
                                  head_dim=text["head_dim"], hidden_act=text["hidden_act"],
                                  rms_norm_eps=text["rms_norm_eps"], attention_bias=False, mlp_bias=False,
                                  rope_parameters={"rope_type": "default",
                                                   "rope_theta": text["rope_theta_in_config_unused"]},
                                  max_position_embeddings=8192, pad_token_id=0, tie_word_embeddings=False)
        return SmolVLMConfig(vision_config=vision_config, text_config=text_config,
                             scale_factor=config["connector"]["scale_factor"], image_token_id=markers["image_token_id"],
                             pad_token_id=0, tie_word_embeddings=False)

    def offline(answer):
        def from_pretrained(name, *args, **kwargs):
            if name != vlm_name:
                raise OSError(f"offline record build: unexpected model {name}")
            return answer()
        return types.SimpleNamespace(from_pretrained=from_pretrained)

    with_expert.AutoConfig = offline(vlm_config)
    with_expert.AutoProcessor = offline(lambda: types.SimpleNamespace(tokenizer=types.SimpleNamespace(**markers)))
    size = vision["image_size"]
    policy_config = SmolVLAConfig(device="cpu", chunk_size=config["chunk_size"], n_action_steps=config["chunk_size"],
                                  max_state_dim=config["max_state_dim"], max_action_dim=config["max_action_dim"],
                                  resize_imgs_with_padding=(size, size), empty_cameras=config["empty_cameras"],
                                  tokenizer_max_length=config["tokenizer_max_length"], num_steps=config["num_steps"],
                                  vlm_model_name=vlm_name, load_vlm_weights=False, add_image_special_tokens=False,
                                  attention_mode=config["attention_mode"], num_expert_layers=0,
                                  num_vlm_layers=config["num_vlm_layers"],
                                  self_attn_every_n_layers=config["self_attn_every_n_layers"],
                                  expert_width_multiplier=config["expert"]["width_multiplier"],
                                  **features(config["camera_names"], size, config["state_dim"], config["action_dim"]))
    return modeling.SmolVLAPolicy(policy_config)


FAMILIES = {"pi0": (build_pi0, "num_inference_steps"), "smolvla": (build_smolvla, "num_steps")}


def main(spec: dict, out: Path) -> None:
    torch.set_num_threads(1)
    build, steps_key = FAMILIES[spec["family"]]
    source = DATA / spec["plain_record"]
    source_name = source.name
    config = json.loads((source / "config.json").read_text())
    cases = dict(np.load(source / "cases.npz"))
    steps, chunk = config[steps_key], config["chunk_size"]
    restated = {"chunk_size": chunk, "action_dim": config["action_dim"], "max_action_dim": config["max_action_dim"],
                "num_inference_steps": steps}
    assert all(spec[key] == value for key, value in restated.items()), f"spec and {source_name} differ: {restated}"
    torch.manual_seed(0)
    policy = build(config).eval()
    policy.load_state_dict(load_file(source / "model.safetensors"), strict=True)
    model = policy.model
    fit_rows = engine_fit_rows()

    observations = []
    for k, recorded in enumerate(config["cases"]):
        slots = recorded.get("model_camera_order") or recorded["model_image_slots"]  # pi0 / SmolVLA
        images, masks = cases[f"case{k}_images"], cases[f"case{k}_image_masks"]
        batch = {name: torch.from_numpy(images[slot:slot + 1]).clone()
                 for slot, name in enumerate(slots) if masks[slot]}  # a missing camera is absent from the batch
        batch["observation.language.tokens"] = torch.from_numpy(cases[f"case{k}_tokens"])[None]
        batch["observation.language.attention_mask"] = torch.from_numpy(cases[f"case{k}_token_mask"])[None]
        batch["observation.state"] = torch.from_numpy(cases[f"case{k}_state"])[None]
        observations.append({"batch": batch, "noise": torch.from_numpy(cases[f"case{k}_noise"])[None], "index": k})

    def set_rtc(rtc_config):
        policy.config.rtc_config = rtc_config
        policy.init_rtc_processor()
        if rtc_config is None:
            model.rtc_processor = None

    def rtc_config(schedule, beta, horizon, enabled=True, debug=False):
        return RTCConfig(enabled=enabled, prefix_attention_schedule=RTCAttentionSchedule(schedule),
                         max_guidance_weight=beta, execution_horizon=horizon, debug=debug, debug_maxlen=100)

    def predict(o, settings=None, delay=None, leftover=None, taps=False):
        set_rtc(None if settings is None else rtc_config(*settings, debug=taps))
        calls, solved, denoise, sample = [], [], model.denoise_step, model.sample_actions
        if taps:
            def tapped(*args, **kwargs):
                velocity = denoise(*args, **kwargs)
                calls.append((kwargs["x_t"].detach().clone(), velocity.detach().clone()))
                return velocity

            def tapped_sample(*args, **kwargs):  # the solve's last state, all max_action_dim columns
                x = sample(*args, **kwargs)
                solved.append(x.detach().clone())
                return x
            model.denoise_step, model.sample_actions = tapped, tapped_sample
        keywords = {} if settings is None else {"inference_delay": delay,
                                                "prev_chunk_left_over": None if leftover is None else leftover.clone()}
        try:
            actions = policy.predict_action_chunk({k: v.clone() for k, v in o["batch"].items()},
                                                  noise=o["noise"].clone(), **keywords)[0].detach().clone()
        finally:
            if taps:
                del model.denoise_step, model.sample_actions  # back to the class methods
        tracked = policy.rtc_processor.get_all_debug_steps() if taps and policy.rtc_processor else []
        set_rtc(None)
        return (actions, calls + [(solved[0], None)], tracked) if taps else actions

    plain = [predict(o) for o in observations]
    plain_vs_source = max(float((actions - torch.from_numpy(cases[f"case{k}_actions"])).abs().max())
                          for k, actions in enumerate(plain))
    assert plain_vs_source < 1e-5, f"plain sampling differs from {source_name} by {plain_vs_source}: other weights?"

    records = []

    def run(name, kind, obs, settings, delay, leftover, leftover_info, expect, extra=None):
        o = observations[obs]
        actions = predict(o, settings, delay, leftover)
        again, calls, tracked = predict(o, settings, delay, leftover, taps=True)
        assert torch.equal(actions, again), f"{name}: not repeatable"
        assert len(calls) == steps + 1 and torch.equal(calls[-1][0][0, :, :actions.shape[1]], actions)
        difference = float((actions - plain[obs]).abs().max())
        guided = settings[3] and leftover is not None
        if expect == "plain":
            assert torch.equal(actions, plain[obs]), f"{name}: expected plain sampling, differs by {difference}"
        else:
            assert guided and difference > 1e-3, f"{name}: RTC had no effect ({difference})"
        record = {"name": name, "kind": kind, "obs": obs, "settings": settings, "delay": delay, "leftover": leftover,
                  "leftover_info": leftover_info, "expect": expect, "actions": actions, "guided": guided,
                  "difference": difference, "extra": extra or {},
                  "x_steps": torch.stack([x[0] for x, _ in calls]),
                  "v_base": torch.stack([v[0] for _, v in calls[:-1]])}
        if guided:
            assert len(tracked) == steps
            record["weights"] = tracked[0].weights.reshape(-1)
            record["guidance_weights"] = torch.stack(
                [torch.as_tensor(s.guidance_weight, dtype=torch.float32).reshape(()) for s in tracked])
            record["v_guided"] = torch.stack([s.v_t[0] for s in tracked])
            record["horizon"] = min(settings[2], leftover.shape[0])
        records.append(record)
        print(f"{name:28s} d={delay} h={settings[2]:>2} {settings[0]:6s} beta={settings[1]:<4} "
              f"leftover={None if leftover is None else tuple(leftover.shape)} max|a-plain|={difference:.4f}",
              flush=True)

    for case in spec["cases"]:
        leftover = info = None
        if case["prev"] is not None:
            of, first, rows = case["prev"]["obs"], case["prev"]["offset"], case["prev"].get("normalize_to")
            leftover = plain[of][first:].clone()
            info = {"source": "plain actions of observation", "obs": of, "rows_from": first}
            if rows is not None:
                leftover = fit_rows(leftover, target_steps=rows)
                info["normalized_to_rows"] = rows
        settings = (case["schedule"], case["max_guidance_weight"], case["execution_horizon"], case.get("enabled", True))
        run(case["name"], "single", case["obs"], settings, case["inference_delay"], leftover, info,
            case.get("expect", "rtc"))

    chain = spec["chain"]
    settings = (chain["schedule"], chain["max_guidance_weight"], chain["execution_horizon"], True)
    queue = ActionQueue(rtc_config(*settings[:3]))
    for j, (obs, delay, executed) in enumerate(zip(chain["obs"], chain["inference_delays"],
                                                   chain["executed_before_inference"])):
        for _ in range(executed):
            assert queue.get() is not None
        index_before = queue.get_action_index()
        leftover, info = queue.get_left_over(), None
        if leftover is not None:
            rows_from = chain["inference_delays"][j - 1] + index_before
            info = {"source": "previous chain chunk", "case": len(records) - 1, "rows_from": rows_from,
                    "leftover_rows_before_normalizing": int(leftover.shape[0]),
                    "normalized_to_rows": chain["execution_horizon"]}
            leftover = fit_rows(leftover, target_steps=chain["execution_horizon"])
            rows = min(leftover.shape[0], chunk - rows_from)
            assert torch.equal(leftover[:rows], records[-1]["actions"][rows_from:rows_from + rows])
        run(f"{chain['name']}{j}", "chain", obs, settings, delay, leftover, info,
            "plain" if leftover is None else "rtc",
            {"chain_step": j, "executed_before_inference": executed, "queue_index_before": index_before})
        for _ in range(delay):
            queue.get()
        queue.merge(records[-1]["actions"], records[-1]["actions"], delay,
                    action_index_before_inference=index_before if leftover is not None else None)

    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "model.safetensors", out / "model.safetensors")
    arrays = {}
    for k, r in enumerate(records):
        o = r["obs"]
        for name in ("images", "image_masks", "tokens", "token_mask", "state", "noise"):
            arrays[f"case{k}_{name}"] = cases[f"case{o}_{name}"]
        if r["leftover"] is not None:
            arrays[f"case{k}_prev_chunk_left_over"] = r["leftover"].numpy().astype(np.float32)
        arrays[f"case{k}_actions"] = r["actions"].numpy()
        arrays[f"case{k}_actions_plain"] = plain[o].numpy()
        arrays[f"case{k}_x_steps"] = r["x_steps"].numpy()
        arrays[f"case{k}_v_base_steps"] = r["v_base"].numpy()
        if r["guided"]:
            arrays[f"case{k}_prefix_weights"] = r["weights"].numpy()
            arrays[f"case{k}_guidance_weights"] = r["guidance_weights"].numpy()
            arrays[f"case{k}_v_guided_steps"] = r["v_guided"].numpy()
    np.savez_compressed(out / "cases.npz", **arrays)

    def case_json(k, r):
        schedule, beta, horizon, enabled = r["settings"]
        entry = {"index": k, "name": r["name"], "kind": r["kind"], "observation": r["obs"],
                 "rtc_config": {"enabled": enabled, "prefix_attention_schedule": schedule,
                                "max_guidance_weight": beta, "execution_horizon": horizon},
                 "inference_delay": r["delay"],
                 "prev_chunk_left_over": None if r["leftover"] is None else {"shape": list(r["leftover"].shape),
                                                                             **r["leftover_info"]},
                 "guidance_applied": r["guided"], "expect": r["expect"],
                 "max_abs_diff_vs_plain": r["difference"], **r["extra"]}
        if r["guided"]:
            entry["effective_execution_horizon"] = r["horizon"]
        return entry

    record_config = {key: value for key, value in config.items() if key not in ("cases", "generated_by", "set")}
    record_config.update({
        "set": spec["name"],
        "num_inference_steps": steps,
        "model": f"{config['model']}, with LeRobot's real-time chunking (RTC); weights and observations of "
                 f"{source_name}",
        "observations": config["cases"],
        "actions_source": "predict_action_chunk(batch, noise=noise, inference_delay=d, prev_chunk_left_over=leftover) "
                          "after policy.config.rtc_config = RTCConfig(...) and policy.init_rtc_processor(); no "
                          "pre/post-processor (model-space actions). actions_plain: rtc_config None.",
        "rtc": {"time_convention": "t = 1 noise -> t = 0 data; Euler step s uses t = 1 + s*dt, dt = -1/steps",
                "schedules": [s.value for s in RTCAttentionSchedule]},
        "cases": [case_json(k, r) for k, r in enumerate(records)],
        "plain_actions_max_abs_diff_vs_source_record": plain_vs_source,
        "generated_by": {"lerobot": lerobot.__version__, "torch": torch.__version__,
                         "script": "test/data/gen_rtc_records.py", "torch_num_threads": torch.get_num_threads()},
    })
    (out / "config.json").write_text(json.dumps(record_config, indent=1))
    print(f"wrote {out}: {len(records)} cases")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} SPEC.json OUT_DIR")
    main(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
