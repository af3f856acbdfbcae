#!/usr/bin/env python
"""LeRobot 0.6.1's real-time chunking (RTC) records for pi0 and SmolVLA on the weights and
observations of a plain model record: test/data/pi0_rtc_tiny and smolvla_rtc_tiny (on pi0_tiny and
smolvla_tiny), and the records kept aside, test/data/extra/pi0_rtc_aside and smolvla_rtc_aside (on
extra/pi0_three_cam_gqa and extra/smolvla_three_cam_gqa). `RtcRun` is also what gen_pi05_rtc.py uses.

Runs in the PyTorch reference environment (lerobot 0.6.1, transformers, torch), not in the project's:

    python gen_rtc_records.py [--records DIR] SPEC.json OUT_DIR
    e.g. --records test/data specs/pi0_rtc_tiny.json OUT_DIR

DIR (or the environment variable EMBODIED_ROS_RECORDS) is the folder the spec's `plain_record` is
relative to (the repository's test/data). SPEC, merged into DEFAULTS below: `family` (pi0 or
smolvla), `plain_record` (the record whose weights and observations are used), `cases` [{name, obs,
schedule, inference_delay, execution_horizon, max_guidance_weight, prev: {obs, offset,
normalize_to?} or null, enabled?, expect?}] (the leftover: the plain actions of observation `obs`
from row `offset`, padded / cut to `normalize_to` rows by LeRobot's engine helper) and `chain` (a
live loop through LeRobot's `ActionQueue`); `chunk_size`, `action_dim`, `max_action_dim` and
`num_inference_steps`, when given, must restate the plain record's.

The policy is rebuilt with the dimensions of the plain record's config.json (lerobot_tiny) and
loaded with the record's own model.safetensors (strict), so the plain record's cases are reproduced
first (within 1e-5: CPU kernels of another machine type round differently; the difference is
recorded). Every RTC case then sets `policy.config.rtc_config = RTCConfig(...)`, calls
`policy.init_rtc_processor()` and runs `predict_action_chunk(batch, noise=..., inference_delay=d,
prev_chunk_left_over=leftover)`: LeRobot's `RTCProcessor.denoise_step` inside its `euler_integrate`.
The chain drives LeRobot's `ActionQueue` as its RTC inference engine does, the leftover padded / cut
to the execution horizon by the engine's own helper.

Record layout: as test/data/pi05_rtc_tiny (docs/reference.md, "Real-time chunking records"), plus
`case{k}_state`. Per step, the plain and guided velocities and the solver states (the last one too)
are recorded (LeRobot's RTC debug tracker and wrappers around the policy's `denoise_step` and
`sample_actions`). Every guided step is also replayed in numpy from the documented arithmetic.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
from pathlib import Path

import common
import lerobot_tiny as tiny

import numpy as np
import torch
from safetensors.torch import load_file

import lerobot
from lerobot.configs import RTCAttentionSchedule
from lerobot.policies.rtc import ActionQueue, RTCConfig

# The cases of the pi0 / SmolVLA RTC records: every schedule, delays 0-5, a horizon past the
# leftover, max guidance weights 10 / 5 / 3, a leftover zero-padded by LeRobot's engine helper,
# three no-op cases and a 4-chunk ActionQueue chain.
DEFAULTS = {
    "name": "pi0_rtc_tiny", "family": "pi0", "plain_record": "pi0_tiny",
    "cases": [
        {"name": "d0_linear_h5", "obs": 0, "schedule": "LINEAR", "inference_delay": 0, "execution_horizon": 5,
         "max_guidance_weight": 10.0, "prev": {"obs": 1, "offset": 3}},
        {"name": "d2_linear_h5", "obs": 0, "schedule": "LINEAR", "inference_delay": 2, "execution_horizon": 5,
         "max_guidance_weight": 10.0, "prev": {"obs": 1, "offset": 3}},
        {"name": "d4_linear_h8", "obs": 1, "schedule": "LINEAR", "inference_delay": 4, "execution_horizon": 8,
         "max_guidance_weight": 10.0, "prev": {"obs": 0, "offset": 2}},
        {"name": "d3_linear_h10_clamped", "obs": 0, "schedule": "LINEAR", "inference_delay": 3,
         "execution_horizon": 10, "max_guidance_weight": 10.0, "prev": {"obs": 1, "offset": 3}},
        {"name": "d2_zeros_h5", "obs": 1, "schedule": "ZEROS", "inference_delay": 2, "execution_horizon": 5,
         "max_guidance_weight": 10.0, "prev": {"obs": 2, "offset": 3}},
        {"name": "d2_ones_h5", "obs": 2, "schedule": "ONES", "inference_delay": 2, "execution_horizon": 5,
         "max_guidance_weight": 10.0, "prev": {"obs": 0, "offset": 3}},
        {"name": "d3_exp_h7_beta5", "obs": 2, "schedule": "EXP", "inference_delay": 3, "execution_horizon": 7,
         "max_guidance_weight": 5.0, "prev": {"obs": 1, "offset": 2}},
        {"name": "d2_linear_h5_beta3", "obs": 0, "schedule": "LINEAR", "inference_delay": 2, "execution_horizon": 5,
         "max_guidance_weight": 3.0, "prev": {"obs": 1, "offset": 3}},
        {"name": "d5_linear_h4", "obs": 1, "schedule": "LINEAR", "inference_delay": 5, "execution_horizon": 4,
         "max_guidance_weight": 10.0, "prev": {"obs": 2, "offset": 2}},
        {"name": "d2_linear_h6_engine_padded", "obs": 0, "schedule": "LINEAR", "inference_delay": 2,
         "execution_horizon": 6, "max_guidance_weight": 10.0, "prev": {"obs": 1, "offset": 6, "normalize_to": 6}},
        {"name": "noop_zeros_d0", "obs": 0, "schedule": "ZEROS", "inference_delay": 0, "execution_horizon": 5,
         "max_guidance_weight": 10.0, "prev": {"obs": 1, "offset": 3}, "expect": "plain"},
        {"name": "noop_prev_none", "obs": 1, "schedule": "LINEAR", "inference_delay": 2, "execution_horizon": 5,
         "max_guidance_weight": 10.0, "prev": None, "expect": "plain"},
        {"name": "noop_rtc_disabled", "obs": 2, "schedule": "LINEAR", "inference_delay": 2, "execution_horizon": 5,
         "max_guidance_weight": 10.0, "prev": {"obs": 0, "offset": 3}, "enabled": False, "expect": "plain"}],
    "chain": {"name": "chain", "obs": [0, 1, 2, 0], "schedule": "LINEAR", "max_guidance_weight": 10.0,
              "execution_horizon": 6, "inference_delays": [2, 3, 2, 3], "executed_before_inference": [0, 1, 2, 0]},
    "torch_threads": 1,
}
STEPS_KEY = {"pi0": "num_inference_steps", "smolvla": "num_steps"}


# ---------------------------------------------------------------------------------------- the RTC run
def numpy_prefix_weights(schedule: str, delay: int, horizon: int, chunk: int) -> np.ndarray:
    """LeRobot's prefix weights, restated: 1 on the frozen rows, then down to 0 at the horizon."""
    frozen = min(delay, horizon)
    weights = np.zeros(chunk)
    if schedule == "ONES":
        weights[:horizon] = 1.0
        return weights
    weights[:frozen] = 1.0
    if schedule in ("LINEAR", "EXP"):
        ramp = (horizon - np.arange(frozen, horizon)) / (horizon - frozen + 1)
        weights[frozen:horizon] = ramp if schedule == "LINEAR" else ramp * np.expm1(ramp) / (math.e - 1)
    return weights


