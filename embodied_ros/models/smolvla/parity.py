"""Running recorded SmolVLA cases: the `parity` command, bundle reference records, `bundle verify`.

Two record layouts, each a folder with cases.npz:

model record     config.json + model.safetensors + cases.npz with, per case k, `case{k}_images`
                 (model slot order, [0, 1]), `_image_masks`, `_tokens`, `_token_mask`, `_state`,
                 `_noise` and model-space `_actions` (format: test/data/smolvla_tiny).
pipeline record  checkpoint/ (LeRobot save) + cases.json (tasks) + cases.npz with raw inputs:
                 `case{k}_{camera}_uint8` (absent = camera missing), `_state_raw`, `_noise` and
                 physical-unit `_actions` (format: test/data/smolvla_tiny_checkpoint/README.md).

Tolerances are those of pi0.5 (models/pi05/parity.py), by the weakest stored type of a bundle.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.models.pi05.parity import TOLERANCES, CaseResult, tolerance_for
from embodied_ros.models.smolvla.runtime import task_prompt
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation

CASES_FILE = "cases.npz"
CHECKPOINT_FOLDER = "checkpoint"


def _case_count(cases) -> int:
    return len({name.split("_")[0] for name in cases.files if name.startswith("case") and name.endswith("_noise")})


def record_kind(folder: Path) -> str | None:
    """"model", "pipeline" or None for a folder that is not a SmolVLA record."""
    from embodied_ros.models.smolvla.convert import detect

    folder = Path(folder)
    if not (folder / CASES_FILE).is_file():
        return None
    checkpoint = folder / CHECKPOINT_FOLDER
    if checkpoint.is_dir() and detect(checkpoint) and (folder / "cases.json").is_file():
        return "pipeline"
    if detect(folder):
        return "model"
    return None


def recognizes_fixture(path: str | Path) -> bool:
    return record_kind(Path(path)) is not None


def model_case(model, inputs, k: int, action_dim: int) -> np.ndarray:
    """Model-space actions of case k of a model record (inputs: the npz or a record's inputs)."""
    images = inputs[f"case{k}_images"] * np.float32(2.0) - np.float32(1.0)
    mask = inputs[f"case{k}_image_masks"]
    cache = model.build_prefix(model.image_tokens(images, mask), mask, inputs[f"case{k}_tokens"],
                               inputs[f"case{k}_token_mask"], inputs[f"case{k}_state"])
    return model.sample_actions(cache, inputs[f"case{k}_noise"])[:, :action_dim]


def pipeline_observation(inputs, task: str, k: int, camera_names) -> Observation:
    images = {name: inputs[f"case{k}_{name}_uint8"] for name in camera_names if f"case{k}_{name}_uint8" in inputs}
    return Observation(stamp_ns=k, images=images, state=inputs[f"case{k}_state_raw"], instruction=task)


def run_cases(runtime, folder: Path, tolerance: float = TOLERANCES["f32"]) -> Iterator[CaseResult]:
    folder = Path(folder)
    kind = record_kind(folder)
    if kind is None:
        raise ValueError(f"{folder}: not a SmolVLA record (needs {CASES_FILE} beside a checkpoint)")
    tasks = json.loads((folder / "cases.json").read_text())["cases"] if kind == "pipeline" else []
    with np.load(folder / CASES_FILE) as cases:
        for k in range(_case_count(cases)):
            expected = cases[f"case{k}_actions"]
            if kind == "model":
                actions = model_case(runtime.model, cases, k, expected.shape[1])
                detail = ""
            else:
                observation = pipeline_observation(cases, tasks[k]["task"], k, runtime.spec.camera_names)
                actions = infer(runtime, observation, cases[f"case{k}_noise"]).actions
                tokens, mask = runtime.tokenizer.encode(task_prompt(tasks[k]["task"]))
                recorded = cases[f"case{k}_tokens"][cases[f"case{k}_token_mask"]]
                detail = "" if np.array_equal(tokens[mask], recorded) else "token ids differ"
            error = float(np.abs(actions - expected).max())
            yield CaseResult(f"case{k}", error if not detail else float("inf"), tolerance, detail)


def checkpoint_of(folder: Path) -> Path:
    return Path(folder) / CHECKPOINT_FOLDER if record_kind(folder) == "pipeline" else Path(folder)


def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` and run every case."""
    from embodied_ros.bundle import QuantPlan, open_bundle
    from embodied_ros.models.smolvla.convert import convert
    from embodied_ros.models.smolvla.runtime import load_runtime

    folder = Path(path)
    plan = QuantPlan.parse(quant)
    with tempfile.TemporaryDirectory(prefix="smolvla_parity_") as scratch:
        bundle_path = Path(scratch) / "policy.gguf"
        convert(checkpoint_of(folder), bundle_path, plan, reference=None, progress=False)
        bundle = open_bundle(bundle_path, architecture="smolvla")
        tolerance = tolerance_for({bundle.tensor_info(name).qtype.lower() for name in bundle.weight_names})
        return list(run_cases(load_runtime(bundle, backend), folder, tolerance))


# ---- bundle reference records --------------------------------------------------------------

def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: the folder's inputs, noise and the reference's actions."""
    from embodied_ros.bundle import ReferenceRecord

    folder = Path(folder)
    kind = record_kind(folder)
    if kind is None:
        raise ValueError(f"{folder}: not a SmolVLA record (needs {CASES_FILE} beside a checkpoint)")
    inputs, noise, expected, fields = {}, {}, {}, {"kind": kind}
    with np.load(folder / CASES_FILE) as cases:
        for k in range(_case_count(cases)):
            noise[f"case{k}"] = cases[f"case{k}_noise"]
            expected[f"case{k}"] = cases[f"case{k}_actions"]
            wanted = ("images", "image_masks", "tokens", "token_mask", "state") if kind == "model" else ("state_raw",)
            for name in wanted:
                inputs[f"case{k}_{name}"] = cases[f"case{k}_{name}"]
            for name in cases.files:
                if kind == "pipeline" and name.startswith(f"case{k}_") and name.endswith("_uint8"):
                    inputs[name] = cases[name]
    if kind == "pipeline":
        for k, case in enumerate(json.loads((folder / "cases.json").read_text())["cases"]):
            fields[f"case{k}_task"] = case["task"]
    return ReferenceRecord(inputs=inputs, expected=expected, tolerance=tolerance, noise=noise, fields=fields)


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, recorded tolerance)."""
    from embodied_ros.models.smolvla.runtime import load_runtime

    record = bundle.reference
    if record is None:
        raise ValueError(f"{bundle.path}: bundle has no reference record")
    runtime = load_runtime(bundle, backend)
    worst = 0.0
    for key, expected in record.expected.items():
        k = int(key[len("case"):])
        if record.fields.get("kind") == "pipeline":
            observation = pipeline_observation(record.inputs, record.fields[f"{key}_task"], k,
                                               runtime.spec.camera_names)
            actions = infer(runtime, observation, record.noise[key]).actions
        else:
            inputs = {**record.inputs, f"{key}_noise": record.noise[key]}
            actions = model_case(runtime.model, inputs, k, expected.shape[1])
        worst = max(worst, float(np.abs(actions - expected).max()))
    return worst, float(record.tolerance)
