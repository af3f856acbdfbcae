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

Tolerances on the max abs action error, by the weakest stored type of a bundle:
  f32 1e-4 (the parity requirement), f16 5e-3, bf16 5e-2, q8_0 1e-1, q4_k 3e-1.
The others are about 3x the worst error measured with every weight group stored in that type on
the random-weight reference records (actions up to ~5 in size): f16 1.2e-3, bf16 1.2e-2,
q8_0 3.1e-2, q4_k 8.9e-2 (pi05_small; the tiny records' widths are not multiples of 256, so
their "q4_k" falls back to q8_0). They catch a broken kernel or layout, not small accuracy changes.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.heads import rtc
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation

TOLERANCES = {"f32": 1e-4, "f16": 5e-3, "bf16": 5e-2, "q8_0": 1e-1, "q4_k": 3e-1}
_STRENGTH = ("f32", "f16", "bf16", "q8_0", "q4_k")  # weakest last
CASES_FILE = "cases.npz"
CHECKPOINT_FOLDER = "checkpoint"


@dataclass(frozen=True)
class CaseResult:
    name: str  # "case0", ...
    max_abs_error: float
    tolerance: float
    detail: str = ""  # what else differed (prompt, token ids), empty when nothing did

    @property
    def passed(self) -> bool:
        return self.max_abs_error <= self.tolerance


def tolerance_for(stored_types: set[str] | list[str]) -> float:
    weakest = max((t for t in stored_types if t in TOLERANCES), key=_STRENGTH.index, default="f32")
    return TOLERANCES[weakest]


def case_count(cases: np.lib.npyio.NpzFile) -> int:
    return len({name.split("_")[0] for name in cases.files if name.startswith("case") and name.endswith("_noise")})


def record_kind(folder: Path) -> str | None:
    """"model", "pipeline" or None for a folder that is not a pi0.5 record."""
    from embodied_ros.models.pi05.convert import detect

    folder = Path(folder)
    if not (folder / CASES_FILE).is_file():
        return None
    if (folder / CHECKPOINT_FOLDER).is_dir() and detect(folder / CHECKPOINT_FOLDER) and (folder / "cases.json").is_file():
        return "pipeline"
    if detect(folder):
        return "model"
    return None


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


def pipeline_observation(cases, tasks: list[str], k: int, camera_names) -> Observation:
    images = {name: cases[f"case{k}_{name}_uint8"] for name in camera_names if f"case{k}_{name}_uint8" in cases}
    return Observation(stamp_ns=k, images=images, state=cases[f"case{k}_state_raw"], instruction=tasks[k])


