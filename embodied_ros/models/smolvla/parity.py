"""Running recorded SmolVLA cases: the `parity` command, bundle reference records, `bundle verify`.

Two record layouts, each a folder with cases.npz:

model record     config.json + model.safetensors + cases.npz with, per case k, `case{k}_images`
                 (model slot order, [0, 1]), `_image_masks`, `_tokens`, `_token_mask`, `_state`,
                 `_noise` and model-space `_actions` (format: test/data/smolvla_tiny); a real-time
                 chunking record adds each case's leftover and settings (test/data/smolvla_rtc_tiny,
                 records.model_record_cases).
pipeline record  checkpoint/ (LeRobot save) + cases.json (tasks) + cases.npz with raw inputs:
                 `case{k}_{camera}_uint8` (absent = camera missing), `_state_raw`, `_noise` and
                 physical-unit `_actions` (format: test/data/smolvla_tiny_checkpoint/README.md).

Tolerances: models/kit/records.py, by the weakest stored type of a bundle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.models.kit import records
from embodied_ros.models.kit.records import CASES_FILE, TOLERANCES, CaseResult, case_count, pipeline_observation, tolerance_for
from embodied_ros.models.kit.flow_vla import newline_prompt
from embodied_ros.pipeline.stages import infer

__all__ = ["TOLERANCES", "CaseResult", "tolerance_for", "record_kind", "recognizes_fixture", "model_prefix",
           "model_case", "pipeline_observation", "run_cases", "run_fixture_parity", "reference_record",
           "verify_reference"]


def record_kind(folder: Path) -> str | None:
    """"model", "pipeline" or None for a folder that is not a SmolVLA record."""
    from embodied_ros.models.smolvla.convert import detect

    return records.record_kind(folder, detect)


def recognizes_fixture(path: str | Path) -> bool:
    return record_kind(Path(path)) is not None


def model_prefix(model, inputs, key: str):
    """The prefix cache of one recorded case; inputs holds `{key}_images`, ... as recorded."""
    images = inputs[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
    mask = inputs[f"{key}_image_masks"]
    return model.build_prefix(model.image_tokens(images, mask), mask, inputs[f"{key}_tokens"],
                              inputs[f"{key}_token_mask"], inputs[f"{key}_state"])


def model_case(model, inputs, k: int, action_dim: int) -> np.ndarray:
    """Model-space actions of case k of a model record (inputs: the npz or a record's inputs)."""
    return model.sample_actions(model_prefix(model, inputs, f"case{k}"), inputs[f"case{k}_noise"])[:, :action_dim]


def run_cases(runtime, folder: Path, tolerance: float = TOLERANCES["f32"]) -> Iterator[CaseResult]:
    folder = Path(folder)
    kind = records.require_kind(folder, record_kind(folder), "SmolVLA")
    if kind == "model":
        return records.model_record_cases(runtime.model, folder, tolerance, model_prefix)
    return pipeline_cases(runtime, folder, tolerance)


def pipeline_cases(runtime, folder: Path, tolerance: float) -> Iterator[CaseResult]:
    """Raw record through the runtime's stages; the token ids are checked too."""
    tasks = records.recorded_tasks(folder)
    with np.load(folder / CASES_FILE) as cases:
        for k in range(case_count(cases)):
            observation = pipeline_observation(cases, tasks[k]["task"], f"case{k}", runtime.spec.camera_names, k)
            actions = infer(runtime, observation, cases[f"case{k}_noise"]).actions
            tokens, mask = runtime.tokenizer.encode(newline_prompt(tasks[k]["task"]))
            recorded = cases[f"case{k}_tokens"][cases[f"case{k}_token_mask"]]
            detail = "" if np.array_equal(tokens[mask], recorded) else "token ids differ"
            error = float(np.abs(actions - cases[f"case{k}_actions"]).max())
            yield CaseResult(f"case{k}", error if not detail else float("inf"), tolerance, detail)


def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` and run every case."""
    from embodied_ros.models.smolvla.convert import convert
    from embodied_ros.models.smolvla.runtime import load_runtime

    folder = Path(path)
    checkpoint = records.checkpoint_of(folder, record_kind(folder))
    with records.converted_bundle(checkpoint, quant, "smolvla", convert) as (bundle, tolerance):
        return list(run_cases(load_runtime(bundle, backend), folder, tolerance))


# ---- bundle reference records --------------------------------------------------------------

def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: the folder's inputs, noise and the reference's actions."""
    kind = records.require_kind(folder, record_kind(folder), "SmolVLA")
    return records.reference_record(folder, kind, tolerance,
                                       ("images", "image_masks", "tokens", "token_mask", "state"))


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, recorded tolerance)."""
    from embodied_ros.models.smolvla.runtime import load_runtime

    def record_case(runtime, record, key: str) -> np.ndarray:
        inputs = {**record.inputs, f"{key}_noise": record.noise[key]}
        return model_case(runtime.model, inputs, int(key[len("case"):]), record.expected[key].shape[1])

    return records.verify_reference(bundle, lambda b: load_runtime(b, backend), record_case)