def numpy_guidance_weight(t: float, beta: float) -> np.float32:
    """min(beta, c * r) with tau = 1 - t, c = (1 - tau) / tau (inf -> beta), r = ((1-tau)^2 + tau^2) / (1-tau)^2."""
    one, tau = np.float32(1.0), np.float32(1.0 - t)
    ratio = ((one - tau) ** 2 + tau * tau) / (one - tau) ** 2
    with np.errstate(divide="ignore"):
        c = (one - tau) / tau
    c = np.float32(beta) if np.isinf(c) else c
    return np.float32(min(np.float32(c * ratio), np.float32(beta)))


class RtcRun:
    """Runs RTC cases through a built policy. `observations`: [{"batch", "noise"}]; `extended` also
    records what the pi0.5 records carry (the numpy replay checks, the guidance weights per case,
    the through-the-expert product of the first step)."""

    def __init__(self, policy, observations: list[dict], steps: int, chunk: int, *, extended: bool = False):
        self.policy, self.model, self.observations = policy, policy.model, observations
        self.steps, self.chunk, self.extended = steps, chunk, extended
        self.fit_rows = common.lerobot_engine_fit_rows()
        self.records: list[dict] = []
        self.checks = {"max_abs_weights_vs_closed_form": 0.0, "max_abs_guidance_weight_vs_numpy": 0.0,
                       "max_abs_guided_velocity_vs_numpy": 0.0, "max_abs_euler_vs_numpy": 0.0,
                       "correction_equals_err_bitwise": True}
        self.plain = [self.predict(o) for o in observations]
        assert all(torch.equal(p, self.predict(o)) for p, o in zip(self.plain, observations)), "not repeatable"

    # LeRobot calls ------------------------------------------------------------------------------
    def set_rtc(self, config) -> None:
        self.policy.config.rtc_config = config
        self.policy.init_rtc_processor()
        if config is None:
            self.model.rtc_processor = None  # as a policy built without an RTC config

    def rtc_config(self, schedule, beta, horizon, enabled=True, debug=False) -> RTCConfig:
        return RTCConfig(enabled=enabled, prefix_attention_schedule=RTCAttentionSchedule(schedule),
                         max_guidance_weight=float(beta), execution_horizon=int(horizon), debug=debug,
                         debug_maxlen=max(100, self.steps))

    def predict(self, o, settings=None, delay=None, leftover=None, taps=False):
        """One predict_action_chunk call (settings None: plain sampling); with taps also every
        solver state and plain velocity, and LeRobot's RTC debug steps."""
        self.set_rtc(None if settings is None else self.rtc_config(*settings, debug=taps))
        calls, solved = [], []
        denoise, sample = self.model.denoise_step, self.model.sample_actions
        if taps:
            def tapped_denoise(*args, **kwargs):
                velocity = denoise(*args, **kwargs)
                calls.append({"x": common.keep(kwargs["x_t"]), "v": common.keep(velocity), "args": args,
                              "kwargs": kwargs})
                return velocity

            def tapped_sample(*args, **kwargs):  # the solve's last state, every padded column
                x = sample(*args, **kwargs)
                solved.append(common.keep(x))
                return x
            self.model.denoise_step, self.model.sample_actions = tapped_denoise, tapped_sample
        keywords = {} if settings is None else {
            "inference_delay": delay, "prev_chunk_left_over": None if leftover is None else leftover.clone()}
        try:
            batch = {k: v.clone() for k, v in o["batch"].items()}
            actions = self.policy.predict_action_chunk(batch, noise=o["noise"].clone(), **keywords)[0]
            actions = actions.detach().clone()
        finally:
            if taps:
                del self.model.denoise_step, self.model.sample_actions  # back to the class methods
        tracked = self.policy.rtc_processor.get_all_debug_steps() if taps and self.policy.rtc_processor else []
        self.set_rtc(None)
        return (actions, calls, solved[0][0], tracked) if taps else actions

    # one case -----------------------------------------------------------------------------------
    def run(self, name, kind, obs, settings, delay, leftover, leftover_info, expect, extra=None) -> None:
        o = self.observations[obs]
        actions = self.predict(o, settings, delay, leftover)
        again, calls, last, tracked = self.predict(o, settings, delay, leftover, taps=True)
        assert torch.equal(actions, again), f"{name}: not repeatable"
        assert len(calls) == self.steps and torch.equal(last[:, :actions.shape[1]], actions)
        difference = float((actions - self.plain[obs]).abs().max())
        guided = bool(settings[3]) and leftover is not None  # RTCProcessor runs its guidance branch
        if expect == "plain":
            assert torch.equal(actions, self.plain[obs]), f"{name}: expected plain sampling, differs by {difference}"
        else:
            assert guided and difference > 1e-3, f"{name}: RTC had no effect ({difference})"
        xs = [c["x"][0] for c in calls] + [last]
        assert torch.equal(xs[0], o["noise"][0])
        record = {"name": name, "kind": kind, "obs": obs, "settings": settings, "delay": delay,
                  "leftover": leftover, "leftover_info": leftover_info, "expect": expect, "actions": actions,
                  "guided": guided, "difference": difference, "extra": extra or {}, "x_steps": torch.stack(xs),
                  "v_base": torch.stack([c["v"][0] for c in calls])}
        dt = -1.0 / self.steps
        if guided:
            assert len(tracked) == self.steps and all(s.correction is not None for s in tracked), f"{name}: no RTC"
            weights = tracked[0].weights.reshape(-1)
            horizon = min(settings[2], leftover.shape[0])
            assert all(torch.equal(s.weights.reshape(-1), weights) for s in tracked)
            assert all(s.execution_horizon == horizon and s.inference_delay == delay for s in tracked)
            record.update(weights=weights, horizon=horizon,
                          guidance_weights=torch.stack([torch.as_tensor(s.guidance_weight, dtype=torch.float32)
                                                        .reshape(()) for s in tracked]),
                          v_guided=torch.stack([s.v_t[0] for s in tracked]))
            self.replay(record, tracked, xs, calls, settings, leftover, dt)
            if self.extended:
                record["vjp_rel"] = self.expert_vjp_rel(calls[0], tracked[0].err)
        else:
            for s in range(self.steps):  # no guidance: the plain velocity moves the solve
                assert torch.equal(xs[s + 1], xs[s] + dt * calls[s]["v"][0])
        self.records.append(record)
        print(f"{name:30s} d={delay} h={settings[2]:>2} {settings[0]:6s} beta={settings[1]:<4} "
              f"leftover={None if leftover is None else tuple(leftover.shape)} max|a-plain|={difference:.4f}",
              flush=True)

    def replay(self, record, tracked, xs, calls, settings, leftover, dt) -> None:
        """The guided steps in numpy from the documented arithmetic (docs/reference.md)."""
        checks, width = self.checks, xs[0].shape[1]
        target = np.zeros((self.chunk, width), np.float32)
        target[:leftover.shape[0], :leftover.shape[1]] = leftover.numpy()
        weights = record["weights"].numpy()
        closed = numpy_prefix_weights(settings[0], record["delay"], record["horizon"], self.chunk)
        checks["max_abs_weights_vs_closed_form"] = max(checks["max_abs_weights_vs_closed_form"],
                                                       float(np.abs(weights - closed).max()))
        for s, step in enumerate(tracked):
            t = 1.0 + s * dt
            assert math.isclose(step.time, t)
            checks["correction_equals_err_bitwise"] &= bool(torch.equal(step.correction, step.err))
            g = float(record["guidance_weights"][s])
            checks["max_abs_guidance_weight_vs_numpy"] = max(checks["max_abs_guidance_weight_vs_numpy"],
                                                             abs(float(numpy_guidance_weight(t, settings[1])) - g))
            x, v = xs[s].numpy(), calls[s]["v"][0].numpy()
            err = (target - (x - np.float32(t) * v)) * weights[:, None].astype(np.float32)
            guided = record["v_guided"][s].numpy()
            checks["max_abs_guided_velocity_vs_numpy"] = max(
                checks["max_abs_guided_velocity_vs_numpy"], float(np.abs(v - np.float32(g) * err - guided).max()))
            checks["max_abs_euler_vs_numpy"] = max(checks["max_abs_euler_vs_numpy"], float(
                np.abs(x + np.float32(dt) * guided - xs[s + 1].numpy()).max()))
        assert checks["correction_equals_err_bitwise"]
        assert max(v for v in checks.values() if not isinstance(v, bool)) <= 1e-6, checks

    def expert_vjp_rel(self, call, err) -> float:
        """|J^T err - err| / |err| at the first step, J = d(x - t v(x))/dx through the expert: the
        RTC paper's guidance, which LeRobot replaces by err itself (recorded for reference)."""
        with torch.enable_grad():
            x = call["x"].clone().requires_grad_(True)
            velocity = self.model.denoise_step(*call["args"], **{**call["kwargs"], "x_t": x})
            product = torch.autograd.grad(x - 1.0 * velocity, x, err)[0][0].detach()
        return float((product - err[0]).norm() / err[0].norm().clamp_min(1e-30))

    # a spec's cases -----------------------------------------------------------------------------
    def run_spec(self, spec: dict) -> None:
        for case in spec["cases"]:
            leftover = info = None
            if case["prev"] is not None:
                of, first, rows = case["prev"]["obs"], case["prev"]["offset"], case["prev"].get("normalize_to")
                leftover = self.plain[of][first:].clone()
                info = {"source": "plain actions of observation", "obs": of, "rows_from": first}
                if rows is not None:
                    leftover = self.fit_rows(leftover, target_steps=rows)
                    info["normalized_to_rows"] = rows
            settings = (case["schedule"], case["max_guidance_weight"], case["execution_horizon"],
                        case.get("enabled", True))
            self.run(case["name"], "single", case["obs"], settings, case["inference_delay"], leftover, info,
                     case.get("expect", "rtc"))
        if spec.get("chain"):
            self.run_chain(spec["chain"])

    def run_chain(self, chain: dict) -> None:
        """LeRobot's RTC engine loop, made deterministic: before chunk j, executed_before_inference[j]
        actions leave the queue; chunk j is computed with delay d_j while d_j more actions run; then
        queue.merge(..., real_delay=d_j)."""
        settings = (chain["schedule"], chain["max_guidance_weight"], chain["execution_horizon"], True)
        queue = ActionQueue(self.rtc_config(*settings[:3]))
        for j, (obs, delay, executed) in enumerate(zip(chain["obs"], chain["inference_delays"],
                                                       chain["executed_before_inference"])):
            for _ in range(executed):
                assert queue.get() is not None
            index_before = queue.get_action_index()
            leftover, info = queue.get_left_over(), None
            if leftover is not None:
                rows_from = chain["inference_delays"][j - 1] + index_before
                info = {"source": "previous chain chunk", "case": len(self.records) - 1, "rows_from": rows_from,
                        "leftover_rows_before_normalizing": int(leftover.shape[0]),
                        "normalized_to_rows": chain["execution_horizon"]}
                leftover = self.fit_rows(leftover, target_steps=chain["execution_horizon"])
                rows = min(leftover.shape[0], self.chunk - rows_from)
                assert torch.equal(leftover[:rows], self.records[-1]["actions"][rows_from:rows_from + rows])
            self.run(f"{chain['name']}{j}", "chain", obs, settings, delay, leftover, info,
                     "plain" if leftover is None else "rtc",
                     {"chain_step": j, "executed_before_inference": executed, "queue_index_before": index_before})
            for _ in range(delay):
                queue.get()
            queue.merge(self.records[-1]["actions"], self.records[-1]["actions"], delay,
                        action_index_before_inference=index_before if leftover is not None else None)

    # output -------------------------------------------------------------------------------------
    def arrays(self, observation_arrays) -> dict:
        """cases.npz: per case the observation's arrays (`observation_arrays(obs index)`), then the RTC ones."""
        arrays = {}
        for k, r in enumerate(self.records):
            for name, value in observation_arrays(r["obs"]).items():
                arrays[f"case{k}_{name}"] = value
            if r["leftover"] is not None:
                arrays[f"case{k}_prev_chunk_left_over"] = r["leftover"].numpy().astype(np.float32)
            arrays[f"case{k}_actions"] = r["actions"].numpy()
            arrays[f"case{k}_actions_plain"] = self.plain[r["obs"]].numpy()
            arrays[f"case{k}_x_steps"] = r["x_steps"].numpy()
            arrays[f"case{k}_v_base_steps"] = r["v_base"].numpy()
            if r["guided"]:
                arrays[f"case{k}_prefix_weights"] = r["weights"].numpy()
                arrays[f"case{k}_guidance_weights"] = r["guidance_weights"].numpy()
                arrays[f"case{k}_v_guided_steps"] = r["v_guided"].numpy()
        return arrays

    def case_entries(self, observation_fields=None) -> list[dict]:
        entries = []
        for k, r in enumerate(self.records):
            schedule, beta, horizon, enabled = r["settings"]
            entry = {"index": k, "name": r["name"], "kind": r["kind"], "observation": r["obs"]}
            if observation_fields is not None:
                entry.update(observation_fields(r["obs"]))
            entry.update({
                "rtc_config": {"enabled": enabled, "prefix_attention_schedule": schedule,
                               "max_guidance_weight": float(beta), "execution_horizon": horizon},
                "inference_delay": r["delay"],
                "prev_chunk_left_over": None if r["leftover"] is None else {"shape": list(r["leftover"].shape),
                                                                            **r["leftover_info"]},
                "guidance_applied": r["guided"], "expect": r["expect"]})
            if self.extended:
                entry["max_abs_action"] = float(r["actions"].abs().max())
            entry["max_abs_diff_vs_plain"] = r["difference"]
            if r["guided"]:
                entry["effective_execution_horizon"] = r["horizon"]
                if self.extended:
                    entry["frozen_rows"] = min(r["delay"], r["horizon"])
                    entry["prefix_weights"] = [round(float(x), 7) for x in r["weights"]]
                    entry["guidance_weights"] = [round(float(x), 6) for x in r["guidance_weights"]]
                    entry["expert_vjp_step0_rel_diff_vs_correction"] = round(r["vjp_rel"], 4)
            entry.update(r["extra"])
            entries.append(entry)
        return entries


