"""Running recorded pi0 cases: the `parity` command, bundle reference records, `bundle verify`.

Record layouts as pi0.5's (models/pi05/parity.py), with the state:

model record     config.json + model.safetensors + cases.npz with, per case k, `case{k}_images`
                 (model order, [0, 1]), `_image_masks`, `_tokens`, `_token_mask`, `_state`
                 (model space), `_noise` and model-space `_actions` (test/data/pi0_tiny).
pipeline record  checkpoint/ (LeRobot save) + cases.json (tasks, prompts) + cases.npz with raw
                 inputs `case{k}_{camera}_uint8` (absent = camera missing), `_state_raw`, `_noise`,
                 the reference's `_tokens` and physical-unit `_actions` (test/data/pi0_tiny_checkpoint,
                 made by test/data/gen_pi0_checkpoint.py).

Tolerances by the weakest stored type: pi0.5's.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.models.pi05.parity import (CASES_FILE, CHECKPOINT_FOLDER, TOLERANCES, CaseResult, case_count,
                                             pipeline_observation, tolerance_for)
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation

__all__ = ["TOLERANCES", "CaseResult", "tolerance_for", "record_kind", "recognizes_fixture", "run_cases",
           "run_fixture_parity", "reference_record", "verify_reference"]


def record_kind(folder: Path) -> str | None:
    """"model", "pipeline" or None for a folder that is not a pi0 record."""
    from embodied_ros.models.pi0.convert import detect

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

def model_case(model, inputs, noise: np.ndarray, action_dim: int, key: str) -> np.ndarray:
    """Model-space actions of one recorded case; inputs holds `{key}_images`, ... as recorded."""
    images = inputs[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
    camera_mask = inputs[f"{key}_image_masks"]
    cache = model.build_prefix(model.image_tokens(images, camera_mask), camera_mask, inputs[f"{key}_tokens"],
                               inputs[f"{key}_token_mask"], inputs[f"{key}_state"])
    return model.sample_actions(cache, noise)[:, :action_dim]


def model_cases(runtime, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    with np.load(Path(folder) / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            expected = cases[f"case{k}_actions"]
            actions = model_case(runtime.model, cases, cases[f"case{k}_noise"], expected.shape[1], f"case{k}")
            yield CaseResult(f"case{k}", float(np.abs(actions - expected).max()), tolerance)


def pipeline_cases(runtime, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    """Raw record: uint8 images + raw state + task -> physical actions; prompt and token ids checked too."""
    from embodied_ros.models.pi0.runtime import prompt_text

    folder = Path(folder)
    recorded = json.loads((folder / "cases.json").read_text())["cases"]
    with np.load(folder / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            observation = pipeline_observation(cases, [c["task"] for c in recorded], k, runtime.spec.camera_names)
            prompt = prompt_text(observation.instruction)
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
        raise ValueError(f"{folder}: not a pi0 record (needs {CASES_FILE} beside a checkpoint)")
    return (model_cases if kind == "model" else pipeline_cases)(runtime, folder, tolerance)


def checkpoint_of(folder: Path) -> Path:
    return Path(folder) / CHECKPOINT_FOLDER if record_kind(folder) == "pipeline" else Path(folder)


# ---- the parity command --------------------------------------------------------------------

def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` and run every case."""
    from embodied_ros.bundle import QuantPlan, open_bundle
    from embodied_ros.models.pi0.config import ARCHITECTURE
    from embodied_ros.models.pi0.convert import convert
    from embodied_ros.models.pi0.runtime import load_runtime

    folder = Path(path)
    plan = QuantPlan.parse(quant)
    with tempfile.TemporaryDirectory(prefix="pi0_parity_") as scratch:
        bundle_path = Path(scratch) / "policy.gguf"
        convert(checkpoint_of(folder), bundle_path, plan, reference=None, progress=False)
        bundle = open_bundle(bundle_path, architecture=ARCHITECTURE)
        tolerance = tolerance_for({bundle.tensor_info(name).qtype.lower() for name in bundle.weight_names})
        return list(run_cases(load_runtime(bundle, backend), folder, tolerance))


# ---- bundle reference records --------------------------------------------------------------

def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: the folder's inputs, noise and the reference's actions."""
    from embodied_ros.bundle import ReferenceRecord

    folder = Path(folder)
    kind = record_kind(folder)
    if kind is None:
        raise ValueError(f"{folder}: not a pi0 record (needs {CASES_FILE} beside a checkpoint)")
    inputs, noise, expected, fields = {}, {}, {}, {"kind": kind}
    with np.load(folder / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            noise[f"case{k}"] = cases[f"case{k}_noise"]
            expected[f"case{k}"] = cases[f"case{k}_actions"]
            wanted = ("images", "image_masks", "tokens", "token_mask", "state") if kind == "model" else ("state_raw",)
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
    from embodied_ros.models.pi0.runtime import load_runtime

    record = bundle.reference
    if record is None:
        raise ValueError(f"{bundle.path}: bundle has no reference record")
    runtime = load_runtime(bundle, backend)
    worst = 0.0
    for key, expected in record.expected.items():
        if record.fields.get("kind") == "pipeline":
            images = {name: record.inputs[f"{key}_{name}_uint8"] for name in runtime.spec.camera_names
                      if f"{key}_{name}_uint8" in record.inputs}
            observation = Observation(0, images, record.inputs[f"{key}_state_raw"], record.fields[f"{key}_task"])
            actions = infer(runtime, observation, record.noise[key]).actions
        else:
            actions = model_case(runtime.model, record.inputs, record.noise[key], expected.shape[1], key)
        worst = max(worst, float(np.abs(actions - expected).max()))
    return worst, float(record.tolerance)
