"""Running recorded pi0.5 cases: the `parity` command, bundle reference records, `bundle verify`.

Two record layouts, each a folder with cases.npz (the reference records of test/data; the pipeline
layout is described in test/data/pi05_tiny_checkpoint/README.md):

model record     config.json + model.safetensors + cases.npz with, per case k, `case{k}_images`
                 (model order, [0, 1]), `_image_masks`, `_tokens`, `_token_mask`, `_noise` and
                 model-space `_actions`. A real-time chunking (RTC) record adds, per case,
                 config.json `cases[k]` {rtc_config, inference_delay, prev_chunk_left_over, expect}
                 and `case{k}_prev_chunk_left_over`; a chained case takes its leftover from this
                 runtime's own output for the case it names, as a live loop would; a case that
                 expects plain sampling must equal this runtime's plain sampling bit for bit.
pipeline record  checkpoint/ (LeRobot save) + cases.json (tasks) + cases.npz with raw inputs:
                 `case{k}_{camera}_uint8` (absent = camera missing), `_state_raw`, `_noise` and
                 physical-unit `_actions`. Runs through the runtime's stages from the raw inputs.

Tolerances: models/family_kit.py (by the weakest stored type of a bundle).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.heads import rtc
from embodied_ros.models import family_kit
from embodied_ros.models.family_kit import CASES_FILE, TOLERANCES, CaseResult, case_count, tolerance_for

__all__ = ["TOLERANCES", "CaseResult", "tolerance_for", "record_kind", "recognizes_fixture", "run_cases",
           "model_cases", "run_fixture_parity", "reference_record", "verify_reference", "rtc_case_settings",
           "rtc_case_leftover"]


def record_kind(folder: Path) -> str | None:
    """"model", "pipeline" or None for a folder that is not a pi0.5 record."""
    from embodied_ros.models.pi05.convert import detect

    return family_kit.record_kind(folder, detect)


def recognizes_fixture(path: str | Path) -> bool:
    return record_kind(Path(path)) is not None


# ---- running cases -------------------------------------------------------------------------

def rtc_case_settings(case: dict) -> rtc.RtcSettings | None:
    """The RTC settings of a recorded case (LeRobot's RTCConfig); None when RTC is off."""
    config = case.get("rtc_config")
    if not config or not config.get("enabled", True):
        return None
    return rtc.RtcSettings(config["prefix_attention_schedule"].lower(), float(config["max_guidance_weight"]),
                           int(config["execution_horizon"]))


def rtc_case_leftover(case: dict, cases, k: int, outputs: dict[int, np.ndarray]) -> np.ndarray | None:
    """The leftover of case k: recorded, or for a chained case this runtime's own earlier output."""
    source = case.get("prev_chunk_left_over")
    if source is None:
        return None
    if source.get("source") == "previous chain chunk":
        leftover = outputs[source["case"]][source["rows_from"]:]
        return rtc.fit_rows(leftover, source["normalized_to_rows"])
    return cases[f"case{k}_prev_chunk_left_over"]


def model_cases(runtime, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    """Model-space record: images + tokens + noise (+ RTC leftover) -> actions, compared in model space."""
    model = runtime.model
    recorded = json.loads((Path(folder) / "config.json").read_text()).get("cases", [])
    outputs: dict[int, np.ndarray] = {}
    with np.load(Path(folder) / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            images = cases[f"case{k}_images"] * np.float32(2.0) - np.float32(1.0)
            camera_mask = cases[f"case{k}_image_masks"]
            tokens = model.image_tokens(images, camera_mask)
            cache = model.build_prefix(tokens, camera_mask, cases[f"case{k}_tokens"], cases[f"case{k}_token_mask"])
            expected, noise = cases[f"case{k}_actions"], cases[f"case{k}_noise"]
            case = recorded[k] if k < len(recorded) and isinstance(recorded[k], dict) else {}
            guidance = None
            if "rtc_config" in case:
                guidance = rtc.chunk_guidance(rtc_case_settings(case), rtc_case_leftover(case, cases, k, outputs),
                                              int(case["inference_delay"]), noise.shape, model.config.num_inference_steps)
            actions = model.sample_actions(cache, noise, guidance)[:, : expected.shape[1]]
            outputs[k] = actions
            error, detail = float(np.abs(actions - expected).max()), ""
            if case.get("expect") == "plain":
                plain = model.sample_actions(cache, noise)[:, : expected.shape[1]]
                if not np.array_equal(actions, plain):
                    error, detail = float("inf"), "RTC no-op case differs from plain sampling"
            yield CaseResult(f"case{k}", error, tolerance, detail)


def run_cases(runtime, folder: Path, tolerance: float = TOLERANCES["f32"]) -> Iterator[CaseResult]:
    kind = family_kit.require_kind(folder, record_kind(folder), "pi0.5")
    if kind == "model":
        return model_cases(runtime, folder, tolerance)
    return family_kit.pipeline_cases(runtime, folder, tolerance, lambda observation: runtime.prompt(observation)[0])


# ---- the parity command --------------------------------------------------------------------

def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` (a type such as
    "q8_0", or a plan such as "lm=q8_0,expert=q4_k") and run every case against the record."""
    from embodied_ros.models.pi05.convert import convert
    from embodied_ros.models.pi05.runtime import load_runtime

    folder = Path(path)
    checkpoint = family_kit.checkpoint_of(folder, record_kind(folder))
    with family_kit.converted_bundle(checkpoint, quant, "pi05", convert) as (bundle, tolerance):
        return list(run_cases(load_runtime(bundle, backend), folder, tolerance))


# ---- bundle reference records --------------------------------------------------------------

def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: the folder's inputs, noise and the reference's actions."""
    folder = Path(folder)
    kind = family_kit.require_kind(folder, record_kind(folder), "pi0.5")
    with np.load(folder / CASES_FILE) as cases:
        if any(name.endswith("_prev_chunk_left_over") for name in cases.files):
            raise ValueError(f"{folder}: a real-time chunking record cannot be a bundle's reference record "
                             "(its actions depend on a leftover chunk); use a plain record")
    return family_kit.reference_record(folder, kind, tolerance, ("images", "image_masks", "tokens", "token_mask"))


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, recorded tolerance)."""
    from embodied_ros.models.pi05.runtime import load_runtime

    return family_kit.verify_reference(bundle, lambda b: load_runtime(b, backend), _record_case)


def _record_case(runtime, record, key: str) -> np.ndarray:
    model = runtime.model
    images = record.inputs[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
    camera_mask = record.inputs[f"{key}_image_masks"]
    cache = model.build_prefix(model.image_tokens(images, camera_mask), camera_mask, record.inputs[f"{key}_tokens"],
                               record.inputs[f"{key}_token_mask"])
    return model.sample_actions(cache, record.noise[key])[:, : record.expected[key].shape[1]]