# ---------------------------------------------------------------------------------------- pi0 / SmolVLA
def rebuild(family: str, config: dict):
    """The policy of a plain record, from its config.json (spec keys as gen_pi0.py / gen_smolvla.py)."""
    vision = config["vision"]
    if family == "pi0":
        lm, expert = config["language_model"], config["expert"]
        spec = {"n_cameras": config["n_cameras"], "image_size": vision["image_size"],
                "patch_size": vision["patch_size"],
                "vision": {k: vision[k] for k in ("width", "depth", "mlp_dim", "num_heads")},
                "lm": {k: lm[k] for k in tiny.GEMMA_KEYS}, "expert": {k: expert[k] for k in tiny.GEMMA_KEYS},
                "vocab_size": lm["vocab_size"], "seeds": {"torch_manual_seed": 0},
                **{k: config[k] for k in ("tokenizer_max_length", "chunk_size", "state_dim", "action_dim",
                                          "max_state_dim", "max_action_dim", "num_inference_steps")}}
        return tiny.build_pi("pi0", spec)[0]
    text = config["text_model"]
    spec = {"n_cameras": config["n_cameras"], "empty_cameras": config["empty_cameras"],
            "image_size": vision["image_size"], "scale_factor": config["connector"]["scale_factor"],
            "vision": {k: vision[k] for k in ("width", "depth", "mlp_dim", "num_heads", "patch_size")},
            "text": {"width": text["width"], "depth": text["layers_in_config"], "mlp_dim": text["mlp_dim"],
                     "num_heads": text["num_heads"], "num_kv_heads": text["num_kv_heads"],
                     "head_dim": text["head_dim"], "rms_norm_eps": text["rms_norm_eps"],
                     "rope_theta": text["rope_theta_in_config_unused"]},
            "vocab_size": text["vocab_size"], "num_vlm_layers": config["num_vlm_layers"], "num_expert_layers": 0,
            "self_attn_every_n_layers": config["self_attn_every_n_layers"],
            "expert_width_multiplier": config["expert"]["width_multiplier"], "seeds": {"torch_manual_seed": 0},
            **{k: config[k] for k in ("tokenizer_max_length", "chunk_size", "state_dim", "action_dim",
                                      "max_state_dim", "max_action_dim", "num_steps")}}
    assert config["attention_mode"] == "cross_attn"
    return tiny.build_smolvla(spec)


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--records", type=Path, default=os.environ.get("EMBODIED_ROS_RECORDS"),
                            help="folder the spec's plain_record is relative to (the repository's test/data); "
                                 "default: $EMBODIED_ROS_RECORDS")

    spec, out, args = common.command_line(DEFAULTS, __doc__, extra=options)
    if args.records is None:
        raise SystemExit("name the folder of the plain records: --records DIR or EMBODIED_ROS_RECORDS")
    common.threads(spec["torch_threads"])
    family, steps_key = spec["family"], STEPS_KEY[spec["family"]]
    source = Path(args.records) / spec["plain_record"]
    config = json.loads((source / "config.json").read_text())
    cases = dict(np.load(source / "cases.npz"))
    steps, chunk = config[steps_key], config["chunk_size"]
    restated = {"chunk_size": chunk, "action_dim": config["action_dim"], "max_action_dim": config["max_action_dim"],
                "num_inference_steps": steps}
    assert all(spec.get(key, value) == value for key, value in restated.items()), \
        f"spec and {source.name} differ: {restated}"
    policy = rebuild(family, config)
    policy.load_state_dict(load_file(str(source / "model.safetensors")), strict=True)

    observations = []
    for k, recorded in enumerate(config["cases"]):
        slots = recorded.get("model_camera_order") or recorded["model_image_slots"]  # pi0 / SmolVLA
        images, masks = cases[f"case{k}_images"], cases[f"case{k}_image_masks"]
        batch = {name: torch.from_numpy(images[slot:slot + 1]).clone()
                 for slot, name in enumerate(slots) if masks[slot]}  # a missing camera is absent from the batch
        batch["observation.language.tokens"] = torch.from_numpy(cases[f"case{k}_tokens"])[None]
        batch["observation.language.attention_mask"] = torch.from_numpy(cases[f"case{k}_token_mask"])[None]
        batch["observation.state"] = torch.from_numpy(cases[f"case{k}_state"])[None]
        observations.append({"batch": batch, "noise": torch.from_numpy(cases[f"case{k}_noise"])[None]})

    rtc = RtcRun(policy, observations, steps, chunk)
    plain_vs_source = max(float((a - torch.from_numpy(cases[f"case{k}_actions"])).abs().max())
                          for k, a in enumerate(rtc.plain))
    assert plain_vs_source < 1e-5, f"plain sampling differs from {source.name} by {plain_vs_source}: other weights?"
    rtc.run_spec(spec)

    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "model.safetensors", out / "model.safetensors")
    names = ("images", "image_masks", "tokens", "token_mask", "state", "noise")
    arrays = rtc.arrays(lambda o: {name: cases[f"case{o}_{name}"] for name in names})
    record_config = {key: value for key, value in config.items() if key not in ("cases", "generated_by", "set")}
    record_config.update({
        "set": spec["name"],
        "num_inference_steps": steps,
        "model": f"{config['model']}, with LeRobot's real-time chunking (RTC); weights and observations of "
                 f"{source.name}",
        "observations": config["cases"],
        "actions_source": "predict_action_chunk(batch, noise=noise, inference_delay=d, prev_chunk_left_over=leftover) "
                          "after policy.config.rtc_config = RTCConfig(...) and policy.init_rtc_processor(); no "
                          "pre/post-processor (model-space actions). actions_plain: rtc_config None.",
        "rtc": {"time_convention": "t = 1 noise -> t = 0 data; Euler step s uses t = 1 + s*dt, dt = -1/steps",
                "schedules": [s.value for s in RTCAttentionSchedule]},
        "cases": rtc.case_entries(),
        "plain_actions_max_abs_diff_vs_source_record": plain_vs_source,
        "generated_by": {"lerobot": lerobot.__version__, "torch": torch.__version__,
                         "script": "reference/gen_rtc_records.py", "torch_num_threads": torch.get_num_threads()},
    })
    common.write_record(out, config=record_config, arrays=arrays, compressed=True)
    print(f"wrote {out}: {len(rtc.records)} cases")


if __name__ == "__main__":
    main()