def pipeline_cases(runtime, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    """Raw record: uint8 images + raw state + task -> physical actions, prompt and tokens checked too."""
    folder = Path(folder)
    recorded = json.loads((folder / "cases.json").read_text())["cases"]
    with np.load(folder / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            observation = pipeline_observation(cases, [c["task"] for c in recorded], k, runtime.spec.camera_names)
            prompt, _ = runtime.prompt(observation)
            tokens, _ = runtime.tokenizer.encode(prompt)
            result = infer(runtime, observation, cases[f"case{k}_noise"])
            error = float(np.abs(result.actions - cases[f"case{k}_actions"]).max())
            problems = []
            if prompt != recorded[k]["prompt"]:
                problems.append(f"prompt differs: {prompt!r}")
            if not np.array_equal(tokens, cases[f"case{k}_tokens"]):
                problems.append("token ids differ")
            yield CaseResult(f"case{k}", error if not problems else float("inf"), tolerance, "; ".join(problems))


def run_cases(runtime, folder: Path, tolerance: float = TOLERANCES["f32"]) -> Iterator[CaseResult]:
    kind = record_kind(folder)
    if kind is None:
        raise ValueError(f"{folder}: not a pi0.5 record (needs {CASES_FILE} beside a checkpoint)")
    run = model_cases if kind == "model" else pipeline_cases
    return run(runtime, folder, tolerance)


def checkpoint_of(folder: Path) -> Path:
    return Path(folder) / CHECKPOINT_FOLDER if record_kind(folder) == "pipeline" else Path(folder)


# ---- the parity command --------------------------------------------------------------------

def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` (a type such as
    "q8_0", or a plan such as "lm=q8_0,expert=q4_k") and run every case against the record."""
    from embodied_ros.bundle import QuantPlan, open_bundle
    from embodied_ros.models.pi05.convert import convert
    from embodied_ros.models.pi05.runtime import load_runtime

    folder = Path(path)
    plan = QuantPlan.parse(quant)
    with tempfile.TemporaryDirectory(prefix="pi05_parity_") as scratch:
        bundle_path = Path(scratch) / "policy.gguf"
        convert(checkpoint_of(folder), bundle_path, plan, reference=None, progress=False)
        bundle = open_bundle(bundle_path, architecture="pi05")
        tolerance = tolerance_for({bundle.tensor_info(name).qtype.lower() for name in bundle.weight_names})
        return list(run_cases(load_runtime(bundle, backend), folder, tolerance))


# ---- bundle reference records --------------------------------------------------------------

def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: the folder's inputs, noise and the reference's actions."""
    from embodied_ros.bundle import ReferenceRecord

    folder = Path(folder)
    kind = record_kind(folder)
    if kind is None:
        raise ValueError(f"{folder}: not a pi0.5 record (needs {CASES_FILE} beside a checkpoint)")
    inputs, noise, expected, fields = {}, {}, {}, {"kind": kind}
    with np.load(folder / CASES_FILE) as cases:
        if any(name.endswith("_prev_chunk_left_over") for name in cases.files):
            raise ValueError(f"{folder}: a real-time chunking record cannot be a bundle's reference record "
                             "(its actions depend on a leftover chunk); use a plain record")
        for k in range(case_count(cases)):
            noise[f"case{k}"] = cases[f"case{k}_noise"]
            expected[f"case{k}"] = cases[f"case{k}_actions"]
            wanted = ("images", "image_masks", "tokens", "token_mask") if kind == "model" else ("state_raw",)
            for name in wanted:
                inputs[f"case{k}_{name}"] = cases[f"case{k}_{name}"]
            if kind == "pipeline":
                for name in cases.files:
                    if name.startswith(f"case{k}_") and name.endswith("_uint8"):
                        inputs[name] = cases[name]
    if kind == "pipeline":
        for k, case in enumerate(json.loads((folder / "cases.json").read_text())["cases"]):
            fields[f"case{k}_task"] = case["task"]
    return ReferenceRecord(inputs=inputs, expected=expected, tolerance=tolerance, noise=noise, fields=fields)


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, recorded tolerance)."""
    from embodied_ros.models.pi05.runtime import load_runtime

    record = bundle.reference
    if record is None:
        raise ValueError(f"{bundle.path}: bundle has no reference record")
    runtime = load_runtime(bundle, backend)
    worst = 0.0
    for key, expected in record.expected.items():
        actions = _record_case(runtime, record, key)
        worst = max(worst, float(np.abs(actions - expected).max()))
    return worst, float(record.tolerance)


def _record_case(runtime, record, key: str) -> np.ndarray:
    noise = record.noise[key]
    if record.fields.get("kind") == "pipeline":
        images = {name: record.inputs[f"{key}_{name}_uint8"] for name in runtime.spec.camera_names
                  if f"{key}_{name}_uint8" in record.inputs}
        observation = Observation(0, images, record.inputs[f"{key}_state_raw"], record.fields[f"{key}_task"])
        return infer(runtime, observation, noise).actions
    model = runtime.model
    images = record.inputs[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
    camera_mask = record.inputs[f"{key}_image_masks"]
    cache = model.build_prefix(model.image_tokens(images, camera_mask), camera_mask, record.inputs[f"{key}_tokens"],
                               record.inputs[f"{key}_token_mask"])
    return model.sample_actions(cache, noise)[:, : record.expected[key].shape[1]]
