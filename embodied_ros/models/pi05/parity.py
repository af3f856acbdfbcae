"""Running recorded pi0.5 cases: the `parity` command, bundle reference records, `bundle verify`.

Two record layouts, each a folder with cases.npz (the reference records of test/data; the pipeline
layout is described in test/data/pi05_tiny_checkpoint/README.md):

model record     config.json + model.safetensors + cases.npz with, per case k, `case{k}_images`
                 (model order, [0, 1]), `_image_masks`, `_tokens`, `_token_mask`, `_noise` and
                 model-space `_actions`; a real-time chunking (RTC) record adds each case's
                 leftover and settings (records.model_record_cases).
pipeline record  checkpoint/ (LeRobot save) + cases.json (tasks) + cases.npz with raw inputs:
                 `case{k}_{camera}_uint8` (absent = camera missing), `_state_raw`, `_noise` and
                 physical-unit `_actions`. Runs through the runtime's stages from the raw inputs.

Tolerances: models/kit/records.py (by the weakest stored type of a bundle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from embodied_ros.models.kit import records
from embodied_ros.models.kit.records import TOLERANCES, CaseResult, tolerance_for

__all__ = ["TOLERANCES", "CaseResult", "tolerance_for", "record_kind", "recognizes_fixture", "run_cases",
           "model_prefix", "run_fixture_parity", "reference_record", "verify_reference"]


def record_kind(folder: Path) -> str | None:
    """"model", "pipeline" or None for a folder that is not a pi0.5 record."""
    from embodied_ros.models.pi05.convert import detect

    return records.record_kind(folder, detect)


def recognizes_fixture(path: str | Path) -> bool:
    return record_kind(Path(path)) is not None


# ---- running cases -------------------------------------------------------------------------

def model_prefix(model, inputs, key: str):
    """The prefix cache of one recorded case; inputs holds `{key}_images`, ... as recorded."""
    images = inputs[f"{key}_images"] * np.float32(2.0) - np.float32(1.0)
    camera_mask = inputs[f"{key}_image_masks"]
    return model.build_prefix(model.image_tokens(images, camera_mask), camera_mask, inputs[f"{key}_tokens"],
                              inputs[f"{key}_token_mask"])


def run_cases(runtime, folder: Path, tolerance: float = TOLERANCES["f32"]) -> Iterator[CaseResult]:
    kind = records.require_kind(folder, record_kind(folder), "pi0.5")
    if kind == "model":
        return records.model_record_cases(runtime.model, folder, tolerance, model_prefix)
    return records.pipeline_cases(runtime, folder, tolerance, runtime.prompt)


# ---- the parity command --------------------------------------------------------------------

def run_fixture_parity(path: str | Path, quant: str = "f32", backend: str = "numba") -> list[CaseResult]:
    """Convert the record's checkpoint to a temporary bundle stored as `quant` (a type such as
    "q8_0", or a plan such as "lm=q8_0,expert=q4_k") and run every case against the record."""
    from embodied_ros.models.pi05.convert import convert
    from embodied_ros.models.pi05.runtime import load_runtime

    folder = Path(path)
    checkpoint = records.checkpoint_of(folder, record_kind(folder))
    with records.converted_bundle(checkpoint, quant, "pi05", convert) as (bundle, tolerance):
        return list(run_cases(load_runtime(bundle, backend), folder, tolerance))


# ---- bundle reference records --------------------------------------------------------------

def reference_record(folder: Path, tolerance: float):
    """The record a bundle carries: the folder's inputs, noise and the reference's actions."""
    kind = records.require_kind(folder, record_kind(folder), "pi0.5")
    return records.reference_record(folder, kind, tolerance, ("images", "image_masks", "tokens", "token_mask"))


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    """Re-run a bundle's reference record: (max abs action error, recorded tolerance)."""
    from embodied_ros.models.pi05.runtime import load_runtime

    return records.verify_reference(bundle, lambda b: load_runtime(b, backend), _record_case)


def _record_case(runtime, record, key: str) -> np.ndarray:
    cache = model_prefix(runtime.model, record.inputs, key)
    return runtime.model.sample_actions(cache, record.noise[key])[:, : record.expected[key].shape[1]]
